"""XLA compiler options for the big one-off and per-step programs (the train step, the
parameter initialiser), per backend.

On CPU, XLA's default instruction scheduler runs independent work as early as it can: in a
BERT-base step it computes every layer's transposed activations and weights for the backward pass
while the forward pass is still going, so they all sit in memory at once, and remat="full" saves
nothing. The memory-optimised scheduler orders the program to keep buffers short-lived: less
scratch memory for the train step and the initialiser, remat that saves what it should, and a
step that is no slower (on a CPU with little memory bandwidth, faster: fewer cache misses).
Figures in docs/results.md.

On TPU, XLA (libtpu 0.0.42) turns the all-gathers of fsdp-split parameters into all-reduces of
full-size, zero-padded buffers, which send twice the bytes, unless told to prefer all-gathers:
compiled for 64 v5e chips, a BERT-mini step with fsdp=64 then gathers with all-gathers and its
fsdp traffic falls from 1.84x to 1.34x the all-gather + reduce-scatter ideal (docs/results.md;
measured from the compiled program, not on a TPU). GPU keeps its defaults.

A one-off program (the parameter initialiser, run once per run) is compiled on CPU with LLVM's
optimisation off (`one_off_options`): its compilation is on the path to the first step and its
run is short, so optimising its code costs more than it saves (a tiny BERT's initialiser: 2.8-3.1
s to 1.6-2.2 s compiling and running; BERT-base's 2.7 s to 2.3 s; docs/results.md).
"""

from __future__ import annotations

from typing import Optional

from bert_jax.runtime import platform

CPU_OPTIONS = {"xla_cpu_scheduler_type": "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED"}
TPU_OPTIONS = {"xla_tpu_prefer_async_allgather_to_allreduce": "true"}
OPTIONS = {"cpu": CPU_OPTIONS, "tpu": TPU_OPTIONS}
ONE_OFF_OPTIONS = {"cpu": {"xla_backend_optimization_level": "0"}}


def compiler_options(backend: Optional[str] = None) -> Optional[dict[str, str]]:
    """`compiler_options` for jax.jit of a program for `backend` (default: the platform in
    context, `bert_jax.runtime.platform.current()`: pass the mesh's platform when compiling for
    one)."""
    backend = platform.normalise(backend) if backend else platform.current()
    return dict(OPTIONS[backend]) if backend in OPTIONS else None


def one_off_options(backend: Optional[str] = None) -> Optional[dict[str, str]]:
    """compiler_options for a program run once (module docstring): the backend's options and,
    on CPU, LLVM's optimisation off."""
    backend = platform.normalise(backend) if backend else platform.current()
    options = {**(compiler_options(backend) or {}), **ONE_OFF_OPTIONS.get(backend, {})}
    return options or None
