"""Masked pre-training batches from a row stream, with an exact, resumable state:
`PretrainingIterator`.

Each row is masked dynamically in the main process (`bert_jax.data.pretraining.masking`), from a
generator seeded by (seed, stream, row number in the stream): the masks of a row are the same
however the run is interrupted and resumed. Batches have batch_rows rows; a finite pass ends with a
batch filled by all-padding rows of weight 0.

State: `PretrainingIterator.get_state()` is a JSON-serialisable dict; `set_state` on a fresh
iterator made with the same config, split, batch size and process layout resumes exactly. A state
saved by another number of processes cannot say where each new host is in its new range:
`set_state_of_other_layout` (given the state of the old process 0) starts a new pass over the data
in a new order instead, and says so in one warning (bert_jax.data.pretraining.host_shards).
`stream_identity` is what a saved state must match (`StreamIdentity`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from typing import Any, Callable, Optional

import grain
import numpy as np

from bert_jax.data.pretraining import host_shards
from bert_jax.data.pretraining.data_config import PretrainingDataConfig
from bert_jax.data.pretraining.document_packing import empty_row
from bert_jax.data.pretraining.masking import MaskingSpec, mask_row

_MASK_STREAM = 0x6D61736B  # "mask": separates the masking generator from other uses of the seed
STATE_VERSION = 2
_READABLE_VERSIONS = (1, 2)  # a version-1 state is one of a run that never changed its layout


@dataclasses.dataclass(frozen=True)
class StreamIdentity:
    """What a saved state must match. `fingerprint`: the config, split, batch rows, process layout
    and worker count (an exact resume); `data`: the config and split alone (a new pass on another
    layout); `process_count`: the layout's number of processes."""

    fingerprint: str
    data: str
    process_count: int


class PretrainingIterator:
    """Host-local pre-training batches with an exact, JSON-serialisable state.

    next(it) -> dict of numpy arrays with batch_rows rows:
      input_ids, token_type_ids, segment_ids, position_ids: [B, L] int32 (segment 0 = padding);
      masked_positions, masked_ids: [B, P] int32; masked_weights: [B, P] float32;
      nsp_labels: [B] int32 in sentence-pair mode only.
    The iterator reads `stride * batch_rows` rows of its row stream per batch and keeps those at
    `offset`, `offset + stride`, ... (stride 1 for a stream of this host's own documents; the
    process count for a finite pass, where every host reads the same stream). At the end of a
    finite pass the last batch is filled with all-padding rows (segment_ids 0, masked_weights 0),
    so every batch has the same shape, no row is dropped, and all hosts make the same number of
    batches.

    rows_for(layout_changes) -> the row stream of the pass after that many changes of the process
    layout (0: the run's first layout; `set_state_of_other_layout`).
    """

    def __init__(self, rows_for: Callable[[int], grain.IterDataset], cfg: PretrainingDataConfig,
                 masking: MaskingSpec, batch_rows: int, stream_id: int, pad_id: int,
                 identity: StreamIdentity, stride: int = 1, offset: int = 0):
        self._rows_for = rows_for
        self._cfg, self._masking, self._batch_rows = cfg, masking, batch_rows
        self._stream_id, self._pad_id, self._identity = stream_id, pad_id, identity
        self._stride, self._offset = stride, offset
        self._rows = iter(rows_for(0))
        self._layout_changes, self._seed = 0, cfg.seed
        self._rows_read = 0
        self._finished = False

    def __iter__(self) -> PretrainingIterator:
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        if self._finished:
            raise StopIteration
        mine = []
        read = 0
        for _ in range(self._stride * self._batch_rows):
            try:
                row = next(self._rows)
            except StopIteration:
                self._finished = True
                break
            if read % self._stride == self._offset:
                mine.append(self._mask(row, self._rows_read + read))
            read += 1
        if read == 0:
            raise StopIteration
        self._rows_read += read
        real = len(mine)
        while len(mine) < self._batch_rows:
            mine.append(self._padding_row())
        batch = _stacked(mine)
        if real < self._batch_rows:  # padding rows weigh 0 in every sum (NSP's too)
            batch["example_weights"] = (np.arange(self._batch_rows) < real).astype(np.float32)
        return batch

    def shape_examples(self, num_batches: int) -> list[dict[str, np.ndarray]]:
        """One batch of the shape every batch of this iterator has (all-padding rows; reading
        nothing): what a run compiles before its first step (bert_jax.train.program)."""
        del num_batches  # every batch has the same shape
        return [_stacked([self._padding_row()] * self._batch_rows)]

    def _mask(self, row: dict[str, np.ndarray], row_number: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng([self._seed, _MASK_STREAM, self._stream_id, row_number])
        input_ids, positions, ids, weights = mask_row(row["input_ids"], self._masking, rng)
        return {**row, "input_ids": input_ids, "masked_positions": positions, "masked_ids": ids,
                "masked_weights": weights}

    def _padding_row(self) -> dict[str, np.ndarray]:
        row = empty_row(self._cfg.seq_len, self._pad_id)
        p = self._cfg.max_predictions
        row.update(masked_positions=np.zeros([p], np.int32), masked_ids=np.zeros([p], np.int32),
                   masked_weights=np.zeros([p], np.float32))
        if self._cfg.sentence_pairs:
            row["nsp_labels"] = np.int32(0)
        return row

    def _start_pass(self, layout_changes: int) -> None:
        """A fresh row stream (at its start) of the pass after `layout_changes` layout changes."""
        self.close()
        self._rows = iter(self._rows_for(layout_changes))
        self._layout_changes = layout_changes
        self._seed = host_shards.pass_seed(self._cfg.seed, layout_changes)
        self._rows_read, self._finished = 0, False

    def get_state(self) -> dict[str, Any]:
        """JSON-serialisable: {"version", "fingerprint", "data_fingerprint", "process_count",
        "layout_changes", "rows_read", "finished", "grain"}."""
        return {"version": STATE_VERSION, "fingerprint": self._identity.fingerprint,
                "data_fingerprint": self._identity.data,
                "process_count": self._identity.process_count,
                "layout_changes": self._layout_changes, "rows_read": self._rows_read,
                "finished": self._finished, "grain": _jsonable(self._rows.get_state())}

    def set_state(self, state: dict[str, Any] | str | bytes) -> None:
        """Resumes from `get_state()` of an iterator made with the same config and layout."""
        state = _checked_version(state)
        if state["fingerprint"] != self._identity.fingerprint:
            raise ValueError("pipeline state was saved by a pipeline with another corpus, seed, "
                             "sequence length, mode, batch size, process layout or worker count; "
                             "it cannot resume this one")
        layout_changes = int(state.get("layout_changes", 0))
        if layout_changes != self._layout_changes:
            self._start_pass(layout_changes)
        self._rows.set_state(state["grain"])
        self._rows_read = int(state["rows_read"])
        self._finished = bool(state["finished"])

    def set_state_of_other_layout(self, state: dict[str, Any] | str | bytes) -> None:
        """Continues a run saved by another number of processes, given `get_state()` of its
        process 0: a new pass over the data in a new order (bert_jax.data.pretraining.host_shards),
        since a position in the old hosts' document ranges is none in the new ones. Says so in one
        warning. ValueError if the state is of another corpus, split or config."""
        state = _checked_version(state)
        if state.get("data_fingerprint") != self._identity.data:
            saved_by = state.get("process_count")
            raise ValueError(
                "pipeline state was saved by a pipeline with another corpus, split, seed, sequence "
                "length or mode (or by a version that does not record them); it cannot start a "
                "new pass of this one: resume with "
                + (f"{saved_by} processes" if saved_by else "as many processes as saved it"))
        self._start_pass(int(state.get("layout_changes", 0)) + 1)
        logging.warning(
            "data iterator: the checkpoint's data position was saved by %s process(es) and this "
            "run has %d, so the model state resumes exactly and the data starts a new pass over "
            "the corpus in a new order (pass %d); to continue the old pass exactly, resume with "
            "%s processes", state.get("process_count"), self._identity.process_count,
            self._layout_changes, state.get("process_count"))

    def close(self) -> None:
        close = getattr(self._rows, "close", None)
        if close is not None:
            close()


def _checked_version(state: dict[str, Any] | str | bytes) -> dict[str, Any]:
    """The state as a dict, if its version is one this module reads."""
    if isinstance(state, (str, bytes)):
        state = json.loads(state)
    if state.get("version") not in _READABLE_VERSIONS:
        raise ValueError(f"pipeline state version {state.get('version')!r}, expected one of "
                         f"{_READABLE_VERSIONS}")
    return state


def _jsonable(value):
    """grain states hold ints, strings, lists and dicts, sometimes numpy scalars: plain JSON."""
    plain = lambda v: v.item() if hasattr(v, "item") else str(v)
    return json.loads(json.dumps(value, default=plain))


def stream_identity(cfg: PretrainingDataConfig, split: str, process_index: int,
                    process_count: int, batch_rows: int, num_epochs: Optional[int]
                    ) -> StreamIdentity:
    """The fingerprint hashes the values, in the order, that version-1 states hashed: they still
    resume."""
    data = [cfg.corpus, split, cfg.seq_len, cfg.seed, cfg.sentence_pairs, cfg.min_segment_tokens]
    layout = [process_index, process_count, batch_rows, cfg.num_workers, num_epochs]
    return StreamIdentity(fingerprint=_digest(data + layout), data=_digest(data + [num_epochs]),
                          process_count=process_count)


def _digest(values: list[Any]) -> str:
    return hashlib.sha1(json.dumps(values).encode()).hexdigest()[:16]


def _stacked(rows: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """A batch of rows: each key's arrays stacked along a new first axis."""
    return {key: np.stack([row[key] for row in rows]) for key in rows[0]}
