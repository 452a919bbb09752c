"""Several short fine-tuning examples in one row: the same batch of examples, less padding.

A batch of B examples, each a row of features [L] padded to L = max_seq_len, becomes R packed
rows of L positions holding those same B examples, R usually well under B for short texts:

    input_ids, token_type_ids, attention_mask   [R, L]  the examples' tokens one after another
    segment_ids                                 [R, L]  1, 2, ... per example in its row, 0 pad
    example_positions                           [R, K]  where each example starts (its [CLS])
    the example targets (e.g. labels [B])       [R, K, ...]
    example_weights                             [R, K]  1 for an example, 0 for an empty slot
    the token targets (e.g. labels [B, L])      [R, L, ...]  under the example's own tokens,
                                                        a fill value (IGNORE, 0) elsewhere
    token_weights (with token targets only)     [R, L]  each token's example weight, 0 pad

K = `max_per_row`, the most examples one row may hold. Rows are filled first-fit in order of
decreasing length (each example goes to the first row with room), so the packing depends only
on the batch. R is rounded up to a multiple of `row_multiple` (empty rows are all padding): the
number of compiled programs is that of the distinct R, at most B / row_multiple; `num_rows`
gives a batch's R without building its arrays, so a run can list (and compile) every R it will
meet before its first step.

With the model's packed attention (bert_jax.model.encoder: a token sees only its own example,
positions restart per example) each example's outputs are those it has alone in a row, so the
loss of a packed batch (a sum over examples weighted by example_weights) equals the unpacked
batch's up to float rounding; only the dropout masks differ (drawn at the packed shape). A
per-token loss (token classification: a sum over tagged tokens) reads the token targets and
token_weights at the same positions as the logits, so the same holds for it; token_weights make
an example's weight (0 for a padding row) that of each of its tokens.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np

from bert_jax.data.row_layout import EXAMPLE_WEIGHTS, MASK_KEY, round_up, row_lengths

TOKEN_INPUTS = ("input_ids", "token_type_ids", MASK_KEY)
SEGMENT_IDS = "segment_ids"
EXAMPLE_POSITIONS = "example_positions"
TOKEN_WEIGHTS = "token_weights"


@dataclasses.dataclass(frozen=True)
class Packer:
    """Packs batches of example rows (module docstring).

    max_per_row: K, the most examples in one row (>= 1).
    row_multiple: R is a multiple of this (e.g. the devices the rows are split over).
    example_keys: the per-example arrays ([B, ...] targets) to carry into [R, K, ...].
    token_keys: {key: fill} of the per-token arrays ([B, L, ...] targets or weights) to carry
        into [R, L, ...]: an example's positions 0..n-1 land at its span start..start+n-1, as
        its input tokens do; every other position holds `fill` (e.g. {"labels": IGNORE}).
        With token keys the packed batch also has token_weights [R, L].
    """

    max_per_row: int
    row_multiple: int
    example_keys: tuple[str, ...]
    token_keys: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if self.max_per_row < 1 or self.row_multiple < 1:
            raise ValueError(f"packing needs max_per_row >= 1 and row_multiple >= 1, got "
                             f"{self.max_per_row} and {self.row_multiple}")

    def assign(self, lengths: np.ndarray, seq_len: int) -> list[list[int]]:
        """The examples of each row (indices into `lengths`), first fit by decreasing length."""
        rows: list[list[int]] = []
        room: list[int] = []
        for index in np.argsort(-lengths, kind="stable"):
            length = int(lengths[index])
            for r, free in enumerate(room):
                if free >= length and len(rows[r]) < self.max_per_row:
                    rows[r].append(int(index))
                    room[r] -= length
                    break
            else:
                rows.append([int(index)])
                room.append(seq_len - length)
        return rows

    def num_rows(self, lengths: np.ndarray, seq_len: int) -> int:
        """R, the packed rows of a batch whose examples have these lengths (what `pack` makes)."""
        return round_up(len(self.assign(lengths, seq_len)), self.row_multiple)

    def pack(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """A batch of B example rows ([B, L] inputs, [B, ...] or [B, L, ...] targets) -> packed
        arrays (module docstring)."""
        token_keys = tuple(self.token_keys)
        missing = [k for k in TOKEN_INPUTS + self.example_keys + token_keys if k not in batch]
        if missing:
            raise ValueError(f"packing: the batch lacks {missing}")
        seq_len = batch[MASK_KEY].shape[1]
        lengths = row_lengths(batch[MASK_KEY])
        rows = self.assign(lengths, seq_len)
        num_rows = round_up(len(rows), self.row_multiple)  # = self.num_rows(lengths, seq_len)
        out = {k: np.zeros((num_rows, seq_len), batch[k].dtype) for k in TOKEN_INPUTS}
        out[SEGMENT_IDS] = np.zeros((num_rows, seq_len), np.int32)
        out[EXAMPLE_POSITIONS] = np.zeros((num_rows, self.max_per_row), np.int32)
        out[EXAMPLE_WEIGHTS] = np.zeros((num_rows, self.max_per_row), np.float32)
        for key in self.example_keys:
            values = batch[key]
            out[key] = np.zeros((num_rows, self.max_per_row) + values.shape[1:], values.dtype)
        for key, fill in self.token_keys.items():
            values = batch[key]
            if values.shape[:2] != (len(lengths), seq_len):
                raise ValueError(f"packing: token key {key!r} has shape {values.shape}, not "
                                 f"[{len(lengths)}, {seq_len}, ...] as the inputs")
            out[key] = np.full((num_rows,) + values.shape[1:], fill, values.dtype)
        if token_keys:
            out[TOKEN_WEIGHTS] = np.zeros((num_rows, seq_len), np.float32)
        weights = batch.get(EXAMPLE_WEIGHTS)
        for r, members in enumerate(rows):
            start = 0
            for slot, index in enumerate(members):
                end = start + int(lengths[index])
                for key in TOKEN_INPUTS + token_keys:
                    out[key][r, start:end] = batch[key][index, :end - start]
                out[SEGMENT_IDS][r, start:end] = slot + 1
                out[EXAMPLE_POSITIONS][r, slot] = start
                out[EXAMPLE_WEIGHTS][r, slot] = 1.0 if weights is None else weights[index]
                if token_keys:
                    out[TOKEN_WEIGHTS][r, start:end] = out[EXAMPLE_WEIGHTS][r, slot]
                for key in self.example_keys:
                    out[key][r, slot] = batch[key][index]
                start = end
        return out

