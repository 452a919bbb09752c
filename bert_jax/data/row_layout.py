"""The layout of a batch of token rows, which batching (bert_jax.data.batches) and example packing
(bert_jax.data.example_packing) both read and write.

    MASK_KEY          "attention_mask" [N, L]: 1 on a row's tokens, 0 on its padding
    EXAMPLE_WEIGHTS   "example_weights": what each example counts in a sum (0: padding)
    row_lengths       [N] lengths of left-aligned rows, from the attention mask
    round_up          a count of rows rounded up to a multiple (of the devices, the batch size)

Rows are left-aligned: a row's length is one past its last attention_mask 1 (`row_lengths`).
"""

from __future__ import annotations

import numpy as np

EXAMPLE_WEIGHTS = "example_weights"
MASK_KEY = "attention_mask"


def round_up(n: int, multiple: int) -> int:
    """The smallest multiple of `multiple` that is >= n (multiple >= 1)."""
    return -(-n // multiple) * multiple


def row_lengths(attention_mask: np.ndarray) -> np.ndarray:
    """[N] int: one past the last position whose mask is non-zero (0 for an empty row)."""
    mask = np.asarray(attention_mask) != 0
    last = mask.shape[1] - np.argmax(mask[:, ::-1], axis=1)
    return np.where(mask.any(axis=1), last, 0)
