"""Tests that need 8 devices run their own file as a script in a subprocess, where
XLA_FLAGS=--xla_force_host_platform_device_count=8 is set before jax is imported; the script
writes its findings as JSON, which the test process reads back."""

import json
import os
import subprocess
import sys

import xla_flags

from repo_root import ROOT, TESTS

RESULTS = "results.json"


def run(test_file: str, out_dir: str, timeout: int = 900) -> dict:
    """Run `python test_file out_dir` on 8 CPU devices, with the repository and tests/ (the
    helper modules) on its path; return what it wrote with `write`."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=os.pathsep.join([ROOT, TESTS]),
               XLA_FLAGS=xla_flags.with_devices(8))
    done = subprocess.run([sys.executable, os.path.abspath(test_file), out_dir], env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-4000:]
    with open(os.path.join(out_dir, RESULTS)) as f:
        return json.load(f)


def write(out_dir: str, results: dict) -> None:
    """In the subprocess: the findings the test process reads back."""
    with open(os.path.join(out_dir, RESULTS), "w") as f:
        json.dump(results, f)


def train_on_random_tokens(task, opt_cfg, loop_cfg, mesh, workdir: str, batch_size: int,
                           seq_len: int, predictions: int):
    """In the subprocess: `task` trained through the real loop on RandomTokenBatches (seed 0,
    sentence pairs); (the logged losses, the loop's TrainResult)."""
    from bert_jax.data.pretraining.synthetic import RandomTokenBatches
    from bert_jax.train import loop, optimizer

    batches = RandomTokenBatches(batch_size, seq_len, predictions, task.model_config.vocab_size,
                                 seed=0, sentence_pairs=True)
    result = loop.train(task, optimizer.make_optimizer(opt_cfg), batches, workdir, loop_cfg,
                        mesh, learning_rate_fn=optimizer.learning_rate_schedule(opt_cfg))
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line)["loss"] for line in f], result
