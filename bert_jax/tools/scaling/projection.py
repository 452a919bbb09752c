"""Step time of a compiled step on a target machine, from its FLOPs and its collectives.

    compute   = model FLOPs per device / (peak FLOP/s x MFU)          (MFU assumed, e.g. 0.5)
    comm      = sum over collectives of runs per step x (bandwidth time + latency)
    step time = compute + comm (no overlap)  ...  max(compute, comm) (full overlap)

Bandwidth time of one collective, payload B per device (`traffic`), over groups of n devices that
span m domains with k = n / m devices in each (`targets`): a two-level algorithm, which is how
NCCL and XLA run collectives across nodes and slices: the fast level moves f(k) B at the fast
bandwidth, the slow level f(m) B / k at the slow one (each of the k devices of a domain carries
1/k of the payload over its own link):

    t = f(k) B / fast + f(m) B / (k slow)

with f the ring factor of the kind (2(n-1)/n all-reduce, (n-1)/n all-gather and reduce-scatter).
An all-to-all sends (k-1)/n B inside the domain and (n-k)/n B out of it; a collective-permute
sends B over the slow link if any pair crosses domains. The payloads are the effective ones
(`traffic.effective_parts`: reassociable all-reduce bytes dropped, sliced ones reduce-scattered).
Latency: log2 hops per level and phase (tree or recursive halving/doubling; two phases for an
all-reduce) at the level's per-hop latency.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Iterable

from bert_jax.tools.scaling.collectives import Collective
from bert_jax.tools.scaling.targets import Target
from bert_jax.tools.scaling.traffic import effective_parts, ring_factor


@dataclasses.dataclass(frozen=True)
class Projection:
    target: str
    mfu: float
    compute_s: float
    comm_s: float  # bandwidth + latency, all collectives
    comm_slow_s: float  # the part spent on the slow network
    latency_s: float
    memory_fits: bool
    step_s_no_overlap: float
    step_s_full_overlap: float
    tokens_per_s_no_overlap: float
    tokens_per_s_full_overlap: float

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def project(target: Target, found: Iterable[Collective], model_flops_per_device: float,
            tokens_per_step: int, memory_per_device: float, mfu: float) -> Projection:
    """The projection of module docstring for one compiled step."""
    compute = model_flops_per_device / (target.peak_flops * mfu)
    comm = slow = latency = 0.0
    for c in found:
        if not c.moves_data:
            continue
        fast_s, slow_s, latency_s = collective_seconds(target, c)
        comm += c.executions * (fast_s + slow_s + latency_s)
        slow += c.executions * slow_s
        latency += c.executions * latency_s
    return Projection(
        target=target.name, mfu=mfu, compute_s=compute, comm_s=comm, comm_slow_s=slow,
        latency_s=latency, memory_fits=memory_per_device <= target.memory_bytes,
        step_s_no_overlap=compute + comm, step_s_full_overlap=max(compute, comm),
        tokens_per_s_no_overlap=tokens_per_step / (compute + comm),
        tokens_per_s_full_overlap=tokens_per_step / max(compute, comm))


def domains_spanned(c: Collective, domain_size: int) -> tuple[int, int]:
    """(m, k): domains a group spans, and devices of the group in each (the first group's)."""
    members = c.groups[0] if c.kind != "collective-permute" else sum(c.groups, ())
    m = len({p // domain_size for p in members})
    return m, max(len(set(members)) // m, 1)


def collective_seconds(target: Target, c: Collective) -> tuple[float, float, float]:
    """(fast-link seconds, slow-link seconds, latency seconds) of one execution of c."""
    if c.kind == "collective-permute":
        crosses = any(s // target.domain_size != t // target.domain_size for s, t in c.groups)
        bandwidth = target.slow_bandwidth if crosses else target.fast_bandwidth
        hop = target.slow_latency if crosses else target.fast_latency
        seconds = c.operand_bytes / bandwidth
        return (0.0, seconds, hop) if crosses else (seconds, 0.0, hop)
    m, k = domains_spanned(c, target.domain_size)
    n = m * k
    if c.kind == "all-to-all":
        fast = (k - 1) / n * c.operand_bytes / target.fast_bandwidth
        slow = (n - k) / n * c.operand_bytes / target.slow_bandwidth
        return fast, slow, _hops(k, 1) * target.fast_latency + _hops(m, 1) * target.slow_latency
    fast = slow = 0.0
    for kind, payload in effective_parts(c):
        fast += ring_factor(kind, k) * payload / target.fast_bandwidth
        slow += ring_factor(kind, m) * payload / k / target.slow_bandwidth
    phases = 2 if c.kind == "all-reduce" else 1
    latency = _hops(k, phases) * target.fast_latency + _hops(m, phases) * target.slow_latency
    return fast, slow, latency


def _hops(n: int, phases: int) -> float:
    return phases * math.ceil(math.log2(n)) if n > 1 else 0.0
