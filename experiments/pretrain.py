"""Pre-train BERT with masked LM (and next-sentence prediction) on a corpus.

    python experiments/pretrain.py --config=experiments/configs/demo.py --workdir=/tmp/bert_demo \
        [--config.total_steps=500 --config.mesh.fsdp=2 ...]

Every key of the config file can be overridden with --config.<key>=<value>. The run resumes by
itself from the newest checkpoint in --workdir (same command after a preemption or a crash).
Writes into --workdir: config.json (the resolved config, read by evaluate.py), metrics.jsonl,
eval_metrics.jsonl, tensorboard/, checkpoints/<step>/ and, for the demo, data/ (corpus + vocab).
Exit status 143 after a SIGTERM (state saved; run the same command again to continue).

`evaluate_checkpoint(config, workdir, step)` is what experiments/evaluate.py calls for runs of
this script: the held-out masked-LM loss and accuracy of a saved step.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, Iterator, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import app, flags, logging
from ml_collections import config_flags

from bert_jax import distributed  # defines --distributed, --coordinator_address, ...
from bert_jax import BertConfig, ConfigError, sharding
from bert_jax.model import BertForPreTraining
from bert_jax.train import checkpointing, flops, loop, optimizer, steps
from bert_jax.train import workdir as workdir_lib

FLAGS = flags.FLAGS

SYNTHETIC = "synthetic"


# ----- the pieces of a run, from the config ----------------------------------------------------

def model_config_from(config: ml_collections.ConfigDict, vocab_size: int) -> BertConfig:
    """BertConfig: config.model.preset, its non-None overrides, config.dtype and config.remat."""
    model = config.model.to_dict()
    preset = model.pop("preset")
    overrides = {k: v for k, v in model.items() if v is not None}
    overrides.setdefault("vocab_size", vocab_size)
    return BertConfig.preset(preset, dtype=config.dtype, remat_policy=config.remat, **overrides)


def optimizer_config_from(config: ml_collections.ConfigDict) -> optimizer.OptimizerConfig:
    return optimizer.OptimizerConfig(
        learning_rate=config.learning_rate, total_steps=config.total_steps,
        warmup_steps=config.warmup_steps, **config.optimizer.to_dict())


def data_dir_of(config: ml_collections.ConfigDict, workdir: str) -> str:
    return config.data.data_dir or os.path.join(workdir, "data")


class RandomTokenBatches:
    """Random-token MLM batches in the pre-training batch contract (smoke tests, benchmarks).

    Batch i of process p is a pure function of (seed, p, i); the state is the next index, so it
    checkpoints and resumes exactly like a grain iterator. `num_batches` makes it finite.
    """

    def __init__(self, rows: int, seq_len: int, max_predictions: int, vocab_size: int, seed: int,
                 process_index: int = 0, sentence_pairs: bool = False,
                 num_batches: Optional[int] = None, seconds_per_batch: float = 0.0):
        self.rows, self.seq_len, self.max_predictions = rows, seq_len, max_predictions
        self.vocab_size, self.seed, self.process_index = vocab_size, seed, process_index
        self.sentence_pairs, self.num_batches = sentence_pairs, num_batches
        self.seconds_per_batch = seconds_per_batch  # > 0 simulates a slow input pipeline
        self.index = 0

    def __iter__(self):
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        if self.num_batches is not None and self.index >= self.num_batches:
            raise StopIteration
        if self.seconds_per_batch:
            time.sleep(self.seconds_per_batch)
        rng = np.random.default_rng([self.seed, self.process_index, self.index])
        self.index += 1
        shape = (self.rows, self.seq_len)
        masked_positions = np.sort(np.stack([
            rng.choice(self.seq_len, self.max_predictions, replace=False)
            for _ in range(self.rows)]), axis=1).astype(np.int32)
        batch = {
            "input_ids": rng.integers(5, self.vocab_size, shape, dtype=np.int32),
            "token_type_ids": np.zeros(shape, np.int32),
            "segment_ids": np.ones(shape, np.int32),
            "position_ids": np.broadcast_to(np.arange(self.seq_len, dtype=np.int32), shape).copy(),
            "masked_positions": masked_positions,
            "masked_ids": rng.integers(5, self.vocab_size, masked_positions.shape, dtype=np.int32),
            "masked_weights": (rng.random(masked_positions.shape) < 0.9).astype(np.float32),
        }
        if self.sentence_pairs:
            batch["nsp_labels"] = rng.integers(0, 2, (self.rows,), dtype=np.int32)
        return batch

    def get_state(self) -> dict[str, Any]:
        return {"index": self.index}

    def set_state(self, state: dict[str, Any]) -> None:
        self.index = int(state["index"])


def prepare_vocabulary(config: ml_collections.ConfigDict, workdir: str) -> tuple[str, int]:
    """(vocab_path, vocab_size): the demo's own vocabulary is built (once) on first use."""
    if config.data.corpus == SYNTHETIC:
        return "", config.data.vocab_size
    from bert_jax.data import pretraining, tokenizer
    vocab_path = config.data.vocab_path
    if not vocab_path:
        if config.data.corpus != "demo":
            raise ValueError(f"config.data.vocab_path is empty: corpus "
                             f"{config.data.corpus!r} needs a vocabulary (vocab.txt or "
                             "tokenizer.json)")
        vocab_path = pretraining.prepare_demo(data_dir_of(config, workdir),
                                              vocab_size=config.data.vocab_size,
                                              lowercase=config.data.lowercase)
    return vocab_path, tokenizer.load_tokenizer(vocab_path, lowercase=config.data.lowercase).vocab_size


def make_data(config: ml_collections.ConfigDict, workdir: str, vocab_path: str, vocab_size: int,
              ) -> tuple[Iterator, Callable[[], Iterator]]:
    """(train iterator, make_eval_iterator): host-local batches of this process's rows."""
    process_index, process_count = jax.process_index(), jax.process_count()
    train_rows = config.batch_size // process_count
    eval_rows = config.eval_batch_size // process_count
    if config.data.corpus == SYNTHETIC:
        common = dict(seq_len=config.seq_len, max_predictions=config.data.max_predictions,
                      vocab_size=vocab_size, process_index=process_index,
                      sentence_pairs=config.data.sentence_pairs)
        train = RandomTokenBatches(train_rows, seed=config.seed,
                                   seconds_per_batch=config.data.get("seconds_per_batch", 0.0),
                                   **common)
        make_eval = lambda: RandomTokenBatches(  # noqa: E731
            eval_rows, seed=config.seed + 1_000_003, num_batches=config.eval_batches or 4, **common)
        return train, make_eval

    from bert_jax.data import pretraining
    data_config = pretraining.PretrainingDataConfig(
        corpus=config.data.corpus, data_dir=data_dir_of(config, workdir), vocab_path=vocab_path,
        lowercase=config.data.lowercase, seq_len=config.seq_len,
        max_predictions=config.data.max_predictions, mask_rate=config.data.mask_rate,
        whole_word_masking=config.data.whole_word_masking,
        sentence_pairs=config.data.sentence_pairs, seed=config.seed,
        num_workers=config.data.num_workers)
    train = pretraining.make_iterator(data_config, split="train",
                                      global_batch_size=config.batch_size,
                                      process_index=process_index, process_count=process_count,
                                      num_epochs=None)
    make_eval = lambda: pretraining.make_iterator(  # noqa: E731
        data_config, split="validation", global_batch_size=config.eval_batch_size,
        process_index=process_index, process_count=process_count, num_epochs=1)
    return train, make_eval


def make_task(config: ml_collections.ConfigDict, model_config: BertConfig,
              initial_params: Any = None) -> loop.Task:
    with_nsp = bool(config.data.sentence_pairs)
    model = BertForPreTraining(model_config, with_nsp=with_nsp)
    seq_len, max_predictions = config.seq_len, config.data.max_predictions
    if seq_len > model_config.max_position_embeddings:
        raise ValueError(f"config.seq_len={seq_len} exceeds the model's max_position_embeddings="
                         f"{model_config.max_position_embeddings}")

    def init_fn(rng):
        ids = jnp.zeros((1, seq_len), jnp.int32)
        positions = jnp.zeros((1, max_predictions), jnp.int32)
        return model.init(rng, ids, positions, ids, None, True, segment_ids=jnp.ones_like(ids),
                          position_ids=jnp.arange(seq_len, dtype=jnp.int32)[None])["params"]

    return loop.Task(
        model_config=model_config, init_fn=init_fn, loss_fn=steps.make_pretrain_loss(model),
        initial_params=initial_params,
        flops_per_step=flops.pretraining_flops_per_step(
            model_config, config.batch_size, seq_len, max_predictions, with_nsp),
        tokens_per_step=config.batch_size * seq_len,
        checkpoint_metadata={"experiment": "pretrain", "with_nsp": with_nsp})


def make_mesh(config: ml_collections.ConfigDict):
    return sharding.make_mesh(config.mesh.data, config.mesh.fsdp, config.mesh.tensor)


def loop_config_from(config: ml_collections.ConfigDict) -> loop.LoopConfig:
    return loop.LoopConfig(
        total_steps=config.total_steps, global_batch_size=config.batch_size,
        log_every_steps=config.log_every_steps, eval_every_steps=config.eval_every_steps,
        checkpoint_every_steps=config.checkpoint_every_steps,
        keep_checkpoints=config.keep_checkpoints, async_checkpoints=config.async_checkpoints,
        accumulation_steps=config.accumulation_steps, seed=config.seed,
        peak_flops_per_device=config.peak_flops_per_device)


# ----- entry points ----------------------------------------------------------------------------

def run(config: ml_collections.ConfigDict, workdir: str) -> loop.TrainResult:
    """Prepare data, build the task and train (resuming from workdir). Errors name the fault."""
    mesh = make_mesh(config)
    loop.check_batch_size(config.batch_size, mesh, config.accumulation_steps)
    loop.check_batch_size(config.eval_batch_size, mesh)
    optimizer_config = optimizer_config_from(config)
    workdir_lib.save_config(config, workdir)

    vocab_path, vocab_size = prepare_vocabulary(config, workdir)
    model_config = model_config_from(config, vocab_size)
    initial_params = None
    if config.init_from:
        init_config, initial_params = checkpointing.load_params(config.init_from)
        logging.info("starting from the params of %s (%s)", config.init_from, init_config)
    task = make_task(config, model_config, initial_params)
    train_iterator, make_eval_iterator = make_data(config, workdir, vocab_path, vocab_size)
    evaluate = loop.make_evaluator(task.loss_fn, make_eval_iterator, mesh,
                                   max_batches=config.eval_batches)
    logging.info("model %s: %.1fM parameters; %.3g model FLOPs per step", model_config,
                 model_config.num_params() / 1e6, task.flops_per_step)
    return loop.train(task, optimizer.make_optimizer(optimizer_config), train_iterator, workdir,
                      loop_config_from(config), mesh,
                      learning_rate_fn=optimizer.learning_rate_schedule(optimizer_config),
                      evaluate=evaluate)


def evaluate_checkpoint(config: ml_collections.ConfigDict, workdir: str,
                        step: Optional[int] = None) -> tuple[int, dict[str, float]]:
    """(step, held-out metrics) of a saved step (default: the newest) of a pre-training run."""
    checkpoint_dir = os.path.join(workdir, "checkpoints")
    step = checkpointing.resolve_step(checkpoint_dir, step)
    model_config, params = checkpointing.load_params(checkpoint_dir, step)
    mesh = make_mesh(config)
    vocab_path, vocab_size = prepare_vocabulary(config, workdir)
    task = make_task(config, model_config)
    abstract_boxed = jax.eval_shape(task.init_fn, jax.random.PRNGKey(0))
    param_shardings = sharding.shardings_for(
        nn.meta.unbox(abstract_boxed), sharding.logical_specs(abstract_boxed), mesh)
    params = jax.tree.map(jax.device_put, params, param_shardings)
    _, make_eval_iterator = make_data(config, workdir, vocab_path, vocab_size)
    evaluate = loop.make_evaluator(task.loss_fn, make_eval_iterator, mesh,
                                   max_batches=config.eval_batches)
    return step, evaluate(params)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    distributed.initialize_from_flags()
    if FLAGS.config is None or FLAGS.workdir is None:
        raise app.UsageError("--config and --workdir are required")
    loop.quiet_orbax_logs()
    try:
        result = run(FLAGS.config, FLAGS.workdir)
    except (ValueError, ConfigError, FileNotFoundError) as e:  # bad input: say what, no traceback
        logging.error("%s", e)
        sys.exit(f"pretrain.py: error: {e}")
    if result.preempted:
        logging.warning("preempted at step %d; run the same command again to resume", result.step)
        sys.exit(143)
    logging.info("done at step %d: train %s; held-out %s", result.step,
                 result.last_train_metrics, result.last_eval_metrics)


def define_flags() -> None:
    """Flags are defined only when run as a script, so evaluate.py can import this module."""
    config_flags.DEFINE_config_file("config", None, "Path to a config file (get_config()).",
                                    lock_config=True)
    flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics and logs.")


def parse_flags(argv: list[str]) -> list[str]:
    """absl flag parsing, with a one-line error for an unknown or ill-typed --config.<key>."""
    try:
        return FLAGS(argv)
    except flags.Error as e:
        sys.exit(f"{os.path.basename(argv[0])}: error: {e}\nPass --help for the flags.")
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        overrides = [a for a in argv[1:] if a.startswith("--config.")]
        message = str(e).strip("'\"").replace("\\n", " ").replace("\\'", "'")
        sys.exit(f"{os.path.basename(argv[0])}: error: bad config override among {overrides}: "
                 f"{message}")


if __name__ == "__main__":
    define_flags()
    app.run(main, flags_parser=parse_flags)
