"""The optimizer of BERT pre-training and fine-tuning, as an Optax chain.

    gradients -> clip to global norm `clip_norm` -> AdamW (or LAMB) with a learning rate that warms
    up linearly from 0 to `learning_rate` over `warmup_steps`, then decays (linearly, as in the
    paper, or along a cosine) to `end_learning_rate_ratio * learning_rate` at `total_steps`.

Other schedules (`decay`): "constant" after the warm-up; "wsd" (warm-up, stable, decay): the peak
until the last `decay_fraction` of `total_steps`, then linear to the end value; "one_cycle"
(optax.cosine_onecycle_schedule): cosine from learning_rate/25 up to the peak over the warm-up,
then cosine down to the end value (learning_rate/25/1e4 when end_learning_rate_ratio is 0).

The whole chain sits inside `optax.apply_if_finite`: a step whose gradients hold a NaN or an
infinity (which a non-finite loss gives) changes neither the parameters nor the optimizer state,
and the state counts such steps (`nonfinite_counts`), so a diverging run never writes non-finite
weights and the loop can stop it (or skip such steps) by config without a per-step host sync.

Weight decay (0.01 in the paper) is decoupled, as in AdamW, and is not applied to biases or to
LayerNorm parameters; `decay_mask` makes that choice from the parameter path. Gradient
accumulation over micro-batches is not part of the chain: `bert_jax.train.steps` sums the
micro-batch gradients inside the jitted step (a `lax.scan`), so the optimizer sees one update per
global batch and its step counter counts optimizer steps.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import optax

OPTIMIZERS = ("adamw", "lamb")
DECAYS = ("linear", "cosine", "constant", "wsd", "one_cycle")
ONE_CYCLE_DIV_FACTOR = 25.0  # one_cycle starts at learning_rate / this


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    """Hyper-parameters of the optimizer and its learning-rate schedule (paper defaults)."""

    learning_rate: float = 1e-4
    total_steps: int = 1_000_000
    warmup_steps: int = 10_000
    decay: str = "linear"  # after warm-up: linear | cosine | constant | wsd | one_cycle
    end_learning_rate_ratio: float = 0.0  # final lr = ratio * learning_rate
    decay_fraction: float = 0.2  # wsd: the share of total_steps spent decaying, at the end
    name: str = "adamw"  # adamw | lamb
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-6
    weight_decay: float = 0.01
    clip_norm: float = 1.0  # global-norm clipping; 0 disables it

    def __post_init__(self):
        if self.name not in OPTIMIZERS:
            raise ValueError(f"optimizer name={self.name!r} is unknown; choose one of {OPTIMIZERS}")
        if self.decay not in DECAYS:
            raise ValueError(f"optimizer decay={self.decay!r} is unknown; choose one of {DECAYS}")
        if self.total_steps <= 0:
            raise ValueError(f"optimizer total_steps={self.total_steps} must be positive")
        if not 0 <= self.warmup_steps <= self.total_steps:
            raise ValueError(f"optimizer warmup_steps={self.warmup_steps} must be in "
                             f"[0, total_steps={self.total_steps}]")
        if self.learning_rate <= 0:
            raise ValueError(f"optimizer learning_rate={self.learning_rate} must be positive")
        if not 0.0 < self.decay_fraction <= 1.0:
            raise ValueError(f"optimizer decay_fraction={self.decay_fraction} must be in (0, 1]")
        if self.decay == "wsd" and self.wsd_decay_start < self.warmup_steps:
            raise ValueError(
                f"optimizer decay='wsd': the decay (the last decay_fraction={self.decay_fraction} "
                f"of total_steps={self.total_steps}) would start before the warm-up "
                f"(warmup_steps={self.warmup_steps}) ends")
        if self.decay == "one_cycle" and not 0.0 <= self.end_learning_rate_ratio < 1.0:
            raise ValueError(f"optimizer decay='one_cycle' needs end_learning_rate_ratio in "
                             f"[0, 1), got {self.end_learning_rate_ratio}")

    @property
    def wsd_decay_start(self) -> int:
        """decay="wsd": the step where the decay starts, total_steps * (1 - decay_fraction)."""
        return self.total_steps - round(self.decay_fraction * self.total_steps)


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


def _path_names(path: tuple[Any, ...]) -> list[str]:
    return [str(getattr(k, "key", getattr(k, "name", k))) for k in path]


def is_decayed(path: tuple[Any, ...]) -> bool:
    """Weight decay applies to weight matrices and embeddings, not to biases or LayerNorm."""
    names = _path_names(path)
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


def make_optimizer(cfg: OptimizerConfig) -> optax.GradientTransformation:
    """Global-norm clipping followed by AdamW or LAMB on the warm-up/decay schedule, skipping
    every update whose gradients are not finite (module docstring)."""
    return optax.apply_if_finite(_make_update_chain(cfg), max_consecutive_errors=_NEVER)


def _make_update_chain(cfg: OptimizerConfig) -> optax.GradientTransformation:
    schedule = learning_rate_schedule(cfg)
    if cfg.name == "adamw":
        update = optax.adamw(schedule, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps,
                             weight_decay=cfg.weight_decay, mask=decay_mask)
    else:
        update = optax.lamb(schedule, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps,
                            weight_decay=cfg.weight_decay, mask=decay_mask)
    if cfg.clip_norm > 0:
        return optax.chain(optax.clip_by_global_norm(cfg.clip_norm), update)
    return update
