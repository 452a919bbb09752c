"""The platform a program is traced for: "cpu", "gpu" or "tpu".

Some choices in the model and the compiler options depend on the hardware (the CPU-only
row-major transposes of `model.precision`, the attention kernel, XLA:CPU's scheduler). They must
follow the devices the program is compiled for, not the host that traces it: a TPU program
compiled ahead of time on a CPU host (`jax.experimental.topologies`) is traced where
`jax.default_backend()` answers "cpu". So a step compiled for a mesh is traced under
`compiling_for(platform_of(mesh))` (`bert_jax.runtime.sharding.activation_sharding` opens it), and
code that decides by platform asks `current()`, which falls back to JAX's default backend outside
such a context (a plain `model.apply` runs where JAX runs it).
"""

from __future__ import annotations

import contextlib
import contextvars
import glob
import importlib.metadata
import importlib.util
import os
from typing import Iterator, Mapping, MutableMapping, Optional

import jax

PLATFORMS = ("cpu", "gpu", "tpu")

_TARGET: contextvars.ContextVar[Optional[str]] = contextvars.ContextVar(
    "bert_jax_target_platform", default=None)


def normalise(platform: str) -> str:
    """A device's platform name -> one of PLATFORMS ("cuda" and "rocm" are "gpu")."""
    platform = platform.lower()
    return "gpu" if platform in ("cuda", "rocm", "gpu") else platform


def platform_of(mesh_or_devices) -> str:
    """The platform of a Mesh's (or a sequence of devices') first device."""
    devices = getattr(mesh_or_devices, "devices", mesh_or_devices)
    first = devices.flat[0] if hasattr(devices, "flat") else next(iter(devices))
    return normalise(first.platform)


def current() -> str:
    """The platform the program being traced is for (default: JAX's default backend)."""
    target = _TARGET.get()
    return target if target is not None else normalise(jax.default_backend())


@contextlib.contextmanager
def compiling_for(platform: str) -> Iterator[None]:
    """While open, `current()` answers `platform`."""
    platform = normalise(platform)
    if platform not in PLATFORMS:
        raise ValueError(f"unknown platform {platform!r}; expected one of {PLATFORMS}")
    token = _TARGET.set(platform)
    try:
        yield
    finally:
        _TARGET.reset(token)


# Google's PCI vendor id: every Cloud TPU chip shows up under it in /sys/bus/pci/devices.
_GOOGLE_PCI_VENDOR = "0x1ae0"
# JAX's GPU plugins, by the platform name JAX_PLATFORMS gives them.
_GPU_PLUGINS = {"cuda": "jax-cuda", "rocm": "jax-rocm"}


def _has_google_pci_device(pattern: str = "/sys/bus/pci/devices/*/vendor") -> bool:
    for path in glob.glob(pattern):
        try:
            with open(path, encoding="ascii") as f:
                if f.read().strip() == _GOOGLE_PCI_VENDOR:
                    return True
        except OSError:
            continue
    return False


def platforms_without_absent_tpu(environ: Mapping[str, str] = os.environ) -> Optional[str]:
    """The JAX_PLATFORMS that keeps JAX from starting libtpu on a host with no TPU, or None to
    leave JAX's own choice.

    libtpu (installed with jax[tpu], e.g. for compiling TPU programs on a CPU host) is started by
    JAX whenever it is installed; on a host without a TPU chip it then prints half a dozen lines
    of errors to stderr, and two processes at once add advice to delete its lock file. None when
    JAX_PLATFORMS is already set (the user's choice stands), when libtpu is not installed, or when
    a Google PCI device is present (a TPU VM). Else the installed GPU plugins' platforms and
    "cpu", in JAX's order of preference (JAX skips "cuda" by itself where no NVIDIA GPU is
    visible).
    """
    if environ.get("JAX_PLATFORMS") or importlib.util.find_spec("libtpu") is None:
        return None
    if _has_google_pci_device():
        return None
    installed = {dist.metadata["Name"].lower().replace("_", "-")
                 for dist in importlib.metadata.distributions()}
    gpus = [name for name, prefix in _GPU_PLUGINS.items()
            if any(dist.startswith(prefix) and dist.endswith("-plugin") for dist in installed)]
    return ",".join([*gpus, "cpu"])


def skip_absent_tpu(environ: MutableMapping[str, str] = os.environ) -> None:
    """Sets JAX_PLATFORMS to `platforms_without_absent_tpu()` where that is not None; call it
    before anything starts JAX's backends (the scripts' first step, `bert_jax.cli.start`)."""
    platforms = platforms_without_absent_tpu(environ)
    if platforms is not None:
        environ["JAX_PLATFORMS"] = platforms
        jax.config.update("jax_platforms", platforms)
