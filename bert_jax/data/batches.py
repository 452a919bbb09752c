"""Batches of fixed-shape rows (dicts of [N, ...] numpy arrays) for training and evaluation.

    train_batches   endless, reshuffled every epoch, resumable (a grain iterator)
    eval_batches    one in-order pass; the last batch padded by `pad_rows`
    pad_rows        a partial batch -> a full one: zero rows with example_weights 0

Every batch of a pass has the same shape (one compilation); padding rows carry
example_weights 0 (and all-zero masks and weights), so they count in no sum.
"""

from __future__ import annotations

from typing import Iterator, Mapping

import grain
import numpy as np

from bert_jax.data.readers import DataError

EXAMPLE_WEIGHTS = "example_weights"


def round_up(n: int, multiple: int) -> int:
    """The smallest multiple of `multiple` that is >= n (multiple >= 1)."""
    return -(-n // multiple) * multiple


def pad_rows(batch: Mapping[str, np.ndarray], num_rows: int) -> dict[str, np.ndarray]:
    """`batch` (arrays [n, ...]) padded with zero rows to [num_rows, ...], with example_weights.

    example_weights [num_rows] float32: 1 for the n real rows and 0 for padding; a batch that
    already has example_weights keeps them, padded with 0. num_rows < n is an error.
    """
    rows = len(next(iter(batch.values())))
    if num_rows < rows:
        raise ValueError(f"cannot pad a batch of {rows} rows to {num_rows}")
    out = {name: np.concatenate([values, np.zeros((num_rows - rows,) + values.shape[1:],
                                                  values.dtype)])
           for name, values in batch.items()}
    if EXAMPLE_WEIGHTS not in batch:
        out[EXAMPLE_WEIGHTS] = (np.arange(num_rows) < rows).astype(np.float32)
    return out


def train_batches(features: Mapping[str, np.ndarray], global_batch_size: int, seed: int,
                  process_index: int = 0, process_count: int = 1) -> grain.DatasetIterator:
    """Endless host-local batches of rows, reshuffled every epoch; get_state/set_state resume.

    Each process takes every process_count-th row of the shuffled stream, so the processes'
    batches together form one global batch of distinct rows.
    """
    num_rows = len(next(iter(features.values())))
    if num_rows == 0:
        raise DataError("no training rows")
    if global_batch_size % process_count:
        raise DataError(f"batch_size={global_batch_size} is not divisible by the "
                        f"{process_count} processes")
    rows = (grain.MapDataset.range(num_rows).shuffle(seed=seed).repeat(None)
            [process_index::process_count])
    batches = rows.batch(global_batch_size // process_count, drop_remainder=True)
    batches = batches.map(lambda indices: {k: v[indices] for k, v in features.items()})
    return iter(batches)


def eval_batches(features: Mapping[str, np.ndarray], global_batch_size: int,
                 process_index: int = 0, process_count: int = 1
                 ) -> Iterator[dict[str, np.ndarray]]:
    """In-order host-local batches; the last is padded to the full size with example_weights 0.

    Every batch has the same shape (one compilation); row r of global batch b is example
    b * global_batch_size + r, this process holding a contiguous block of rows.
    """
    num_rows = len(next(iter(features.values())))
    per_process = global_batch_size // process_count
    for start in range(0, num_rows, global_batch_size):
        block = {name: values[start:start + global_batch_size]
                 for name, values in features.items()}
        batch = pad_rows(block, global_batch_size)
        lo = process_index * per_process
        yield {name: values[lo:lo + per_process] for name, values in batch.items()}
