"""StableAdamW (bert_jax.train.optimizer, name="stable_adamw"): AdamW bit for bit where no
tensor's RMS_t = sqrt(mean(g^2 / max(v_hat, eps^2))) exceeds 1; the step and the weight decay
divided by RMS_t where it does, checked against a hand computation in float64 on a small tree
(with the schedule's rate, under jit); biases and norms never decayed; the state AdamW's; and on
8 devices with fsdp shardings the moments keep their parameters' shardings and the update is the
one-device update."""

import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from bert_jax.config import settings
from bert_jax.train import optimizer

import eight_devices

EPS, B1, B2, WD = 1e-6, 0.9, 0.98, 0.1


def _config(name="stable_adamw", **overrides):
    values = dict(learning_rate=1e-2, total_steps=4, warmup_steps=0, decay="linear", name=name,
                  b1=B1, b2=B2, eps=EPS, weight_decay=WD, clip_norm=0.0)
    values.update(overrides)
    return settings.OptimizerConfig(**values)


def _params():
    rng = np.random.default_rng(0)
    return {"dense": {"kernel": jnp.asarray(rng.normal(size=(3, 2)), jnp.float32),
                      "bias": jnp.asarray(rng.normal(size=(2,)), jnp.float32)},
            "layer_norm": {"scale": jnp.asarray(rng.normal(size=(2,)), jnp.float32)}}


def _step(tx):
    @jax.jit
    def step(params, state, grads):
        updates, state = tx.update(grads, state, params)
        return updates, optax.apply_updates(params, updates), state
    return step


def _by_hand(params, gradients, cfg):
    """The updates of each step, in float64 numpy, from the definition (module docstring)."""
    schedule = optimizer.learning_rate_schedule(cfg)
    leaves, treedef = jax.tree.flatten(params)
    decayed = jax.tree.leaves(optimizer.decay_mask(params))
    p = [np.asarray(x, np.float64) for x in leaves]
    m = [np.zeros_like(x) for x in p]
    v = [np.zeros_like(x) for x in p]
    steps, rms_of_steps = [], []
    for t, grads in enumerate(gradients, start=1):
        lr = float(schedule(t - 1))
        updates, rms_all = [], []
        for i, g in enumerate(np.asarray(x, np.float64) for x in jax.tree.leaves(grads)):
            m[i] = B1 * m[i] + (1 - B1) * g
            v[i] = B2 * v[i] + (1 - B2) * g * g
            m_hat, v_hat = m[i] / (1 - B1 ** t), v[i] / (1 - B2 ** t)
            rms = np.sqrt(np.mean(g * g / np.maximum(v_hat, EPS ** 2)))
            step = m_hat / (np.sqrt(v_hat) + EPS) + (WD * p[i] if decayed[i] else 0.0)
            updates.append(-lr * step / max(1.0, rms))
            rms_all.append(rms)
        p = [a + u for a, u in zip(p, updates)]
        steps.append(jax.tree.unflatten(treedef, updates))
        rms_of_steps.append(rms_all)
    return steps, rms_of_steps


def _gradients(scales):
    rng = np.random.default_rng(1)
    params = _params()
    return [jax.tree.map(lambda x, s=s: jnp.asarray(s * rng.normal(size=x.shape), jnp.float32),
                         params) for s in scales]


def test_clipped_step_and_decay_equal_the_hand_computation():
    # Small gradients, then 30x larger ones: at step 2 every tensor's RMS_t is about sqrt(2)
    # (its v_hat still remembers step 1); at step 3 (small again) every RMS_t is below 1.
    cfg = _config()
    gradients = _gradients([0.01, 0.3, 0.01])
    expected, rms = _by_hand(_params(), gradients, cfg)
    assert all(r > 1.2 for r in rms[1]) and all(r < 1.0 for r in rms[2])
    tx, params = optimizer.make_optimizer(cfg), _params()
    step, state = _step(tx), tx.init(params)
    for index, grads in enumerate(gradients):
        updates, params, state = step(params, state, grads)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-9),
                     updates, expected[index])
    # The transformation itself (no non-finite guard) gives the same.
    tx, params = optimizer.stable_adamw(optimizer.learning_rate_schedule(cfg), B1, B2, EPS, WD,
                                        optimizer.decay_mask), _params()
    step, state = _step(tx), tx.init(params)
    for index, grads in enumerate(gradients):
        updates, params, state = step(params, state, grads)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-9),
                     updates, expected[index])


def test_no_decay_on_biases_and_norms_whatever_the_clipping():
    cfg = _config(learning_rate=1.0, decay="constant")
    params = _params()
    tx = optimizer.make_optimizer(cfg)
    zero = jax.tree.map(jnp.zeros_like, params)
    updates, _ = tx.update(zero, tx.init(params), params)
    np.testing.assert_allclose(updates["dense"]["kernel"], -WD * params["dense"]["kernel"],
                               rtol=1e-6)
    assert not np.any(updates["dense"]["bias"]) and not np.any(updates["layer_norm"]["scale"])


def test_equals_adamw_bit_for_bit_where_no_rms_exceeds_one():
    # Gradients shrinking 10x a step: after the first, every RMS_t is far below 1; the first
    # step's gradients are below eps (g^2 / max(v_hat, eps^2) < 1 there too).
    gradients = _gradients([1e-7, 1e-8, 1e-9, 1e-10])
    gradients[0] = jax.tree.map(lambda g: jnp.clip(g, -9e-7, 9e-7), gradients[0])
    _, rms = _by_hand(_params(), gradients, _config())
    assert max(max(r) for r in rms) < 1.0
    runs = {}
    for name in ("adamw", "stable_adamw"):
        tx, params = optimizer.make_optimizer(_config(name)), _params()
        step, state, out = _step(tx), tx.init(params), []
        for grads in gradients:
            updates, params, state = step(params, state, grads)
            out.append((updates, params, state))
        runs[name] = out
    for a, b in zip(jax.tree.leaves(runs["adamw"]), jax.tree.leaves(runs["stable_adamw"])):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


def test_state_is_adamws_and_the_schedule_applies():
    params = _params()
    shapes = lambda tree: jax.tree.map(lambda x: (jnp.shape(x), jnp.result_type(x)), tree)
    stable = optimizer.make_optimizer(_config()).init(params)
    adamw = optimizer.make_optimizer(_config("adamw")).init(params)
    assert jax.tree.structure(stable) == jax.tree.structure(adamw)
    assert shapes(stable) == shapes(adamw)
    # A warm-up: the first step's rate is 0, so nothing moves.
    tx = optimizer.make_optimizer(_config(warmup_steps=2))
    updates, _, _ = _step(tx)(params, tx.init(params), _gradients([1.0])[0])
    assert not any(np.any(u) for u in jax.tree.leaves(updates))


def test_config_accepts_it_and_refuses_scanned_layers():
    settings.OptimizerConfig(name="stable_adamw")
    from bert_jax import BertConfig
    from bert_jax.config import run as run_config
    config = run_config.pretrain_config()
    config.optimizer.name = "stable_adamw"
    config.total_steps = 10
    run = settings.read(config, "pretrain")
    cfg = BertConfig.preset("tiny", scan_layers=True)
    with pytest.raises(ValueError, match="stable_adamw with model.scan_layers=True"):
        run.check_fits(run.mesh.make(), cfg)


# ----- fsdp: 8 devices --------------------------------------------------------------------------

def _worker(out_dir: str) -> None:
    """In the 8-device subprocess: a tiny BERT's parameters on mesh (1, 8, 1) (fsdp), the
    optimizer jitted with the program's state shardings, two steps (the second clipped)."""
    import flax.linen as nn

    from bert_jax import BertConfig
    from bert_jax.model import BertForPreTraining
    from bert_jax.runtime import sharding
    from bert_jax.train import state as state_lib

    cfg = BertConfig.preset("tiny", num_hidden_layers=1, vocab_size=96, hidden_size=32,
                            num_attention_heads=4, intermediate_size=64,
                            max_position_embeddings=16)
    model = BertForPreTraining(cfg)

    def init_fn(rng):
        return model.init(rng, jnp.zeros((1, 16), jnp.int32), jnp.zeros((1, 3), jnp.int32))[
            "params"]

    tx = optimizer.make_optimizer(_config())
    mesh = sharding.make_mesh(1, 8, 1)
    param_shardings, state_shardings = state_lib.state_shardings(
        jax.eval_shape(init_fn, jax.random.PRNGKey(0)), tx, mesh)
    opt_shardings = state_shardings.opt_state
    params = nn.meta.unbox(init_fn(jax.random.PRNGKey(0)))
    rng = np.random.default_rng(2)
    gradients = [jax.tree.map(lambda p, s=s: jnp.asarray(s * rng.normal(size=p.shape),
                                                        jnp.float32), params)
                 for s in (0.01, 0.3)]

    def run(p, grads_list, shardings=None):
        step = _step(tx) if shardings is None else jax.jit(
            _step(tx), in_shardings=(shardings[0], shardings[1], shardings[0]),
            out_shardings=(shardings[0], shardings[0], shardings[1]))
        state = tx.init(p) if shardings is None else jax.jit(
            tx.init, out_shardings=shardings[1])(p)
        for grads in grads_list:
            updates, p, state = step(p, state, grads)
        return updates, state

    sharded = jax.device_put(params, param_shardings)
    updates, state = run(sharded, [jax.device_put(g, param_shardings) for g in gradients],
                         (param_shardings, opt_shardings))
    one_updates, _ = run(params, gradients)
    mu = state.inner_state[0].mu
    kernel = ("bert", "encoder", "layer_0", "feed_forward", "intermediate", "kernel")

    def at(tree):
        for key in kernel:
            tree = tree[key]
        return tree

    eight_devices.write(out_dir, {
        "param_spec": str(at(sharded).sharding.spec),
        "mu_spec": str(at(mu).sharding.spec), "nu_spec": str(at(state.inner_state[0].nu)
                                                                .sharding.spec),
        "mu_shapes_equal": jax.tree.all(jax.tree.map(lambda a, b: a.shape == b.shape, mu,
                                                     params)),
        "max_relative_difference": max(
            float(np.max(np.abs(np.asarray(a) - np.asarray(b)) / (np.abs(np.asarray(b)) + 1e-12)))
            for a, b in zip(jax.tree.leaves(updates), jax.tree.leaves(one_updates))),
    })


def test_fsdp_sharded_state_and_update_equal_one_device(tmp_path):
    results = eight_devices.run(__file__, str(tmp_path), timeout=300)
    assert "fsdp" in results["param_spec"]
    assert results["mu_spec"] == results["nu_spec"] == results["param_spec"]
    assert results["mu_shapes_equal"]
    assert results["max_relative_difference"] < 1e-4


if __name__ == "__main__":
    _worker(sys.argv[1])
