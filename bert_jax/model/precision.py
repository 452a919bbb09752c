"""Dense matmuls for reduced-precision compute: bf16 (or fp16) operands, fp32 accumulation.

With `BertConfig.dtype="bfloat16"` activations and weights enter each matmul in bf16, the products
are summed in fp32 (`preferred_element_type=float32`) and the result is rounded to bf16 once.
Accuracy: the fp32 sum is what GPUs and TPUs do anyway. Speed: on CPUs with bf16 dot-product
instructions XLA runs this on its YNNPACK kernel: 936-963 GFLOP/s here for [1024, 768] x
[768, 3072], against 455 with fp32 operands (bf16 in and bf16 out is widened to fp32 by XLA:CPU).

`matmul` has its own VJP, for two reasons:
- JAX would transpose a dot with an fp32 output into dots that take the fp32 cotangent as an
  operand, so the gradient matmuls would run in fp32; here they multiply bf16 by bf16 as well.
- The weight enters in its storage dtype (fp32) and is rounded to bf16 inside, so the backward
  pass keeps the fp32 parameter itself as its residual (no second, bf16 copy of every weight
  alive through the step) and the weight gradient comes out in fp32 straight from the fp32
  accumulator (no bf16 rounding of gradients).
In fp32 compute `matmul` is plain lax.dot_general, bit for bit what flax's Dense does.

The two gradient matmuls need a transposed operand (dX = dY W^T, dW = X^T dY). On CPU, XLA's fast
dot kernels (YNNPACK) take only row-major [M, K] x [K, N]; a dot whose operand is transposed
(which XLA folds into the dot's dimension numbers or into a column-major layout) falls back to the
generic kernel with its bf16 operands widened to fp32: 427-449 GFLOP/s here, against 864-936 for
the same product on a row-major copy. `transpose_row_major` makes that copy (it costs one pass over
a weight or an activation, small next to the product). Off CPU the plain transpose is used: GPU and
TPU matmuls read transposed operands natively.
"""

from __future__ import annotations

import functools
from typing import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array


def _as_matrices(lhs: Array, rhs: Array, num_contract: int) -> tuple[Array, Array]:
    """lhs [..., K...] -> [M, K], rhs [K..., N...] -> [K, N] (contracted dims trailing/leading)."""
    k = int(np.prod(rhs.shape[:num_contract]))
    return lhs.reshape(-1, k), rhs.reshape(k, -1)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _matmul_f32_accumulate(lhs: Array, rhs: Array, num_contract: int) -> Array:
    """lhs [..., K...] . rhs [K..., N...] over the K dims: operands in lhs.dtype, fp32 sums,
    result rounded to lhs.dtype. rhs may be stored in a wider dtype (it is rounded inside)."""
    lhs2, rhs2 = _as_matrices(lhs, rhs, num_contract)
    out = jnp.dot(lhs2, rhs2.astype(lhs.dtype), preferred_element_type=jnp.float32)
    return out.astype(lhs.dtype).reshape(lhs.shape[:lhs.ndim - num_contract]
                                         + rhs.shape[num_contract:])


def _forward(lhs, rhs, num_contract):
    return _matmul_f32_accumulate(lhs, rhs, num_contract), (lhs, rhs)


def _fresh_rounding(weight: Array, dtype: jnp.dtype) -> Array:
    """weight.astype(dtype), computed anew where the backward pass needs it.

    The forward pass rounds the same weight; XLA would reuse that rounded copy and so keep a
    low-precision copy of every weight alive from the forward pass to the backward pass (207 MB at
    BERT-base). The barrier hides the equality, so the copy lives only as long as its matmul.
    """
    return jax.lax.optimization_barrier(weight).astype(dtype)


def transpose_row_major(x: Array) -> Array:
    """x [a, b] -> x.T [b, a], on CPU as a materialised row-major array (see the module doc).

    A plain transpose is free in XLA: it becomes a layout change or is folded into the consuming
    dot. Going through the 3-D view [a, b/2, 2] -> [b/2, 2, a] is not a relayout of the 2-D array,
    so XLA writes the transposed values out, and the dot that reads them is row-major.
    (On a CPU device mesh, where a shard of dim 1 has odd width, e.g. vocab 30522 split over
    tensor=2, the 3-D view costs extra collectives; values are unaffected. Meshes of CPU devices
    are for tests; GPU/TPU take the plain transpose.)
    """
    a, b = x.shape
    if jax.default_backend() != "cpu" or b % 2:
        return x.T
    return x.reshape(a, b // 2, 2).transpose(1, 2, 0).reshape(b, a)


def _backward(num_contract, residuals, grad_out):
    lhs, rhs = residuals
    lhs2, rhs2 = _as_matrices(lhs, rhs, num_contract)
    rhs2 = _fresh_rounding(rhs2, lhs.dtype)
    grad2 = grad_out.reshape(lhs2.shape[0], rhs2.shape[1]).astype(lhs.dtype)
    grad_lhs = jnp.dot(grad2, transpose_row_major(rhs2),  # dX [M, K] = dY [M, N] . W^T [N, K]
                       preferred_element_type=jnp.float32).astype(lhs.dtype)
    grad_rhs = jnp.dot(transpose_row_major(lhs2), grad2,  # dW [K, N] = X^T [K, M] . dY [M, N]
                       preferred_element_type=jnp.float32).astype(rhs.dtype)
    return grad_lhs.reshape(lhs.shape), grad_rhs.reshape(rhs.shape)


_matmul_f32_accumulate.defvjp(_forward, _backward)


@jax.custom_vjp
def _matmul_transposed_f32_accumulate(lhs: Array, rhs: Array) -> Array:
    """lhs [..., K] . rhs[N, K]^T -> [..., N]: as _matmul_f32_accumulate, for a weight stored
    transposed (the tied MLM decoder reads the [vocab, hidden] word-embedding table)."""
    lhs2 = lhs.reshape(-1, lhs.shape[-1])
    out = jnp.dot(lhs2, transpose_row_major(rhs.astype(lhs.dtype)),
                  preferred_element_type=jnp.float32)
    return out.astype(lhs.dtype).reshape(lhs.shape[:-1] + rhs.shape[:1])


def _transposed_forward(lhs, rhs):
    return _matmul_transposed_f32_accumulate(lhs, rhs), (lhs, rhs)


def _transposed_backward(residuals, grad_out):
    lhs, rhs = residuals
    lhs2 = lhs.reshape(-1, lhs.shape[-1])
    grad2 = grad_out.reshape(lhs2.shape[0], rhs.shape[0]).astype(lhs.dtype)
    grad_lhs = jnp.dot(grad2, _fresh_rounding(rhs, lhs.dtype),  # dX [M, K] = dY [M, N] . W [N, K]
                       preferred_element_type=jnp.float32).astype(lhs.dtype)
    grad_rhs = jnp.dot(transpose_row_major(grad2), lhs2,  # dW [N, K] = dY^T [N, M] . X [M, K]
                       preferred_element_type=jnp.float32).astype(rhs.dtype)
    return grad_lhs.reshape(lhs.shape), grad_rhs


_matmul_transposed_f32_accumulate.defvjp(_transposed_forward, _transposed_backward)


def matmul_transposed(x: Array, weight: Array, dtype: jnp.dtype) -> Array:
    """x [..., K] . weight [N, K]^T -> [..., N] in compute `dtype` (weight kept in its layout)."""
    dtype = jnp.dtype(dtype)
    x = x.astype(dtype)
    if dtype == jnp.float32:
        return jax.lax.dot_general(x, weight.astype(dtype), (((x.ndim - 1,), (1,)), ((), ())))
    return _matmul_transposed_f32_accumulate(x, weight)


def matmul(x: Array, weight: Array, num_contract: int, dtype: jnp.dtype) -> Array:
    """x [..., K...] . weight [K..., N...] -> [..., N...] in compute `dtype`.

    The last `num_contract` dims of x meet the first `num_contract` dims of weight.
    """
    dtype = jnp.dtype(dtype)
    x = x.astype(dtype)
    if dtype == jnp.float32:
        dims = ((tuple(range(x.ndim - num_contract, x.ndim)), tuple(range(num_contract))), ((), ()))
        return jax.lax.dot_general(x, weight.astype(dtype), dims)
    return _matmul_f32_accumulate(x, weight, num_contract)


class Dense(nn.Module):
    """y = x . kernel + bias over the trailing `num_contract` dims of x.

    x: [..., in...] -> [..., features...]; kernel: [in..., features...]; bias: [features...].
    The parameter names (`kernel`, `bias`) and shapes are those of flax's Dense/DenseGeneral.
    """

    features: Sequence[int]
    num_contract: int
    kernel_init: Callable
    bias_init: Callable
    dtype: str = "float32"
    param_dtype: str = "float32"

    @nn.compact
    def __call__(self, x: Array) -> Array:
        features = tuple(self.features)
        kernel = self.param("kernel", self.kernel_init,
                            tuple(x.shape[x.ndim - self.num_contract:]) + features, self.param_dtype)
        bias = self.param("bias", self.bias_init, features, self.param_dtype)
        y = matmul(x, kernel, self.num_contract, self.dtype)
        return y + bias.astype(y.dtype)
