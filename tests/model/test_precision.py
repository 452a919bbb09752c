"""bf16 matmuls with fp32 accumulation: values and gradients against fp32, and the model uses
them."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax import BertConfig, BertForPreTraining
from bert_jax.model.precision import matmul, matmul_transposed, transpose_row_major


def _dot_signatures(stablehlo: str) -> list[tuple[str, str]]:
    """(operand types, result type) of every dot_general without batch dims (i.e. every dense
    matmul, not attention's per-head products) in a StableHLO module."""
    out = []
    for line in stablehlo.splitlines():
        if "stablehlo.dot_general" in line and "batching_dims" not in line:
            operands, result = line.rsplit(" : ", 1)[1].split(" -> ")
            out.append((operands, result))
    return out


@pytest.mark.parametrize("lhs_shape,rhs_shape,num_contract", [
    ((3, 5, 32), (32, 24), 1),          # [b, s, e] . [e, f]
    ((3, 5, 4, 8), (4, 8, 16), 2),      # [b, s, n, h] . [n, h, e]
    ((3, 5, 32), (32, 4, 8), 1),        # [b, s, e] . [e, n, h]
])
def test_values_and_gradients_match_fp32(lhs_shape, rhs_shape, num_contract):
    k1, k2 = jax.random.split(jax.random.key(0))
    lhs, rhs = jax.random.normal(k1, lhs_shape), jax.random.normal(k2, rhs_shape)
    dims = ((tuple(range(len(lhs_shape) - num_contract, len(lhs_shape))),
             tuple(range(num_contract))), ((), ()))

    def mixed(lhs, rhs):
        out = matmul(lhs, rhs, num_contract, jnp.bfloat16)
        assert out.dtype == jnp.bfloat16
        return out.astype(jnp.float32)

    def exact(lhs, rhs):
        return jax.lax.dot_general(lhs, rhs, dims, precision="highest")

    # fp32 compute is the plain dot, bit for bit.
    np.testing.assert_array_equal(matmul(lhs, rhs, num_contract, jnp.float32),
                                  jax.lax.dot_general(lhs, rhs, dims))

    np.testing.assert_allclose(mixed(lhs, rhs), exact(lhs, rhs), rtol=0.02, atol=0.05)
    cotangent = jax.random.normal(jax.random.key(1), exact(lhs, rhs).shape)
    grads_mixed = jax.vjp(mixed, lhs, rhs)[1](cotangent)
    grads_exact = jax.vjp(exact, lhs, rhs)[1](cotangent)
    for got, want in zip(grads_mixed, grads_exact):
        # fp32 in, fp32 gradient out: the weight's gradient is never rounded to bf16.
        assert got.shape == want.shape and got.dtype == want.dtype == jnp.float32
        relative = float(jnp.max(jnp.abs(got - want)) / jnp.max(jnp.abs(want)))
        assert relative < 0.01, relative  # bf16 operands: ~3 significant digits


def test_transposed_weight_matmul_matches_fp32():
    """The tied decoder's x . table^T: values and fp32 gradients as the exact product's."""
    k1, k2, k3 = jax.random.split(jax.random.key(2), 3)
    x, table = jax.random.normal(k1, (3, 5, 32)), jax.random.normal(k2, (40, 32))
    exact = lambda x, t: jnp.einsum("bsk,nk->bsn", x, t, precision="highest")
    mixed = lambda x, t: matmul_transposed(x, t, jnp.bfloat16).astype(jnp.float32)
    np.testing.assert_array_equal(matmul_transposed(x, table, jnp.float32),
                                  jnp.einsum("bsk,nk->bsn", x, table))
    np.testing.assert_allclose(mixed(x, table), exact(x, table), rtol=0.02, atol=0.05)
    cotangent = jax.random.normal(k3, (3, 5, 40))
    for got, want in zip(jax.vjp(mixed, x, table)[1](cotangent),
                         jax.vjp(exact, x, table)[1](cotangent)):
        assert got.shape == want.shape and got.dtype == jnp.float32
        assert float(jnp.max(jnp.abs(got - want)) / jnp.max(jnp.abs(want))) < 0.01


@pytest.mark.parametrize("shape", [(6, 4), (3, 8), (5, 7)])
def test_transpose_row_major_is_the_transpose(shape):
    x = jnp.arange(np.prod(shape), dtype=jnp.float32).reshape(shape)
    np.testing.assert_array_equal(jax.jit(transpose_row_major)(x), x.T)


def test_gradient_matmuls_take_bf16_operands():
    """The backward dots must multiply bf16 by bf16 (the fast path), not the fp32 cotangent."""
    lhs = jnp.ones((4, 16), jnp.bfloat16)
    rhs = jnp.ones((16, 8), jnp.float32)  # a weight stored in fp32
    loss = lambda a, b: matmul(a, b, 1, jnp.bfloat16).astype(jnp.float32).sum()
    hlo = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(lhs, rhs).as_text()
    signatures = _dot_signatures(hlo)
    assert len(signatures) == 2
    assert all(operands.count("bf16") == 2 and result.endswith("xf32>")
               for operands, result in signatures), signatures


def _tiny_bf16_model():
    """A 2-layer BertForPreTraining computing in bf16, its params, ids [2, 8], positions [2, 2]."""
    cfg = BertConfig.preset("tiny", dtype="bfloat16", vocab_size=100)
    model = BertForPreTraining(cfg, with_nsp=False)
    ids = jnp.ones((2, 8), jnp.int32)
    positions = jnp.zeros((2, 2), jnp.int32)
    return model, model.init(jax.random.key(0), ids, positions)["params"], ids, positions


def test_model_dense_layers_use_fp32_accumulation_in_bf16():
    model, params, ids, positions = _tiny_bf16_model()
    hlo = jax.jit(lambda p: model.apply({"params": p}, ids, positions).mlm_logits).lower(
        params).as_text()
    signatures = _dot_signatures(hlo)
    # Every dense matmul of the model (projections, FFN, MLM transform, the tied decoder) takes
    # bf16 operands and accumulates in fp32.
    assert len(signatures) == 2 * 6 + 2  # 2 layers x (Q, K, V, output, 2 FFN) + transform + decoder
    assert all(operands.count("bf16") == 2 and result.endswith("xf32>")
               for operands, result in signatures), signatures


def _compiled_dot_operand_types(hlo: str, batched: bool = False) -> list[tuple[str, str]]:
    """Operand element types of every dot (batched: the per-head ones) in compiled HLO text.

    Dots sit inside fusions there, their operands being the fusion's parameters, so the types
    come from the computations' signatures and the instructions' definitions.
    """
    types = {}
    for name, shape in re.findall(r"([\w.\-]+): (\w+)\[[\d,]*\]", hlo):  # computation params
        types.setdefault(name, shape)
    for name, shape in re.findall(r"%([\w.\-]+) = (\w+)\[[\d,]*\]", hlo):
        types.setdefault(name, shape)
    out = []
    for line in hlo.splitlines():
        match = re.search(r" dot\(%([\w.\-]+), %([\w.\-]+)\)", line)
        if match and batched == ("lhs_batch_dims" in line):
            out.append((types[match.group(1)], types[match.group(2)]))
    return out


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="checks XLA:CPU's compiled dots")
def test_compiled_train_step_keeps_every_dense_dot_in_bf16_on_cpu():
    """XLA:CPU widens a bf16 dot with a transposed operand to fp32 (half the speed); the
    gradient matmuls transpose row-major first, so forward and backward stay bf16 x bf16."""
    model, params, ids, positions = _tiny_bf16_model()

    def loss(p):  # a loss that needs the logits' values, so the forward decoder dot stays
        logits = model.apply({"params": p}, ids, positions).mlm_logits.astype(jnp.float32)
        return jnp.square(logits).sum()

    hlo = jax.jit(jax.grad(loss)).lower(params).compile().as_text()
    operand_types = _compiled_dot_operand_types(hlo)
    # Forward 14 dense dots (as above), backward two per dense dot.
    assert len(operand_types) == 3 * 14, operand_types
    assert all(types == ("bf16", "bf16") for types in operand_types), operand_types


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="checks XLA:CPU's compiled dots")
def test_compiled_forward_pass_keeps_attention_products_in_bf16_on_cpu():
    model, params, ids, positions = _tiny_bf16_model()
    hlo = jax.jit(lambda p: model.apply({"params": p}, ids, positions).mlm_logits).lower(
        params).compile().as_text()
    per_head = _compiled_dot_operand_types(hlo, batched=True)
    assert len(per_head) == 2 * 2  # 2 layers x (scores, probabilities x values)
    assert all(types == ("bf16", "bf16") for types in per_head), per_head
