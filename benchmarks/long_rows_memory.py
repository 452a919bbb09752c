"""Peak memory and step time of long rows through ModernBERT's own encoder layers: its alternating
local/global attention against the same layers all global ("full") and all local, one training
step (forward and gradients) per process, on this CPU; and the same step compiled for one chip of
a TPU slice (its bytes per chip, from the compiled program).

    python benchmarks/long_rows_memory.py [--seq_lens=1024,2048,4096,8192] \
        [--modes=alternating,full,local] [--targets=cpu,tpu:v5e:2x2] [--tpu_attention=auto] \
        [--layers=3] [--hidden=768] [--heads=12] [--intermediate=1152] [--window=128] \
        [--batch=1] [--steps=3] [--max_temp_gib=12] [--json=out.json]

The stack: `bert_jax.model.modernbert.Layer` (pre-norm attention with RoPE, then GeGLU; no
biases) as `modernbert.Encoder` builds it (layer 0 without its attention norm, each layer the
rotary angles of its kind, positions restarting at each packed document), then the final norm:
the Encoder's own program when the windows are ModernBERT's (a test checks it). Embeddings and
the MLM head are left out (the input is random hidden states, the loss the mean of the output
along a fixed random direction): both are the same in every mode and do not grow faster than
the row. ModernBERT-base widths by default (hidden 768, 12 heads, GeGLU 1152, window 128), fp32
parameters and activations, no remat, no dropout (ModernBERT's default), rows packed as two
documents (segment ids), so the kernels mask as in pre-training. Modes (layer i's attention):
- alternating: ModernBERT's pattern, global iff i % 3 == 0 (3 layers: one global, two local);
- full: every layer global;
- local: every layer local (what the local layers alone cost).

Targets, each (target, mode, row length) in a fresh process (benchmarks/harness/worker.py):
- cpu: compiled and run here. peak_rss_mb (the process's peak resident memory, all steps),
  first_step_peak_mb (its peak after the first step), compiled_peak_mb (its peak before the step
  ran: JAX, the program compiled, the inputs made; the table's "step RSS" is the first step's
  peak less this, its "peak RSS" the peak over all steps), temp_mb (XLA's temporaries: what the
  program allocates beyond its arguments and outputs), step_s (median of --steps steps after one
  warm-up) and the load average over the timed steps (times mean something only on a quiet
  machine; memory holds on a busy one). A step whose temporaries exceed --max_temp_gib, or the
  memory available now less HEADROOM_GIB, is compiled but not run.
- tpu:<generation>:<shape>: compiled for one chip of that slice (bert_jax.tools.scaling.topology:
  jax.experimental.topologies and libtpu, no TPU needed) and not run: the compiled program's
  bytes on the chip (bert_jax.tools.scaling.memory), or the error of a program XLA:TPU refuses (one
  over the chip's memory). Batch 1 leaves nothing to split, hence one chip (libtpu describes
  no single-chip v5e slice here: "v5e:1x1 is not divisible by the given (or default)
  chips_per_host_bounds 2x2x1"; the default takes one chip of v5e:2x2).
  --tpu_attention=auto runs splash on every layer (FullMask for global layers, LocalMask for
  local ones: flash attention, no [seq, seq] scores); xla: the xla composition on global layers
  and the blocked local kernel on local ones (bert_jax.model.attention.choose).
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import sys
import tempfile
import time
from typing import Optional, Sequence

from absl import app, flags

FLAGS = flags.FLAGS
SCRIPT = "long_rows_memory.py"
MODES = ("alternating", "full", "local")
TPU_ATTENTION = ("auto", "xla")
GLOBAL_EVERY = 3  # ModernBERT's global_attn_every_n_layers
INIT_TOKENS = 16  # the row length the CPU parameters are initialised on
HEADROOM_GIB = 2.0  # what a run leaves of the memory available when it starts
MIB = 1024 * 1024
GIB = 1024 * MIB


def windows(mode: str, layers: int, window: int) -> list[Optional[int]]:
    """Each layer's attention window: None (global) or `window` (module docstring's modes)."""
    if mode == "alternating":
        return [None if i % GLOBAL_EVERY == 0 else window for i in range(layers)]
    return [None if mode == "full" else window] * layers


def layer_stack(cfg, layer_windows: Sequence[Optional[int]]):
    """A flax module: (x [batch, seq, hidden], segment_ids [batch, seq]) -> [batch, seq, hidden],
    the layers of `cfg` (a ModernBertConfig) with these windows, then the final norm; parameters
    named as modernbert.Encoder's."""
    import flax.linen as nn

    from bert_jax.model import modernbert
    from bert_jax.model.attention import Mask
    from bert_jax.model.encoder import positions_from_segments
    from bert_jax.model.layers import rotary_angles

    class LayerStack(nn.Module):
        @nn.compact
        def __call__(self, x, segment_ids):
            positions = positions_from_segments(segment_ids)
            mask = Mask(segment_ids=segment_ids)
            for i, window in enumerate(layer_windows):
                theta = cfg.global_rope_theta if window is None else cfg.local_rope_theta
                x = modernbert.Layer(cfg, window, attn_norm=i > 0, name=f"layer_{i}")(
                    x, mask, True, rotary_angles(positions, cfg.head_dim, theta))
            return nn.LayerNorm(epsilon=cfg.norm_eps, use_bias=cfg.norm_bias,
                                use_fast_variance=False, name="final_norm")(x)

    return LayerStack()


def _vm_hwm_mb() -> float:
    """This process's peak resident memory so far (VmHWM), MiB."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _available_gib() -> float:
    """MemAvailable of /proc/meminfo, GiB (inf where there is none)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 / GIB
    except OSError:
        pass
    return float("inf")


def step(spec: dict) -> dict:
    """The worker job: build and compile one step for spec["target"]; on the CPU run it (if it
    fits) and time it. Figures as the module docstring says."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax.core import meta

    from bert_jax.config.modernbert import ModernBertConfig
    from bert_jax.model import attention
    from bert_jax.runtime import platform, sharding, xla_options
    from bert_jax.tools.scaling import memory, topology

    batch, seq, target = spec["batch"], spec["seq_len"], spec["target"]
    on_tpu = target != "cpu"
    cfg = ModernBertConfig(num_hidden_layers=spec["layers"], hidden_size=spec["hidden"],
                           num_attention_heads=spec["heads"],
                           intermediate_size=spec["intermediate"],
                           local_attention=spec["window"], max_position_embeddings=seq,
                           attention=spec.get("attention", "auto"))
    layer_windows = windows(spec["mode"], cfg.num_hidden_layers, cfg.local_attention)
    model = layer_stack(cfg, layer_windows)
    segment_ids = np.where(np.arange(seq) < seq // 2, 1, 2)[None].repeat(batch, 0).astype(np.int32)
    x_shape = (batch, seq, cfg.hidden_size)

    if on_tpu:
        chip = topology.devices(target)[:1]
        mesh = sharding.make_mesh(1, 1, 1, devices=chip)
        replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
        params = jax.tree.map(
            lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=replicated),
            meta.unbox(jax.eval_shape(model.init, jax.random.key(0),
                                      jax.ShapeDtypeStruct(x_shape, jnp.float32),
                                      jax.ShapeDtypeStruct(segment_ids.shape, jnp.int32))))
        x = jax.ShapeDtypeStruct(x_shape, jnp.float32, sharding=replicated)
        segment_ids = jax.ShapeDtypeStruct(segment_ids.shape, jnp.int32, sharding=replicated)
        context, shardings = sharding.activation_sharding(mesh), {"in_shardings": replicated,
                                                                   "out_shardings": replicated}
    else:
        rng = np.random.default_rng(0)
        x = jnp.asarray(rng.normal(size=x_shape), jnp.float32)
        segment_ids = jnp.asarray(segment_ids)
        # Parameters do not depend on the row length: initialised on a few tokens, so that
        # no [seq, seq] scores of an eager forward pass enter the peak before the step.
        params = meta.unbox(jax.jit(model.init)(jax.random.key(0), x[:, :INIT_TOKENS],
                                                segment_ids[:, :INIT_TOKENS]))
        context, shardings = platform.compiling_for("cpu"), {}

    # The output read along a fixed direction: a scalar whose gradient reaches every parameter.
    direction = jnp.asarray(np.random.default_rng(1).normal(size=cfg.hidden_size), jnp.float32)

    def loss(params, x, segment_ids):
        return jnp.mean(model.apply(params, x, segment_ids) @ direction)

    with context:
        kernels = {kind: attention.choose(cfg.attention, platform.current(), dtype=jnp.float32,
                                          head_dim=cfg.head_dim, seq_len=seq, with_dropout=False,
                                          packed=True, window=window)
                   for kind, window in (("global", None), ("local", cfg.local_attention))
                   if any((w is None) == (kind == "global") for w in layer_windows)}
        started = time.perf_counter()
        lowered = jax.jit(jax.value_and_grad(loss), **shardings,
                          compiler_options=xla_options.compiler_options()).lower(
            params, x, segment_ids)
        result = {"target": target, "mode": spec["mode"], "seq_len": seq,
                  "attention": cfg.attention, "windows": layer_windows, "kernels": kernels}
        try:
            compiled = lowered.compile()
        except Exception as e:  # XLA:TPU refuses a program over the chip's HBM
            if not on_tpu:
                raise
            lines = [line.strip() for line in str(e).splitlines() if line.strip()]
            return {**result, "ran": False, "device_kind": chip[0].device_kind,
                    "compile_error": " ".join(lines[:2]) if lines else type(e).__name__}
        compile_s = time.perf_counter() - started
    mem = memory.memory_per_device(compiled)
    result = {**result,
              "temp_mb": mem["temporaries"] / MIB, "argument_mb": mem["arguments"] / MIB,
              "output_mb": mem["outputs"] / MIB, "alias_mb": mem["aliased"] / MIB,
              "generated_code_mb": mem["generated_code"] / MIB, "program_mb": mem["peak"] / MIB,
              "compile_s": round(compile_s, 1), "ran": False}
    if on_tpu:
        result["device_kind"] = chip[0].device_kind
        return result
    result["compiled_peak_mb"] = _vm_hwm_mb()
    available = _available_gib()
    needed = mem["temporaries"] / GIB
    if needed > spec["max_temp_gib"]:
        result["not_run"] = f"XLA temporaries {needed:.1f} GiB > --max_temp_gib"
        return result
    if needed > available - HEADROOM_GIB:
        result["not_run"] = (f"XLA temporaries {needed:.1f} GiB > the {available:.1f} GiB "
                             f"available less {HEADROOM_GIB:g}")
        return result
    times, load_before = [], os.getloadavg()[0]
    for _ in range(1 + spec["steps"]):
        started = time.perf_counter()
        value, grads = compiled(params, x, segment_ids)
        jax.block_until_ready(grads)
        times.append(time.perf_counter() - started)
        value = float(value)
        del grads
        if len(times) == 1:
            first_step_peak = _vm_hwm_mb()
    result.update(ran=True, loss=value, step_s=statistics.median(times[1:]),
                  first_step_peak_mb=first_step_peak,
                  step_times_s=[round(t, 3) for t in times], warmup_s=round(times[0], 3),
                  load_average=[round(load_before, 2), round(os.getloadavg()[0], 2)])
    return result


def _fmt(value: Optional[float], digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _kernels(r: dict) -> str:
    return ", ".join(f"{kind} {name}" for kind, name in r["kernels"].items())


def _growth(by_key: dict, r: dict, field: str) -> Optional[float]:
    """r[field] over the same run's at half the row length (2.0: linear, 4.0: quadratic)."""
    half = by_key.get(r["target"], {}).get((r["mode"], r.get("attention"), r["seq_len"] // 2))
    return None if half is None or not half.get(field) else r[field] / half[field]


def _index(results: list[dict]) -> dict:
    by_key: dict = {}
    for r in results:
        by_key.setdefault(r["target"], {})[(r["mode"], r.get("attention"), r["seq_len"])] = r
    return by_key


def _order(results: list[dict]) -> list[dict]:
    """By attention setting, then row length, then mode."""
    return sorted(results, key=lambda r: (r.get("attention", ""), r["seq_len"],
                                          MODES.index(r["mode"])))


def cpu_table(results: list[dict]) -> str:
    """Markdown, one row per (row length, mode) of the CPU runs: peak RSS (all steps), step RSS
    (the first step's peak less the peak before it), XLA temp (and its growth over half the
    row), the median step time and the load average."""
    by_key = _index(results)
    lines = ["| row length | mode | kernels | peak RSS MiB | step RSS MiB | XLA temp MiB | "
             "temp x (vs half the row) | step s | load average |", "|" + "---|" * 9]
    for r in _order([r for r in results if r["target"] == "cpu"]):
        ran = r["ran"]
        growth = _growth(by_key, r, "temp_mb")
        load = r.get("load_average")
        lines.append("| " + " | ".join([
            f"{r['seq_len']:,}", r["mode"], _kernels(r),
            _fmt(r["peak_rss_mb"]) if ran else "not run",
            _fmt(r["first_step_peak_mb"] - r["compiled_peak_mb"]) if ran else "not run",
            _fmt(r["temp_mb"]), _fmt(growth, 2), _fmt(r.get("step_s"), 2),
            "-" if load is None else f"{load[0]:.1f}-{load[1]:.1f}"]) + " |")
    return "\n".join(lines)


def tpu_table(results: list[dict]) -> str:
    """Markdown, one row per (attention, row length, mode) of the TPU compilations: MiB per chip
    of arguments, outputs, temporaries (and their growth over half the row) and the program."""
    by_key = _index(results)
    lines = ["| target | row length | mode | kernels | arguments MiB | outputs MiB | "
             "temporaries MiB | temp x (vs half the row) | program MiB per chip |",
             "|" + "---|" * 9]
    for r in _order([r for r in results if r["target"] != "cpu"]):
        cells = [r["target"], f"{r['seq_len']:,}", r["mode"], _kernels(r)]
        if "compile_error" in r:
            cells += ["refused by XLA: " + r["compile_error"]] + ["-"] * 4
        else:
            cells += [_fmt(r["argument_mb"]), _fmt(r["output_mb"]), _fmt(r["temp_mb"]),
                      _fmt(_growth(by_key, r, "temp_mb"), 2), _fmt(r["program_mb"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _list(name: str, text: str, choices: Optional[Sequence[str]] = None) -> list[str]:
    values = [v.strip() for v in text.split(",") if v.strip()]
    if not values or (choices and any(v not in choices for v in values)):
        sys.exit(f"{SCRIPT}: error: --{name}={text!r}: choose among {', '.join(choices or ())}"
                 if choices else f"{SCRIPT}: error: --{name}={text!r}: a comma-separated list")
    return values


def main(argv):
    del argv
    modes = _list("modes", FLAGS.modes, MODES)
    tpu_attention = _list("tpu_attention", FLAGS.tpu_attention, TPU_ATTENTION)
    targets = _list("targets", FLAGS.targets)
    try:
        seq_lens = [int(s) for s in FLAGS.seq_lens.split(",") if s.strip()]
    except ValueError:
        sys.exit(f"{SCRIPT}: error: --seq_lens={FLAGS.seq_lens!r}: integers separated by commas")
    if not seq_lens or min(seq_lens) < 2:
        sys.exit(f"{SCRIPT}: error: --seq_lens={FLAGS.seq_lens!r}: row lengths >= 2")
    if FLAGS.heads < 1 or FLAGS.hidden % FLAGS.heads or (FLAGS.hidden // FLAGS.heads) % 2:
        sys.exit(f"{SCRIPT}: error: --heads={FLAGS.heads} must divide --hidden={FLAGS.hidden} "
                 f"into an even head size")
    if FLAGS.steps < 1:
        sys.exit(f"{SCRIPT}: error: --steps={FLAGS.steps}: at least 1")
    if any(target != "cpu" for target in targets):
        from bert_jax.tools.scaling import topology  # imports JAX: after the checks that need none
        for target in targets:
            try:
                if target != "cpu":
                    topology.parse(target)
            except ValueError as e:
                sys.exit(f"{SCRIPT}: error: --targets={FLAGS.targets!r}: cpu or "
                         f"tpu:<topology> ({e})")
    from benchmarks.harness import worker
    folder = tempfile.mkdtemp(prefix="long_rows_memory_")
    results = []
    for target in targets:
        for attention in (["auto"] if target == "cpu" else tpu_attention):
            for seq in seq_lens:
                for mode in modes:
                    label = f"{target.replace(':', '_')}-{attention}-{mode}-{seq}"
                    spec = {"job": "benchmarks.long_rows_memory:step", "target": target,
                            "attention": attention, "mode": mode, "seq_len": seq,
                            "batch": FLAGS.batch, "hidden": FLAGS.hidden, "heads": FLAGS.heads,
                            "intermediate": FLAGS.intermediate, "layers": FLAGS.layers,
                            "window": FLAGS.window, "steps": FLAGS.steps,
                            "max_temp_gib": FLAGS.max_temp_gib,
                            "result_path": os.path.join(folder, f"{label}.json")}
                    result = worker.run(spec, os.path.join(folder, f"{label}.spec.json"),
                                        os.path.join(folder, f"{label}.log"), label)
                    results.append(result)
                    print(json.dumps(result), flush=True)
    settings = {k: getattr(FLAGS, k) for k in ("layers", "hidden", "heads", "intermediate",
                                                "window", "batch", "steps")}
    print(f"\n{settings}")
    if any(r["target"] == "cpu" for r in results):
        print(f"\n{cpu_table(results)}")
    if any(r["target"] != "cpu" for r in results):
        print(f"\n{tpu_table(results)}")
    if FLAGS.json:
        with open(FLAGS.json, "w", encoding="utf-8") as f:
            json.dump({"settings": settings, "results": results}, f, indent=1)


if __name__ == "__main__":
    flags.DEFINE_string("seq_lens", "1024,2048,4096,8192", "Row lengths, comma-separated.")
    flags.DEFINE_string("modes", ",".join(MODES), "Attention patterns, comma-separated: "
                                                  "alternating (ModernBERT's), full, local.")
    flags.DEFINE_string("targets", "cpu,tpu:v5e:2x2", "cpu (run here) and/or "
                        "tpu:<generation>:<shape> (compiled for one chip of that slice).")
    flags.DEFINE_string("tpu_attention", "auto", "The attention setting of the TPU "
                        "compilations: auto (splash) and/or xla, comma-separated.")
    flags.DEFINE_integer("layers", 3, "Layers in the stack.")
    flags.DEFINE_integer("hidden", 768, "Hidden size.")
    flags.DEFINE_integer("heads", 12, "Attention heads.")
    flags.DEFINE_integer("intermediate", 1152, "GeGLU inner width.")
    flags.DEFINE_integer("window", 128, "The local layers' window (query i sees |i - j| <= "
                                        "window // 2).")
    flags.DEFINE_integer("batch", 1, "Rows per step.")
    flags.DEFINE_integer("steps", 3, "Timed CPU steps after one warm-up (their median).")
    flags.DEFINE_float("max_temp_gib", 12.0, "Compile but do not run a step whose XLA "
                                             "temporaries exceed this.")
    flags.DEFINE_string("json", None, "Also write the results here.")
    app.run(main)
