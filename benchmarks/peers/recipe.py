"""The reference recipe every peer trains with, written once per framework: BERT's AdamW (weight
decay off biases and LayerNorm parameters), a linear warm-up then linear decay to 0, gradients
clipped to a global norm first, as transformers' Trainer trains (and as bert_jax's optimizer
does, bert_jax/train/optimizer.py).

    recipe = Recipe.of(learning_rate, warmup_fraction, total_steps, optimizer_block)
    trainer = TorchTrainer(model, recipe)     # torch: AdamW parameter groups, the schedule
    loss = trainer.step(batch)                #   forward, backward, clip, update, schedule
    tx = optax_transform(recipe)              # Flax: the same recipe as one optax transform

Used by benchmarks/compare_polarity.py (torch), benchmarks/peers/finetune.py (torch and Flax
fine-tuning), torch_mlm.py and hf_flax_mlm.py (the pre-training race) and
benchmarks/harness/mlm_modes.py (its peers' train steps), so that every peer trains with the
hyper-parameters our side reads from its config. Frameworks are imported inside the functions:
the torch worker never imports optax, the Flax one never torch.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Mapping

OPTIMIZER_KEYS = ("b1", "b2", "eps", "weight_decay", "clip_norm")  # of a config's optimizer block


def no_decay(name: str) -> bool:
    """Whether the parameter `name` (torch's dotted, Flax's joined path) is kept out of weight
    decay: biases and LayerNorm parameters."""
    return name.endswith("bias") or "LayerNorm" in name


@dataclasses.dataclass(frozen=True)
class Recipe:
    """The hyper-parameters of the reference recipe (module docstring)."""

    learning_rate: float
    total_steps: int
    warmup_steps: int
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-6
    weight_decay: float = 0.01
    clip_norm: float = 1.0  # 0: no clipping, as in bert_jax's optimizer

    @classmethod
    def of(cls, learning_rate: float, warmup_fraction: float, total_steps: int,
           optimizer: Mapping[str, Any]) -> Recipe:
        """The recipe of a run's settings: `optimizer` holds OPTIMIZER_KEYS (a config's
        optimizer block, or the race's spec); the warm-up is round(warmup_fraction x
        total_steps) steps, as bert_jax.config.settings.optimizer_config counts it."""
        return cls(learning_rate=learning_rate, total_steps=total_steps,
                   warmup_steps=round(warmup_fraction * total_steps),
                   **{key: optimizer[key] for key in OPTIMIZER_KEYS})


class TorchTrainer:
    """torch.optim.AdamW over two parameter groups (decayed, and no_decay's at 0) with
    transformers' get_linear_schedule_with_warmup; `step` is one optimizer step."""

    def __init__(self, model, recipe: Recipe):
        import torch
        import transformers

        named = list(model.named_parameters())
        groups = [{"params": [p for n, p in named if not no_decay(n)],
                   "weight_decay": recipe.weight_decay},
                  {"params": [p for n, p in named if no_decay(n)], "weight_decay": 0.0}]
        self.model, self.recipe = model, recipe
        self.optimizer = torch.optim.AdamW(groups, lr=recipe.learning_rate,
                                           betas=(recipe.b1, recipe.b2), eps=recipe.eps)
        self.schedule = transformers.get_linear_schedule_with_warmup(
            self.optimizer, recipe.warmup_steps, recipe.total_steps)

    def step(self, batch: Mapping[str, Any], autocast=None):
        """Forward (under `autocast`, a context manager, if given) on `batch` (the model's
        keyword arguments, labels included), backward, clip, update, advance the schedule;
        returns the loss tensor (detached)."""
        import torch

        with autocast if autocast is not None else contextlib.nullcontext():
            loss = self.model(**batch).loss
        loss.backward()
        if self.recipe.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.recipe.clip_norm)
        self.optimizer.step()
        self.schedule.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()


def optax_transform(recipe: Recipe):
    """The recipe as one optax transform: clipping (if any), then AdamW with the decay mask on
    the warm-up and linear-decay schedule."""
    import optax
    from flax import traverse_util

    def decay_mask(params):
        flat = traverse_util.flatten_dict(params)
        return traverse_util.unflatten_dict({path: not no_decay("/".join(map(str, path)))
                                             for path in flat})

    warmup = optax.linear_schedule(0.0, recipe.learning_rate, max(recipe.warmup_steps, 1))
    decay = optax.linear_schedule(recipe.learning_rate, 0.0,
                                  max(recipe.total_steps - recipe.warmup_steps, 1))
    schedule = optax.join_schedules([warmup, decay], boundaries=[recipe.warmup_steps])
    adamw = optax.adamw(schedule, b1=recipe.b1, b2=recipe.b2, eps=recipe.eps,
                        weight_decay=recipe.weight_decay, mask=decay_mask)
    if recipe.clip_norm > 0:
        return optax.chain(optax.clip_by_global_norm(recipe.clip_norm), adamw)
    return adamw
