"""Sentence pairs with next-sentence labels: BERT's [CLS] A [SEP] B [SEP] rows.

One document at a time: its token-id lines are cut into sentences (at ".", "!", "?" and line
ends), gathered into chunks up to a target length (shorter with probability short_seq_prob, as
in BERT), and each chunk split into A and B: the actual continuation (nsp_labels 0) or, with
probability 1/2, a random span of another document (nsp_labels 1). One pair per row, with token
types 0/1, one segment, padded to seq_len; every sentence of a document lands in some row.

A document's rows are made as they are read (`DocumentRows`), and its text is tokenized a window
at a time as its sentences are needed (`Sentences`; windows as in
bert_jax.data.pretraining.document_tokens): a long document holds back neither its first row nor
anyone's random B, which comes from the whole of a document of one window and from a span at a
random line of a longer one (`random_span_sentences`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterator, Sequence

import grain
import numpy as np

from bert_jax.data.pretraining import document_tokens
from bert_jax.data.pretraining.document_packing import (
    ItemsIterator,
    ItemsIterDataset,
    empty_row,
    split_point,
)

_PAIR_STREAM = 0x70616972  # "pair": separates the pairing generator from other uses of the seed
RANDOM_SPAN_CHARS = 4096  # of a long document, where a random B is drawn (random_span_sentences)


@dataclasses.dataclass(frozen=True)
class PairSpec:
    """Row layout (special ids, seq_len) and what cuts sentences and words."""

    seq_len: int
    cls_id: int
    sep_id: int
    pad_id: int
    sentence_end_ids: tuple[int, ...]
    short_seq_prob: float
    is_continuation: np.ndarray        # [vocab] bool: "##" pieces

    @property
    def max_tokens(self) -> int:
        """Tokens of A and B together: seq_len less [CLS] and two [SEP]."""
        return self.seq_len - 3


def split_sentences(lines: Sequence[Sequence[int]], spec: PairSpec) -> list[np.ndarray]:
    """Token-id lines -> sentences: cut after ".", "!", "?" and at line ends; a sentence longer
    than max_tokens // 2 is cut into pieces (at word starts) so that no token is ever dropped."""
    limit = max(1, spec.max_tokens // 2)
    sentences = []
    for line in lines:
        line = np.asarray(line, np.int32)
        ends = np.flatnonzero(np.isin(line, spec.sentence_end_ids)) + 1
        for sentence in np.split(line, ends):
            start = 0
            while start < len(sentence):
                end = start + limit
                if end < len(sentence):
                    end = split_point(sentence, end, start, spec.is_continuation)
                sentences.append(sentence[start:end])
                start = end
    return [s for s in sentences if len(s)]


class Sentences:
    """The sentences (`split_sentences`) of one document's text, tokenized a window at a time as
    `has(i)` asks for sentence i; `forget_before(i)` lets the earlier ones go.

    encode_batch: texts -> their token-id lists. Windows end at line ends where the text has them
    (`document_tokens.window_end`), so the sentences are those of the whole text; a line longer
    than half a window may get one more sentence end, where its window ends.
    """

    def __init__(self, text: str, encode_batch: Callable[[list[str]], list[list[int]]],
                 spec: PairSpec, window_chars: int = document_tokens.WINDOW_CHARS,
                 start: int = 0):
        self._text, self._encode_batch, self._spec = text, encode_batch, spec
        self._window_chars = window_chars
        self._chars = start  # text[start:_chars] is split into sentences
        self._first = 0  # the index of self._held[0]
        self._held: list[np.ndarray] = []

    def has(self, index: int) -> bool:
        while index >= self._first + len(self._held) and self._split_next_window():
            pass
        return index < self._first + len(self._held)

    def __getitem__(self, index: int) -> np.ndarray:
        if not self.has(index) or index < self._first:
            raise IndexError(f"sentence {index} is not held (held: {self._first}.."
                             f"{self._first + len(self._held) - 1})")
        return self._held[index - self._first]

    def forget_before(self, index: int) -> None:
        drop = max(0, min(index - self._first, len(self._held)))
        del self._held[:drop]
        self._first += drop

    def window(self) -> list[np.ndarray]:
        """The sentences of the first window (all of them for a text of one window)."""
        self._split_next_window()
        return list(self._held)

    def _split_next_window(self) -> bool:
        if self._chars >= len(self._text):
            return False
        end = document_tokens.window_end(self._text, self._chars, self._window_chars)
        lines = [line for line in self._text[self._chars:end].split("\n") if line.strip()]
        self._held.extend(split_sentences(self._encode_batch(lines) if lines else [], self._spec))
        self._chars = end
        return True


def random_span_sentences(text: str, encode_batch: Callable[[list[str]], list[list[int]]],
                          spec: PairSpec, rng: np.random.Generator) -> list[np.ndarray]:
    """Sentences to draw a random B from: all of `text` when it fits in one window; else those
    of RANDOM_SPAN_CHARS characters from the start of a random line (a B needs a few hundred
    characters at most, so a long document costs no more than a short one)."""
    if len(text) <= document_tokens.WINDOW_CHARS:
        return Sentences(text, encode_batch, spec).window()
    start = text.rfind("\n", 0, int(rng.integers(0, len(text)))) + 1
    return Sentences(text, encode_batch, spec, RANDOM_SPAN_CHARS, start).window()


def pair_instances(sentences: Sentences, random_sentences: Callable[[], list[np.ndarray]],
                   spec: PairSpec, rng: np.random.Generator,
                   ) -> Iterator[tuple[np.ndarray, np.ndarray, int]]:
    """BERT's instances from one document: (tokens_a, tokens_b, nsp_label) with 1 = random B,
    made as they are read.

    Every sentence of the document lands in some A or actual-next B; only random Bs are cut to fit.
    """
    target = spec.max_tokens
    if rng.random() < spec.short_seq_prob:
        target = int(rng.integers(2, spec.max_tokens + 1))
    chunk: list[np.ndarray] = []
    length = 0
    i = 0
    while sentences.has(i):
        if chunk and length + len(sentences[i]) > spec.max_tokens:
            full = True
        else:
            chunk.append(sentences[i])
            length += len(sentences[i])
            i += 1
            full = length >= target or not sentences.has(i)
        if not full:
            continue
        a_end = 1 if len(chunk) == 1 else int(rng.integers(1, len(chunk)))
        tokens_a = np.concatenate(chunk[:a_end])
        if len(chunk) == 1 or rng.random() < 0.5:
            label = 1
            other = random_sentences()
            start = int(rng.integers(0, len(other))) if other else 0
            tokens_b = np.concatenate(other[start:] or [np.zeros([0], np.int32)])
            room = spec.max_tokens - len(tokens_a)
            if len(tokens_b) > room:
                tokens_b = tokens_b[:split_point(tokens_b, room, 0, spec.is_continuation)]
            i -= len(chunk) - a_end  # the unused sentences start the next chunk
        else:
            label = 0
            tokens_b = np.concatenate(chunk[a_end:])
        yield tokens_a, tokens_b, label
        sentences.forget_before(i)
        chunk, length = [], 0
        target = spec.max_tokens
        if rng.random() < spec.short_seq_prob:
            target = int(rng.integers(2, spec.max_tokens + 1))


def pair_row(tokens_a: np.ndarray, tokens_b: np.ndarray, label: int,
             spec: PairSpec) -> dict[str, np.ndarray]:
    """[CLS] A [SEP] B [SEP] padded to seq_len, with token types, one segment and the NSP label."""
    ids = np.concatenate([[spec.cls_id], tokens_a, [spec.sep_id], tokens_b, [spec.sep_id]])
    n = len(ids)
    row = empty_row(spec.seq_len, spec.pad_id)
    row["input_ids"][:n] = ids
    row["token_type_ids"][len(tokens_a) + 2:n] = 1
    row["segment_ids"][:n] = 1
    row["position_ids"][:n] = np.arange(n)
    row["nsp_labels"] = np.int32(label)
    return row


class DocumentRows:
    """The rows of one document, made as they are read: has(i), then [i], forwards (the rows
    before the last one asked for are let go)."""

    def __init__(self, rows: Iterator[dict[str, np.ndarray]]):
        self._rows = rows
        self._index = -1  # of self._row, the last row made
        self._row: Any = None

    def has(self, index: int) -> bool:
        while self._index < index:
            row = next(self._rows, None)
            if row is None:
                return False
            self._index, self._row = self._index + 1, row
        return self._index == index

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        if not self.has(index):
            raise IndexError(f"row {index} is not held (rows are read forwards)")
        return self._row


class PairRows:
    """Picklable map (stream index, document index) -> DocumentRows of one document, its first
    row made (by the read-ahead threads).

    documents: the text of each document; encode_batch: texts -> token-id lists. The rows of a
    document depend only on (seed, process_index, stream_index), so they are the same however
    the run is resumed.
    """

    def __init__(self, documents: grain.MapDataset, encode_batch: Callable, spec: PairSpec,
                 seed: int, process_index: int):
        self.documents, self.encode_batch, self.spec = documents, encode_batch, spec
        self.seed, self.process_index = seed, process_index

    def __call__(self, stream_index: int, document_index: int) -> DocumentRows:
        rng = np.random.default_rng([self.seed, _PAIR_STREAM, self.process_index, stream_index])
        n = len(self.documents)

        def random_sentences():
            other = int(rng.integers(0, n - 1)) if n > 1 else 0
            other += int(n > 1 and other >= document_index)  # any document but this one
            return random_span_sentences(self.documents[other], self.encode_batch, self.spec,
                                         rng)

        sentences = Sentences(self.documents[document_index], self.encode_batch, self.spec)
        instances = pair_instances(sentences, random_sentences, self.spec, rng)
        rows = DocumentRows(pair_row(a, b, label, self.spec) for a, b, label in instances)
        rows.has(0)
        return rows


class _FlattenedIterator(ItemsIterator):
    def __next__(self):
        lists = self._items
        while lists.exhausted():
            if not lists.advance():
                raise StopIteration
        lists.offset += 1
        return lists.item[lists.offset - 1]


class FlattenedIterDataset(ItemsIterDataset):
    """Lists -> their elements, one at a time, with a state that can point inside a list.

    FlattenedIterDataset(parent, lists_per_epoch: int)."""

    iterator_type = _FlattenedIterator
