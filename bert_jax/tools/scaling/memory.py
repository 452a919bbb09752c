"""Per-device memory and FLOPs of a compiled program, as XLA reports them.

`compiled.memory_analysis()` gives the buffers of one device's program: its arguments (the
sharded train state and batch), outputs, the outputs aliased to (donated) arguments, the
temporaries (activations, gradients, collective buffers: one allocation sized for the peak of
the schedule) and the generated code. What a device holds at the peak is about

    arguments + outputs - aliased + temporaries + generated code.

`compiled.cost_analysis()["flops"]` counts the FLOPs of one device's program, rematerialised
recomputation included; XLA's cost analysis visits a while loop's body once.
"""

from __future__ import annotations

from typing import Any, Optional


def memory_per_device(compiled: Any) -> dict[str, int]:
    """{arguments, outputs, aliased, temporaries, generated_code, peak} in bytes ({} if the
    backend reports nothing)."""
    stats = compiled.memory_analysis()
    if stats is None:
        return {}
    out = {"arguments": stats.argument_size_in_bytes, "outputs": stats.output_size_in_bytes,
           "aliased": stats.alias_size_in_bytes, "temporaries": stats.temp_size_in_bytes,
           "generated_code": stats.generated_code_size_in_bytes}
    out["peak"] = (out["arguments"] + out["outputs"] - out["aliased"] + out["temporaries"]
                   + out["generated_code"])
    return {k: int(v) for k, v in out.items()}


def hlo_cost(compiled: Any) -> dict[str, float]:
    """XLA's cost analysis of one device's program: {"flops", "bytes accessed"} where the
    backend reports them ({} where it has none)."""
    try:
        cost = compiled.cost_analysis()
    except Exception:  # noqa: BLE001 - some backends raise instead of returning nothing
        return {}
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else None
    return {k: float(cost[k]) for k in ("flops", "bytes accessed") if cost and k in cost}


def hlo_flops_per_device(compiled: Any) -> Optional[float]:
    """XLA's FLOP count of one device's program, or None where the backend has none."""
    return hlo_cost(compiled).get("flops")
