"""Per-step traffic of a program's collectives on its mesh: which mesh axes each one spans, and
the bytes it moves, as compiled and as a GPU/TPU compiler would move them.

Wire bytes are what each device sends in the bandwidth-optimal (ring) algorithm over a group of
n devices, for a payload of B bytes per device:

    all-reduce          2 (n - 1) / n x B   (B: the operand; a reduce-scatter then an all-gather)
    all-gather          (n - 1) / n x B     (B: the gathered result)
    reduce-scatter      (n - 1) / n x B     (B: the operand before scattering)
    all-to-all          (n - 1) / n x B     (B: the operand; each device keeps 1/n of it)
    collective-permute  B                   (each device sends its operand once)

"Effective" bytes drop an all-reduce's reassociable bytes and count its sliced bytes as a
reduce-scatter (see `collectives`): what the same program moves once XLA's GPU/TPU passes have
run. Both figures are reported; the projections use the effective ones.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Sequence

import numpy as np

from bert_jax.tools.scaling.collectives import Collective

PARAMETERS = "state.params"  # how the program names the train state's parameters


def payload_bytes(c: Collective) -> float:
    """B of the module docstring."""
    return c.result_bytes if c.kind == "all-gather" else c.operand_bytes


def ring_factor(kind: str, n: int) -> float:
    """Wire bytes per payload byte per device (module docstring)."""
    if n <= 1:
        return 0.0
    if kind == "all-reduce":
        return 2.0 * (n - 1) / n
    return 1.0 if kind == "collective-permute" else (n - 1) / n


def wire_bytes(c: Collective) -> float:
    """Bytes each device sends per execution of c, as compiled."""
    return ring_factor(c.kind, c.group_size) * payload_bytes(c) if c.moves_data else 0.0


def effective_parts(c: Collective) -> list[tuple[str, float]]:
    """(kind, payload) of what c moves once its reassociable bytes are dropped and its sliced
    bytes run as a reduce-scatter (the two are assumed to overlap in proportion)."""
    if c.kind != "all-reduce" or not c.operand_bytes:
        return [(c.kind, payload_bytes(c))]
    kept = c.operand_bytes - c.reassociable_bytes
    sliced_share = c.sliced_bytes / c.operand_bytes
    return [("all-reduce", kept * (1 - sliced_share)), ("reduce-scatter", kept * sliced_share)]


def effective_wire_bytes(c: Collective) -> float:
    """Bytes each device sends per execution of c after the GPU/TPU rewrites (module doc)."""
    if not c.moves_data:
        return 0.0
    return sum(ring_factor(kind, c.group_size) * payload for kind, payload in effective_parts(c))


def spanned_axes(c: Collective, mesh_shape: Sequence[int], axis_names: Sequence[str]
                 ) -> tuple[str, ...]:
    """The mesh axes along which the members of c's groups differ."""
    varying = np.zeros(len(mesh_shape), bool)
    for group in c.groups:
        coords = np.array(np.unravel_index(np.asarray(group), tuple(mesh_shape))).T
        varying |= (coords != coords[0]).any(axis=0)
    return tuple(name for name, v in zip(axis_names, varying) if v)


@dataclasses.dataclass
class Traffic:
    """The collectives of one kind over one set of mesh axes, per device, per step."""

    kind: str
    axes: tuple[str, ...]
    group_size: int
    ops: int = 0  # instructions run per step (loop trip counts included)
    operand_bytes: float = 0.0
    result_bytes: float = 0.0
    wire_bytes: float = 0.0  # sent per device, ring algorithm, as compiled
    effective_wire_bytes: float = 0.0  # the same after the GPU/TPU rewrites (module docstring)
    sliced_bytes: float = 0.0
    reassociable_bytes: float = 0.0
    dtypes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "axes": "+".join(self.axes) or "-"}


def summarize(found: Iterable[Collective], mesh_shape: Sequence[int],
              axis_names: Sequence[str]) -> list[Traffic]:
    """Per-step traffic by (kind, spanned axes, group size), most wire bytes first."""
    table: dict[tuple, Traffic] = {}
    for c in found:
        if not c.moves_data:
            continue
        axes = spanned_axes(c, mesh_shape, axis_names)
        row = table.setdefault((c.kind, axes, c.group_size), Traffic(c.kind, axes, c.group_size))
        row.ops += c.executions
        row.operand_bytes += c.executions * c.operand_bytes
        row.result_bytes += c.executions * c.result_bytes
        row.wire_bytes += c.executions * wire_bytes(c)
        row.effective_wire_bytes += c.executions * effective_wire_bytes(c)
        row.sliced_bytes += c.executions * c.sliced_bytes
        row.reassociable_bytes += c.executions * c.reassociable_bytes
        row.dtypes = tuple(sorted(set(row.dtypes) | set(c.dtypes)))
    return sorted(table.values(), key=lambda t: -t.wire_bytes)


def parameter_gathers(found: Iterable[Collective]) -> dict[str, float]:
    """All-gather result bytes per step, split three ways: `parameters`, by the first all-gather
    instruction of each parameter (times its runs: a scanned layer stack's gather runs once per
    layer, each time on another layer); `regathered`, by the other instructions that gather a
    parameter already gathered (the backward pass, rematerialised layers); `activations`, of
    computed values."""
    seen: set[str] = set()
    out = {"parameters": 0.0, "regathered": 0.0, "activations": 0.0}
    for c in found:
        if c.kind != "all-gather" or not c.moves_data:
            continue
        if not c.source.startswith(PARAMETERS):
            out["activations"] += c.executions * c.result_bytes
            continue
        out["regathered" if c.source in seen else "parameters"] += c.executions * c.result_bytes
        seen.add(c.source)
    return out
