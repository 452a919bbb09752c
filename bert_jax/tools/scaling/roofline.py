"""A compiled step against one chip: does it fit in HBM, and how fast could it at best run.

Memory: the program's peak per chip (`memory.memory_per_device`: arguments + outputs - aliased
+ temporaries + generated code) against the chip's HBM; the headroom is what is left.

Roofline: a step can be no faster than the slowest of

    compute  = model FLOPs per chip / peak bf16 FLOP/s           (bert_jax/train/flops.py)
    memory   = bytes accessed per chip / HBM bandwidth           (XLA's cost analysis)
    network  = collective bytes sent per chip / link bandwidth   (traffic: ring bytes as
                                                                  compiled; half the
                                                                  bidirectional ICI)

and the MFU bound is compute / max(compute, memory, network). XLA's cost analysis visits a while
loop's body once, so with scanned layers the memory term is a lower bound (`loops` says so);
FLOPs come from the model, never from the cost analysis.

FSDP traffic: the ideal of a step is one all-gather of every fsdp-split parameter and one
reduce-scatter of its gradient ((n - 1) / n of its bytes each, n = fsdp size, in the parameters'
storage dtype), plus an all-reduce (2 (n - 1) / n) of every other gradient over the axes that
split the batch. `fsdp_traffic` sets the measured bytes of the collectives over `fsdp` beside
it; a ratio > FSDP_RATIO_LIMIT is flagged. The program is the chip's own, so its collectives are
counted as compiled (traffic's wire bytes: no rewrite by a later compiler is assumed).
"""

from __future__ import annotations

from typing import Any, Optional

from bert_jax.tools.scaling.chips import Chip

FSDP_RATIO_LIMIT = 1.2


def memory_fit(memory_per_chip: dict[str, int], chip: Chip) -> dict[str, Any]:
    peak = memory_per_chip.get("peak", 0)
    return {"hbm_bytes": chip.hbm_bytes, "peak_bytes": peak, "fits": peak <= chip.hbm_bytes,
            "headroom_bytes": chip.hbm_bytes - peak,
            "used_fraction": peak / chip.hbm_bytes if chip.hbm_bytes else None}


def bound(chip: Chip, model_flops_per_chip: float, bytes_accessed: Optional[float],
          collective_bytes: float, tokens_per_step: int, loops: bool) -> dict[str, Any]:
    """The roofline bound of module docstring (seconds, the limiting term, MFU and tokens/s)."""
    terms = {"compute": model_flops_per_chip / chip.peak_bf16_flops,
             "memory": (bytes_accessed or 0.0) / chip.hbm_bandwidth,
             "network": collective_bytes / chip.link_bandwidth}
    limit = max(terms, key=terms.get)
    step = terms[limit]
    return {"compute_s": terms["compute"], "memory_s": terms["memory"],
            "network_s": terms["network"], "limited_by": limit, "step_s": step,
            "mfu_bound": terms["compute"] / step if step else None,
            "tokens_per_s_bound": tokens_per_step / step if step else None,
            "memory_term_is_lower_bound": bool(loops)}


def fsdp_ideal_bytes(fsdp_size: int, fsdp_param_bytes: float, other_param_bytes: float,
                     batch_split: int) -> float:
    """Ideal bytes a chip sends per step over the mesh (module docstring)."""
    def ring(n: int) -> float:
        return (n - 1) / n if n > 1 else 0.0
    return 2 * ring(fsdp_size) * fsdp_param_bytes + 2 * ring(batch_split) * other_param_bytes


def fsdp_traffic(collective_rows: list[dict], fsdp_size: int, fsdp_param_bytes: float,
                 other_param_bytes: float, batch_split: int) -> Optional[dict[str, Any]]:
    """Measured against ideal bytes of the collectives that span `fsdp` (None without fsdp)."""
    if fsdp_size <= 1:
        return None
    by_kind: dict[str, float] = {}
    for row in collective_rows:
        if "fsdp" in row["axes"].split("+"):
            by_kind[row["kind"]] = by_kind.get(row["kind"], 0.0) + row["wire_bytes"]
    measured = sum(by_kind.values())
    ideal = fsdp_ideal_bytes(fsdp_size, fsdp_param_bytes, other_param_bytes, batch_split)
    ratio = measured / ideal if ideal else None
    return {"measured_bytes": measured, "ideal_bytes": ideal, "ratio": ratio,
            "by_kind": by_kind, "flagged": ratio is not None and ratio > FSDP_RATIO_LIMIT}
