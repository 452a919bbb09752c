"""Faults of a whole run, injected on purpose: divergence, two runs on one workdir, Ctrl-C, a rerun
with a changed or broken config, settings that would lose the model, and two fresh workdirs that
must give the same run. Each runs experiments/pretrain.py in subprocesses (tests/pretrain_runs.py).
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from pretrain_runs import EVALUATE, ROOT, command, env, last_logged_step, losses, run, wait_for


def _error_line(done) -> str:
    """The last stderr line, which must be the one-line error; no traceback before it."""
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done.stderr.strip().splitlines()[-1]


def _finite_checkpoints(workdir):
    import jax

    from bert_jax.train import params_loading
    directory = os.path.join(workdir, "checkpoints")
    steps = sorted(int(s) for s in os.listdir(directory) if s.isdigit())
    for step in steps:
        _, params = params_loading.load_params(directory, step)
        assert all(np.isfinite(np.asarray(leaf)).all() for leaf in jax.tree.leaves(params)), step
    return steps


DIVERGING = ("--config.learning_rate=1e4", "--config.optimizer.clip_norm=0",
             "--config.warmup_fraction=0", "--config.model.hidden_dropout_prob=0",
             "--config.checkpoint_every_steps=1", "--config.keep_checkpoints=2",
             "--config.log_every_steps=5")


def test_divergence_stops_the_run_and_keeps_the_last_finite_checkpoints(tmp_path):
    workdir = str(tmp_path)
    done = run(workdir, *DIVERGING, check=False)
    assert done.returncode == 1
    line = _error_line(done)
    assert line.startswith("pretrain.py: error: training diverged"), line
    assert "not finite" in line and "newest checkpoint, step" in line
    kept = _finite_checkpoints(workdir)
    assert kept, "the rotation deleted every finite checkpoint"
    assert f"newest checkpoint, step {kept[-1]}," in line


def test_divergence_with_skip_stops_after_the_steps_in_a_row(tmp_path):
    workdir = str(tmp_path)
    done = run(workdir, *DIVERGING, "--config.nonfinite=skip",
               "--config.max_nonfinite_in_a_row=3", check=False)
    assert done.returncode == 1
    line = _error_line(done)
    assert "training diverged" in line and "in a row" in line
    _finite_checkpoints(workdir)


def test_a_second_run_on_the_same_workdir_stops_at_once(tmp_path):
    workdir = str(tmp_path)
    first = subprocess.Popen(command(workdir, "--config.total_steps=100000",
                                     "--config.data.seconds_per_batch=0.02"),
                             env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True)
    try:
        wait_for(lambda: last_logged_step(workdir) >= 3, first)
        second = run(workdir, "--config.total_steps=100000", check=False)
        assert second.returncode == 1
        line = _error_line(second)
        assert f"in use by process {first.pid}" in line and "run.lock" in line
    finally:
        first.send_signal(signal.SIGTERM)
        _, stderr = first.communicate(timeout=120)
    assert first.returncode == 143, stderr[-2000:]
    losses(workdir)  # every step logged once, in order
    assert not os.path.exists(os.path.join(workdir, "run.lock"))  # released on exit


def test_a_stale_lock_of_a_dead_process_is_taken_over(tmp_path):
    workdir = str(tmp_path)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    import socket
    with open(os.path.join(workdir, "run.lock"), "w") as f:
        json.dump({"pid": gone.pid, "host": socket.gethostname(), "since": "earlier"}, f)
    run(workdir, "--config.total_steps=5")
    assert sorted(losses(workdir)) == [1, 2, 3, 4, 5]


def test_ctrl_c_saves_and_exits_130_then_the_run_resumes(tmp_path):
    workdir = str(tmp_path)
    process = subprocess.Popen(command(workdir, "--config.data.seconds_per_batch=0.05"),
                               env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True)
    wait_for(lambda: last_logged_step(workdir) >= 25, process)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr[-3000:]
    assert "KeyboardInterrupt" not in stderr
    stopped_at = last_logged_step(workdir)
    saved = sorted(int(s) for s in os.listdir(os.path.join(workdir, "checkpoints")))
    assert saved[-1] == stopped_at, "Ctrl-C must save the step it stopped at"
    run(workdir)
    assert sorted(losses(workdir)) == list(range(1, 61))


def test_a_second_ctrl_c_aborts_at_once():
    """The signals go to this thread (pthread_kill), so their handlers run here before the next
    line: os.kill may deliver to one of XLA's threads and the main thread see it a moment late."""
    from bert_jax.train.preemption import StopSignals
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN when started in the background
    with StopSignals() as stop:
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)
        assert stop.should_stop() and stop.received == signal.SIGINT
        with pytest.raises(KeyboardInterrupt):
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)
            time.sleep(5)  # interrupted at once by the handler's KeyboardInterrupt
    assert signal.getsignal(signal.SIGINT) == before  # the handler it found is back


@pytest.mark.parametrize("flag, named", [("--config.keep_checkpoints=0", "keep_checkpoints=0"),
                                         ("--config.log_every_steps=0", "log_every_steps=0")])
def test_settings_that_would_lose_work_are_refused_before_anything_is_written(tmp_path, flag,
                                                                              named):
    workdir = str(tmp_path / "run")
    done = run(workdir, flag, check=False)
    assert done.returncode == 1
    assert named in _error_line(done)
    assert not os.path.exists(workdir)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("finished"))
    run(workdir, "--config.total_steps=10", "--config.checkpoint_every_steps=5")
    return workdir


def _files(workdir, *names):
    contents = []
    for name in names:
        with open(os.path.join(workdir, name), "rb") as f:
            contents.append(f.read())
    return contents


def test_a_mistaken_rerun_leaves_the_finished_run_intact(finished):
    before = _files(finished, "config.json", "eval_metrics.jsonl", "metrics.jsonl")
    for flag, named in (("--config.max_seq_len=1000", "max_seq_len"),
                        ("--config.learning_rate=0.5", "learning_rate: 0.001 -> 0.5")):
        done = run(finished, "--config.total_steps=10", "--config.checkpoint_every_steps=5",
                   flag, check=False)
        assert done.returncode == 1
        assert named in _error_line(done)
    assert _files(finished, "config.json", "eval_metrics.jsonl", "metrics.jsonl") == before
    done = subprocess.run([sys.executable, EVALUATE, f"--workdir={finished}"], env=env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_same_rerun_on_a_finished_run_adds_no_second_evaluation(finished):
    before = _files(finished, "eval_metrics.jsonl")
    run(finished, "--config.total_steps=10", "--config.checkpoint_every_steps=5")
    assert _files(finished, "eval_metrics.jsonl") == before


def test_an_intended_config_change_keeps_the_previous_config(finished, tmp_path):
    import shutil
    workdir = str(tmp_path / "copy")
    shutil.copytree(finished, workdir)
    run(workdir, "--config.total_steps=12", "--config.checkpoint_every_steps=5",
        "--config.allow_config_change=true")
    kept = [n for n in os.listdir(workdir) if n.startswith("config.previous-")]
    assert len(kept) == 1
    with open(os.path.join(workdir, kept[0])) as f:
        assert json.load(f)["total_steps"] == 10
    assert sorted(losses(workdir)) == list(range(1, 13))


def test_two_fresh_workdirs_give_the_same_run(tmp_path):
    """A run is a function of its config: two fresh workdirs train the demo with equal losses.
    The second reads the corpus and vocabulary the first prepared (that every preparation writes
    the same bytes is tests/faults/test_input_faults.py's test)."""
    demo = ["--config=" + os.path.join(ROOT, "experiments", "configs", "demo.py"),
            "--config.total_steps=30", "--config.log_every_steps=10",
            "--config.eval_every_steps=0",
            "--config.data.data_dir=" + str(tmp_path / "data")]
    results = []
    for name in ("a", "b"):
        workdir = str(tmp_path / name)
        done = subprocess.run([sys.executable, os.path.join(ROOT, "experiments", "pretrain.py"),
                               f"--workdir={workdir}", *demo], env=env(), capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        results.append(losses(workdir))
    assert len(results[0]) == 3 and results[0] == results[1]
