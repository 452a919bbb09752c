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


# ----- checkpoint integrity, disk full, read-only workdir, a lost config.json --------------------

SHORT = ("--config.total_steps=30", "--config.checkpoint_every_steps=10")
INJECT = os.path.join(ROOT, "tests", "faults", "inject.py")


def _clean_one_line(done, returncode=1) -> str:
    """The one-line error, last on stderr, with no traceback of any thread before it."""
    assert done.returncode == returncode, done.stderr[-3000:]
    assert "Event loop is closed" not in done.stderr, done.stderr[-3000:]
    return _error_line(done)


def _steps(workdir):
    return sorted(int(s) for s in os.listdir(os.path.join(workdir, "checkpoints")) if s.isdigit())


def _array_files(step_dir):
    return [os.path.join(root, name) for root, _, names in os.walk(os.path.join(step_dir, "state"))
            for name in names]


def _flip_bytes(path):
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        for start in (size // 4, size // 2, 3 * size // 4):
            f.seek(start)
            chunk = f.read(64)
            f.seek(start)
            f.write(bytes(b ^ 0xFF for b in chunk))


def _zero(path):
    with open(path, "r+b") as f:
        f.write(bytes(os.path.getsize(path)))


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    """An uninterrupted 30-step run (checkpoints 10, 20, 30): its workdir and losses."""
    workdir = str(tmp_path_factory.mktemp("short"))
    run(workdir, *SHORT)
    assert _steps(workdir) == [10, 20, 30]
    return workdir, losses(workdir)


@pytest.fixture
def short_copy(short_run, tmp_path):
    import shutil
    workdir = str(tmp_path / "copy")
    shutil.copytree(short_run[0], workdir)
    return workdir


def test_bit_rot_in_the_newest_step_falls_back_and_ends_as_the_uninterrupted_run(
        short_run, short_copy):
    """Issue 26's case: step 30 removed, 3 x 64 bytes flipped in step 20's largest array file:
    the rerun sets step 20 aside, resumes from step 10 and logs the uninterrupted losses."""
    import shutil
    checkpoints = os.path.join(short_copy, "checkpoints")
    shutil.rmtree(os.path.join(checkpoints, "30"))
    _flip_bytes(max(_array_files(os.path.join(checkpoints, "20")), key=os.path.getsize))
    done = run(short_copy, *SHORT)
    assert "Traceback" not in done.stderr and "Event loop is closed" not in done.stderr
    assert "does not match its checksum" in done.stderr  # the warning names the file
    assert os.listdir(os.path.join(short_copy, "checkpoints_unreadable")) == ["20"]
    assert losses(short_copy) == short_run[1]


@pytest.mark.parametrize("with_checksums", [True, False])
def test_when_no_step_can_be_read_the_one_line_error_is_the_last_line(short_copy,
                                                                      with_checksums):
    """Every manifest zeroed (without checksums, Orbax itself meets them): the error is the last
    line, with no tracebacks of Orbax's threads after it."""
    import shutil
    for step in _steps(short_copy):
        step_dir = os.path.join(short_copy, "checkpoints", str(step))
        _zero(os.path.join(step_dir, "state", "manifest.ocdbt"))
        if not with_checksums:
            shutil.rmtree(os.path.join(step_dir, "checksums"))
    line = _clean_one_line(run(short_copy, *SHORT, check=False))
    assert line.startswith(f"pretrain.py: error: no checkpoint in {short_copy}/checkpoints can be "
                           "read"), line


@pytest.mark.parametrize("with_checksums", [True, False])
def test_a_recovery_from_a_zeroed_file_prints_no_traceback(short_run, short_copy,
                                                           with_checksums):
    import shutil
    step_dir = os.path.join(short_copy, "checkpoints", "30")
    _zero(max(_array_files(step_dir), key=os.path.getsize))
    if not with_checksums:
        shutil.rmtree(os.path.join(step_dir, "checksums"))
    done = run(short_copy, *SHORT)
    assert "Traceback" not in done.stderr and "Event loop is closed" not in done.stderr, \
        done.stderr[-3000:]
    assert os.listdir(os.path.join(short_copy, "checkpoints_unreadable")) == ["30"]
    assert losses(short_copy) == short_run[1]


def _injected(fault, workdir, *extra, script=None):
    return subprocess.run([sys.executable, INJECT, fault, script or command(workdir)[1],
                           *command(workdir, *extra)[2:]],
                          env=env(), capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("fault, named", [
    ("enospc-metrics:15", "could not write {workdir}/metrics.jsonl: OSError: [Errno 28] No space "
                          "left on device: '{workdir}/metrics.jsonl'"),
    ("enospc-tensorboard:15", "could not write TensorBoard's events in {workdir}/tensorboard: "
                              "OSError: [Errno 28] No space left on device"),
    ("enospc-checkpoint:20", "could not write the checkpoint {workdir}/checkpoints/20: OSError: "
                             "[Errno 28] No space left on device"),
])
def test_a_full_disk_stops_the_run_in_one_line_and_loses_nothing(short_run, tmp_path, fault,
                                                                 named):
    workdir = str(tmp_path / "run")
    line = _clean_one_line(_injected(fault, workdir, *SHORT))
    assert line == "pretrain.py: error: " + named.format(workdir=workdir)
    run(workdir, *SHORT)  # room again: the same command resumes and finishes
    assert losses(workdir) == short_run[1]


def test_a_read_only_workdir_is_one_line(short_run, short_copy):
    line = _clean_one_line(_injected(f"readonly:{short_copy}", short_copy, *SHORT))
    assert line.startswith(f"pretrain.py: error: cannot write into {short_copy} (OSError: "
                           f"[Errno 30] Read-only file system: '{short_copy}/run.lock.tmp-"), line
    assert line.endswith("): a run needs a writable --workdir (free some space, or use another "
                         "folder)")
    assert losses(short_copy) == short_run[1]


def test_a_run_whose_config_json_is_gone_is_checked_against_its_checkpoint(short_copy):
    config_path = os.path.join(short_copy, "config.json")
    os.remove(config_path)
    line = _clean_one_line(run(short_copy, *SHORT, "--config.learning_rate=0.5", check=False))
    assert line == (f"pretrain.py: error: {config_path} is missing, and the newest checkpoint "
                    "(step 30) was saved with another config (learning_rate: 0.001 -> 0.5): "
                    "rerun with the config it was saved with, or "
                    "--config.allow_config_change=true if the change is meant")
    assert not os.path.exists(config_path)
    done = run(short_copy, *SHORT)  # the config it was saved with: a warning, and on it goes
    assert (f"{config_path} was missing; this config is the one checkpoint step 30 was saved "
            "with, written anew") in done.stderr
    assert os.path.exists(config_path)
