"""What a changed config does to a resumed run's learning rate.

The schedule is a function of total_steps (its warm-up, config.warmup_fraction x total_steps,
and its decay both end where total_steps says), so extending a run with allow_config_change
restarts it: at the restored step the rate jumps to where the new schedule puts that step
(e.g. back into a longer warm-up). `restart_line` says so in one line, naming the old and new
total_steps and the rates before and after, and how to keep the warm-up instead:
config.warmup_steps fixes the warm-up in steps, and the decay then runs from its end to the
new total_steps.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from bert_jax.config.settings import OptimizerConfig, warmup_steps
from bert_jax.train import optimizer


def rate_at(config: Mapping[str, Any], total_steps: int, step: int) -> float:
    """The learning rate `config`'s schedule over total_steps gives at `step`."""
    options = dict(config.get("optimizer", {}) or {})
    opt = OptimizerConfig(learning_rate=float(config["learning_rate"]),
                          total_steps=total_steps,
                          warmup_steps=warmup_steps(config, total_steps), **options)
    return float(optimizer.learning_rate_schedule(opt)(step))


def restart_line(old: Mapping[str, Any], new: Mapping[str, Any], step: int
                 ) -> Optional[str]:
    """One warning line when resuming at `step` with `new` restarts the schedule `old` ran (its
    warm-up length changes and with it the rate at `step`), or None. With the warm-up kept
    (config.warmup_steps) the decay is stretched from its end to the new total_steps, which is
    how a run is extended: no warning. Only for explicit total_steps on both sides (a run
    counted in epochs knows its steps from the data, later)."""
    old_total, new_total = int(old.get("total_steps", 0) or 0), int(new.get("total_steps", 0))
    if not old_total or not new_total or not 0 < step <= min(old_total, new_total):
        return None
    try:
        before, after = rate_at(old, old_total, step), rate_at(new, new_total, step)
    except (KeyError, TypeError, ValueError):
        return None  # a config the schedule cannot be read from: the run's own checks say why
    old_warmup = warmup_steps(old, old_total)
    if warmup_steps(new, new_total) == old_warmup or after == before:
        return None  # the same warm-up, the decay stretched to the new end: an extension
    return (f"the learning-rate schedule restarts at step {step}: total_steps {old_total} -> "
            f"{new_total} moves the rate from {before:.3g} to {after:.3g} (warm-up "
            f"{old_warmup} -> {warmup_steps(new, new_total)} steps); to extend the schedule "
            f"instead, keep the warm-up with --config.warmup_steps={old_warmup} (the decay "
            f"then runs to total_steps={new_total})")
