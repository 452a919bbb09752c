"""The Flax model on its own: parameter counts and names, masks, packing, dropout, heads, remat.

Parity with the reference implementation (transformers) is in test_convert_hf.py.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax import (
    BertConfig,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertModel,
)
from bert_jax.model.encoder import positions_from_segments

from random_params import randomise

TINY = BertConfig.preset("tiny", vocab_size=211, max_position_embeddings=64)


def count(tree) -> int:
    return sum(int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(tree))


def init_plain(model, *args, seed=0, eager=False, **kwargs):
    """The unboxed params of model.init, initialised as one compiled program (op by op, each
    distinct operation would be compiled, and written to the session's cache, on its own;
    `eager` where the operations are shared with other models of the same test)."""
    def init(key, *a):
        return nn.meta.unbox(model.init(key, *a, **kwargs)["params"])
    return (init if eager else jax.jit(init))(jax.random.key(seed), *args)


def random_ids(seed, shape, vocab=TINY.vocab_size):
    return np.random.default_rng(seed).integers(1, vocab, shape, dtype=np.int32)


def compiled(model):
    """model.apply as one compiled program per input shape (`deterministic` a Python bool)."""
    return jax.jit(model.apply, static_argnames=("deterministic",))


@pytest.mark.parametrize("preset, expected", [("base", 109_482_240), ("large", 335_141_888)])
@pytest.mark.parametrize("with_pooler", [True, False])
def test_parameter_count_of_the_model_equals_the_formula(preset, expected, with_pooler):
    cfg = BertConfig.preset(preset)
    ids = jnp.zeros((1, 8), jnp.int32)
    shapes = jax.eval_shape(BertModel(cfg, add_pooler=with_pooler).init, jax.random.key(0), ids)
    pooler = cfg.hidden_size * cfg.hidden_size + cfg.hidden_size
    assert count(shapes["params"]) == expected - (0 if with_pooler else pooler)
    assert count(shapes["params"]) == cfg.num_params(with_pooler=with_pooler)


def test_parameter_tree_names_shapes_and_logical_axes():
    cfg = TINY
    d, n, h, f = cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim, cfg.intermediate_size
    ids = jnp.zeros((1, 4), jnp.int32)
    boxed = jax.eval_shape(BertForPreTraining(cfg).init, jax.random.key(0), ids,
                           jnp.zeros((1, 2), jnp.int32))["params"]
    shapes = {"/".join(k.key for k in path): tuple(v.shape)
              for path, v in jax.tree_util.tree_leaves_with_path(nn.meta.unbox(boxed))}
    layer = "bert/encoder/layer_1"
    expected = {
        "bert/embeddings/word_embeddings/embedding": (cfg.vocab_size, d),
        "bert/embeddings/position_embeddings/embedding": (cfg.max_position_embeddings, d),
        "bert/embeddings/token_type_embeddings/embedding": (2, d),
        "bert/embeddings/layer_norm/scale": (d,),
        f"{layer}/attention/query/kernel": (d, n, h),
        f"{layer}/attention/value/bias": (n, h),
        f"{layer}/attention/output/kernel": (n, h, d),
        f"{layer}/attention/output/bias": (d,),
        f"{layer}/attention_layer_norm/bias": (d,),
        f"{layer}/feed_forward/intermediate/kernel": (d, f),
        f"{layer}/feed_forward/output/kernel": (f, d),
        f"{layer}/output_layer_norm/scale": (d,),
        "bert/pooler/dense/kernel": (d, d),
        "mlm/transform/kernel": (d, d),
        "mlm/transform_layer_norm/scale": (d,),
        "mlm/output_bias": (cfg.vocab_size,),
        "nsp/dense/kernel": (d, 2),
    }
    assert {k: shapes.get(k) for k in expected} == expected
    # Logical axes travel with the parameters, for the sharding rules.
    query = boxed["bert"]["encoder"]["layer_0"]["attention"]["query"]["kernel"]
    assert query.names == ("embed", "heads", "kv")
    assert boxed["bert"]["embeddings"]["word_embeddings"]["embedding"].names == ("vocab", "embed")


def test_positions_restart_in_every_segment():
    segments = jnp.array([[1, 1, 1, 2, 2, 3, 0, 0]])
    assert positions_from_segments(segments).tolist() == [[0, 1, 2, 0, 1, 0, 0, 1]]


def test_padding_does_not_change_real_tokens():
    model = BertModel(TINY)
    apply = compiled(model)
    ids = random_ids(0, (1, 7))
    params = randomise(init_plain(model, ids))
    alone = apply({"params": params}, ids)
    padded_ids = jnp.concatenate([ids, random_ids(1, (1, 5))], axis=1)  # garbage behind the mask
    mask = jnp.array([[1] * 7 + [0] * 5])
    padded = apply({"params": params}, padded_ids, attention_mask=mask)
    np.testing.assert_allclose(padded.sequence_output[:, :7], alone.sequence_output, atol=1e-5)
    np.testing.assert_allclose(padded.pooled_output, alone.pooled_output, atol=1e-5)


def test_packed_sequences_equal_each_sequence_alone():
    model = BertModel(TINY)
    apply = compiled(model)
    first, second = random_ids(2, (1, 9)), random_ids(3, (1, 6))
    types_first = jnp.array([[0] * 5 + [1] * 4])
    types_second = jnp.array([[0] * 3 + [1] * 3])
    params = randomise(init_plain(model, first))
    alone_first = apply({"params": params}, first, types_first).sequence_output
    alone_second = apply({"params": params}, second, types_second).sequence_output

    pad = 4
    packed_ids = jnp.concatenate([first, second, jnp.zeros((1, pad), jnp.int32)], axis=1)
    packed_types = jnp.concatenate([types_first, types_second, jnp.zeros((1, pad), jnp.int32)],
                                   axis=1)
    segments = jnp.array([[1] * 9 + [2] * 6 + [0] * pad])
    packed = apply({"params": params}, packed_ids, packed_types,
                         segment_ids=segments).sequence_output
    np.testing.assert_allclose(packed[:, :9], alone_first, atol=1e-5)
    np.testing.assert_allclose(packed[:, 9:15], alone_second, atol=1e-5)
    assert np.isfinite(np.asarray(packed)).all()  # padding rows attend to nothing, yet stay finite

    # Explicit position_ids that restart per segment give the same result.
    positions = jnp.array([list(range(9)) + list(range(6)) + [0] * pad])
    explicit = apply({"params": params}, packed_ids, packed_types, segment_ids=segments,
                           position_ids=positions).sequence_output
    np.testing.assert_allclose(explicit[:, :15], packed[:, :15], atol=1e-6)


def test_attention_does_not_leak_across_segments():
    model = BertModel(TINY)
    apply = compiled(model)
    ids = random_ids(4, (2, 12))
    segments = jnp.array([[1] * 5 + [2] * 7, [1] * 8 + [2] * 2 + [0] * 2])
    params = randomise(init_plain(model, ids))
    before = apply({"params": params}, ids, segment_ids=segments).sequence_output
    # Change every token of the second segment (and the padding): the first must not move at all.
    changed_ids = jnp.where(segments == 1, ids, (ids + 17) % TINY.vocab_size)
    after = apply({"params": params}, changed_ids, segment_ids=segments).sequence_output
    for row, length in enumerate((5, 8)):
        np.testing.assert_allclose(after[row, :length], before[row, :length], atol=1e-6)
        assert np.abs(after[row, length:] - before[row, length:]).max() > 1e-2  # it did change


def test_dropout_active_only_when_not_deterministic():
    model = BertModel(TINY)  # dropout 0.1 on hidden states and attention probabilities
    apply = compiled(model)
    ids = random_ids(5, (2, 10))
    params = init_plain(model, ids)

    def run(deterministic, seed=0):
        return apply({"params": params}, ids, deterministic=deterministic,
                           rngs={"dropout": jax.random.key(seed)}).sequence_output

    np.testing.assert_array_equal(run(True, 0), run(True, 1))  # no randomness when deterministic
    np.testing.assert_array_equal(run(False, 0), run(False, 0))  # the same key, the same masks
    assert np.abs(run(False, 0) - run(True)).max() > 1e-2
    assert np.abs(run(False, 0) - run(False, 1)).max() > 1e-2
    with pytest.raises(Exception, match="dropout"):  # no silent fallback without an rng
        model.apply({"params": params}, ids, deterministic=False)


def test_dropout_off_in_config_gives_the_deterministic_output():
    cfg = TINY.replace(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = BertModel(cfg)
    apply = compiled(model)
    ids = random_ids(6, (2, 10))
    params = init_plain(model, ids)
    np.testing.assert_allclose(
        apply({"params": params}, ids, deterministic=False).sequence_output,
        apply({"params": params}, ids, deterministic=True).sequence_output, atol=1e-6)


def test_masked_lm_logits_at_masked_positions_only():
    model = BertForPreTraining(TINY)
    apply = compiled(model)
    ids = random_ids(7, (2, 10))
    every_position = jnp.broadcast_to(jnp.arange(10), (2, 10))
    params = randomise(init_plain(model, ids, every_position))
    full = apply({"params": params}, ids, every_position)
    positions = jnp.array([[3, 0, 9], [1, 1, 5]])
    some = apply({"params": params}, ids, positions)
    assert some.mlm_logits.shape == (2, 3, TINY.vocab_size)
    assert full.nsp_logits.shape == (2, 2)
    expected = jnp.take_along_axis(full.mlm_logits, positions[:, :, None], axis=1)
    np.testing.assert_allclose(some.mlm_logits, expected, atol=1e-5)
    np.testing.assert_allclose(some.nsp_logits, full.nsp_logits, atol=1e-6)

    # The decoder is tied: logits are the transformed hidden state against the word embeddings.
    bert = BertModel(TINY)
    hidden = compiled(bert)({"params": params["bert"]}, ids).sequence_output[:, 3]
    mlm = params["mlm"]
    transformed = jax.nn.gelu(hidden @ mlm["transform"]["kernel"] + mlm["transform"]["bias"],
                              approximate=False)
    mean = transformed.mean(-1, keepdims=True)
    var = ((transformed - mean) ** 2).mean(-1, keepdims=True)
    normed = (transformed - mean) / jnp.sqrt(var + TINY.layer_norm_eps)
    normed = normed * mlm["transform_layer_norm"]["scale"] + mlm["transform_layer_norm"]["bias"]
    word_embeddings = params["bert"]["embeddings"]["word_embeddings"]["embedding"]
    logits = normed @ word_embeddings.T + mlm["output_bias"]
    np.testing.assert_allclose(some.mlm_logits[0, 0], logits[0], atol=1e-4)


def test_pretraining_without_nsp_has_no_pooler():
    model = BertForPreTraining(TINY, with_nsp=False)
    apply = compiled(model)
    ids = random_ids(8, (1, 6))
    params = init_plain(model, ids, jnp.zeros((1, 2), jnp.int32))
    assert "pooler" not in params["bert"] and "nsp" not in params
    out = apply({"params": params}, ids, jnp.zeros((1, 2), jnp.int32))
    assert out.nsp_logits is None and out.mlm_logits.shape == (1, 2, TINY.vocab_size)


def test_fine_tuning_heads_shapes():
    ids = random_ids(9, (3, 11))
    for model, expected in [(BertForSequenceClassification(TINY, 5), [(3, 5)]),
                            (BertForSequenceClassification(TINY, 1), [(3, 1)]),
                            (BertForTokenClassification(TINY, 7), [(3, 11, 7)]),
                            (BertForQuestionAnswering(TINY), [(3, 11), (3, 11)])]:
        params = init_plain(model, ids, eager=True)  # the encoder's operations are shared
        out = model.apply({"params": params}, ids)
        assert [o.shape for o in (out if isinstance(out, tuple) else [out])] == expected


@pytest.mark.parametrize("policy", ["full", "dots_no_batch"])
def test_rematerialisation_changes_neither_outputs_nor_gradients(policy):
    ids = random_ids(10, (2, 8))
    plain = BertModel(TINY)
    params = randomise(init_plain(plain, ids))

    def loss(model, p):
        return jnp.sum(model.apply({"params": p}, ids).sequence_output ** 2)

    remat = BertModel(TINY.replace(remat_policy=policy))
    loss_plain, grads_plain = jax.jit(jax.value_and_grad(lambda p: loss(plain, p)))(params)
    loss_remat, grads_remat = jax.jit(jax.value_and_grad(lambda p: loss(remat, p)))(params)
    np.testing.assert_allclose(loss_remat, loss_plain, rtol=1e-6)
    for a, b in zip(jax.tree.leaves(grads_remat), jax.tree.leaves(grads_plain)):
        np.testing.assert_allclose(a, b, atol=1e-4, rtol=1e-4)


def test_bad_inputs_are_refused():
    model = BertModel(TINY)
    params = init_plain(model, jnp.zeros((1, 4), jnp.int32))
    with pytest.raises(ValueError, match=r"input_ids must be \[batch, seq\]"):
        model.apply({"params": params}, jnp.zeros((4,), jnp.int32))
    with pytest.raises(ValueError, match="exceeds max_position_embeddings=64"):
        model.apply({"params": params}, jnp.zeros((1, 65), jnp.int32))
    with pytest.raises(ValueError, match="token_type_ids must be integers"):
        model.apply({"params": params}, jnp.zeros((1, 4), jnp.int32), jnp.zeros((1, 4)))


def test_one_row_token_type_table_serves_every_type_id():
    """type_vocab_size=1 (RoBERTa-style checkpoints): the one row, whatever the id, as nn.Embed."""
    model = BertModel(TINY.replace(type_vocab_size=1))
    apply = compiled(model)
    ids = random_ids(3, (2, 6))
    params = init_plain(model, ids)
    zeros = apply({"params": params}, ids, jnp.zeros_like(ids)).sequence_output
    ones = apply({"params": params}, ids, jnp.ones_like(ids)).sequence_output
    assert bool(jnp.all(jnp.isfinite(ones)))
    np.testing.assert_array_equal(ones, zeros)


def test_bf16_compute_trains_with_fp32_parameters():
    cfg = TINY.replace(dtype="bfloat16")
    model = BertForPreTraining(cfg)
    ids, positions = random_ids(11, (2, 12)), jnp.array([[1, 4], [0, 7]])
    params = init_plain(model, ids, positions)
    assert {leaf.dtype for leaf in jax.tree.leaves(params)} == {jnp.dtype("float32")}

    def loss(p):
        out = model.apply({"params": p}, ids, positions, deterministic=False,
                          rngs={"dropout": jax.random.key(0)})
        assert out.mlm_logits.dtype == jnp.bfloat16
        log_probs = jax.nn.log_softmax(out.mlm_logits.astype(jnp.float32))
        targets = jnp.take_along_axis(ids, positions, axis=1)
        return -jnp.take_along_axis(log_probs, targets[..., None], axis=-1).mean()

    value, grads = jax.jit(jax.value_and_grad(loss))(params)
    assert np.isfinite(value) and value > 0
    assert all(g.dtype == jnp.float32 and np.isfinite(np.asarray(g)).all()
               for g in jax.tree.leaves(grads))
    assert max(float(jnp.abs(g).max()) for g in jax.tree.leaves(grads)) > 0
