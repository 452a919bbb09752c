"""Peak memory of long rows: a stack of attention layers with a sliding window (the blocked kernel
of bert_jax.model.local_attention) against the same stack with full attention, one training step
(forward and gradients) per process.

    python benchmarks/long_rows_memory.py [--seq_lens=1024,2048,4096,8192] [--layers=2] \
        [--hidden=768] [--heads=12] [--window=128] [--batch=1] [--max_temp_gib=12] \
        [--modes=local,full] [--json=out.json]

Each layer is the attention half of a pre-norm block, ModernBERT-base-sized by default:
x + W_o attend(W_q n(x), W_k n(x), W_v n(x)), n an RMS norm, no biases, fp32, rows packed as two
documents (segment ids) so the kernels mask segments as in pre-training. "local": every layer
with window --window (attention.attend routes it to the blocked kernel on CPU); "full": every
layer global (window None: the xla kernel, [batch, heads, seq, seq] scores). The feed-forward
half is left out: its memory is linear in the row length for both and the same for both.

Each (mode, row length) runs in a fresh process (benchmarks/worker.py), which reports
- peak_rss_mb: the process's peak resident memory (getrusage ru_maxrss) after one step;
- compiled_peak_mb: its peak before the step ran (JAX, the program compiled, the inputs made);
  the table's "step RSS" is peak_rss_mb less this;
- temp_mb: XLA's compiled memory analysis of the step, temporary bytes (what the program
  allocates beyond its arguments and outputs).
A step whose compiled temporaries exceed --max_temp_gib is compiled but not run (its peak RSS is
then missing from the table): full attention at 8,192 tokens needs many GiB. No times: memory is
what this measures, and it holds on a busy machine.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import tempfile

from absl import app, flags

FLAGS = flags.FLAGS
SCRIPT = "long_rows_memory.py"
MODES = ("local", "full")
MIB = 1024 * 1024


def _vm_hwm_mb() -> float:
    """This process's peak resident memory so far (VmHWM), MiB."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def step(spec: dict) -> dict:
    """The worker job: build, compile and (if it fits) run one step; memory figures."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from bert_jax import platform
    from bert_jax.model import attention

    batch, seq, hidden, heads = spec["batch"], spec["seq_len"], spec["hidden"], spec["heads"]
    head_dim = hidden // heads
    window = spec["window"] if spec["mode"] == "local" else None
    rng = np.random.default_rng(0)

    def weights(*shape):
        return jnp.asarray(rng.normal(size=shape) / np.sqrt(hidden), jnp.float32)

    params = [{"norm": jnp.ones((hidden,), jnp.float32),
               "query": weights(hidden, heads, head_dim), "key": weights(hidden, heads, head_dim),
               "value": weights(hidden, heads, head_dim),
               "output": weights(heads, head_dim, hidden)} for _ in range(spec["layers"])]
    x = jnp.asarray(rng.normal(size=(batch, seq, hidden)), jnp.float32)
    segment_ids = jnp.asarray(np.where(np.arange(seq) < seq // 2, 1, 2)[None].repeat(batch, 0),
                              jnp.int32)

    def loss(params, x, segment_ids):
        mask = attention.Mask(segment_ids=segment_ids)
        for layer in params:
            normed = x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-5) * layer["norm"]
            q, k, v = (jnp.einsum("bsd,dnh->bsnh", normed, layer[name])
                       for name in ("query", "key", "value"))
            context = attention.attend(q, k, v, mask, implementation="auto", window=window)
            x = x + jnp.einsum("bsnh,nhd->bsd", context, layer["output"])
        return jnp.mean(x * x)

    kernel = attention.choose("auto", platform.current(), dtype=jnp.float32, head_dim=head_dim,
                              seq_len=seq, with_dropout=False, packed=True, window=window)
    compiled = jax.jit(jax.value_and_grad(loss)).lower(params, x, segment_ids).compile()
    analysis = compiled.memory_analysis()
    result = {"mode": spec["mode"], "seq_len": seq, "kernel": kernel,
              "temp_mb": analysis.temp_size_in_bytes / MIB,
              "argument_mb": analysis.argument_size_in_bytes / MIB,
              "output_mb": analysis.output_size_in_bytes / MIB,
              "compiled_peak_mb": _vm_hwm_mb(), "ran": False}
    if analysis.temp_size_in_bytes <= spec["max_temp_gib"] * 1024 * MIB:
        value, grads = compiled(params, x, segment_ids)
        jax.block_until_ready(grads)
        result.update(ran=True, loss=float(value))
    return result


def table(results: list[dict]) -> str:
    """A markdown table, MiB per mode: the peak RSS, the step's share of it (peak RSS less the
    peak before the step ran) and XLA's temporaries."""
    by_key = {(r["mode"], r["seq_len"]): r for r in results}
    modes = [m for m in MODES if any(r["mode"] == m for r in results)]
    columns = [("peak RSS", lambda r: r["peak_rss_mb"] if r["ran"] else None),
               ("step RSS", lambda r: r["peak_rss_mb"] - r["compiled_peak_mb"] if r["ran"]
                else None),
               ("XLA temp", lambda r: r["temp_mb"])]
    header = ["row length"] + [f"{m} {name} MiB" for name, _ in columns for m in modes]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for seq in sorted({r["seq_len"] for r in results}):
        cells = [f"{seq:,}"]
        for _, value in columns:
            for mode in modes:
                r = by_key.get((mode, seq))
                v = None if r is None else value(r)
                cells.append("not run" if v is None else f"{v:,.0f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv):
    del argv
    from benchmarks import worker
    modes = [m.strip() for m in FLAGS.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        sys.exit(f"{SCRIPT}: error: --modes={FLAGS.modes!r}: choose among {', '.join(MODES)}")
    try:
        seq_lens = [int(s) for s in FLAGS.seq_lens.split(",") if s.strip()]
    except ValueError:
        sys.exit(f"{SCRIPT}: error: --seq_lens={FLAGS.seq_lens!r}: integers separated by commas")
    if not seq_lens or min(seq_lens) < 1:
        sys.exit(f"{SCRIPT}: error: --seq_lens={FLAGS.seq_lens!r}: row lengths >= 1")
    if FLAGS.heads < 1 or FLAGS.hidden % FLAGS.heads:
        sys.exit(f"{SCRIPT}: error: --heads={FLAGS.heads} must divide --hidden={FLAGS.hidden}")
    folder = tempfile.mkdtemp(prefix="long_rows_memory_")
    results = []
    for seq in seq_lens:
        for mode in modes:
            label = f"{mode}-{seq}"
            spec = {"job": "benchmarks.long_rows_memory:step", "mode": mode, "seq_len": seq,
                    "batch": FLAGS.batch, "hidden": FLAGS.hidden, "heads": FLAGS.heads,
                    "layers": FLAGS.layers, "window": FLAGS.window,
                    "max_temp_gib": FLAGS.max_temp_gib,
                    "result_path": os.path.join(folder, f"{label}.json")}
            result = worker.run(spec, os.path.join(folder, f"{label}.spec.json"),
                                os.path.join(folder, f"{label}.log"), label)
            results.append(result)
            print(json.dumps(result), flush=True)
    settings = {k: getattr(FLAGS, k) for k in ("layers", "hidden", "heads", "window", "batch")}
    print(f"\n{settings}\n{table(results)}")
    if FLAGS.json:
        with open(FLAGS.json, "w", encoding="utf-8") as f:
            json.dump({"settings": settings, "results": results}, f, indent=1)


if __name__ == "__main__":
    flags.DEFINE_string("seq_lens", "1024,2048,4096,8192", "Row lengths, comma-separated.")
    flags.DEFINE_string("modes", "local,full", "local and/or full, comma-separated.")
    flags.DEFINE_integer("layers", 2, "Layers in the stack.")
    flags.DEFINE_integer("hidden", 768, "Hidden size.")
    flags.DEFINE_integer("heads", 12, "Attention heads.")
    flags.DEFINE_integer("window", 128, "The local layers' window (query i sees |i - j| <= "
                                        "window // 2).")
    flags.DEFINE_integer("batch", 1, "Rows per step.")
    flags.DEFINE_float("max_temp_gib", 12.0, "Compile but do not run a step whose XLA "
                                             "temporaries exceed this.")
    flags.DEFINE_string("json", None, "Also write the results here.")
    app.run(main)
