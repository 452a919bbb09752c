"""experiments/pretrain.py end to end, in subprocesses: exact resume after SIGTERM and after
SIGKILL (the resumes, whose stderr no test reads, in this process: pretrain_runs.train_here),
evaluate.py in a new process, and the bad-input errors (unknown config key, a workdir
holding a checkpoint of another model shape, a batch the data-parallel size does not divide).

A tiny BERT on the synthetic corpus (random tokens: the point is the bookkeeping, not learning),
dropout on, so that resuming must also restore the dropout randomness and the data position.
"""

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest
import xla_flags

from pretrain_runs import (
    EVALUATE,
    command,
    env,
    last_logged_step,
    losses,
    refusal,
    run,
    train_here,
    wait_for,
)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("uninterrupted"))
    run(workdir)
    return workdir, losses(workdir)


def test_uninterrupted_run_logs_every_step_and_keeps_last_checkpoints(uninterrupted):
    workdir, losses = uninterrupted
    assert sorted(losses) == list(range(1, 61))
    assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["20", "40", "60"]
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        record = json.loads(f.readline())
    for key in ("step", "loss", "mlm_accuracy", "learning_rate", "tokens_per_second",
                "grad_norm", "mfu"):
        assert key in record
    assert os.listdir(os.path.join(workdir, "tensorboard"))


def test_sigterm_then_restart_gives_bit_equallosses(uninterrupted, tmp_path):
    _, reference = uninterrupted
    workdir = str(tmp_path)
    slow = "--config.data.seconds_per_batch=0.05"  # so that SIGTERM lands mid-run
    process = subprocess.Popen(command(workdir, slow), env=env(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    wait_for(lambda: last_logged_step(workdir) >= 27, process)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr[-3000:]
    stopped_at = last_logged_step(workdir)
    assert 27 <= stopped_at < 40
    saved = sorted(int(s) for s in os.listdir(os.path.join(workdir, "checkpoints")))
    assert saved == [20, stopped_at], "SIGTERM must save the step it stopped at"
    assert not os.path.exists(os.path.join(workdir, "run.lock"))  # the lock released on exit

    train_here(workdir)  # the same command, resumed in this process (no stderr is read)
    assert losses(workdir) == reference  # bit-equal: exact float equality at all 60 steps


def test_sigkill_after_a_save_then_restart_gives_bit_equallosses(uninterrupted, tmp_path):
    _, reference = uninterrupted
    workdir = str(tmp_path)
    process = subprocess.Popen(command(workdir, "--config.data.seconds_per_batch=0.05"),
                               env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    step_20 = os.path.join(workdir, "checkpoints", "20", "state")
    wait_for(lambda: os.path.isdir(step_20) and last_logged_step(workdir) >= 25, process)
    process.kill()
    process.wait(timeout=60)
    killed_at = last_logged_step(workdir)
    assert killed_at < 60

    train_here(workdir)  # the same command, resumed in this process (no stderr is read)
    assert losses(workdir) == reference


def test_evaluate_reproduces_the_held_out_figure_of_training(uninterrupted):
    workdir, _ = uninterrupted
    with open(os.path.join(workdir, "eval_metrics.jsonl")) as f:
        final = [json.loads(line) for line in f][-1]
    assert final["step"] == 60
    done = subprocess.run([sys.executable, EVALUATE, f"--workdir={workdir}"], env=env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    with open(os.path.join(workdir, "evaluation", "step_60.json")) as f:
        reloaded = json.load(f)
    assert reloaded["step"] == 60
    for key in ("loss", "mlm_loss", "mlm_accuracy"):
        assert reloaded["metrics"][key] == final[key]


def test_unknown_config_key_is_named(tmp_path):
    # the script's flags and recipe in this process (pretrain_runs.refusal): exit 1, one line
    assert "totl_steps" in refusal(str(tmp_path), "--config.totl_steps=5")


def test_checkpoint_of_another_model_shape_is_named(uninterrupted, tmp_path):
    workdir = str(tmp_path / "copy")
    shutil.copytree(uninterrupted[0], workdir)
    # the script's flags and recipe in this process (pretrain_runs.refusal): exit 1, one line
    line = refusal(workdir, "--config.total_steps=70", "--config.model.hidden_size=64")
    assert "model.hidden_size: 32 -> 64" in line and "another config" in line  # named first
    line = refusal(workdir, "--config.total_steps=70", "--config.model.hidden_size=64",
                   "--config.allow_config_change=true")
    assert "hidden_size" in line and "another shape" in line


def test_batch_not_divisible_by_data_parallel_size_is_named(tmp_path):
    four_devices = dict(env(), XLA_FLAGS=xla_flags.with_devices(4))
    done = subprocess.run(command(str(tmp_path), "--config.batch_size=6"), env=four_devices,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "batch_size=6" in done.stderr and "data-parallel size 4" in done.stderr
