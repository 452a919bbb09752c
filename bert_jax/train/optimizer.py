"""The optimizer of BERT pre-training and fine-tuning, as an Optax chain.

    gradients -> clip to global norm `clip_norm` -> AdamW (StableAdamW, LAMB) with a learning
    rate that warms up linearly from 0 to `learning_rate` over `warmup_steps`, then decays
    (linearly, as in the paper, or along a cosine) to `end_learning_rate_ratio * learning_rate`
    at `total_steps`.

Other schedules (`decay`): "constant" after the warm-up; "wsd" (warm-up, stable, decay): the peak
until the last `decay_fraction` of `total_steps`, then linear to the end value; "one_cycle"
(optax.cosine_onecycle_schedule): cosine from learning_rate/25 up to the peak over the warm-up,
then cosine down to the end value (learning_rate/25/1e4 when end_learning_rate_ratio is 0).

The whole chain behaves as inside `optax.apply_if_finite`: a step whose gradients hold a NaN or
an infinity (which a non-finite loss gives) changes neither the parameters nor the optimizer
state, and the state counts such steps (`nonfinite_counts`), so a diverging run never writes
non-finite weights and the loop can stop it (or skip such steps) by config without a per-step
host sync. The state is apply_if_finite's; the update, the same operations on the same values,
is computed without its `lax.cond`, so that XLA fuses it into about one pass over each
parameter's memory (`make_optimizer`).

StableAdamW (`name="stable_adamw"`; Wortsman et al. 2023, "Stable and low-precision training for
large-scale vision-language models", Algorithm 1; ModernBERT trains with it) is AdamW with
update clipping per parameter tensor: the step and the weight decay of a tensor are divided by
max(1, RMS_t), where

    RMS_t = sqrt(mean over the tensor of g_t^2 / max(v_hat_t, eps^2))

g_t the gradient Adam receives (after the global-norm clipping, when that is on), v_hat_t the
bias-corrected second moment after this step's update, v_t / (1 - b2^t), and eps Adam's own eps
(the max keeps elements whose v_hat is ~0 from dividing by zero; the definition of the `optimi`
library's StableAdamW, which ModernBERT used). Where no tensor's RMS exceeds 1 it is AdamW, bit
for bit; the state is AdamW's, so a checkpoint of one resumes in the other. `stable_adamw` is the
transformation; make_optimizer computes the same values inside its fused update.

Weight decay (0.01 in the paper) is decoupled, as in AdamW, and is not applied to biases or to
LayerNorm parameters; `decay_mask` makes that choice from the parameter path. Gradient
accumulation over micro-batches is not part of the chain: `bert_jax.train.steps` sums the
micro-batch gradients inside the jitted step (a `lax.scan`), so the optimizer sees one update per
global batch and its step counter counts optimizer steps.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax

from bert_jax.config.settings import OptimizerConfig
from bert_jax.runtime import pytree

ONE_CYCLE_DIV_FACTOR = 25.0  # one_cycle starts at learning_rate / this


def learning_rate_schedule(cfg: OptimizerConfig) -> optax.Schedule:
    """step -> learning rate: linear warm-up from 0, then the chosen decay until total_steps."""
    peak, end = cfg.learning_rate, cfg.learning_rate * cfg.end_learning_rate_ratio
    if cfg.decay == "one_cycle":
        return _one_cycle(cfg)
    decay_steps = max(cfg.total_steps - cfg.warmup_steps, 1)
    if cfg.decay == "linear":
        decay = optax.linear_schedule(peak, end, decay_steps)
    elif cfg.decay == "cosine":
        decay = optax.cosine_decay_schedule(peak, decay_steps, alpha=cfg.end_learning_rate_ratio)
    elif cfg.decay == "wsd":
        stable_steps = cfg.wsd_decay_start - cfg.warmup_steps
        decay = optax.join_schedules(
            [optax.constant_schedule(peak),
             optax.linear_schedule(peak, end, cfg.total_steps - cfg.wsd_decay_start)],
            boundaries=[stable_steps])
    else:
        decay = optax.constant_schedule(peak)
    if cfg.warmup_steps == 0:
        return decay
    warmup = optax.linear_schedule(0.0, peak, cfg.warmup_steps)
    return optax.join_schedules([warmup, decay], boundaries=[cfg.warmup_steps])


def _one_cycle(cfg: OptimizerConfig) -> optax.Schedule:
    """optax.cosine_onecycle_schedule over total_steps, rising for warmup_steps (at least 1)."""
    ratio = cfg.end_learning_rate_ratio
    final_div_factor = 1e4 if ratio == 0.0 else 1.0 / (ONE_CYCLE_DIV_FACTOR * ratio)
    return optax.cosine_onecycle_schedule(
        transition_steps=cfg.total_steps, peak_value=cfg.learning_rate,
        pct_start=max(cfg.warmup_steps, 1) / cfg.total_steps, div_factor=ONE_CYCLE_DIV_FACTOR,
        final_div_factor=final_div_factor)


def is_decayed(path: tuple[Any, ...]) -> bool:
    """Weight decay applies to weight matrices and embeddings, not to biases or LayerNorm."""
    names = pytree.path_names(path)
    leaf = names[-1] if names else ""
    in_layer_norm = any("layer_norm" in n.lower() or "layernorm" in n.lower() for n in names)
    return not (in_layer_norm or leaf == "bias" or leaf.endswith("_bias"))


def decay_mask(params: Any) -> Any:
    """A tree of bools like `params`: True where weight decay applies."""
    return jax.tree_util.tree_map_with_path(lambda path, _: is_decayed(path), params)


# apply_if_finite gives up and applies a non-finite update after this many in a row: never.
_NEVER = 2**31 - 1


def nonfinite_counts(opt_state: Any) -> dict[str, jax.Array]:
    """{"nonfinite_steps": total, "nonfinite_in_a_row": consecutive} of a make_optimizer state
    (int32 scalars; {} for another optimizer's state)."""
    if not isinstance(opt_state, optax.ApplyIfFiniteState):
        return {}
    return {"nonfinite_steps": opt_state.total_notfinite,
            "nonfinite_in_a_row": opt_state.notfinite_count}


def update_rms(grad: jax.Array, nu_hat: jax.Array, eps: float) -> jax.Array:
    """StableAdamW's RMS_t of one tensor: sqrt(mean(g^2 / max(v_hat, eps^2))), a float32 scalar
    (module docstring).

    Each term is computed as (g / sqrt(max(v_hat, eps^2)))^2: equal, and finite where g^2
    overflows float32 (a gradient above ~1.8e19, which the global-norm clipping would otherwise
    catch): v_hat is then infinite too and the term 0, as Adam's step for that element is,
    where g^2 / v_hat would be inf / inf = NaN."""
    floor = jnp.maximum(jnp.float32(eps) ** 2, jnp.finfo(jnp.float32).tiny)  # never 0
    root = jnp.sqrt(jnp.maximum(nu_hat.astype(jnp.float32), floor))
    return jnp.sqrt(jnp.mean(jnp.square(grad.astype(jnp.float32) / root)))


def clip_updates(updates: Any, grads: Any, nu_hat: Any, eps: float) -> Any:
    """Each leaf of `updates` divided by max(1, update_rms of its gradient and v_hat): unchanged
    (divided by exactly 1) where the RMS is at most 1."""
    def clip(update, grad, nu):
        return update / jnp.maximum(1.0, update_rms(grad, nu, eps)).astype(update.dtype)
    return jax.tree.map(clip, updates, grads, nu_hat)


def stable_adamw(learning_rate: optax.ScalarOrSchedule, b1: float = 0.9, b2: float = 0.999,
                 eps: float = 1e-6, weight_decay: float = 0.0, mask: Any = None
                 ) -> optax.GradientTransformation:
    """StableAdamW (module docstring): optax.adamw with the same arguments, whose update of each
    tensor (Adam's step and the decoupled weight decay together) is divided by max(1, RMS_t).

    Its state is optax.adamw's (scale_by_adam's, add_decayed_weights', scale_by_learning_rate's)
    and equal to it after every step: only the updates differ.
    """
    adam = optax.scale_by_adam(b1=b1, b2=b2, eps=eps)
    tail = optax.chain(optax.add_decayed_weights(weight_decay, mask),
                       optax.scale_by_learning_rate(learning_rate))

    def init(params):
        return (adam.init(params), *tail.init(params))

    def update(grads, state, params=None):
        adam_state, *tail_state = state
        direction, adam_state = adam.update(grads, adam_state, params)
        nu_hat = optax.tree.bias_correction(adam_state.nu, b2, adam_state.count)
        updates, tail_state = tail.update(direction, tuple(tail_state), params)
        return clip_updates(updates, grads, nu_hat, eps), (adam_state, *tail_state)

    return optax.GradientTransformation(init, update)


def make_optimizer(cfg: OptimizerConfig) -> optax.GradientTransformationExtraArgs:
    """Global-norm clipping followed by AdamW, StableAdamW or LAMB on the warm-up/decay
    schedule, skipping every update whose gradients are not finite (module docstring).

    The values and the state are those of `optax.apply_if_finite(<the chain>, _NEVER)` with
    <the chain> `_make_update_chain(cfg)` (the state is built by that very transformation, so
    checkpoints and `nonfinite_counts` see one layout); `_fused_update` computes them in about
    one elementwise pass per parameter leaf instead of the several passes and copies that the
    `lax.cond` of apply_if_finite costs. The operations are optax's, on the same values, so the
    results are equal bit for bit where XLA compiles each operation as written (LLVM
    optimisation level 0, as the tests run); an optimising backend may contract a multiply-add
    into one FMA in the one program's kernel and not in the other's, a rounding apart."""
    init = optax.apply_if_finite(_make_update_chain(cfg), max_consecutive_errors=_NEVER).init
    # Jitted: called outside a jit (tests, tools) the update is one compiled program, as the
    # cond made apply_if_finite's, not hundreds of ops run one by one; a jit inlines it.
    return optax.GradientTransformationExtraArgs(init=init, update=jax.jit(_fused_update(cfg)))


def _fused_update(cfg: OptimizerConfig):
    """The update function of make_optimizer: apply_if_finite(clip -> Adam -> tail), where the
    tail is AdamW's or LAMB's rest after `optax.scale_by_adam` (StableAdamW: AdamW's, its
    output divided by max(1, RMS_t) per tensor, `clip_updates`).

    apply_if_finite picks "run the chain" or "keep the state, return zeros" with a `lax.cond`
    whose branches return whole trees, which XLA cannot fuse across. Here the chain always runs
    and each leaf of its state and updates is chosen by `jnp.where(finite, new, old)`, an
    elementwise select that fuses into the kernel computing the leaf. A select never lets the
    dropped operand leak into the result, so the NaN/inf that a rejected step's gradients
    spread through the chain is discarded as the cond discards it.

    Adam is written out from optax's pieces (`optax.tree.update_moment`, `bias_correction`,
    scale_by_adam's one-line direction) for one reason: the direction is computed from the
    moments *kept* (mu, nu after the select), which equal the new ones whenever the update is
    applied. Computed from the unselected new moments (as a wrapper around optax.adamw must),
    XLA recomputes them from the old mu and nu inside the parameter kernel, so it must copy
    the donated old mu and nu before overwriting them in place: two extra passes per moment.
    """
    clips = cfg.clip_norm > 0  # then the chain's state is (clip's EmptyState, AdamW's or LAMB's)
    schedule = learning_rate_schedule(cfg)
    trust_ratio = [optax.scale_by_trust_ratio()] if cfg.name == "lamb" else []
    # optax.adamw, optax.lamb and stable_adamw are chain(scale_by_adam, <these>) (stable_adamw's
    # output then clipped), with these states.
    tail = optax.chain(optax.add_decayed_weights(cfg.weight_decay, decay_mask), *trust_ratio,
                       optax.scale_by_learning_rate(schedule))
    b1, b2, eps, eps_root = cfg.b1, cfg.b2, cfg.eps, 0.0  # scale_by_adam's arguments

    def update(grads, state, params=None, **extra_args):
        del extra_args  # accepted, as by apply_if_finite; no piece of this chain reads any
        clip_state, (adam_state, *tail_state) = (
            state.inner_state if clips else (None, state.inner_state))
        isfinite = _all_finite(grads)
        # apply_if_finite would also apply an update after max_consecutive_errors non-finite ones
        # in a row; with _NEVER (int32's maximum, where its saturating counter stops) it never
        # does, so a step is applied exactly when its gradients are finite.
        notfinite_count = jnp.where(isfinite, jnp.zeros([], jnp.int32),
                                    optax.safe_increment(state.notfinite_count))

        def keep(new, old):  # the new value when the step is applied, else the old one
            return jnp.where(isfinite, new, old)

        grads_mu, grads_nu = _clipped_twice(grads, cfg.clip_norm) if clips else (grads, grads)
        # optax.scale_by_adam's update, its state selected before the direction reads it.
        count = optax.safe_increment(adam_state.count)
        adam_state = optax.ScaleByAdamState(
            count=keep(count, adam_state.count),
            mu=jax.tree.map(keep, optax.tree.update_moment(grads_mu, adam_state.mu, b1, 1),
                            adam_state.mu),
            nu=jax.tree.map(keep, optax.tree.update_moment_per_elem_norm(
                grads_nu, adam_state.nu, b2, 2), adam_state.nu))
        mu_hat = optax.tree.bias_correction(adam_state.mu, b1, count)
        nu_hat = optax.tree.bias_correction(adam_state.nu, b2, count)
        # scale_by_adam's direction (no nesterov, no mu_dtype: the config sets neither).
        direction = jax.tree.map(lambda m, v: m / (jnp.sqrt(v + eps_root) + eps), mu_hat, nu_hat)
        updates, new_tail_state = tail.update(direction, tuple(tail_state), params)
        if cfg.name == "stable_adamw":
            updates = clip_updates(updates, grads_nu, nu_hat, eps)
        tail_state = jax.tree.map(keep, new_tail_state, tuple(tail_state))
        inner_state = (adam_state, *tail_state)
        return jax.tree.map(lambda u: jnp.where(isfinite, u, jnp.zeros_like(u)), updates), \
            optax.ApplyIfFiniteState(
                notfinite_count=notfinite_count,
                last_finite=isfinite,
                total_notfinite=jnp.where(isfinite, state.total_notfinite,
                                          optax.safe_increment(state.total_notfinite)),
                inner_state=(clip_state, inner_state) if clips else inner_state)

    return update


def _clipped_twice(grads: Any, max_norm: float) -> tuple[Any, Any]:
    """optax.clip_by_global_norm(max_norm)'s clipped gradients, twice, bit for bit.

    Two copies because both Adam moments read the clipped gradients, and XLA does not duplicate
    a division (an "expensive" op) into two consumer kernels: it would write the divided
    gradients to a temporary and read them back, a pass and a buffer of the gradients' size.
    The second copy divides by the same norm passed through `optimization_barrier`, a value XLA
    cannot merge with the first, so each moment's kernel does its own division.
    """
    g_norm = optax.tree.norm(grads)
    trigger = jnp.squeeze(g_norm < max_norm)

    def clip(norm):  # clip_by_global_norm's formula
        return jax.tree.map(
            lambda t: jax.lax.select(trigger, t, (t / norm.astype(t.dtype)) * max_norm), grads)

    return clip(g_norm), clip(jax.lax.optimization_barrier(g_norm))


def _all_finite(tree: Any) -> jax.Array:
    """True when every element of `tree` is finite: optax.apply_if_finite's test, read off the
    squared global norm when that is finite (XLA computes it once for this, the clipping and
    the train step's logged grad_norm: no pass of its own).

    A finite sum of squares means every element is finite: a NaN makes the sum NaN, an
    infinity makes its square +inf and a sum of non-negative terms holding +inf is +inf or NaN.
    The converse fails only when finite gradients are so large that the sum overflows; then the
    elements themselves are tested, in a branch that runs only in that case.
    """
    sqnorm = optax.tree.norm(tree, squared=True)
    return jax.lax.cond(jnp.isfinite(sqnorm), lambda: jnp.array(True),
                        lambda: every_element_finite(tree))


def every_element_finite(tree: Any) -> jax.Array:
    """Whether every element of every leaf of `tree` is finite: one boolean scalar, from the
    elements themselves (a pass over the tree)."""
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree.leaves(tree)]))


def _make_update_chain(cfg: OptimizerConfig) -> optax.GradientTransformation:
    schedule = learning_rate_schedule(cfg)
    if cfg.name == "adamw":
        update = optax.adamw(schedule, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps,
                             weight_decay=cfg.weight_decay, mask=decay_mask)
    elif cfg.name == "stable_adamw":
        update = stable_adamw(schedule, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps,
                              weight_decay=cfg.weight_decay, mask=decay_mask)
    else:
        update = optax.lamb(schedule, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps,
                            weight_decay=cfg.weight_decay, mask=decay_mask)
    if cfg.clip_norm > 0:
        return optax.chain(optax.clip_by_global_norm(cfg.clip_norm), update)
    return update
