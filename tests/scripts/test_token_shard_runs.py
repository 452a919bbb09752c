"""Tiny pre-training runs of experiments/pretrain.py from prepared token shards (`shards:DIR`):
1 process on 1 device, 1 process on 8 devices and 2 processes x 4 devices log the same losses,
since every process takes its share of the same global batches
(bert_jax.data.pretraining.shard_iterator). A resume on another process count continues the
same batches."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import token_shard_fixture
import xla_flags

import pretrain_runs

ROOT = pretrain_runs.ROOT
LAUNCHER = os.path.join(ROOT, "launch", "multihost_local.sh")
STEPS = 6


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return token_shard_fixture.prepare(str(tmp_path_factory.mktemp("shards")), 120, 20)


def flags(shards, steps=STEPS):
    return [f"--config.data.corpus=shards:{shards}", "--config.tokenizer.path=",
            "--config.max_seq_len=16", f"--config.total_steps={steps}",
            "--config.checkpoint_every_steps=3", "--config.eval_every_steps=0",
            "--config.async_checkpoints=False"]


def losses(workdir):
    return pretrain_runs.losses(workdir)


def run_on_devices(workdir, devices, *extra):
    env = dict(pretrain_runs.env(), XLA_FLAGS=xla_flags.with_devices(devices))
    done = subprocess.run(pretrain_runs.command(workdir, *extra), env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def run_on_two_processes(workdir, *extra):
    logdir = os.path.join(workdir + "-logs")
    os.makedirs(logdir, exist_ok=True)
    done = subprocess.run(
        ["bash", LAUNCHER, "2", "4", pretrain_runs.PRETRAIN, f"--workdir={workdir}",
         *pretrain_runs.TINY_RUN, *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**pretrain_runs.env(), "PYTHON": sys.executable, "LOGDIR": logdir})
    logs = "".join(open(os.path.join(logdir, f"process_{i}.log")).read()[-2000:]
                   for i in range(2))
    assert done.returncode == 0, done.stderr[-2000:] + logs
    return logs


def test_one_device_eight_devices_and_two_processes_log_the_same_losses(shards, tmp_path):
    one = str(tmp_path / "one")
    run_on_devices(one, 1, *flags(shards))
    reference = losses(one)
    assert sorted(reference) == list(range(1, STEPS + 1))
    eight = str(tmp_path / "eight")
    run_on_devices(eight, 8, *flags(shards))
    for step, loss in losses(eight).items():
        assert loss == pytest.approx(reference[step], rel=2e-5, abs=1e-6), step
    two = str(tmp_path / "two")
    run_on_two_processes(two, *flags(shards))
    for step, loss in losses(two).items():
        assert loss == pytest.approx(reference[step], rel=2e-5, abs=1e-6), step
    # the 2-process run's step-3 checkpoint resumes on 1 device and continues the same batches
    shutil.rmtree(os.path.join(two, "checkpoints", str(STEPS)))
    with open(os.path.join(two, "metrics.jsonl")) as f:
        kept = [line for line in f if json.loads(line)["step"] <= 3]
    with open(os.path.join(two, "metrics.jsonl"), "w") as f:
        f.writelines(kept)
    run_on_devices(two, 1, *flags(shards))
    for step in range(4, STEPS + 1):
        assert losses(two)[step] == pytest.approx(reference[step], rel=2e-5, abs=1e-6), step
    state = os.path.join(two, "checkpoints", str(STEPS), "data_iterator", "process_0-of-1.json")
    with open(state) as f:
        assert json.load(f)["batch"] == STEPS
