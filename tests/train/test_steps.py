"""Pure steps: the pre-training loss against a hand computation, gradient accumulation equal to
one big batch, eval sums that add up across batches, a train step that learns."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from bert_jax import BertConfig
from bert_jax.config import settings
from bert_jax.model import BertForPreTraining
from bert_jax.recipes import pretrain
from bert_jax.train import optimizer, steps

SEQ, PREDICTIONS, VOCAB = 16, 4, 64


def make_batch(rows, seed=0, nsp=True):
    rng = np.random.default_rng(seed)
    batch = {
        "input_ids": rng.integers(5, VOCAB, (rows, SEQ), dtype=np.int32),
        "token_type_ids": np.zeros((rows, SEQ), np.int32),
        "segment_ids": np.ones((rows, SEQ), np.int32),
        "position_ids": np.tile(np.arange(SEQ, dtype=np.int32), (rows, 1)),
        "masked_positions": np.sort(rng.integers(0, SEQ, (rows, PREDICTIONS)), 1).astype(np.int32),
        "masked_ids": rng.integers(5, VOCAB, (rows, PREDICTIONS), dtype=np.int32),
        # uneven weights per row: micro-batches carry different numbers of predictions
        "masked_weights": (rng.random((rows, PREDICTIONS)) < 0.6).astype(np.float32),
    }
    if nsp:
        batch["nsp_labels"] = rng.integers(0, 2, (rows,), dtype=np.int32)
    return batch


@pytest.fixture(scope="module")
def setup():
    # one layer: the steps' bookkeeping does not depend on the depth, compilation does
    cfg = BertConfig.preset("tiny", vocab_size=VOCAB, hidden_size=32, num_attention_heads=2,
                            num_hidden_layers=1,
                            intermediate_size=64, max_position_embeddings=SEQ,
                            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = BertForPreTraining(cfg, with_nsp=True)
    params = nn.meta.unbox(model.init(jax.random.PRNGKey(0), jnp.zeros((1, SEQ), jnp.int32),
                                      jnp.zeros((1, PREDICTIONS), jnp.int32))["params"])
    return model, params, pretrain.make_loss(model)


def test_pretrain_loss_matches_a_hand_computation(setup):
    model, params, loss_fn = setup
    batch = make_batch(8)
    terms, metrics = loss_fn(params, batch, jax.random.PRNGKey(0), True)
    out = model.apply({"params": params}, batch["input_ids"], batch["masked_positions"],
                      batch["token_type_ids"], None, True, segment_ids=batch["segment_ids"],
                      position_ids=batch["position_ids"])
    logits = np.asarray(out.mlm_logits, np.float64)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    nll = -np.take_along_axis(log_probs, batch["masked_ids"][..., None], -1)[..., 0]
    w = batch["masked_weights"]
    np.testing.assert_allclose(steps.mean_of(terms["mlm_loss"]), (nll * w).sum() / w.sum(),
                               rtol=1e-5)
    accuracy = ((logits.argmax(-1) == batch["masked_ids"]) * w).sum() / w.sum()
    np.testing.assert_allclose(steps.mean_of(metrics["mlm_accuracy"]), accuracy, rtol=1e-6)
    nsp_logits = np.asarray(out.nsp_logits, np.float64)
    nsp_log_probs = nsp_logits - np.log(np.exp(nsp_logits).sum(-1, keepdims=True))
    nsp_nll = -nsp_log_probs[np.arange(8), batch["nsp_labels"]]
    np.testing.assert_allclose(steps.mean_of(terms["nsp_loss"]), nsp_nll.mean(), rtol=1e-5)
    assert float(terms["nsp_loss"][1]) == 8


def test_zero_weight_slots_do_not_count(setup):
    _, params, loss_fn = setup
    batch = make_batch(8)
    changed = dict(batch, masked_ids=np.where(batch["masked_weights"] > 0, batch["masked_ids"],
                                              (batch["masked_ids"] + 7) % VOCAB))
    a, _ = loss_fn(params, batch, jax.random.PRNGKey(0), True)
    b, _ = loss_fn(params, changed, jax.random.PRNGKey(0), True)
    assert float(a["mlm_loss"][0]) == float(b["mlm_loss"][0])


def test_without_nsp_labels_only_the_mlm_term(setup):
    _, params, loss_fn = setup
    terms, metrics = loss_fn(params, make_batch(4, nsp=False), jax.random.PRNGKey(0), True)
    assert set(terms) == {"mlm_loss"} and set(metrics) == {"mlm_accuracy"}


def test_accumulating_4_micro_batches_of_8_equals_one_batch_of_32(setup):
    _, params, loss_fn = setup
    # SGD with lr 1: the update is minus the gradient, so equal updates mean equal gradients.
    # (Adam's first step, g / (|g| + eps), would amplify rounding noise of near-zero gradients.)
    tx = optimizer.optax.sgd(1.0)
    state = steps.TrainState.create(params, tx, jax.random.PRNGKey(1))
    batch = make_batch(32, seed=3)
    results = {}
    for k in (1, 4):
        results[k] = jax.jit(steps.make_train_step(loss_fn, tx, k))(state, batch)
    (one, metrics_one), (four, metrics_four) = results[1], results[4]
    for name in ("loss", "mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy", "grad_norm"):
        np.testing.assert_allclose(metrics_four[name], metrics_one[name], rtol=1e-5, atol=0)
    grads_one = jax.tree.map(jnp.subtract, params, one.params)
    grads_four = jax.tree.map(jnp.subtract, params, four.params)
    scale = max(float(jnp.max(jnp.abs(g))) for g in jax.tree.leaves(grads_one))
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * scale),
                 grads_four, grads_one)
    assert scale > 1e-3  # a real update happened
    assert int(four.step) == int(one.step) == 1


def test_accumulation_needs_a_divisible_batch(setup):
    _, params, loss_fn = setup
    tx = optimizer.optax.sgd(1.0)
    state = steps.TrainState.create(params, tx, jax.random.PRNGKey(1))
    with pytest.raises(ValueError, match="accumulation_steps must divide the batch size"):
        steps.make_train_step(loss_fn, tx, 3)(state, make_batch(8))


def test_eval_sums_add_up_across_batches(setup):
    _, params, loss_fn = setup
    eval_step = jax.jit(steps.make_eval_step(loss_fn))
    batch = make_batch(16, seed=5)
    halves = [{k: v[:8] for k, v in batch.items()}, {k: v[8:] for k, v in batch.items()}]
    total = None
    for half in halves:
        total = steps.add_sums(total, eval_step(params, half))
    whole = steps.summarize(steps.add_sums(None, eval_step(params, batch)))
    split = steps.summarize(total)
    assert set(whole) == {"loss", "mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy"}
    for name in whole:
        np.testing.assert_allclose(split[name], whole[name], rtol=1e-6)
    np.testing.assert_allclose(whole["loss"], whole["mlm_loss"] + whole["nsp_loss"], rtol=1e-9)


def test_train_steps_learn_a_fixed_batch(setup):
    _, params, loss_fn = setup
    cfg = settings.OptimizerConfig(learning_rate=3e-3, total_steps=30, warmup_steps=0,
                                   decay="constant")
    tx = optimizer.make_optimizer(cfg)
    step = jax.jit(steps.make_train_step(loss_fn, tx), donate_argnums=0)
    own_params = jax.tree.map(jnp.copy, params)  # the donated state must not hold the fixture's
    state = steps.TrainState.create(own_params, tx, jax.random.PRNGKey(0))
    batch = make_batch(8, seed=7)
    losses = []
    for _ in range(30):
        state, metrics = step(state, batch)
        losses.append(float(metrics["loss"]))
    assert losses[-1] < 0.5 * losses[0]
    assert int(state.step) == 30


def test_dropout_depends_on_the_step(setup):
    model, params, _ = setup
    dropout_model = BertForPreTraining(model.cfg.replace(hidden_dropout_prob=0.3), with_nsp=True)
    loss_fn = pretrain.make_loss(dropout_model)
    tx = optimizer.make_optimizer(settings.OptimizerConfig(learning_rate=1e-9, total_steps=10,
                                                           warmup_steps=0))
    step = jax.jit(steps.make_train_step(loss_fn, tx))
    state = steps.TrainState.create(params, tx, jax.random.PRNGKey(0))
    batch = make_batch(8)
    _, first = step(state, batch)
    _, again = step(state, batch)
    _, later = step(state.replace(step=state.step + 1), batch)
    assert float(first["loss"]) == float(again["loss"])  # same step: same masks
    assert float(first["loss"]) != float(later["loss"])  # next step: new masks


def test_hash_dropout_bits_are_reproducible_uniform_and_the_same_on_any_mesh():
    """dropout_rng="hash" (bert_jax.train.dropout_bits): the same base key and step give the same
    mask, another step or key another; the bits look uniform (mean, variance, neighbours
    uncorrelated, the rate of units dropped). On any mesh the same (the default generator:
    tests/train/test_sharding.py's meshes of 8 devices log the one-device losses with dropout
    on)."""
    from bert_jax.train import dropout_bits
    base = jnp.asarray(jax.random.PRNGKey(3), jnp.uint32)
    layer = nn.Dropout(0.25)

    def mask(key):
        return np.asarray(layer.apply({}, jnp.ones((64, 256)), False, rngs={"dropout": key}) == 0)

    key = steps.dropout_key(base, jnp.int32(5), "hash")
    assert jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
    first = mask(key)
    np.testing.assert_array_equal(first, mask(steps.dropout_key(base, jnp.int32(5), "hash")))
    assert (first != mask(steps.dropout_key(base, jnp.int32(6), "hash"))).mean() > 0.3
    other = jnp.asarray(jax.random.PRNGKey(4), jnp.uint32)
    assert (first != mask(steps.dropout_key(other, jnp.int32(5), "hash"))).mean() > 0.3
    assert abs(first.mean() - 0.25) < 0.01
    uniform = np.asarray(jax.random.uniform(key, (1 << 20,)), np.float64)
    assert abs(uniform.mean() - 0.5) < 0.002 and abs(uniform.var() - 1 / 12) < 0.001
    assert abs(np.corrcoef(uniform[:-1], uniform[1:])[0, 1]) < 0.005
    folded = [jax.random.key_data(jax.random.fold_in(key, d)) for d in range(3)]
    assert len({tuple(np.asarray(k)) for k in folded}) == 3
    assert np.asarray(jax.random.key_data(jax.random.split(key, 4))).shape == (4, 2)
    bits = jax.random.bits(key, (4, 1000), jnp.uint32)
    assert len(np.unique(np.asarray(bits))) == 4000  # a bijection of distinct counters
    assert dropout_bits.hash_impl() is dropout_bits.hash_impl()


def test_rbg_dropout_bits_are_reproducible_and_change_with_the_step():
    """dropout_rng="rbg": the same base key and step give the same mask (so a resumed run
    draws what an uninterrupted one does); another step or base key another one; about the
    dropout rate of the units are dropped, as with threefry."""
    base = jnp.asarray(jax.random.PRNGKey(3), jnp.uint32)
    layer = nn.Dropout(0.25)

    def mask(key):
        return np.asarray(layer.apply({}, jnp.ones((64, 256)), False, rngs={"dropout": key}) == 0)

    first = mask(steps.dropout_key(base, jnp.int32(5), "rbg"))
    assert jax.dtypes.issubdtype(steps.dropout_key(base, 5, "rbg").dtype, jax.dtypes.prng_key)
    np.testing.assert_array_equal(first, mask(steps.dropout_key(base, jnp.int32(5), "rbg")))
    assert (first != mask(steps.dropout_key(base, jnp.int32(6), "rbg"))).any()
    other = jnp.asarray(jax.random.PRNGKey(4), jnp.uint32)
    assert (first != mask(steps.dropout_key(other, jnp.int32(5), "rbg"))).any()
    assert abs(first.mean() - 0.25) < 0.01
    threefry = mask(steps.dropout_key(base, jnp.int32(5)))
    assert abs(threefry.mean() - 0.25) < 0.01 and (threefry != first).any()
    with pytest.raises(ValueError, match="dropout_rng='philox'"):
        steps.make_train_step(lambda *a: None, optax.sgd(0.1), dropout_rng="philox")
