"""Faults of a whole run, injected on purpose: divergence, two runs on one workdir, Ctrl-C, a rerun
with a changed or broken config, settings that would lose the model, and two fresh workdirs that
must give the same run. Each runs experiments/pretrain.py in subprocesses (tests/pretrain_runs.py);
refusals that come before any training (settings, config changes, the workdir's lock) are checked
in this process, through cli.run_or_exit as the script runs the recipe (pretrain_runs.refusal).
One uninterrupted 30-step run (`short_run`, one layer) is the reference of every run that resumes,
and copies of its workdir stand in for finished runs.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from faults.inject import as_saved_before_checksums

from pretrain_runs import (
    ROOT,
    command,
    env,
    last_logged_step,
    losses,
    refusal,
    run,
    train_here,
    wait_for,
)


def _error_line(done) -> str:
    """The last stderr line, which must be the one-line error; no traceback before it."""
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done.stderr.strip().splitlines()[-1]


def _finite_checkpoints(workdir):
    import jax

    from bert_jax.train.checkpoint import params as params_loading
    directory = os.path.join(workdir, "checkpoints")
    steps = sorted(int(s) for s in os.listdir(directory) if s.isdigit())
    for step in steps:
        _, params = params_loading.load_params(directory, step)
        assert all(np.isfinite(np.asarray(leaf)).all() for leaf in jax.tree.leaves(params)), step
    return steps


# One layer: these tests are about the bookkeeping of a run, not its model; one shape compiles
# quickly, and every run of the module but the diverging ones compiles the same programs.
ONE_LAYER = "--config.model.num_hidden_layers=1"
SHORT = ("--config.total_steps=30", "--config.checkpoint_every_steps=10", ONE_LAYER)
INJECT = os.path.join(ROOT, "tests", "faults", "inject.py")


def _clean_one_line(done, returncode=1) -> str:
    """The one-line error, last on stderr, with no traceback of any thread before it."""
    assert done.returncode == returncode, done.stderr[-3000:]
    assert "Event loop is closed" not in done.stderr, done.stderr[-3000:]
    return _error_line(done)


def _steps(workdir):
    return sorted(int(s) for s in os.listdir(os.path.join(workdir, "checkpoints")) if s.isdigit())


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    """An uninterrupted 30-step run (checkpoints 10, 20, 30): its workdir and losses."""
    workdir = str(tmp_path_factory.mktemp("short"))
    run(workdir, *SHORT)
    assert _steps(workdir) == [10, 20, 30]
    return workdir, losses(workdir)


@pytest.fixture
def short_copy(short_run, tmp_path):
    workdir = str(tmp_path / "copy")
    shutil.copytree(short_run[0], workdir)
    return workdir


def _stale_lock(workdir):
    """run.lock as a process that died holding it leaves it: its pid is no process now."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "run.lock"), "w") as f:
        json.dump({"pid": gone.pid, "host": socket.gethostname(), "since": "earlier"}, f)


DIVERGING = ("--config.learning_rate=1e4", "--config.optimizer.clip_norm=0",
             "--config.warmup_fraction=0", "--config.model.hidden_dropout_prob=0",
             "--config.checkpoint_every_steps=1", "--config.keep_checkpoints=2",
             "--config.log_every_steps=5", ONE_LAYER)


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


SLOW = "--config.data.seconds_per_batch=0.1"  # so that the signal lands mid-run


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """The short run, paced by its data, met mid-run by a second run on its workdir (refused:
    the workdir's lock) and then by Ctrl-C; the same command then resumes it to the end. What
    happened, for the tests below to check."""
    workdir = str(tmp_path_factory.mktemp("interrupted"))
    process = subprocess.Popen(command(workdir, *SHORT, SLOW), env=env(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: last_logged_step(workdir) >= 3, process)
        second = refusal(workdir, *SHORT)  # the same command, in this process: the lock's check
        wait_for(lambda: last_logged_step(workdir) >= 12, process)
    finally:
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
    stopped_at = last_logged_step(workdir)
    result = {"pid": process.pid, "second": second, "returncode": process.returncode,
              "stderr": stderr, "stopped_at": stopped_at, "saved": _steps(workdir),
              "lock_left": os.path.exists(os.path.join(workdir, "run.lock"))}
    train_here(workdir, *SHORT, SLOW)  # the same command resumes (here: no stderr is read)
    result["losses"] = losses(workdir)  # every step logged once, in order
    return result


def test_a_second_run_on_the_same_workdir_stops_at_once(interrupted):
    line = interrupted["second"]
    assert f"in use by process {interrupted['pid']}" in line and "run.lock" in line, line
    assert not interrupted["lock_left"]  # released on exit


def test_ctrl_c_saves_and_exits_130_then_the_run_resumes(short_run, interrupted):
    assert interrupted["returncode"] == 130, interrupted["stderr"][-3000:]
    assert "KeyboardInterrupt" not in interrupted["stderr"]
    assert 12 <= interrupted["stopped_at"] < 30
    assert interrupted["saved"][-1] == interrupted["stopped_at"], \
        "Ctrl-C must save the step it stopped at"
    assert interrupted["losses"] == short_run[1]  # all 30 steps, as uninterrupted


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
    assert named in refusal(workdir, flag)
    assert not os.path.exists(workdir)


@pytest.fixture(scope="module")
def finished(short_run, tmp_path_factory):
    """A finished run: a copy of the short run (evaluated at its end)."""
    workdir = str(tmp_path_factory.mktemp("finished") / "run")
    shutil.copytree(short_run[0], workdir)
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
        assert named in refusal(finished, *SHORT, flag)
    assert _files(finished, "config.json", "eval_metrics.jsonl", "metrics.jsonl") == before
    from bert_jax.tools import evaluation  # what evaluate.py runs, here
    step, metrics, _ = evaluation.evaluate_run(finished, None, None, None)
    assert step == 30 and np.isfinite(metrics["loss"]), (step, metrics)


def test_the_same_rerun_on_a_finished_run_adds_no_second_evaluation(finished):
    before = _files(finished, "eval_metrics.jsonl")
    assert train_here(finished, *SHORT).step == 30  # in this process: nothing read from stderr
    assert _files(finished, "eval_metrics.jsonl") == before


def test_an_intended_config_change_keeps_the_previous_config(short_copy):
    workdir = short_copy
    train_here(workdir, "--config.total_steps=32", *SHORT[1:],
               "--config.allow_config_change=true")
    kept = [n for n in os.listdir(workdir) if n.startswith("config.previous-")]
    assert len(kept) == 1
    with open(os.path.join(workdir, kept[0])) as f:
        assert json.load(f)["total_steps"] == 30
    assert sorted(losses(workdir)) == list(range(1, 33))


def test_two_fresh_workdirs_give_the_same_run(short_run, tmp_path):
    """A run is a function of its config: a second fresh workdir gives the short run's losses,
    exactly (that every preparation of the demo corpus and vocabulary writes the same bytes is
    tests/faults/test_input_faults.py's test)."""
    workdir = str(tmp_path / "b")
    run(workdir, *SHORT)
    assert len(short_run[1]) == 30 and losses(workdir) == short_run[1]
    assert _steps(workdir) == _steps(short_run[0])


# ----- checkpoint integrity, disk full, read-only workdir, a lost config.json --------------------


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


def test_bit_rot_in_the_newest_step_falls_back_and_ends_as_the_uninterrupted_run(
        short_run, short_copy):
    """Issue 26's case: step 30 removed, 3 x 64 bytes flipped in step 20's largest array file:
    the rerun sets step 20 aside, resumes from step 10 and logs the uninterrupted losses."""
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
    for step in _steps(short_copy):
        step_dir = os.path.join(short_copy, "checkpoints", str(step))
        _zero(os.path.join(step_dir, "state", "manifest.ocdbt"))
        if not with_checksums:
            as_saved_before_checksums(step_dir)
    line = _clean_one_line(run(short_copy, *SHORT, check=False))
    assert line.startswith(f"pretrain.py: error: no checkpoint in {short_copy}/checkpoints can be "
                           "read"), line


@pytest.mark.parametrize("with_checksums", [True, False])
def test_a_recovery_from_a_zeroed_file_prints_no_traceback(short_run, short_copy,
                                                           with_checksums):
    step_dir = os.path.join(short_copy, "checkpoints", "30")
    _zero(max(_array_files(step_dir), key=os.path.getsize))
    if not with_checksums:
        as_saved_before_checksums(step_dir)
    done = run(short_copy, *SHORT)
    assert "Traceback" not in done.stderr and "Event loop is closed" not in done.stderr, \
        done.stderr[-3000:]
    assert os.listdir(os.path.join(short_copy, "checkpoints_unreadable")) == ["30"]
    assert losses(short_copy) == short_run[1]


def _injected(fault, workdir, *extra, script=None):
    return subprocess.run([sys.executable, INJECT, fault, script or command(workdir)[1],
                           *command(workdir, *extra)[2:]],
                          env=env(), capture_output=True, text=True, timeout=300)


# The three faults meet one workdir in turn, each in the run that resumes after the one before;
# the tensorboard fault first, on a fresh workdir (its 15th flush comes before step 30 only from
# the start), the checkpoint fault before step 20 is saved, and the metrics fault early in what is
# left. Then, with room again, the same command finishes the run as the uninterrupted one.
FULL_DISK = {
    "enospc-tensorboard:15": "could not write TensorBoard's events in {workdir}/tensorboard: "
                             "OSError: [Errno 28] No space left on device",
    "enospc-checkpoint:20": "could not write the checkpoint {workdir}/checkpoints/20: OSError: "
                            "[Errno 28] No space left on device",
    "enospc-metrics:3": "could not write {workdir}/metrics.jsonl: OSError: [Errno 28] No space "
                        "left on device: '{workdir}/metrics.jsonl'",
}


@pytest.fixture(scope="module")
def full_disk(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("full_disk") / "run")
    stopped = {}
    for fault in FULL_DISK:
        done = _injected(fault, workdir, *SHORT)
        stopped[fault] = (done, os.path.exists(os.path.join(workdir, "run.lock")))
    # Room again, and the lock a killed run would have left behind (its process gone): the same
    # command takes the stale lock over, resumes and finishes.
    _stale_lock(workdir)
    train_here(workdir, *SHORT)
    return workdir, stopped, losses(workdir)


@pytest.mark.parametrize("fault", list(FULL_DISK))
def test_a_full_disk_stops_the_run_in_one_line_and_loses_nothing(short_run, full_disk, fault):
    workdir, stopped, losses_after = full_disk
    done, lock_left = stopped[fault]
    line = _clean_one_line(done)
    assert line == "pretrain.py: error: " + FULL_DISK[fault].format(workdir=workdir)
    assert not lock_left  # released on the way out
    assert losses_after == short_run[1]


def test_a_read_only_workdir_is_one_line(short_run, short_copy):
    line = _clean_one_line(_injected(f"readonly:{short_copy}", short_copy, *SHORT))
    assert line.startswith(f"pretrain.py: error: cannot write into {short_copy} (OSError: "
                           f"[Errno 30] Read-only file system: '{short_copy}/run.lock.tmp-"), line
    assert line.endswith("): a run needs a writable --workdir (free some space, or use another "
                         "folder)")
    assert losses(short_copy) == short_run[1]


def test_a_run_whose_config_json_is_gone_is_checked_against_its_checkpoint(short_copy, capfd,
                                                                          caplog):
    """Both reruns in this process (pretrain_runs.refusal, train_here): the script's one line,
    and nothing else on stderr (no traceback of a thread that read the checkpoint)."""
    config_path = os.path.join(short_copy, "config.json")
    os.remove(config_path)
    capfd.readouterr()
    line = refusal(short_copy, *SHORT, "--config.learning_rate=0.5")
    stderr = capfd.readouterr().err
    assert "Traceback" not in stderr and "Event loop is closed" not in stderr, stderr[-3000:]
    assert line == (f"pretrain.py: error: {config_path} is missing, and the newest checkpoint "
                    "(step 30) was saved with another config (learning_rate: 0.001 -> 0.5): "
                    "rerun with the config it was saved with, or "
                    "--config.allow_config_change=true if the change is meant")
    assert not os.path.exists(config_path)
    with caplog.at_level("WARNING"):
        train_here(short_copy, *SHORT)  # the config it was saved with: a warning, and on it goes
    assert (f"{config_path} was missing; this config is the one checkpoint step 30 was saved "
            "with, written anew") in caplog.text
    assert os.path.exists(config_path)
