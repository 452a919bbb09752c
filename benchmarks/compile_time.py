"""Compile time and step time of the MLM train step, encoder layers unrolled against scanned.

    python benchmarks/compile_time.py                       # BERT-large, both layouts
    python benchmarks/compile_time.py --preset=base --dtype=bfloat16 --remat=full \
        --batch_size=32 --seq_len=128 --mesh=-1,1,1 --layouts=scanned

For each layout (BertConfig.scan_layers False / True): the seconds to lower and to compile
`jax.jit(train_step)` (the loop's step: state donated, sharded on the mesh, activation
constraints in force), then the median seconds of --steps train steps after --warmup untimed
ones, on random tokens. One JSON line per layout. Exit status: 0 done, 1 bad input (one line
`compile_time.py: error: ...`).
"""

from __future__ import annotations

import json
import statistics
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from bert_jax import BertConfig, cli, distributed, sharding, xla_options
from bert_jax.config import PRESETS
from bert_jax.data.synthetic import RandomTokenBatches
from bert_jax.model import BertForPreTraining
from bert_jax.recipes import pretrain
from bert_jax.train import loop, optimizer, steps
from bert_jax.train import state as state_lib

FLAGS = flags.FLAGS
LAYOUTS = {"unrolled": False, "scanned": True}


def _mesh():
    try:
        shape = [int(size) for size in FLAGS.mesh.split(",")]
    except ValueError:
        shape = []
    if len(shape) != 3:
        raise ValueError(f"--mesh={FLAGS.mesh!r}: expected data,fsdp,tensor, e.g. -1,1,1")
    return sharding.make_mesh(*shape)


def _train_step(cfg: BertConfig, mesh, max_predictions: int):
    """(jitted step, init_fn, optimizer, state shardings) as the training loop builds them."""
    model = BertForPreTraining(cfg, with_nsp=False)

    def init_fn(rng):
        ids = jnp.zeros((1, FLAGS.seq_len), jnp.int32)
        return model.init(rng, ids, ids[:, :max_predictions])["params"]

    opt = optimizer.make_optimizer(optimizer.OptimizerConfig(total_steps=1000, warmup_steps=10))
    _, shardings = state_lib.state_shardings(jax.eval_shape(init_fn, jax.random.PRNGKey(0)),
                                             opt, mesh)
    batch_sharding = sharding.batch_sharding(mesh)
    step = jax.jit(sharding.with_activation_sharding(
        steps.make_train_step(pretrain.make_loss(model), opt), mesh),
        in_shardings=(shardings, batch_sharding),
        out_shardings=(shardings, sharding.replicated(mesh)),
        donate_argnums=(0,), compiler_options=xla_options.compiler_options())
    return step, init_fn, opt, shardings


def measure(cfg: BertConfig, mesh) -> dict:
    """Lower and compile seconds, then the median step seconds, of one layout."""
    max_predictions = FLAGS.max_predictions or max(1, round(0.15 * FLAGS.seq_len))
    step, init_fn, opt, shardings = _train_step(cfg, mesh, max_predictions)
    batches = RandomTokenBatches(FLAGS.batch_size // jax.process_count(), FLAGS.seq_len,
                                 max_predictions, cfg.vocab_size, seed=0,
                                 process_index=jax.process_index())
    batch = sharding.device_put_batch(next(batches), mesh)
    create = lambda p: steps.TrainState.create(p, opt, jax.random.PRNGKey(0))  # noqa: E731
    abstract_state = jax.eval_shape(create, jax.eval_shape(
        lambda: nn.meta.unbox(init_fn(jax.random.PRNGKey(0)))))

    start = time.perf_counter()
    lowered = step.lower(abstract_state, batch)
    lowered_at = time.perf_counter()
    compiled = lowered.compile()
    compiled_at = time.perf_counter()

    params, _ = sharding.init_sharded(lambda: init_fn(jax.random.PRNGKey(0)), mesh)
    state = jax.jit(create, out_shardings=shardings, donate_argnums=(0,))(params)
    times = []
    for i in range(FLAGS.warmup + FLAGS.steps):
        begin = time.perf_counter()
        state, metrics = compiled(state, batch)
        jax.block_until_ready(metrics)
        if i >= FLAGS.warmup:
            times.append(time.perf_counter() - begin)
    return {"preset": FLAGS.preset, "scan_layers": cfg.scan_layers, "dtype": cfg.dtype,
            "remat": cfg.remat_policy, "batch_size": FLAGS.batch_size,
            "seq_len": FLAGS.seq_len, "mesh": dict(mesh.shape), "devices": mesh.size,
            "lower_seconds": round(lowered_at - start, 3),
            "compile_seconds": round(compiled_at - lowered_at, 3),
            "step_seconds_median": round(statistics.median(times), 4) if times else None,
            "steps": len(times), "loss": float(np.asarray(metrics["loss"]))}


def run() -> list[dict]:
    mesh = _mesh()
    loop.check_batch_size(FLAGS.batch_size, mesh)
    layouts = [name.strip() for name in FLAGS.layouts.split(",") if name.strip()]
    unknown = sorted(set(layouts) - set(LAYOUTS))
    if unknown or not layouts:
        raise ValueError(f"--layouts={FLAGS.layouts!r}: choose from {sorted(LAYOUTS)}")
    results = []
    for name in layouts:
        cfg = BertConfig.preset(FLAGS.preset, dtype=FLAGS.dtype, remat_policy=FLAGS.remat,
                                max_position_embeddings=max(512, FLAGS.seq_len),
                                scan_layers=LAYOUTS[name])
        results.append(measure(cfg, mesh))
        if jax.process_index() == 0:
            print(json.dumps(results[-1]), flush=True)
    return results


def main(argv):
    cli.start(argv, compilation_cache=False)  # it measures compilation
    cli.run_or_exit("compile_time.py", run)


if __name__ == "__main__":
    flags.DEFINE_enum("preset", "large", list(PRESETS), "BertConfig preset.")
    flags.DEFINE_string("layouts", "unrolled,scanned", "Comma-separated: unrolled, scanned.")
    flags.DEFINE_integer("batch_size", 8, "Sequences per step, over all devices.")
    flags.DEFINE_integer("seq_len", 128, "Tokens per sequence.")
    flags.DEFINE_integer("max_predictions", None, "Masked positions per row (default 15%).")
    flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "Compute dtype.")
    flags.DEFINE_enum("remat", "none", ["none", "full", "dots", "dots_no_batch"],
                      "Remat policy of each layer (inside the scan when scanned).")
    flags.DEFINE_integer("steps", 5, "Timed train steps.")
    flags.DEFINE_integer("warmup", 2, "Untimed train steps first.")
    flags.DEFINE_string("mesh", "-1,1,1", "data,fsdp,tensor sizes (one may be -1).")
    distributed.define_flags()
    app.run(main, flags_parser=cli.parse_flags)
