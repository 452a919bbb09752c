"""XLA compiler options for the big one-off and per-step programs (the train step, the
parameter initialiser), per backend.

On CPU, XLA's default instruction scheduler runs independent work as early as it can: in a
BERT-base step it computes every layer's transposed activations and weights for the backward pass
while the forward pass is still going, so they all sit in memory at once, and remat="full" saves
nothing. The memory-optimised scheduler orders the program to keep buffers short-lived: less
scratch memory for the train step and the initialiser, remat that saves what it should, and a
step that is no slower (on a CPU with little memory bandwidth, faster: fewer cache misses).
Figures in docs/results.md. GPU and TPU keep their defaults.
"""

from __future__ import annotations

from typing import Optional

import jax

CPU_OPTIONS = {"xla_cpu_scheduler_type": "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED"}


def memory_lean(backend: Optional[str] = None) -> Optional[dict[str, str]]:
    """`compiler_options` for jax.jit on `backend` (default: JAX's default backend)."""
    backend = backend or jax.default_backend()
    return dict(CPU_OPTIONS) if backend == "cpu" else None
