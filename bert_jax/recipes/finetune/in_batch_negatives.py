"""The in-batch-negatives loss of contrastive sentence embeddings (sentence-transformers'
MultipleNegativesRankingLoss), over the GLOBAL batch.

    in_batch_loss(vectors [b, K, H], example_weights [b], scale, symmetric) -> LossOutput

vectors[:, 0] are the anchors, vectors[:, 1] their positives and, with K = 3, vectors[:, 2]
their hard negatives, every vector L2-normalised. Each anchor is scored against the candidates
of the whole global batch of B examples: all B positives, then all B hard negatives,
`scale * cosine` (as sentence-transformers orders them: candidate j < B is positive j), and
the loss is the cross-entropy with its own positive as the target: one right answer among
B * (K - 1) candidates, so B * (K - 1) - 1 negatives per example (B - 1 for pairs, 2B - 1 with
hard negatives), whatever the number of devices. symmetric: also every positive
against the B anchors (B - 1 negatives), target its own anchor, and the two cross-entropies
averaged (MultipleNegativesSymmetricRankingLoss).

Where the batch lives:
  * under jit with batch-sharded global arrays (the partitioner's step) `b` is the global B:
    the [B, B * (K - 1)] score matrix makes XLA all-gather the candidate vectors over the data
    axes (one all-gather of B * (K - 1) * H floats per step, tiny beside the encoder's
    activations);
  * inside the explicit-fsdp step's shard_map (bert_jax.train.fsdp.gradients: the batch axes
    `data` and `fsdp` manual) each device holds b = B / devices rows: the vectors [b, K, H] and
    weights of every device are all-gathered here over the manual axes, and a device's
    anchor i is global example axis_index * b + i. The gather's transpose (a reduce-scatter)
    brings every device's gradient of its own vectors back, so the step equals the global one.

Padding rows (example_weights 0) are neither scored nor candidates. The loss of one example
depends on the whole batch, so the sum over micro-batches of gradient accumulation would be
another loss (fewer negatives): the contrastive kind refuses accumulation_steps > 1.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from bert_jax.recipes.finetune.losses import LossOutput

LOSS_TERM = "in_batch_cross_entropy"
ACCURACY = "in_batch_accuracy"  # the own positive scored highest among all candidates
MASKED = -1e9  # the score of a padding candidate: never the softmax's choice
NOT_BATCH_AXES = ("tensor",)  # manual mesh axes that do not split the batch's rows


def batch_axes() -> tuple[str, ...]:
    """The manual mesh axes the rows are split over where this is traced (inside the explicit
    fsdp step's shard_map), in mesh order; () under the partitioner (global arrays)."""
    manual = jax.sharding.get_abstract_mesh().manual_axes
    return tuple(axis for axis in manual if axis not in NOT_BATCH_AXES)


def _global(x: jax.Array, axes: tuple[str, ...]) -> jax.Array:
    """[b, ...] -> [B, ...]: every device's rows in global order (x itself when axes is ())."""
    return jax.lax.all_gather(x, axes, axis=0, tiled=True) if axes else x


def in_batch_loss(vectors: jax.Array, example_weights: jax.Array, scale: float,
                  symmetric: bool) -> LossOutput:
    """({LOSS_TERM: (sum, weight)}, {ACCURACY: (sum, weight)}) over this shard's anchors
    (module docstring); vectors float32 [b, K, H] with K in (2, 3), example_weights [b]."""
    b, k = vectors.shape[:2]
    if k not in (2, 3):
        raise ValueError(f"contrastive vectors of shape {vectors.shape}: expected 2 or 3 texts "
                         "per example (anchor, positive[, hard negative])")
    vectors = vectors.astype(jnp.float32)
    weights = example_weights.astype(jnp.float32)
    axes = batch_axes()
    offset = jax.lax.axis_index(axes) * b if axes else 0
    all_vectors, all_weights = _global(vectors, axes), _global(weights, axes)  # [B, K, H], [B]
    # [B * (K - 1), H]: positives 0..B-1, then hard negatives 0..B-1
    candidates = jnp.swapaxes(all_vectors[:, 1:], 0, 1).reshape(-1, vectors.shape[-1])
    real = jnp.tile(all_weights > 0, k - 1)
    targets = offset + jnp.arange(b)
    scores = jnp.where(real, scale * vectors[:, 0] @ candidates.T, MASKED)  # [b, B * (K - 1)]
    cross_entropy = optax.softmax_cross_entropy_with_integer_labels(scores, targets)
    if symmetric:
        backward = jnp.where(all_weights > 0, scale * vectors[:, 1] @ all_vectors[:, 0].T,
                             MASKED)  # [b, B]: positives against the anchors
        cross_entropy = (cross_entropy + optax.softmax_cross_entropy_with_integer_labels(
            backward, targets)) / 2
    correct = (jnp.argmax(scores, -1) == targets).astype(jnp.float32)
    total = jnp.sum(weights)
    return ({LOSS_TERM: (jnp.sum(cross_entropy * weights), total)},
            {ACCURACY: (jnp.sum(correct * weights), total)})
