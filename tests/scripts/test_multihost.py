"""Multi-host training on one machine: 2 processes x 2 CPU devices joined by jax.distributed
(launch/multihost_local.sh): checkpoints written by both, read by one process of one device.

The corpus is a few text files the test writes (a `text:` corpus: prepared into array_record
files and its vocabulary trained by one of the two processes under the data folder's lock, as the
demo corpus would be, without the demo's wiki parsing, which costs about 20 s of CPU)."""

import json
import os
import random
import subprocess
import sys

import pytest
import xla_flags

from repo_root import ROOT

LAUNCHER = os.path.join(ROOT, "launch", "multihost_local.sh")


SYLLABLES = ("ka", "to", "ri", "mun", "sel", "da", "ve", "lo", "pin", "gar", "tu", "ne", "bo",
             "sha", "mi", "ter", "quo", "fa", "ly", "zen")


def write_corpus(folder) -> str:
    """`text:GLOB` of 4 files of 100 documents each (several sentences of made-up words)."""
    rng = random.Random(0)
    words = ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 3))) for _ in range(300)]
    os.makedirs(folder, exist_ok=True)
    for f in range(4):
        documents = ["\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(6, 14)))
                               + "." for _ in range(rng.randint(6, 12))) for _ in range(100)]
        with open(os.path.join(folder, f"part{f}.txt"), "w") as out:
            out.write("\n\n".join(documents) + "\n")
    return f"text:{folder}/*.txt"


def pretrain_on_two_processes(workdir: str, corpus: str, total_steps: int, logdir: str,
                              *extra: str) -> None:
    """A text corpus (held-out rows dealt round-robin, so the held-out set is the same for any
    process count), a tiny vocabulary, a one-layer 32-wide model and few steps."""
    os.makedirs(logdir, exist_ok=True)
    proc = subprocess.run(
        ["bash", LAUNCHER, "2", "2", "experiments/pretrain.py",
         "--config=experiments/configs/demo.py", f"--workdir={workdir}",
         f"--config.data.corpus={corpus}",
         "--config.tokenizer.vocab_size=512", "--config.max_seq_len=64",
         "--config.model.num_hidden_layers=1", "--config.model.hidden_size=32",
         "--config.model.num_attention_heads=2", "--config.model.intermediate_size=64",
         "--config.data.max_predictions=10", f"--config.total_steps={total_steps}",
         "--config.warmup_fraction=0.1", "--config.log_every_steps=1",
         "--config.eval_every_steps=3",
         "--config.checkpoint_every_steps=3", "--config.batch_size=8", "--config.eval_batches=2",
         "--config.mesh.fsdp=2", "--config.async_checkpoints=False", *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHON": sys.executable, "LOGDIR": logdir})
    logs = "".join(open(os.path.join(logdir, f"process_{i}.log")).read()[-2000:] for i in range(2))
    assert proc.returncode == 0, proc.stderr[-2000:] + logs
    assert "process 1 of 2; 2 local of 4 global devices" in open(
        os.path.join(logdir, "process_1.log")).read()


def read_jsonl(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f]


def test_two_processes_train_checkpoint_and_evaluate_on_one(tmp_path):
    workdir = str(tmp_path / "run")
    pretrain_on_two_processes(workdir, write_corpus(str(tmp_path / "corpus")), 6,
                              str(tmp_path / "logs1"))
    first = read_jsonl(os.path.join(workdir, "metrics.jsonl"))
    assert [r["step"] for r in first] == [1, 2, 3, 4, 5, 6]  # written once, by process 0
    assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["3", "6"]

    # (Two processes resuming, bit for bit: tests/scripts/test_slurm.py; a config change on resume:
    # tests/faults/test_run_faults.py.)

    # One process with one device reads the checkpoint the two processes wrote.
    proc = subprocess.run([sys.executable, "experiments/evaluate.py", f"--workdir={workdir}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "XLA_FLAGS": xla_flags.with_devices()})
    assert proc.returncode == 0, proc.stderr[-2000:]
    evaluated = json.loads(proc.stdout.strip().splitlines()[-1])
    logged = read_jsonl(os.path.join(workdir, "eval_metrics.jsonl"))[-1]
    assert evaluated["step"] == logged["step"] == 6
    assert evaluated["metrics"]["mlm_loss"] == pytest.approx(logged["mlm_loss"], rel=1e-5)
