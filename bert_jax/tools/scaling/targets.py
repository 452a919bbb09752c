"""The machines the report projects onto: published peak figures, and the assumptions on top.

Each target is a two-level machine: a *domain* of devices joined by the fast interconnect
(a TPU slice's ICI torus, a GPU node's NVLink switch) and a slower network between domains
(TPU data-center network, InfiniBand). A device's partition id p lies in domain p // domain_size:
the mesh's devices are laid out in order, as `jax.experimental.mesh_utils` lays out the devices
of a GPU cluster (process by process) and as a TPU slice's devices are numbered.

Published figures (per device; "per direction" halves a bidirectional figure):

    TPU v5e   197 TFLOP/s bf16; 16 GB HBM; ICI 400 GB/s bidirectional (4 ports) -> 200 GB/s;
              pod (domain) 256 chips, 2D torus; beyond it the data-center network: 2 x 100 Gb/s
              per host of 8 chips -> 3.125 GB/s per chip.
              https://cloud.google.com/tpu/docs/v5e
    TPU v5p   459 TFLOP/s bf16; 95 GiB HBM; ICI 1200 GB/s bidirectional -> 600 GB/s; largest
              slice (domain) 6144 chips, 3D torus; DCN 50 Gb/s per chip -> 6.25 GB/s.
              https://cloud.google.com/tpu/docs/v5p
    H100 SXM  989 TFLOP/s bf16 dense (1979 with sparsity); 80 GB HBM3; NVLink 4 900 GB/s
              bidirectional -> 450 GB/s; node (domain) of 8 GPUs on NVSwitch; InfiniBand NDR
              400 Gb/s per GPU (DGX H100: one ConnectX-7 per GPU) -> 50 GB/s.
              https://www.nvidia.com/en-us/data-center/h100/ and the DGX H100 user guide

Assumptions (not published figures; printed with every report):
- a collective inside a domain gets the device's whole fast-link bandwidth in each direction
  (TPU: every ICI port, an upper bound for a collective confined to one torus dimension; GPU:
  the NVSwitch fabric);
- latency per hop: ICI 1 us, NVLink 1 us, InfiniBand 5 us, DCN 10 us (orders of magnitude).
"""

from __future__ import annotations

import dataclasses

GB = 1e9


@dataclasses.dataclass(frozen=True)
class Target:
    name: str
    peak_flops: float  # dense bf16 FLOP/s per device
    memory_bytes: float  # HBM per device
    domain_size: int  # devices on the fast interconnect
    fast_bandwidth: float  # bytes/s per device per direction, inside a domain
    slow_bandwidth: float  # bytes/s per device per direction, between domains
    fast_latency: float  # seconds per hop
    slow_latency: float
    fast_name: str
    slow_name: str
    source: str


TARGETS: dict[str, Target] = {
    "tpu_v5e": Target("TPU v5e", 197e12, 16 * GB, 256, 200 * GB, 2 * 100e9 / 8 / 8, 1e-6, 10e-6,
                      "ICI", "DCN", "https://cloud.google.com/tpu/docs/v5e"),
    "tpu_v5p": Target("TPU v5p", 459e12, 95 * 2**30, 6144, 600 * GB, 50e9 / 8, 1e-6, 10e-6,
                      "ICI", "DCN", "https://cloud.google.com/tpu/docs/v5p"),
    "h100": Target("H100 SXM (8 per node, NVLink + InfiniBand)", 989e12, 80 * GB, 8, 450 * GB,
                   400e9 / 8, 1e-6, 5e-6, "NVLink", "InfiniBand",
                   "https://www.nvidia.com/en-us/data-center/h100/ ; DGX H100 user guide "
                   "(8 x ConnectX-7 400 Gb/s)"),
}


def get(name: str) -> Target:
    if name not in TARGETS:
        raise ValueError(f"unknown target {name!r}; choose among {sorted(TARGETS)}")
    return TARGETS[name]
