"""Packing token-id documents into rows of exactly seq_len tokens (MLM mode), resumably.

The documents are `DocumentTokens` (bert_jax.data.pretraining.document_tokens): a row asks each for
the ids it can take next, so a document is tokenized as far as the rows made so far reach and no
further. Documents are packed greedily, each piece as [CLS] piece [SEP] with its own segment id (1,
2, ...) and positions restarting at 0; a document that does not fit the rest of a row continues in
the next one (split before a word start, never dropped); a row is closed (padded) only when fewer
than 2 + min_segment_tokens places are left.

A row is a dict of [seq_len] int32 arrays: input_ids, token_type_ids, segment_ids (0 = padding),
position_ids. The grain iterators here can be checkpointed in the middle of a document: their
state is the parent's state before the current item plus an offset into it (`ResumableItems`),
and for a DocumentTokens the window boundary at or before that offset, from which a resume goes
on tokenizing (the whole document before it is not tokenized again).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import grain
import numpy as np

from bert_jax.data.pretraining.document_tokens import DocumentTokens


def split_point(tokens: np.ndarray, end: int, start: int, is_continuation: np.ndarray) -> int:
    """The largest cut <= end that starts a word at tokens[cut] (a hard cut at `end` if the word
    would take more than half of tokens[start:end])."""
    cut = end
    lowest = start + max(1, (end - start) // 2)
    while cut > lowest and cut < len(tokens) and is_continuation[tokens[cut]]:
        cut -= 1
    return cut if cut < len(tokens) and not is_continuation[tokens[cut]] else end


@dataclasses.dataclass(frozen=True)
class PackingSpec:
    seq_len: int
    cls_id: int
    sep_id: int
    pad_id: int
    min_segment_tokens: int
    is_continuation: np.ndarray    # [vocab] bool: "##" pieces
    documents_per_epoch: int


def empty_row(seq_len: int, pad_id: int = 0) -> dict[str, np.ndarray]:
    """An all-padding row: input_ids pad_id, the other [seq_len] int32 arrays 0."""
    return {"input_ids": np.full([seq_len], pad_id, np.int32),
            "token_type_ids": np.zeros([seq_len], np.int32),
            "segment_ids": np.zeros([seq_len], np.int32),
            "position_ids": np.zeros([seq_len], np.int32)}


def _has_element(item: Any, offset: int) -> bool:
    """Whether `item` has an element at `offset`: a sequence, or an item made as it is read
    (a DocumentTokens, sentence_pairs.DocumentRows) that says so with `has(offset)`."""
    if hasattr(item, "has"):
        return item.has(offset)
    return offset < len(item)


class ResumableItems:
    """Reads a parent grain iterator one item at a time, remembering the parent state before the
    current item, so a consumer can be checkpointed in the middle of an item.

    Items are sequences, or items made as they are read (`_has_element`), whose length is known
    only once they are read to the end. Empty items are skipped; `items_per_epoch` empty items in
    a row mean the data holds nothing at all (every document tokenizes to nothing), an error
    rather than an endless loop.
    """

    def __init__(self, parent: grain.DatasetIterator, items_per_epoch: int):
        self.parent = parent
        self.items_per_epoch = items_per_epoch
        self.item: Any = None
        self.offset = 0
        self.state_before_item: Any = None

    def advance(self) -> bool:
        """Loads the next non-empty item (offset 0); False at the end of the parent."""
        for _ in range(self.items_per_epoch):
            before = self.parent.get_state()
            try:
                self.item = next(self.parent)
            except StopIteration:
                self.item = None
                return False
            self.offset, self.state_before_item = 0, before
            if _has_element(self.item, 0):
                return True
        raise ValueError(f"{self.items_per_epoch} documents in a row gave no tokens: the corpus "
                         "holds no text this vocabulary can tokenize")

    def exhausted(self) -> bool:
        """True when the current item is used up (or none is loaded)."""
        return self.item is None or not _has_element(self.item, self.offset)

    def get_state(self) -> dict[str, Any]:
        """{"parent", "offset"}, and "window": [char, id] for a DocumentTokens item."""
        if self.item is None:
            return {"parent": self.parent.get_state(), "offset": -1}
        state = {"parent": self.state_before_item, "offset": self.offset}
        if isinstance(self.item, DocumentTokens):
            state["window"] = list(self.item.resume_point(self.offset))
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Resumes at `get_state()`; a state without "window" (saved before documents were
        tokenized by windows) tokenizes its document from the beginning."""
        self.parent.set_state(state["parent"])
        self.item = None
        if state["offset"] >= 0:
            if not self.advance():
                raise ValueError("iterator state points past the end of its data")
            if "window" in state and isinstance(self.item, DocumentTokens):
                self.item.seek(*state["window"])
            self.offset = state["offset"]


class ItemsIterator(grain.DatasetIterator):
    """A grain iterator that consumes its parent through `self._items` (a ResumableItems), and
    whose state is that of the items: subclasses define only __next__."""

    def __init__(self, parent: grain.DatasetIterator, items_per_epoch: int):
        super().__init__(parent)
        self._items = ResumableItems(parent, items_per_epoch)

    def get_state(self) -> dict[str, Any]:
        return self._items.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        self._items.set_state(state)


class _PackedRowsIterator(ItemsIterator):
    def __init__(self, parent: grain.DatasetIterator, spec: PackingSpec):
        super().__init__(parent, spec.documents_per_epoch)
        self._spec = spec

    def __next__(self) -> dict[str, np.ndarray]:
        spec, docs = self._spec, self._items
        row = empty_row(spec.seq_len, spec.pad_id)
        used = segment = 0
        while True:
            if docs.exhausted() and not docs.advance():
                break
            start = docs.offset
            space = spec.seq_len - used - 2
            # One id past the space says whether the document goes on (and whether the id after
            # a cut starts a word); fewer than space + 1 ids: the rest of the document.
            tokens = docs.item.ids(start, start + space + 1)
            if space < min(spec.min_segment_tokens, len(tokens)):
                break
            end = min(len(tokens), space)
            if end < len(tokens):
                end = split_point(tokens, end, 0, spec.is_continuation)
            length = end + 2
            segment += 1
            row["input_ids"][used:used + length] = np.concatenate(
                [[spec.cls_id], tokens[:end], [spec.sep_id]])
            row["segment_ids"][used:used + length] = segment
            row["position_ids"][used:used + length] = np.arange(length)
            used += length
            docs.offset = start + end
        if used == 0:
            raise StopIteration
        return row


class ItemsIterDataset(grain.IterDataset):
    """The IterDataset of an ItemsIterator: each iteration is `iterator_type(parent iterator,
    argument)`; subclasses set iterator_type."""

    iterator_type: type[ItemsIterator]

    def __init__(self, parent: grain.IterDataset, argument: Any):
        super().__init__(parent)
        self._argument = argument

    def __iter__(self) -> ItemsIterator:
        return self.iterator_type(self._parent.__iter__(), self._argument)


class PackedRowsIterDataset(ItemsIterDataset):
    """DocumentTokens -> rows [seq_len] with segment and position ids (module doc).

    PackedRowsIterDataset(parent, spec: PackingSpec)."""

    iterator_type = _PackedRowsIterator
