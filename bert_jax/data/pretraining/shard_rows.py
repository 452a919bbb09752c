"""The global row sequence of a token-shard split: `ShardRows`, rows as a pure function of
(seed, global row index), whatever the number of processes, devices or workers.

Epoch e orders all documents of the split by a permutation seeded by (seed, e); its token stream
is the documents in that order, each as [CLS] doc [SEP]; the stream is cut into rows of exactly
seq_len tokens (a row may begin or end inside a document; the last row of an epoch is padded).
So every epoch has the same number of rows, R = ceil((tokens + 2 * documents) / seq_len), and
global row g is row g % R of epoch g // R. Within a row: segment_ids 1, 2, ... per document
piece (0: padding), position_ids from 0 at each piece's start (a piece continued from the row
before starts at the row's first token), token_type_ids 0.

Rows [a, b) are made by finding the documents they overlap (np.searchsorted on the epoch's
prefix sums), reading only those, and slicing their concatenation: vectorised numpy, no Python
loop over tokens.

Memory: the document token counts (4 bytes a document, `ShardDocuments.document_tokens`) plus,
per epoch planned, its permutation (4 bytes a document, int32 below 2**31 documents) and the
prefix sums of its pieces (8 bytes): about 16 bytes a document with one epoch planned, 28 while a
read crosses an epoch boundary (two are kept). 1e9 documents: ~16 GB; a blockwise shuffle would
bound it (not done).
"""

from __future__ import annotations

import dataclasses

import numpy as np

_ORDER_STREAM = 0x6F726472  # "ordr": separates the document order from other uses of the seed


@dataclasses.dataclass(frozen=True)
class _EpochPlan:
    order: np.ndarray   # [n] the documents in stream order
    ends: np.ndarray    # [n] int64: where each piece ([CLS] doc [SEP]) ends in the stream


class ShardRows:
    """Rows of `seq_len` tokens of one split (module docstring).

    documents: a `ShardDocuments` (or anything with len, `read(indices)` and
      `document_tokens()`); shuffle=False keeps the stored order in every epoch.
    rows(start, stop) -> dict of [stop - start, seq_len] int32 arrays: input_ids,
      token_type_ids, segment_ids, position_ids, for global rows [start, stop).
    """

    def __init__(self, documents, seq_len: int, cls_id: int, sep_id: int, pad_id: int,
                 seed: int, shuffle: bool = True):
        self.documents, self.seq_len, self.seed, self.shuffle = documents, seq_len, seed, shuffle
        self.cls_id, self.sep_id, self.pad_id = cls_id, sep_id, pad_id
        self._pieces = documents.document_tokens().astype(np.int64) + 2
        self.stream_tokens = int(self._pieces.sum())
        self.rows_per_epoch = -(-self.stream_tokens // seq_len)
        self._plans: dict[int, _EpochPlan] = {}

    def plan(self, epoch: int) -> _EpochPlan:
        """Epoch `epoch`'s document order and piece ends (the two newest are kept)."""
        if epoch not in self._plans:
            n = len(self._pieces)
            index_type = np.int32 if n < 2**31 else np.int64
            if self.shuffle:
                rng = np.random.default_rng([self.seed, _ORDER_STREAM, epoch])
                order = rng.permutation(n).astype(index_type)
            else:
                order = np.arange(n, dtype=index_type)
            self._plans = {e: p for e, p in self._plans.items() if e == epoch - 1}
            self._plans[epoch] = _EpochPlan(order, np.cumsum(self._pieces[order]))
        return self._plans[epoch]

    def rows(self, start: int, stop: int) -> dict[str, np.ndarray]:
        """Global rows [start, stop) (they may span epochs)."""
        if not 0 <= start <= stop:
            raise ValueError(f"rows [{start}, {stop}) is not a range of global rows")
        parts, row = [], start
        while row < stop:
            epoch, first = divmod(row, self.rows_per_epoch)
            count = min(stop - row, self.rows_per_epoch - first)
            parts.append(self._epoch_rows(epoch, first, count))
            row += count
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return self._epoch_rows(0, 0, 0)
        return {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}

    def _epoch_rows(self, epoch: int, first: int, count: int) -> dict[str, np.ndarray]:
        length = self.seq_len
        begin = first * length
        end = min((first + count) * length, self.stream_tokens)
        shape = (count, length)
        input_ids = np.full(count * length, self.pad_id, np.int32)
        segment_ids = np.zeros(count * length, np.int32)
        position_ids = np.zeros(count * length, np.int32)
        if end > begin:
            plan = self.plan(epoch)
            lo = int(np.searchsorted(plan.ends, begin, side="right"))  # first piece in range
            hi = int(np.searchsorted(plan.ends, end, side="left")) + 1   # one past the last
            hi = min(hi, len(plan.ends))
            pieces = self._pieces[plan.order[lo:hi]]
            piece_start = int(plan.ends[lo] - pieces[0])
            stream = self._stream(plan.order[lo:hi], pieces)
            used = end - begin
            input_ids[:used] = stream[begin - piece_start:end - piece_start]
            # the piece (counted from lo) and the stream offset of each token taken
            offsets = np.arange(begin, end, dtype=np.int64)
            piece = np.searchsorted(plan.ends[lo:hi], offsets, side="right")
            starts = plan.ends[lo:hi][piece] - pieces[piece]
            row_start = (offsets // length) * length
            position_ids[:used] = offsets - np.maximum(starts, row_start)
            first_piece = piece[(row_start - begin).astype(np.int64)]
            segment_ids[:used] = piece - first_piece + 1
        return {"input_ids": input_ids.reshape(shape),
                "token_type_ids": np.zeros(shape, np.int32),
                "segment_ids": segment_ids.reshape(shape),
                "position_ids": position_ids.reshape(shape)}

    def _stream(self, documents: np.ndarray, pieces: np.ndarray) -> np.ndarray:
        """[sum(pieces)] int32: the documents (by index) each as [CLS] doc [SEP], concatenated."""
        read = self.documents.read(documents)
        stream = np.empty(int(pieces.sum()), np.int32)
        ends = np.cumsum(pieces)
        starts = ends - pieces
        content = np.ones(len(stream), bool)
        content[starts] = False
        content[ends - 1] = False
        stream[starts] = self.cls_id
        stream[ends - 1] = self.sep_id
        if len(read):
            stream[content] = np.concatenate(read)
        return stream
