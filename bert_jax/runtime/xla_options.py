"""XLA compiler options for the big one-off and per-step programs (the train step, the
parameter initialiser), per backend.

On CPU, XLA's default instruction scheduler runs independent work as early as it can: in a
BERT-base step it computes every layer's transposed activations and weights for the backward pass
while the forward pass is still going, so they all sit in memory at once, and remat="full" saves
nothing. The memory-optimised scheduler orders the program to keep buffers short-lived: less
scratch memory for the train step and the initialiser, remat that saves what it should, and a
step that is no slower (on a CPU with little memory bandwidth, faster: fewer cache misses).
Figures in docs/history.md ("What each speed change gave").

On TPU, XLA (libtpu 0.0.42) turns the all-gathers of fsdp-split parameters into all-reduces of
full-size, zero-padded buffers, which send twice the bytes, unless told to prefer all-gathers:
compiled for 64 v5e chips, a BERT-mini step with fsdp=64 then gathers with all-gathers and its
fsdp traffic falls from 1.84x to 1.34x the all-gather + reduce-scatter ideal (docs/results.md;
measured from the compiled program, not on a TPU). GPU keeps its defaults.

A one-off program (the parameter initialiser, run once per run) is compiled on CPU with LLVM's
optimisation off (`one_off_options`): its compilation is on the path to the first step and its
run is short, so optimising its code costs more than it saves (a tiny BERT's initialiser: 2.8-3.1
s to 1.6-2.2 s compiling and running; BERT-base's 2.7 s to 2.3 s; docs/history.md).
"""

from __future__ import annotations

import functools
from typing import Optional

import jax
import numpy as np
from absl import logging

from bert_jax.runtime import platform

CPU_OPTIONS = {"xla_cpu_scheduler_type": "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED"}
TPU_OPTIONS = {"xla_tpu_prefer_async_allgather_to_allreduce": "true"}
OPTIONS = {"cpu": CPU_OPTIONS, "tpu": TPU_OPTIONS}
ONE_OFF_OPTIONS = {"cpu": {"xla_backend_optimization_level": "0"}}


def compiler_options(backend: Optional[str] = None) -> Optional[dict[str, str]]:
    """`compiler_options` for jax.jit of a program for `backend` (default: the platform in
    context, `bert_jax.runtime.platform.current()`: pass the mesh's platform when compiling for
    one), less any that the installed jaxlib does not know (`known`)."""
    backend = platform.normalise(backend) if backend else platform.current()
    return known(backend, OPTIONS.get(backend, {}))


def one_off_options(backend: Optional[str] = None) -> Optional[dict[str, str]]:
    """compiler_options for a program run once (module docstring): the backend's options and,
    on CPU, LLVM's optimisation off."""
    backend = platform.normalise(backend) if backend else platform.current()
    return known(backend, {**OPTIONS.get(backend, {}), **ONE_OFF_OPTIONS.get(backend, {})})


def known(backend: str, options: dict[str, str]) -> Optional[dict[str, str]]:
    """`options` less those that the installed jaxlib refuses for `backend` (None if none is
    left). XLA's options come and go between jaxlib releases, and jax.jit fails on one it does
    not know ("No such compile option"), so each is tried once per process on a one-line program
    for this host's own backend (milliseconds), and one left out is logged. Options for another
    platform (a TPU program compiled on a CPU host) cannot be tried here and are kept: the TPU
    compile tests check them on every jaxlib that CI installs."""
    kept = {name: value for name, value in options.items()
            if backend != _host_backend() or _accepted(backend, name, value)}
    return kept or None


def _host_backend() -> str:
    return platform.normalise(jax.default_backend())


@functools.cache
def _accepted(backend: str, name: str, value: str) -> bool:
    try:
        jax.jit(lambda x: x + 1, compiler_options={name: value}).lower(np.float32(0)).compile()
    except Exception as e:  # jaxlib's error class differs between releases: match the message
        if "No such compile option" not in str(e):
            raise
        logging.warning("XLA compiler option %s=%s is unknown to the jaxlib of jax %s (%s): "
                        "left out", name, value, jax.__version__, backend)
        return False
    return True
