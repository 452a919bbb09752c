"""Where the time of our compiled train step goes: a jax.profiler trace of the timed steps, each
XLA op's time summed by what it computes (benchmarks/benchmark.py --profile_dir=DIR).

    with traced(directory, compiled_hlo_text):
        ... the timed steps ...
    table = breakdown(directory, steps)   # [(category, ms per step, share of the op time)]

XLA's CPU runtime records one trace event per op it runs (a fusion, a dot, a copy), named by the
op in the optimised HLO; the HLO's metadata names the JAX operation it came from
(`jit(train_step)/transpose(jvp(BertFor...))/bert/encoder/layer_3/attention/Dropout_0/...`),
which says forward or backward, the layer part and the primitive. Op times are summed over all
threads, so on a busy machine they exceed the wall time; the shares are what to read.
"""

from __future__ import annotations

import collections
import contextlib
import glob
import gzip
import json
import os
import re
from typing import Iterator

HLO_FILE = "train_step.hlo.txt"
_INSTRUCTION = re.compile(r"\s*(?:ROOT )?%?([^\s=]+) = (\S+) .*?([a-z][a-z0-9\-]*)\(")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_RANDOM = ("_bernoulli", "_uniform", "threefry", "random_bits", "rng_bit_generator")


@contextlib.contextmanager
def traced(directory: str, hlo_text: str) -> Iterator[None]:
    """jax.profiler.trace into `directory`, with the step's optimised HLO saved beside it."""
    import jax

    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, HLO_FILE), "w", encoding="utf-8") as f:
        f.write(hlo_text)
    with jax.profiler.trace(directory):
        yield


def instructions(hlo_text: str) -> dict[str, tuple[str, str, str]]:
    """{instruction name: (opcode, result type, the JAX op_name of its metadata)} of every
    computation."""
    found = {}
    for line in hlo_text.splitlines():
        match = _INSTRUCTION.match(line)
        if match:
            op_name = _OP_NAME.search(line)
            found[match.group(1)] = (match.group(3), match.group(2),
                                     op_name.group(1) if op_name else "")
    return found


def category(name: str, opcode: str, result: str, op_name: str) -> str:
    """What an op of the train step computes, from its HLO name, opcode, result type and JAX
    op_name. Copies XLA adds carry no op_name: those of uint32 arrays move random bits."""
    if any(word in op_name for word in _RANDOM) or (not op_name and result.startswith("u32[")):
        return "dropout: random bits"
    if "BertFor" not in op_name:  # the optimizer update (inside apply_if_finite's cond), loss
        return ("optimizer update" if "/cond" in op_name
                else "loss, clipping, grad norm, metrics, other")
    side = "backward" if "transpose(" in op_name else "forward"
    if opcode in ("dot", "convolution") or name.startswith(("ynn_fusion", "xnn_fusion")):
        return f"matmuls, {side}"
    if opcode in ("copy", "transpose") or name.startswith(("copy", "transpose")):
        return f"layout copies and transposes, {side}"
    for part, label in (("Dropout", "dropout: masks"), ("attention", "attention: mask, softmax"),
                        ("layer_norm", "layer norm"), ("feed_forward", "feed-forward: GELU, bias"),
                        ("embeddings", "embeddings: gather, scatter-add")):
        if part in op_name:
            return f"{label}, {side}"
    return f"other elementwise, {side}"


def op_times(directory: str, module_prefix: str = "jit_train_step") -> dict[str, float]:
    """{op name: microseconds summed over the trace} of the newest trace in `directory`."""
    traces = sorted(glob.glob(os.path.join(directory, "plugins", "profile", "*",
                                           "*.trace.json.gz")))
    if not traces:
        raise FileNotFoundError(f"no jax.profiler trace under {directory}")
    with gzip.open(traces[-1]) as f:
        events = json.load(f)["traceEvents"]
    times: dict[str, float] = collections.Counter()
    for event in events:
        args = event.get("args", {})
        if (event.get("ph") == "X" and "hlo_op" in args
                and args.get("hlo_module", "").startswith(module_prefix)):
            times[args["hlo_op"]] += event.get("dur", 0.0)
    return times


def breakdown(directory: str, steps: int) -> list[tuple[str, float, float]]:
    """[(category, ms per step, share of all op time)], largest first."""
    with open(os.path.join(directory, HLO_FILE), encoding="utf-8") as f:
        known = instructions(f.read())
    totals: dict[str, float] = collections.Counter()
    for name, micros in op_times(directory).items():
        totals[category(name, *known.get(name, ("", "", "")))] += micros
    whole = sum(totals.values()) or 1.0
    return [(label, round(micros / steps / 1e3, 2), round(micros / whole, 4))
            for label, micros in sorted(totals.items(), key=lambda item: -item[1])]


def lines(table: list) -> list[str]:
    """The breakdown as text lines."""
    return [f"  {ms:9.1f} ms/step {100 * share:5.1f}%  {label}" for label, ms, share in table]
