"""Dense matmuls for reduced-precision compute: bf16 (or fp16) operands, fp32 accumulation.

With `BertConfig.dtype="bfloat16"` activations and weights enter each matmul in bf16, the products
are summed in fp32 (`preferred_element_type=float32`) and the result is rounded to bf16 once.
Accuracy: the fp32 sum is what GPUs and TPUs do anyway. Speed: on CPUs with bf16 dot-product
instructions XLA:CPU runs bf16 x bf16 -> fp32 on its YNNPACK kernel at about twice its fp32 rate
(bf16 in and bf16 out it widens to fp32 operands); the figures are in docs/history.md.

The matmuls have their own VJP, for two reasons:
- JAX would transpose a dot with an fp32 output into dots that take the fp32 cotangent as an
  operand, so the gradient matmuls would run in fp32; here they multiply bf16 by bf16 as well.
- The weight enters in its storage dtype (fp32) and is rounded to bf16 inside, so the backward
  pass keeps the fp32 parameter itself as its residual (no second, bf16 copy of every weight
  alive through the step) and the weight gradient comes out in fp32 straight from the fp32
  accumulator (no bf16 rounding of gradients).
In fp32 compute they are plain lax.dot_general, bit for bit what flax's Dense does.

Two layouts of the weight share that VJP: `matmul` reads a kernel W [K, N]; `matmul_transposed`
reads a table T [N, K] as T^T (the tied MLM decoder and its [vocab, hidden] word embeddings).
Every product is written row-major, [M, K] x [K, N]: on CPU, XLA's fast dot kernel (YNNPACK)
takes only that form, and a dot with a transposed operand (which XLA folds into the dot's
dimension numbers or into a column-major layout) falls back to the generic kernel with its bf16
operands widened to fp32, at about half the speed. So wherever a product needs an operand
transposed (dX = dY W^T, dW = X^T dY, the decoder's X T^T and dT = dY^T X),
`transpose_row_major` writes that operand out transposed first; it costs one pass over a weight
or an activation, small next to the product. Off CPU the plain transpose is used: GPU and TPU
matmuls read transposed operands natively.
"""

from __future__ import annotations

import functools
from typing import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.runtime import platform

Array = jax.Array


def transpose_row_major(x: Array, row_major: bool | None = None) -> Array:
    """x [a, b] -> x.T [b, a], on CPU as a materialised row-major array (see the module doc).

    A plain transpose is free in XLA: it becomes a layout change or is folded into the consuming
    dot. Going through the 3-D view [a, b/2, 2] -> [b/2, 2, a] is not a relayout of the 2-D array,
    so XLA writes the transposed values out, and the dot that reads them is row-major.
    (On a CPU device mesh, where a shard of dim 1 has odd width, e.g. vocab 30522 split over
    tensor=2, the 3-D view costs extra collectives; values are unaffected. Meshes of CPU devices
    are for tests; GPU/TPU take the plain transpose.)
    row_major: materialise the transpose (default: when the program is for a CPU,
    `bert_jax.runtime.platform.current()`).
    """
    a, b = x.shape
    if row_major is None:
        row_major = platform.current() == "cpu"
    if not row_major or b % 2:
        return x.T
    return x.reshape(a, b // 2, 2).transpose(1, 2, 0).reshape(b, a)


def _fresh_rounding(weight: Array, dtype: jnp.dtype) -> Array:
    """weight.astype(dtype), computed anew where the backward pass needs it.

    The forward pass rounds the same weight; XLA would reuse that rounded copy and so keep a
    low-precision copy of every weight alive from the forward pass to the backward pass. The
    barrier hides the equality, so the copy lives only as long as its matmul.
    """
    return jax.lax.optimization_barrier(weight).astype(dtype)


def _product(a: Array, b: Array, out_dtype: jnp.dtype) -> Array:
    """a [M, K] . b [K, N], both row-major, summed in fp32 and rounded to out_dtype."""
    return jnp.dot(a, b, preferred_element_type=jnp.float32).astype(out_dtype)


def _as_matrices(lhs: Array, rhs: Array, num_contract: int,
                 transposed: bool) -> tuple[Array, Array]:
    """lhs [..., K...] -> [M, K]; rhs [K..., N...] -> [K, N], transposed: [N..., K...] -> [N, K]."""
    k = int(np.prod(lhs.shape[lhs.ndim - num_contract:]))
    return lhs.reshape(-1, k), (rhs.reshape(-1, k) if transposed else rhs.reshape(k, -1))


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4))
def _matmul_f32_accumulate(lhs: Array, rhs: Array, num_contract: int, transposed: bool,
                           row_major: bool) -> Array:
    """The last `num_contract` dims of lhs against rhs's first (`transposed`: last) ones: operands
    in lhs.dtype, fp32 sums, result rounded to lhs.dtype. rhs may be stored in a wider dtype (it is
    rounded inside). row_major: transposed operands materialised (transpose_row_major).

    row_major is an argument, not read inside, because JAX caches the traces of a custom_vjp's
    rules by their arguments: a rule traced for one platform must not be reused for another."""
    x, w = _as_matrices(lhs, rhs, num_contract, transposed)
    w = w.astype(lhs.dtype)
    out = _product(x, transpose_row_major(w, row_major) if transposed else w, lhs.dtype)
    features = rhs.shape[:rhs.ndim - num_contract] if transposed else rhs.shape[num_contract:]
    return out.reshape(lhs.shape[:lhs.ndim - num_contract] + features)


def _forward(lhs, rhs, num_contract, transposed, row_major):
    return _matmul_f32_accumulate(lhs, rhs, num_contract, transposed, row_major), (lhs, rhs)


def _backward(num_contract, transposed, row_major, residuals, grad_out):
    lhs, rhs = residuals
    x, w = _as_matrices(lhs, rhs, num_contract, transposed)
    w = _fresh_rounding(w, lhs.dtype)
    dy = grad_out.reshape(x.shape[0], -1).astype(lhs.dtype)
    # dX [M, K] = dY [M, N] . W^T [N, K], where W^T is the stored table T itself when transposed.
    grad_lhs = _product(dy, w if transposed else transpose_row_major(w, row_major), lhs.dtype)
    # The weight's gradient in its stored layout: dW [K, N] = X^T . dY, or dT [N, K] = dY^T . X.
    first, second = (dy, x) if transposed else (x, dy)
    grad_rhs = _product(transpose_row_major(first, row_major), second, rhs.dtype)
    return grad_lhs.reshape(lhs.shape), grad_rhs.reshape(rhs.shape)


_matmul_f32_accumulate.defvjp(_forward, _backward)


def _matmul(x: Array, weight: Array, num_contract: int, transposed: bool,
            dtype: jnp.dtype) -> Array:
    dtype = jnp.dtype(dtype)
    x = x.astype(dtype)
    if dtype == jnp.float32:
        x_dims = tuple(range(x.ndim - num_contract, x.ndim))
        w_dims = (tuple(range(weight.ndim - num_contract, weight.ndim)) if transposed
                  else tuple(range(num_contract)))
        return jax.lax.dot_general(x, weight.astype(dtype), ((x_dims, w_dims), ((), ())))
    return _matmul_f32_accumulate(x, weight, num_contract, transposed,
                                  platform.current() == "cpu")


def matmul(x: Array, weight: Array, num_contract: int, dtype: jnp.dtype) -> Array:
    """x [..., K...] . weight [K..., N...] -> [..., N...] in compute `dtype`.

    The last `num_contract` dims of x meet the first `num_contract` dims of weight.
    """
    return _matmul(x, weight, num_contract, False, dtype)


def matmul_transposed(x: Array, weight: Array, dtype: jnp.dtype) -> Array:
    """x [..., K] . weight [N, K]^T -> [..., N] in compute `dtype` (weight kept in its layout)."""
    return _matmul(x, weight, 1, True, dtype)


class Dense(nn.Module):
    """y = x . kernel + bias over the trailing `num_contract` dims of x (no bias: use_bias=False).

    x: [..., in...] -> [..., features...]; kernel: [in..., features...]; bias: [features...].
    The parameter names (`kernel`, `bias`) and shapes are those of flax's Dense/DenseGeneral.
    """

    features: Sequence[int]
    num_contract: int
    kernel_init: Callable
    bias_init: Callable
    dtype: str = "float32"
    param_dtype: str = "float32"
    use_bias: bool = True

    @nn.compact
    def __call__(self, x: Array) -> Array:
        features = tuple(self.features)
        kernel_shape = tuple(x.shape[x.ndim - self.num_contract:]) + features
        kernel = self.param("kernel", self.kernel_init, kernel_shape, self.param_dtype)
        y = matmul(x, kernel, self.num_contract, self.dtype)
        if not self.use_bias:
            return y
        bias = self.param("bias", self.bias_init, features, self.param_dtype)
        return y + bias.astype(y.dtype)
