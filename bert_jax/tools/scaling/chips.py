"""Accelerator chips: the published figures a compiled program is measured against.

One row per chip, each figure per chip, with where it is published; the bf16 peaks are those of
bert_jax.train.flops.PEAK_FLOPS_BY_DEVICE_KIND (the MFU of the training log), read from there.
`bidirectional_ici` is the vendor's per-chip interconnect figure (ICI for TPUs, NVLink for GPUs),
both directions summed; a collective's bytes leave a chip at up to half of it (`link_bandwidth`).

    chip       bf16 peak     HBM        HBM bandwidth  interconnect (bidirectional)
    TPU v4     275 TFLOP/s   32 GiB     1200 GB/s      300 GB/s (6 ICI links x 50 GB/s: the v4
                                                       paper, Jouppi et al., ISCA 2023)
    TPU v5e    197 TFLOP/s   16 GB      819 GB/s       400 GB/s
    TPU v5p    459 TFLOP/s   95 GB      2765 GB/s      1200 GB/s
    TPU v6e    918 TFLOP/s   32 GB      1638 GB/s      800 GB/s
    H100 SXM   989 TFLOP/s   80 GB      3350 GB/s      900 GB/s (NVLink 4)
    H200 SXM   989 TFLOP/s   141 GB     4800 GB/s      900 GB/s (NVLink 4)

TPU figures: cloud.google.com/tpu/docs/{v4,v5e,v5p,v6e}; GPU figures: nvidia.com's H100 and
H200 product pages (dense bf16, i.e. without the 2:4 sparsity doubling).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from bert_jax.train.flops import PEAK_FLOPS_BY_DEVICE_KIND

GB = 1e9
GIB = 2**30


@dataclasses.dataclass(frozen=True)
class Chip:
    name: str
    device_kinds: tuple[str, ...]  # jax's Device.device_kind strings of this chip
    hbm_bytes: float
    hbm_bandwidth: float  # bytes/s
    bidirectional_ici: float  # bytes/s, both directions of every link summed
    source: str

    @property
    def peak_bf16_flops(self) -> float:
        """Dense bf16 FLOP/s."""
        return PEAK_FLOPS_BY_DEVICE_KIND[self.device_kinds[0]]

    @property
    def link_bandwidth(self) -> float:
        """Bytes/s a chip sends in collectives: one direction of its links."""
        return self.bidirectional_ici / 2


CHIPS: dict[str, Chip] = {chip.name: chip for chip in (
    Chip("TPU v4", ("TPU v4",), 32 * GIB, 1200 * GB, 300 * GB,
         "https://cloud.google.com/tpu/docs/v4; ICI: Jouppi et al., TPU v4, ISCA 2023"),
    Chip("TPU v5e", ("TPU v5 lite", "TPU v5e"), 16 * GB, 819 * GB, 400 * GB,
         "https://cloud.google.com/tpu/docs/v5e"),
    Chip("TPU v5p", ("TPU v5", "TPU v5p"), 95 * GB, 2765 * GB, 1200 * GB,
         "https://cloud.google.com/tpu/docs/v5p"),
    Chip("TPU v6e", ("TPU v6 lite", "TPU v6e"), 32 * GB, 1638 * GB, 800 * GB,
         "https://cloud.google.com/tpu/docs/v6e"),
    Chip("H100 SXM", ("NVIDIA H100", "NVIDIA H100 80GB HBM3"), 80 * GB, 3350 * GB,
         900 * GB, "https://www.nvidia.com/en-us/data-center/h100/"),
    Chip("H200 SXM", ("NVIDIA H200",), 141 * GB, 4800 * GB, 900 * GB,
         "https://www.nvidia.com/en-us/data-center/h200/"),
)}


def for_device_kind(device_kind: str) -> Optional[Chip]:
    """The chip whose device_kinds name `device_kind` (None for a chip not in the table)."""
    for chip in CHIPS.values():
        if device_kind in chip.device_kinds:
            return chip
    for chip in CHIPS.values():  # e.g. "NVIDIA H200 NVL" or a longer marketing name
        gpu_kinds = [kind for kind in chip.device_kinds if kind.startswith("NVIDIA")]
        if any(device_kind.startswith(kind) for kind in gpu_kinds):
            return chip
    return None
