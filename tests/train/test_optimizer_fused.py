"""make_optimizer against the optax chain it replaces: optax.apply_if_finite around
clip_by_global_norm -> optax.adamw / optax.lamb (or optimizer.stable_adamw), built here from optax
directly. Over a run of
steps with clipping active and not, NaN and inf steps (two in a row) and huge finite gradients
whose squared norm overflows, the parameters, the whole optimizer state and the non-finite
counts agree bit for bit after every step; the state has the same tree, shapes and dtypes, so
checkpoints of either restore into the other.

Bit for bit under the suite's XLA flags (tests/xla_flags.py: LLVM optimisation level 0, each
operation compiled as written): the two programs do the same operations on the same values.
With LLVM's default optimisation a multiply-add may be contracted into an FMA in one program's
fused kernel and not in the other's (seen in Adam's first moment on XLA:CPU), a rounding apart."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from bert_jax.config import settings
from bert_jax.train import optimizer

SHAPES = {
    "embeddings": {"word_embeddings": {"embedding": (10, 6)}},
    "encoder": {"layer_0": {"attention": {"kernel": (6, 6), "bias": (6,)},
                            "attention_layer_norm": {"scale": (6,), "bias": (6,)}}},
    "output_bias": (10,),
}
STEPS = 10  # the steps of `gradients` below


def _params():
    rng = np.random.default_rng(0)
    return jax.tree.map(lambda s: jnp.asarray(rng.normal(size=s), jnp.float32), SHAPES,
                        is_leaf=lambda x: isinstance(x, tuple))


def _leaf(tree, index):
    return jax.tree.leaves(tree)[index]


def _gradients(params):
    """(name, gradients) per step: every case the optimizer tells apart."""
    rng = np.random.default_rng(1)

    def normal(scale):
        return jax.tree.map(lambda p: jnp.asarray(scale * rng.normal(size=p.shape), jnp.float32),
                            params)

    def poisoned(value, leaf_index):
        grads = normal(0.1)
        leaves, treedef = jax.tree.flatten(grads)
        leaves[leaf_index] = leaves[leaf_index].at[0].set(value)
        return jax.tree.unflatten(treedef, leaves)

    return [("clipped", normal(1.0)), ("not clipped", normal(1e-3)), ("nan", poisoned(np.nan, 2)),
            ("inf", poisoned(np.inf, 4)), ("not clipped", normal(1e-2)),
            ("-inf", poisoned(-np.inf, 0)),
            ("huge finite", poisoned(3e38, 1)),  # finite, but its squared norm overflows
            ("clipped", normal(0.5)), ("nan", poisoned(np.nan, 5)), ("not clipped", normal(1e-3))]


def _reference(cfg: settings.OptimizerConfig) -> optax.GradientTransformation:
    """The chain make_optimizer replaced, written with optax's own transformations."""
    schedule = optimizer.learning_rate_schedule(cfg)
    build = {"adamw": optax.adamw, "lamb": optax.lamb,
             "stable_adamw": optimizer.stable_adamw}[cfg.name]
    update = build(schedule, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, weight_decay=cfg.weight_decay,
                   mask=optimizer.decay_mask)
    if cfg.clip_norm > 0:
        update = optax.chain(optax.clip_by_global_norm(cfg.clip_norm), update)
    return optax.apply_if_finite(update, max_consecutive_errors=2**31 - 1)


def _config(name, clip_norm):
    # A large learning rate (decaying linearly from the first step, so it is never 0 here) and
    # weight decay: every applied step moves the parameters.
    return settings.OptimizerConfig(learning_rate=1e-2, total_steps=STEPS, warmup_steps=0,
                                    name=name, weight_decay=0.1, clip_norm=clip_norm)


def _jitted_step(tx):
    @jax.jit
    def step(params, state, grads):
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state
    return step


def _assert_bitwise(actual, expected, what):
    assert jax.tree.structure(actual) == jax.tree.structure(expected), what
    for (path, a), b in zip(jax.tree_util.tree_flatten_with_path(actual)[0],
                            jax.tree.leaves(expected)):
        a, b = np.asarray(a), np.asarray(b)
        where = f"{what}{jax.tree_util.keystr(path)}"
        assert (a.dtype, a.shape) == (b.dtype, b.shape), where
        assert a.tobytes() == b.tobytes(), f"{where}: {a} != {b}"


@pytest.mark.parametrize("name, clip_norm", [("adamw", 1.0), ("lamb", 1.0), ("adamw", 0.0),
                                             ("lamb", 0.0), ("stable_adamw", 1.0),
                                             ("stable_adamw", 0.0)])
def test_every_step_equals_the_optax_chain_bit_for_bit(name, clip_norm):
    cfg = _config(name, clip_norm)
    fused, reference = optimizer.make_optimizer(cfg), _reference(cfg)
    params = _params()
    fused_step, reference_step = _jitted_step(fused), _jitted_step(reference)
    state, ref_state = fused.init(params), reference.init(params)
    _assert_bitwise(state, ref_state, "init")
    ref_params, counts = params, []
    for index, (kind, grads) in enumerate(_gradients(params)):
        norm = float(optax.tree.norm(grads))
        if kind == "clipped":
            assert norm > 1.0
        elif kind == "not clipped":
            assert norm < 1.0
        elif kind == "huge finite":
            assert norm == np.inf and all(np.isfinite(g).all() for g in jax.tree.leaves(grads))
        new_params, state = fused_step(params, state, grads)
        ref_params, ref_state = reference_step(ref_params, ref_state, grads)
        _assert_bitwise(new_params, ref_params, f"step {index} ({kind}) params")
        _assert_bitwise(state, ref_state, f"step {index} ({kind}) opt_state")
        _assert_bitwise(optimizer.nonfinite_counts(state), optimizer.nonfinite_counts(ref_state),
                        f"step {index} ({kind}) counts")
        moved = not all(np.array_equal(a, b) for a, b in
                        zip(jax.tree.leaves(new_params), jax.tree.leaves(params)))
        assert moved == (kind not in ("nan", "inf", "-inf")), f"step {index} ({kind})"
        params = new_params
        counts.append((int(state.notfinite_count), int(state.total_notfinite)))
    assert counts == [(0, 0), (0, 0), (1, 1), (2, 2), (0, 2), (1, 3), (0, 3), (0, 3), (1, 4),
                      (0, 4)]
    assert int(state.inner_state[0].count if clip_norm == 0 else
               state.inner_state[1][0].count) == STEPS - 4  # Adam counted the applied steps


def test_a_reference_state_continues_in_make_optimizer_and_back():
    """A checkpoint written by the old optimizer restores into the new one (and the reverse):
    the same tree, shapes and dtypes, and an update of the one's state by the other agrees."""
    cfg = _config("adamw", 1.0)
    fused, reference = optimizer.make_optimizer(cfg), _reference(cfg)
    params = _params()
    steps = _gradients(params)
    ref_state = reference.init(params)
    for _, grads in steps[:3]:
        params, ref_state = _jitted_step(reference)(params, ref_state, grads)
    shapes = lambda tree: jax.tree.map(lambda x: (jnp.shape(x), jnp.result_type(x)), tree)
    assert jax.tree.structure(fused.init(params)) == jax.tree.structure(ref_state)
    assert shapes(fused.init(params)) == shapes(ref_state)
    assert isinstance(ref_state, optax.ApplyIfFiniteState)
    for _, grads in steps[3:6]:
        fused_out = _jitted_step(fused)(params, ref_state, grads)
        ref_out = _jitted_step(reference)(params, ref_state, grads)
        _assert_bitwise(fused_out, ref_out, "continued")
        params, ref_state = ref_out
        assert shapes(fused_out[1]) == shapes(ref_state)


def test_the_update_has_no_cond_over_the_parameter_trees():
    """The cost this optimizer removes: apply_if_finite's lax.cond returning whole trees, which
    XLA cannot fuse across. The only cond left returns one bool (the overflow fallback)."""
    cfg = _config("adamw", 1.0)
    params = _params()
    grads = jax.tree.map(jnp.ones_like, params)

    def cond_outputs(tx):
        jaxpr = jax.make_jaxpr(lambda g, s, p: tx.update(g, s, p))(
            grads, tx.init(params), params)
        return [[v.aval.shape for v in eqn.outvars]
                for eqn in _equations(jaxpr.jaxpr) if eqn.primitive.name == "cond"]

    assert any(len(outs) > 1 for outs in cond_outputs(_reference(cfg)))  # the reference has one
    assert cond_outputs(optimizer.make_optimizer(cfg)) == [[()]]


def _equations(jaxpr):
    """The equations of `jaxpr` and of the jaxprs nested in them (pjit, cond branches...)."""
    for eqn in jaxpr.eqns:
        yield eqn
        for param in eqn.params.values():
            for sub in param if isinstance(param, (tuple, list)) else (param,):
                sub = getattr(sub, "jaxpr", sub)
                if hasattr(sub, "eqns"):
                    yield from _equations(sub)
