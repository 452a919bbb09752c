"""Batches of rows (dicts of [N, ...] numpy arrays) for training and evaluation.

    train_batches   endless, reshuffled every epoch, resumable (get_state/set_state); optionally
                    grouped by length; lists one batch of each shape it will yield
                    (`TrainBatches.shape_examples`), so that a run compiles them all first
    eval_batches    one in-order pass; the last batch padded by `pad_rows`
    pad_rows        a partial batch -> a full one: zero rows with example_weights 0
    Buckets         the lengths a batch's token arrays may be cut to

Without buckets every batch of a pass has the rows' full length L: one shape, one compilation.
With buckets, each batch is cut to the smallest bucket that holds its longest row, so a set of
short texts is not computed at L, and XLA compiles one program per bucket, not one per batch.
Bucketing never cuts a token of a row nor drops a row: it only removes padding columns.
Padding rows carry example_weights 0 (and all-zero masks and weights), so they count in no sum.

Rows are left-aligned: a row's length is one past its last attention_mask 1 (`row_lengths`): the
layout of bert_jax.data.row_layout, which example packing shares.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Optional

import numpy as np

from bert_jax.data.row_layout import EXAMPLE_WEIGHTS, MASK_KEY, row_lengths
from bert_jax.data.textfiles import DataError

if TYPE_CHECKING:
    import grain

    from bert_jax.data.example_packing import Packer


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


# ----- length buckets --------------------------------------------------------------------------

def power_of_two_lengths(max_len: int, smallest: int = 16) -> tuple[int, ...]:
    """(smallest, 2 * smallest, ... below max_len, max_len): e.g. 128 -> (16, 32, 64, 128)."""
    lengths, length = [], smallest
    while length < max_len:
        lengths.append(length)
        length *= 2
    return tuple(lengths) + (max_len,)


@dataclasses.dataclass(frozen=True)
class Buckets:
    """The lengths that the token arrays of a batch are cut to.

    lengths: ascending bucket lengths. A batch goes to the smallest one that holds its longest
      row; one whose longest row fits none keeps its full length (no row is ever cut).
    token_keys: the arrays with a token axis, [N, L, ...], cut along axis 1 (the model inputs,
      and targets per token); the others ([N], [N, C]) are left as they are.
    """

    lengths: tuple[int, ...]
    token_keys: tuple[str, ...]

    def __post_init__(self):
        if not self.lengths or any(not isinstance(n, (int, np.integer)) or n < 1
                                   for n in self.lengths):
            raise ValueError(f"bucket lengths {self.lengths!r} must be positive integers")
        if list(self.lengths) != sorted(set(self.lengths)):
            raise ValueError(f"bucket lengths {self.lengths!r} must be strictly ascending")
        if MASK_KEY not in self.token_keys:
            raise ValueError(f"bucket token_keys {self.token_keys!r} must include {MASK_KEY!r}")

    def length_for(self, longest: int, full: int) -> int:
        """The length a batch of rows of `full` columns whose longest row is `longest` gets."""
        fitting = [n for n in self.lengths if n >= longest]
        return min(fitting[0], full) if fitting else full

    def cut(self, batch: Mapping[str, np.ndarray], longest: Optional[int] = None
            ) -> dict[str, np.ndarray]:
        """`batch` with its token arrays cut to the bucket of `longest` (default: the longest
        row of this batch; pass the global batch's when this is one process's share)."""
        full = batch[MASK_KEY].shape[1]
        if longest is None:
            longest = int(row_lengths(batch[MASK_KEY]).max(initial=0))
        length = self.length_for(longest, full)
        out = dict(batch)
        for key in self.token_keys:
            if batch[key].ndim < 2 or batch[key].shape[1] != full:
                raise ValueError(f"bucketing: {key!r} has shape {batch[key].shape}, not "
                                 f"[rows, {full}, ...] like {MASK_KEY!r}")
            out[key] = batch[key][:, :length]
        return out


# ----- training --------------------------------------------------------------------------------

def _grouped(rows: grain.MapDataset, lengths: np.ndarray, batch_size: int, group: int,
             seed: int) -> grain.MapDataset:
    """Global batches of `rows` grouped by length: each window of `group` consecutive batches
    of the stream is sorted by row length, cut into batches, and those are put in a seeded
    random order. The same rows as ungrouped batches, only redistributed inside a window."""
    import grain  # not with the module: see train_batches
    windows = rows.batch(group * batch_size, drop_remainder=True)

    def batch(number: int) -> np.ndarray:
        window, part = divmod(number, group)
        indices = windows[window]
        by_length = indices[np.argsort(-lengths[indices], kind="stable")]
        order = np.random.default_rng([seed, window]).permutation(group)
        return by_length[order[part] * batch_size:(order[part] + 1) * batch_size]

    return grain.MapDataset.range(len(windows) * group).map(batch)


class TrainBatches:
    """The iterator `train_batches` returns: host-local batches, resumable, that can say ahead
    of time which shapes they come in.

    get_state/set_state: the underlying grain iterator's, for checkpoints.
    shape_examples(num_batches): one batch of each distinct shape among batches 0 ..
      num_batches - 1 (in order of first appearance), found from the rows' lengths alone: the
      shapes a run of that many steps needs compiled. Batches past num_batches may still bring
      a new shape (then it is compiled when it comes).
    """

    def __init__(self, iterator: grain.DatasetIterator, global_batches: grain.MapDataset,
                 host_batch: Callable[[np.ndarray], dict[str, np.ndarray]],
                 shape_key: Callable[[np.ndarray], Any]):
        self._iterator, self._global_batches = iterator, global_batches
        self._host_batch, self._shape_key = host_batch, shape_key

    def __iter__(self) -> TrainBatches:
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        return next(self._iterator)

    def get_state(self) -> dict:
        return self._iterator.get_state()

    def set_state(self, state: dict) -> None:
        self._iterator.set_state(state)

    def shape_examples(self, num_batches: int) -> list[dict[str, np.ndarray]]:
        firsts: dict[Any, int] = {}
        for number in range(num_batches):
            firsts.setdefault(self._shape_key(self._global_batches[number]), number)
        return [self._host_batch(self._global_batches[number]) for number in firsts.values()]


def train_batches(features: Mapping[str, np.ndarray], global_batch_size: int, seed: int,
                  process_index: int = 0, process_count: int = 1,
                  buckets: Optional[Buckets] = None, group_by_length: int = 0,
                  packer: Optional[Packer] = None) -> TrainBatches:
    """Endless host-local batches of rows, reshuffled every epoch; get_state/set_state resume.

    Global batch k holds rows k * B .. (k + 1) * B - 1 of the shuffled stream (B the global batch
    size); each process takes every process_count-th of them, so the processes' batches together
    form one global batch of distinct rows. buckets: token arrays cut to the bucket of the global
    batch's longest row (all processes agree). group_by_length > 1: batches of rows of similar
    length, grouped over windows of that many batches (`_grouped`; changes which rows go
    together, so it is off by default); needs features[attention_mask]. packer: each global
    batch packed into rows of several examples (bert_jax.data.example_packing; instead of
    buckets), each process taking its contiguous share of the rows.
    """
    # grain is imported here, not with the module: evaluation (pad_rows, eval_batches) and so the
    # train loop import this module without needing grain.
    import grain
    num_rows = len(next(iter(features.values())))
    if num_rows == 0:
        raise DataError("no training rows")
    if global_batch_size % process_count:
        raise DataError(f"batch_size={global_batch_size} is not divisible by the "
                        f"{process_count} processes")
    lengths = (row_lengths(features[MASK_KEY])
               if buckets is not None or group_by_length > 1 or packer is not None else None)
    rows = grain.MapDataset.range(num_rows).shuffle(seed=seed).repeat(None)
    if group_by_length > 1:
        global_batches = _grouped(rows, lengths, global_batch_size, group_by_length, seed)
    else:
        global_batches = rows.batch(global_batch_size, drop_remainder=True)

    def host_batch(indices: np.ndarray) -> dict[str, np.ndarray]:
        if packer is not None:
            packed = packer.pack({k: v[indices] for k, v in features.items()})
            share = len(packed[MASK_KEY]) // process_count
            return {k: v[process_index * share:(process_index + 1) * share]
                    for k, v in packed.items()}
        mine = indices[process_index::process_count]
        batch = {k: v[mine] for k, v in features.items()}
        return batch if buckets is None else buckets.cut(batch, int(lengths[indices].max()))

    full = features[MASK_KEY].shape[1] if MASK_KEY in features else 0

    def shape_key(indices: np.ndarray) -> Any:
        """What decides a batch's shape: its packed row count, its bucket, or nothing."""
        if packer is not None:
            return packer.num_rows(lengths[indices], full)
        if buckets is not None:
            return buckets.length_for(int(lengths[indices].max()), full)
        return None

    # grain's default read options (16 threads, 500 batches ahead) would build 500 batches at
    # every start, however short the run, in threads that compete with the training step for
    # the host's cores and the GIL; a few batches ahead keep the step fed (row gathers from
    # arrays in memory). The same batches in the same order, the same iterator state.
    iterator = global_batches.map(host_batch).to_iter_dataset(
        grain.ReadOptions(num_threads=4, prefetch_buffer_size=32))
    return TrainBatches(iter(iterator), global_batches, host_batch, shape_key)


# ----- evaluation ------------------------------------------------------------------------------

def eval_batches(features: Mapping[str, np.ndarray], global_batch_size: int,
                 process_index: int = 0, process_count: int = 1,
                 buckets: Optional[Buckets] = None) -> Iterator[dict[str, np.ndarray]]:
    """In-order host-local batches; the last is padded to the full size with example_weights 0.

    Row r of global batch b is example b * global_batch_size + r, this process holding a
    contiguous block of rows. Every batch has global_batch_size rows; without buckets also the
    full length (one compilation), with buckets the bucket of the global batch's longest row.
    """
    num_rows = len(next(iter(features.values())))
    per_process = global_batch_size // process_count
    for start in range(0, num_rows, global_batch_size):
        block = {name: values[start:start + global_batch_size]
                 for name, values in features.items()}
        batch = pad_rows(block, global_batch_size)
        if buckets is not None:
            batch = buckets.cut(batch)
        lo = process_index * per_process
        yield {name: values[lo:lo + per_process] for name, values in batch.items()}

