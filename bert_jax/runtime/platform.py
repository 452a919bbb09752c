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
from typing import Iterator, Optional

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
