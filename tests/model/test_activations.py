"""The exact GELU with a memory-lean backward pass equals jax.nn.gelu(approximate=False)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.model.activations import gelu

reference = functools.partial(jax.nn.gelu, approximate=False)


def test_values_and_gradient_match_autodiff_of_the_formula():
    x = jnp.linspace(-6.0, 6.0, 1001, dtype=jnp.float32)
    np.testing.assert_allclose(gelu(x), reference(x), rtol=1e-6, atol=1e-7)
    ours = jax.grad(lambda v: jnp.sum(gelu(v) * jnp.cos(v)))(x)
    want = jax.grad(lambda v: jnp.sum(reference(v) * jnp.cos(v)))(x)
    np.testing.assert_allclose(ours, want, rtol=1e-5, atol=1e-6)


def test_bfloat16_in_bfloat16_out_computed_in_fp32():
    x = jnp.linspace(-4.0, 4.0, 257, dtype=jnp.float32)
    out = gelu(x.astype(jnp.bfloat16))
    assert out.dtype == jnp.bfloat16
    # one bf16 rounding of the fp32 result (relative 2^-8), not bf16 arithmetic throughout
    np.testing.assert_allclose(out.astype(jnp.float32), reference(x.astype(jnp.bfloat16).astype(
        jnp.float32)), rtol=2 ** -8, atol=1e-6)
    grad = jax.grad(lambda v: jnp.sum(gelu(v).astype(jnp.float32)))(x.astype(jnp.bfloat16))
    assert grad.dtype == jnp.bfloat16
    want = jax.grad(lambda v: jnp.sum(reference(v)))(x.astype(jnp.bfloat16).astype(jnp.float32))
    np.testing.assert_allclose(grad.astype(jnp.float32), want, rtol=2 ** -7, atol=1e-6)
