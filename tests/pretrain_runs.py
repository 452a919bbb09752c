"""Tiny pre-training runs of experiments/pretrain.py in subprocesses, shared by the end-to-end
and fault tests: a tiny BERT on the synthetic corpus (random tokens: the point is the
bookkeeping, not learning), dropout on, so that resuming must also restore the dropout
randomness and the data position."""

import json
import os
import subprocess
import sys
import time

import xla_flags

import finetune_runs
from repo_root import ROOT

PRETRAIN = os.path.join(ROOT, "experiments", "pretrain.py")
EVALUATE = os.path.join(ROOT, "experiments", "evaluate.py")

TINY_RUN = [
    "--config=" + os.path.join(ROOT, "experiments", "configs", "demo.py"),
    "--config.data.corpus=synthetic", "--config.tokenizer.vocab_size=97",
    # BERT as published (the demo config uses the efficient recipe): exportable to HF
    "--config.model.layer_norm_position=post", "--config.model.position_embedding_type=absolute",
    "--config.data.mask_rate=0.15",
    "--config.model.hidden_size=32", "--config.model.num_attention_heads=2",
    "--config.model.intermediate_size=64", "--config.model.max_position_embeddings=16",
    "--config.model.hidden_dropout_prob=0.1", "--config.model.attention_probs_dropout_prob=0.1",
    "--config.max_seq_len=16", "--config.data.max_predictions=3",
    "--config.batch_size=8", "--config.eval_batch_size=8", "--config.eval_batches=2",
    "--config.total_steps=60", "--config.warmup_fraction=0.1", "--config.learning_rate=1e-3",
    "--config.log_every_steps=1", "--config.checkpoint_every_steps=20",
    "--config.eval_every_steps=0", "--config.keep_checkpoints=3",
]


def env():
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    env["XLA_FLAGS"] = xla_flags.with_devices()  # one device, whatever the caller had
    return env


def command(workdir, *extra):
    return [sys.executable, PRETRAIN, f"--workdir={workdir}", *TINY_RUN, *extra]


def run(workdir, *extra, check=True):
    done = subprocess.run(command(workdir, *extra), env=env(), capture_output=True, text=True,
                          timeout=300)
    if check:
        assert done.returncode == 0, done.stderr[-3000:]
    return done


def losses(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    steps = [r["step"] for r in records]
    assert steps == sorted(set(steps)), f"steps logged twice or out of order: {steps}"
    return {r["step"]: r["loss"] for r in records}


def last_logged_step(workdir):
    path = os.path.join(workdir, "metrics.jsonl")
    if not os.path.exists(path):
        return 0
    with open(path) as f:
        lines = [line for line in f if line.endswith("\n")]
    return json.loads(lines[-1])["step"] if lines else 0


def wait_for(predicate, process, timeout=240):
    start = time.time()
    while not predicate():
        assert process.poll() is None, "the run ended before it could be interrupted"
        assert time.time() - start < timeout, "timed out waiting for the run"
        time.sleep(0.01)


def parsed_config(workdir, *extra):
    """The config experiments/pretrain.py would train with `command(workdir, *extra)`'s flags,
    parsed in this process (cli.parse_flags on a fresh set of the script's flags)."""
    from absl import flags

    from bert_jax import cli
    from experiments import pretrain as pretrain_script
    argv = command(workdir, *extra)[1:]
    flag_values = flags.FlagValues()
    real_argv, sys.argv = sys.argv, argv  # ml_collections finds the overrides there
    try:
        pretrain_script.define_flags(flag_values)
        cli.parse_flags(argv, flag_values)
    finally:
        sys.argv = real_argv
    return flag_values.config


def refusal(workdir, *extra):
    """The one line pretrain.py exits with (status 1) for `command(workdir, *extra)`, found in
    this process: the flags parsed and the recipe run under cli.run_or_exit, as the script does.
    For refusals that come before any training (config checks, the workdir's lock)."""
    from bert_jax import cli
    from bert_jax.recipes import pretrain
    try:
        cli.run_or_exit("pretrain.py", lambda: pretrain.train_and_evaluate(
            parsed_config(workdir, *extra), str(workdir)))
    except SystemExit as e:
        message = e.code
    else:
        raise AssertionError(f"pretrain.py {extra} was not refused")
    assert isinstance(message, str) and "\n" not in message, message
    assert message.startswith("pretrain.py: error: "), message
    return message


def train_here(workdir, *extra):
    """What `run(workdir, *extra)` trains, in this process (the recipe on the same parsed config):
    no interpreter to start and no imports, for runs whose stderr and exit status no test reads.
    Returns the recipe's TrainResult."""
    from bert_jax.recipes import pretrain
    return pretrain.train_and_evaluate(parsed_config(workdir, *extra), str(workdir))


def tiny_pretrain_config(**changes):
    """The pre-training run config of a tiny one-layer BERT on the synthetic corpus, 2 steps, for
    runs made in the test process; `changes` by dotted key ("data.corpus": ...)."""
    from bert_jax.config import run as run_config
    config = run_config.pretrain_config()
    config.data.corpus = "synthetic"
    config.tokenizer.vocab_size = 97
    config.model = run_config.model_block("tiny", hidden_size=16, num_hidden_layers=1,
                                          num_attention_heads=2, intermediate_size=32,
                                          max_position_embeddings=16)
    config.max_seq_len, config.data.max_predictions = 16, 3
    config.batch_size = config.eval_batch_size = 4
    config.total_steps = 2
    return finetune_runs.set_keys(config, changes)
