"""The optimizer: schedule shape, weight-decay mask by parameter path, clipping, LAMB, bad
config."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax import BertConfig
from bert_jax.config import settings
from bert_jax.model import BertForPreTraining
from bert_jax.train import optimizer


@pytest.fixture(scope="module")
def params():
    cfg = BertConfig.preset("tiny", vocab_size=64, hidden_size=16, num_attention_heads=2,
                            intermediate_size=32, max_position_embeddings=8)
    ids = jnp.zeros((1, 8), jnp.int32)
    boxed = BertForPreTraining(cfg, with_nsp=True).init(
        jax.random.PRNGKey(0), ids, jnp.zeros((1, 2), jnp.int32))["params"]
    return nn.meta.unbox(boxed)


def test_schedule_warms_up_linearly_then_decays_linearly_to_zero():
    cfg = settings.OptimizerConfig(learning_rate=1e-3, total_steps=100, warmup_steps=10)
    lr = optimizer.learning_rate_schedule(cfg)
    np.testing.assert_allclose([lr(0), lr(5), lr(10), lr(55), lr(100)],
                               [0.0, 5e-4, 1e-3, 5e-4, 0.0], rtol=1e-6, atol=1e-12)


def test_cosine_decay_and_end_ratio():
    cfg = settings.OptimizerConfig(learning_rate=1.0, total_steps=110, warmup_steps=10,
                                   decay="cosine", end_learning_rate_ratio=0.1)
    lr = optimizer.learning_rate_schedule(cfg)
    np.testing.assert_allclose([lr(10), lr(60), lr(110)], [1.0, 0.55, 0.1], rtol=1e-5)


def test_decay_mask_excludes_biases_and_layer_norm(params):
    mask = {jax.tree_util.keystr(path): value for path, value in
            jax.tree_util.tree_flatten_with_path(optimizer.decay_mask(params))[0]}
    decayed = {k for k, v in mask.items() if v}
    assert "['bert']['embeddings']['word_embeddings']['embedding']" in decayed
    assert "['bert']['encoder']['layer_0']['attention']['query']['kernel']" in decayed
    assert "['bert']['encoder']['layer_1']['feed_forward']['output']['kernel']" in decayed
    assert "['mlm']['transform']['kernel']" in decayed
    for key in decayed:
        assert "bias" not in key and "layer_norm" not in key
    assert not mask["['mlm']['output_bias']"]
    assert not mask["['bert']['encoder']['layer_0']['attention_layer_norm']['scale']"]
    assert not mask["['bert']['embeddings']['layer_norm']['bias']"]


def test_weight_decay_touches_only_the_masked_leaves(params):
    cfg = settings.OptimizerConfig(learning_rate=1.0, total_steps=10, warmup_steps=0,
                                   decay="constant", weight_decay=0.1, clip_norm=0.0)
    tx = optimizer.make_optimizer(cfg)
    zero_grads = jax.tree.map(jnp.zeros_like, params)
    updates, _ = tx.update(zero_grads, tx.init(params), params)
    mask = optimizer.decay_mask(params)

    def check(update, param, decayed):
        expected = -0.1 * param if decayed else np.zeros_like(param)
        np.testing.assert_allclose(update, expected, rtol=1e-6, atol=1e-7)

    jax.tree.map(check, updates, params, mask)


def test_clipping_to_global_norm(params):
    # eps=1 makes Adam's update depend on the gradient's scale, so clipping shows in the update.
    def make(clip_norm):
        return optimizer.make_optimizer(settings.OptimizerConfig(
            learning_rate=1e-2, total_steps=10, warmup_steps=0, clip_norm=clip_norm, eps=1.0))

    rng = np.random.default_rng(0)
    grads = jax.tree.map(lambda p: jnp.asarray(rng.normal(size=p.shape), jnp.float32), params)
    norm = float(optimizer.optax.tree.norm(grads))
    assert norm > 1.0
    unit = jax.tree.map(lambda g: g / norm, grads)
    update = lambda tx, g: tx.update(g, tx.init(params), params)[0]
    clipped, reference, unclipped = update(make(1.0), grads), update(make(0.0), unit), \
        update(make(0.0), grads)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-8),
                 clipped, reference)
    kernel = lambda u: u["bert"]["encoder"]["layer_0"]["attention"]["query"]["kernel"]
    assert not np.allclose(kernel(clipped), kernel(unclipped))


def test_lamb_differs_from_adamw(params):
    grads = jax.tree.map(jnp.ones_like, params)
    updates = {}
    for name in ("adamw", "lamb"):
        tx = optimizer.make_optimizer(settings.OptimizerConfig(
            learning_rate=1e-2, total_steps=10, warmup_steps=0, name=name))
        updates[name], _ = tx.update(grads, tx.init(params), params)
    kernel = lambda u: u["bert"]["encoder"]["layer_0"]["attention"]["query"]["kernel"]
    assert not np.allclose(kernel(updates["adamw"]), kernel(updates["lamb"]))


@pytest.mark.parametrize("bad, message", [
    (dict(name="sgd"), "optimizer name='sgd'"),
    (dict(decay="step"), "decay='step'"),
    (dict(warmup_steps=20, total_steps=10), "warmup_steps=20"),
    (dict(learning_rate=0.0), "learning_rate=0.0"),
])
def test_bad_config_is_named(bad, message):
    with pytest.raises(ValueError, match=message):
        settings.OptimizerConfig(**bad)


def test_wsd_schedule_warms_up_holds_the_peak_then_decays_over_the_last_fraction():
    cfg = settings.OptimizerConfig(learning_rate=1.0, total_steps=100, warmup_steps=10,
                                   decay="wsd", decay_fraction=0.2, end_learning_rate_ratio=0.1)
    schedule = optimizer.learning_rate_schedule(cfg)
    assert cfg.wsd_decay_start == 80
    expected = {0: 0.0, 5: 0.5, 10: 1.0, 50: 1.0, 80: 1.0, 90: 0.55, 100: 0.1, 150: 0.1}
    for step, value in expected.items():
        np.testing.assert_allclose(float(schedule(step)), value, rtol=1e-6, atol=1e-7)


def test_wsd_schedule_without_warmup_and_default_fraction():
    cfg = settings.OptimizerConfig(learning_rate=2.0, total_steps=50, warmup_steps=0, decay="wsd")
    schedule = optimizer.learning_rate_schedule(cfg)
    for step, value in {0: 2.0, 39: 2.0, 40: 2.0, 45: 1.0, 50: 0.0}.items():
        np.testing.assert_allclose(float(schedule(step)), value, rtol=1e-6, atol=1e-7)


def test_one_cycle_schedule_rises_to_the_peak_over_the_warmup_then_anneals():
    cfg = settings.OptimizerConfig(learning_rate=1.0, total_steps=100, warmup_steps=10,
                                   decay="one_cycle", end_learning_rate_ratio=0.01)
    schedule = optimizer.learning_rate_schedule(cfg)
    start, end = 1.0 / optimizer.ONE_CYCLE_DIV_FACTOR, 0.01
    expected = {0: start, 5: start + (1 - start) * 0.5, 10: 1.0,
                55: end + (1 - end) * 0.5, 100: end}  # cosine halfway up and halfway down
    for step, value in expected.items():
        np.testing.assert_allclose(float(schedule(step)), value, rtol=1e-5, atol=1e-7)
    values = [float(schedule(s)) for s in range(101)]
    assert max(values) == pytest.approx(1.0) and np.argmax(values) == 10


@pytest.mark.parametrize("bad, message", [
    (dict(decay_fraction=0.0), "decay_fraction=0.0"),
    (dict(decay_fraction=1.5), "decay_fraction=1.5"),
    (dict(decay="wsd", total_steps=10, warmup_steps=5, decay_fraction=0.8), "decay='wsd'"),
    (dict(decay="one_cycle", end_learning_rate_ratio=1.0), "decay='one_cycle'"),
])
def test_bad_schedule_options_are_named(bad, message):
    with pytest.raises(ValueError, match=message):
        settings.OptimizerConfig(**bad)


@pytest.mark.parametrize("decay", ["wsd", "one_cycle"])
def test_new_schedules_build_an_optimizer_from_the_config_blocks(decay):
    from bert_jax.config import run as run_config
    block = run_config.optimizer_block(decay=decay)
    assert block.decay_fraction == 0.2
    cfg = settings.OptimizerConfig(learning_rate=1e-3, total_steps=10, warmup_steps=1,
                                   **block.to_dict())
    optimizer.make_optimizer(cfg).init({"w": jnp.zeros((2,))})
