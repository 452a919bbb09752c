"""Activation functions by their Hugging Face names, and an exact GELU that is lean in memory.

`gelu` is GELU(x) = x Phi(x) with the exact normal CDF Phi(x) = (1 + erf(x / sqrt 2)) / 2, as
published (the same values as jax.nn.gelu(approximate=False)). Autodiff of that formula
evaluates its derivative's pieces (erf, exp(-x^2/2), products) during the forward pass and keeps
them for the backward pass: three extra [batch, seq, intermediate] arrays per layer. Here the
backward pass keeps x alone and recomputes them: d/dx GELU(x) = Phi(x) + x phi(x), phi the normal
density. Reduced-precision inputs are computed in fp32 and rounded once.

Being a custom VJP, `gelu` has no forward-mode derivative (jax.jvp, jacfwd, Hessian-vector
products through it fail, as they do through the bf16 matmuls of precision.py). A custom JVP
that keeps the slope would allow them, but XLA then keeps erfc's fp32 intermediates of every layer
alive until the backward pass (barriers do not prevent it), which costs more train-step scratch
memory than the custom VJP saves (figures in docs/history.md).
"""

from __future__ import annotations

import functools
import math
from typing import Callable

import jax
import jax.numpy as jnp

Array = jax.Array


def _normal_cdf(x: Array) -> Array:
    """Phi(x) = (1 + erf(x / sqrt 2)) / 2, as erfc(-x / sqrt 2) / 2: no cancellation for x << 0."""
    return 0.5 * jax.lax.erfc(-x * math.sqrt(0.5))


@jax.custom_vjp
def gelu(x: Array) -> Array:
    """Exact (erf) GELU, elementwise; the result has x's dtype."""
    x32 = x.astype(jnp.float32)
    return (x32 * _normal_cdf(x32)).astype(x.dtype)


def _gelu_forward(x):
    return gelu(x), x


def _gelu_backward(x, grad):
    # The barrier keeps XLA from reusing the forward pass's erf (equal, hence merged), which
    # would keep an fp32 [batch, seq, intermediate] array per layer alive until this point.
    x32 = jax.lax.optimization_barrier(x).astype(jnp.float32)
    density = jnp.exp(-0.5 * x32 * x32) / math.sqrt(2.0 * math.pi)
    return ((grad.astype(jnp.float32) * (_normal_cdf(x32) + x32 * density)).astype(x.dtype),)


gelu.defvjp(_gelu_forward, _gelu_backward)

ACTIVATION_FNS: dict[str, Callable[[Array], Array]] = {
    "gelu": gelu,  # exact, erf-based: as published
    "gelu_new": functools.partial(jax.nn.gelu, approximate=True),
    "gelu_pytorch_tanh": functools.partial(jax.nn.gelu, approximate=True),
    "relu": jax.nn.relu,
    "silu": jax.nn.silu,
    "tanh": jnp.tanh,
}
