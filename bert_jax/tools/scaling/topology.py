"""TPU slices described without a TPU: their devices, to compile programs for from any host.

`devices("v5e:2x4")` gives the 8 devices of a v5e slice as `jax.experimental.topologies`
describes them (libtpu must be installed: `pip install -e '.[tpu]'`). A Mesh of them and
`jax.jit(...).lower(...).compile()` give the real TPU program, its memory and cost analysis;
nothing can run on them. On a CPU host set JAX_PLATFORMS=cpu (and TPU_SKIP_MDS_QUERY=1, so that
libtpu does not ask a cloud metadata server for the machine it is on).

v4 and v5p chips hold two TensorCores; as on their TPU VMs, one device per chip (megacore).
"""

from __future__ import annotations

import os
from typing import Sequence

import jax

# Chip generations whose two TensorCores are one device (megacore), as their TPU VMs run them.
MEGACORE = ("v4", "v5p")


def parse(target: str) -> str:
    """"tpu:v5e:2x4" or "v5e:2x4" -> "v5e:2x4"; ValueError for anything else."""
    name = target[len("tpu:"):] if target.startswith("tpu:") else target
    generation, _, shape = name.partition(":")
    dims = shape.split("x")
    if not generation or not shape or not all(d.isdigit() and int(d) > 0 for d in dims):
        raise ValueError(f"TPU topology {target!r}: expected <generation>:<shape>, e.g. "
                         "v5e:2x4, v4:4x4x4, v5p:2x2x1, v6e:2x2")
    return name


def devices(target: str) -> Sequence[jax.Device]:
    """The devices of a TPU slice (module docstring); ValueError naming what is wrong."""
    name = parse(target)
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    # Compiling touches no chip, so several processes may load libtpu at once (by default the
    # second one fails on libtpu's lock file).
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    try:
        from jax.experimental import topologies
    except ImportError as e:  # pragma: no cover - every supported jax has it
        raise ValueError(f"this jax has no jax.experimental.topologies ({e})") from None
    generation = name.split(":")[0]
    options = {"chip_config_name": "megacore"} if generation in MEGACORE else {}
    try:
        description = topologies.get_topology_desc(topology_name=name, platform="tpu",
                                                   **options)
    except Exception as e:  # noqa: BLE001 - libtpu raises plain RuntimeErrors and XlaRuntimeErrors
        message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if not _libtpu_installed():
            raise ValueError(f"TPU topology {name!r}: libtpu is not installed (pip install -e "
                             f"'.[tpu]'): {message}") from None
        raise ValueError(f"TPU topology {name!r}: {message}") from None
    return list(description.devices)


def _libtpu_installed() -> bool:
    import importlib.util
    return importlib.util.find_spec("libtpu") is not None
