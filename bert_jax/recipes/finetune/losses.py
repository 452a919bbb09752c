"""The loss functions the fine-tuning kinds share, and the type of a kind's loss() result.

A loss returns (loss terms, metrics), each a dict of (sum, weight) pairs (`Weighted`): sums over
the examples (or tokens) weighted by the batch's example weights, and the total weight, so that
batches and devices combine by adding (bert_jax.train.steps.LossFn). Kept apart from kinds.py,
which holds the TaskKind interface and its registry.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

Weighted = tuple[jax.Array, jax.Array]
LossOutput = tuple[dict[str, Weighted], dict[str, Weighted]]


def softmax_cross_entropy(logits: jax.Array, labels: jax.Array, weights: jax.Array,
                          accuracy_name: str) -> LossOutput:
    """({"cross_entropy": (sum, weight)}, {accuracy_name: (sum, weight)}) of class logits
    [..., C] against integer labels [...], each position weighted by `weights` [...]."""
    logits = logits.astype(jnp.float32)
    cross_entropy = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
    correct = (jnp.argmax(logits, -1) == labels).astype(jnp.float32)
    total = jnp.sum(weights)
    return ({"cross_entropy": (jnp.sum(cross_entropy * weights), total)},
            {accuracy_name: (jnp.sum(correct * weights), total)})
