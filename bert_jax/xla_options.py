"""XLA compiler options for the big one-off and per-step programs (the train step, the
parameter initialiser), per backend.

On CPU, XLA's default instruction scheduler runs independent work as early as it can: in a
BERT-base step it computes every layer's transposed activations and weights for the backward pass
while the forward pass is still going, so they all sit in memory at once. The memory-optimised
scheduler orders the step to keep buffers short-lived. Measured on BERT-base, batch 8 x 128,
bf16, 2 cores: XLA scratch memory 1484 -> 1242 MB without remat and 1484 -> 737 MB with
remat="full" (where the default scheduler undoes remat's savings entirely), and the step got
faster, not slower: 606 -> 665 tokens/s (fewer cache misses on a machine with little bandwidth).
BERT-base's parameter initialiser: scratch 705 -> 268 MB. GPU and TPU keep their defaults.
"""

from __future__ import annotations

from typing import Optional

import jax

CPU_OPTIONS = {"xla_cpu_scheduler_type": "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED"}


def memory_lean(backend: Optional[str] = None) -> Optional[dict[str, str]]:
    """`compiler_options` for jax.jit on `backend` (default: JAX's default backend)."""
    backend = backend or jax.default_backend()
    return dict(CPU_OPTIONS) if backend == "cpu" else None
