"""Compile time and step time of the MLM train step, encoder layers unrolled against scanned.

    python benchmarks/compile_time.py                       # BERT-large, both layouts
    python benchmarks/compile_time.py --preset=base --dtype=bfloat16 --remat=full \
        --batch_size=32 --seq_len=128 --mesh=-1,1,1 --layouts=scanned

For each layout (BertConfig.scan_layers False / True): the seconds to lower and to compile the
train step that training runs (benchmarks/harness/pretrain_step.py, built by bert_jax.train.program:
state donated, sharded on the mesh, activation constraints in force, the recipe's optimizer),
then the median seconds of --steps train steps after --warmup untimed ones, on the synthetic
corpus's random tokens. One JSON line per layout. Exit status: 0 done, 1 bad input (one line
`compile_time.py: error: ...`).
"""

from __future__ import annotations

import json
import statistics
import time

import jax
import numpy as np
from absl import app, flags

from benchmarks.harness import pretrain_step
from bert_jax import cli
from bert_jax.config.bert import PRESETS
from bert_jax.runtime import distributed, sharding

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


def measure(config, mesh) -> dict:
    """Lower and compile seconds, then the median step seconds, of one layout: the step that
    training runs (benchmarks/harness/pretrain_step.py), lowered for its fresh state."""
    _, train = pretrain_step.build(config, mesh)
    batch = sharding.device_put_batch(next(pretrain_step.batches(config)), mesh)

    start = time.perf_counter()
    lowered = train.train_step.lower(train.state, batch)
    lowered_at = time.perf_counter()
    compiled = lowered.compile()
    compiled_at = time.perf_counter()

    state, times = train.state, []
    for i in range(FLAGS.warmup + FLAGS.steps):
        begin = time.perf_counter()
        state, metrics = compiled(state, batch)
        jax.block_until_ready(metrics)
        if i >= FLAGS.warmup:
            times.append(time.perf_counter() - begin)
    return {"preset": FLAGS.preset, "scan_layers": bool(config.model.scan_layers),
            "dtype": config.dtype, "remat": config.remat, "batch_size": FLAGS.batch_size,
            "seq_len": FLAGS.seq_len, "mesh": dict(mesh.shape), "devices": mesh.size,
            "lower_seconds": round(lowered_at - start, 3),
            "compile_seconds": round(compiled_at - lowered_at, 3),
            "step_seconds_median": round(statistics.median(times), 4) if times else None,
            "steps": len(times), "loss": float(np.asarray(metrics["loss"]))}


def run() -> list[dict]:
    mesh = _mesh()
    layouts = [name.strip() for name in FLAGS.layouts.split(",") if name.strip()]
    unknown = sorted(set(layouts) - set(LAYOUTS))
    if unknown or not layouts:
        raise ValueError(f"--layouts={FLAGS.layouts!r}: choose from {sorted(LAYOUTS)}")
    results = []
    for name in layouts:
        config = pretrain_step.config(FLAGS.preset, FLAGS.batch_size, FLAGS.seq_len,
                                      FLAGS.max_predictions, FLAGS.dtype, FLAGS.remat,
                                      scan_layers=LAYOUTS[name])
        results.append(measure(config, mesh))
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
