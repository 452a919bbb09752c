"""Parameters with noise in every leaf, shared by the model tests."""

import jax
import numpy as np


def randomise(params, seed=1, scale=0.2):
    """Every leaf replaced by noise: non-zero biases and LayerNorm terms make the checks sharper."""
    rng = np.random.default_rng(seed)
    return jax.tree.map(
        lambda leaf: np.asarray(leaf) + (scale * rng.normal(size=leaf.shape)).astype(leaf.dtype),
        params)
