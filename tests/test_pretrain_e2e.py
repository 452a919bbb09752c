"""experiments/pretrain.py end to end, in subprocesses: exact resume after SIGTERM and after SIGKILL,
evaluate.py in a new process, and the bad-input errors (unknown config key, a workdir holding a
checkpoint of another model shape, a batch the data-parallel size does not divide).

A tiny BERT on the synthetic corpus (random tokens: the point is the bookkeeping, not learning),
dropout on, so that resuming must also restore the dropout randomness and the data position.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRETRAIN = os.path.join(ROOT, "experiments", "pretrain.py")
EVALUATE = os.path.join(ROOT, "experiments", "evaluate.py")

TINY_RUN = [
    "--config=" + os.path.join(ROOT, "experiments", "configs", "demo.py"),
    "--config.data.corpus=synthetic", "--config.tokenizer.vocab_size=97",
    "--config.model.hidden_size=32", "--config.model.num_attention_heads=2",
    "--config.model.intermediate_size=64", "--config.model.max_position_embeddings=16",
    "--config.model.hidden_dropout_prob=0.1", "--config.model.attention_probs_dropout_prob=0.1",
    "--config.max_seq_len=16", "--config.data.max_predictions=3",
    "--config.batch_size=8", "--config.eval_batch_size=8", "--config.eval_batches=2",
    "--config.total_steps=60", "--config.warmup_fraction=0.1", "--config.learning_rate=1e-3",
    "--config.log_every_steps=1", "--config.checkpoint_every_steps=20",
    "--config.eval_every_steps=0", "--config.keep_checkpoints=3",
]


def _env():
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    env.pop("XLA_FLAGS", None)
    return env


def _command(workdir, *extra):
    return [sys.executable, PRETRAIN, f"--workdir={workdir}", *TINY_RUN, *extra]


def _run(workdir, *extra, check=True):
    done = subprocess.run(_command(workdir, *extra), env=_env(), capture_output=True, text=True,
                          timeout=300)
    if check:
        assert done.returncode == 0, done.stderr[-3000:]
    return done


def _losses(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    steps = [r["step"] for r in records]
    assert steps == sorted(set(steps)), f"steps logged twice or out of order: {steps}"
    return {r["step"]: r["loss"] for r in records}


def _last_logged_step(workdir):
    path = os.path.join(workdir, "metrics.jsonl")
    if not os.path.exists(path):
        return 0
    with open(path) as f:
        lines = [line for line in f if line.endswith("\n")]
    return json.loads(lines[-1])["step"] if lines else 0


def _wait_for(predicate, process, timeout=240):
    start = time.time()
    while not predicate():
        assert process.poll() is None, "the run ended before it could be interrupted"
        assert time.time() - start < timeout, "timed out waiting for the run"
        time.sleep(0.01)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("uninterrupted"))
    _run(workdir)
    return workdir, _losses(workdir)


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


def test_sigterm_then_restart_gives_bit_equal_losses(uninterrupted, tmp_path):
    _, reference = uninterrupted
    workdir = str(tmp_path)
    slow = "--config.data.seconds_per_batch=0.05"  # so that SIGTERM lands mid-run
    process = subprocess.Popen(_command(workdir, slow), env=_env(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    _wait_for(lambda: _last_logged_step(workdir) >= 27, process)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr[-3000:]
    stopped_at = _last_logged_step(workdir)
    assert 27 <= stopped_at < 40
    saved = sorted(int(s) for s in os.listdir(os.path.join(workdir, "checkpoints")))
    assert saved == [20, stopped_at], "SIGTERM must save the step it stopped at"

    _run(workdir)
    assert _losses(workdir) == reference  # bit-equal: exact float equality at all 60 steps


def test_sigkill_after_a_save_then_restart_gives_bit_equal_losses(uninterrupted, tmp_path):
    _, reference = uninterrupted
    workdir = str(tmp_path)
    process = subprocess.Popen(_command(workdir, "--config.data.seconds_per_batch=0.05"),
                               env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    step_20 = os.path.join(workdir, "checkpoints", "20", "state")
    _wait_for(lambda: os.path.isdir(step_20) and _last_logged_step(workdir) >= 25, process)
    process.kill()
    process.wait(timeout=60)
    killed_at = _last_logged_step(workdir)
    assert killed_at < 60

    _run(workdir)
    assert _losses(workdir) == reference


def test_evaluate_reproduces_the_held_out_figure_of_training(uninterrupted):
    workdir, _ = uninterrupted
    with open(os.path.join(workdir, "eval_metrics.jsonl")) as f:
        final = [json.loads(line) for line in f][-1]
    assert final["step"] == 60
    done = subprocess.run([sys.executable, EVALUATE, f"--workdir={workdir}"], env=_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    with open(os.path.join(workdir, "evaluation", "step_60.json")) as f:
        reloaded = json.load(f)
    assert reloaded["step"] == 60
    for key in ("loss", "mlm_loss", "mlm_accuracy"):
        assert reloaded["metrics"][key] == final[key]


def test_unknown_config_key_is_named(tmp_path):
    done = _run(str(tmp_path), "--config.totl_steps=5", check=False)
    assert done.returncode != 0
    assert "totl_steps" in done.stderr


def test_checkpoint_of_another_model_shape_is_named(uninterrupted, tmp_path):
    workdir = str(tmp_path / "copy")
    shutil.copytree(uninterrupted[0], workdir)
    done = _run(workdir, "--config.total_steps=70", "--config.model.hidden_size=64", check=False)
    assert done.returncode != 0
    assert "hidden_size" in done.stderr and "another shape" in done.stderr


def test_batch_not_divisible_by_data_parallel_size_is_named(tmp_path):
    env = dict(_env(), XLA_FLAGS="--xla_force_host_platform_device_count=4")
    done = subprocess.run(_command(str(tmp_path), "--config.batch_size=6"), env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "batch_size=6" in done.stderr and "data-parallel size 4" in done.stderr
