"""bf16 matmuls with fp32 accumulation: values and gradients against fp32, and the model uses them."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax import BertConfig, BertForPreTraining
from bert_jax.model.precision import dot_general_for, mixed_dot_general

DENSE = (((2,), (0,)), ((), ()))          # [b, s, e] . [e, f]
TWO_CONTRACTED = (((2, 3), (0, 1)), ((), ()))  # [b, s, n, h] . [n, h, e]


def _dot_signatures(stablehlo: str) -> list[tuple[str, str]]:
    """(operand types, result type) of every dot_general without batch dims (i.e. every dense
    matmul, not attention's per-head products) in a StableHLO module."""
    out = []
    for line in stablehlo.splitlines():
        if "stablehlo.dot_general" in line and "batching_dims" not in line:
            operands, result = line.rsplit(" : ", 1)[1].split(" -> ")
            out.append((operands, result))
    return out


@pytest.mark.parametrize("lhs_shape,rhs_shape,dims", [
    ((3, 5, 32), (32, 24), DENSE),
    ((3, 5, 4, 8), (4, 8, 16), TWO_CONTRACTED),
])
def test_values_and_gradients_match_fp32(lhs_shape, rhs_shape, dims):
    k1, k2 = jax.random.split(jax.random.key(0))
    lhs, rhs = jax.random.normal(k1, lhs_shape), jax.random.normal(k2, rhs_shape)

    def mixed(lhs, rhs):
        out = mixed_dot_general(lhs.astype(jnp.bfloat16), rhs.astype(jnp.bfloat16), dims)
        assert out.dtype == jnp.bfloat16
        return out.astype(jnp.float32)

    def exact(lhs, rhs):
        return jax.lax.dot_general(lhs, rhs, dims, precision="highest")

    np.testing.assert_allclose(mixed(lhs, rhs), exact(lhs, rhs), rtol=0.02, atol=0.05)
    cotangent = jax.random.normal(jax.random.key(1), exact(lhs, rhs).shape)
    grads_mixed = jax.vjp(mixed, lhs, rhs)[1](cotangent)
    grads_exact = jax.vjp(exact, lhs, rhs)[1](cotangent)
    for got, want in zip(grads_mixed, grads_exact):
        assert got.shape == want.shape and got.dtype == want.dtype
        relative = float(jnp.max(jnp.abs(got - want)) / jnp.max(jnp.abs(want)))
        assert relative < 0.01, relative  # bf16 operands: ~3 significant digits


def test_gradient_matmuls_take_bf16_operands():
    """The backward dots must multiply bf16 by bf16 (the fast path), not the fp32 cotangent."""
    lhs = jnp.ones((4, 16), jnp.bfloat16)
    rhs = jnp.ones((16, 8), jnp.bfloat16)
    loss = lambda a, b: mixed_dot_general(a, b, (((1,), (0,)), ((), ()))).astype(jnp.float32).sum()
    hlo = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(lhs, rhs).as_text()
    signatures = _dot_signatures(hlo)
    assert len(signatures) == 2
    assert all(operands.count("bf16") == 2 and result.endswith("xf32>")
               for operands, result in signatures), signatures


def test_model_dense_layers_use_fp32_accumulation_only_in_reduced_precision():
    assert dot_general_for("float32") is None
    assert dot_general_for("bfloat16") is mixed_dot_general
    cfg = BertConfig.preset("tiny", dtype="bfloat16", vocab_size=100)
    model = BertForPreTraining(cfg, with_nsp=False)
    ids = jnp.ones((2, 8), jnp.int32)
    positions = jnp.zeros((2, 2), jnp.int32)
    params = model.init(jax.random.key(0), ids, positions)["params"]
    hlo = jax.jit(lambda p: model.apply({"params": p}, ids, positions).mlm_logits).lower(
        params).as_text()
    signatures = _dot_signatures(hlo)
    # Every dense matmul of the model (projections, FFN, MLM transform, the tied decoder) takes
    # bf16 operands and accumulates in fp32.
    assert len(signatures) == 2 * 6 + 2  # 2 layers x (Q, K, V, output, 2 FFN) + transform + decoder
    assert all(operands.count("bf16") == 2 and result.endswith("xf32>")
               for operands, result in signatures), signatures
