"""Sentence pairs with next-sentence labels: BERT's [CLS] A [SEP] B [SEP] rows.

One document at a time: its token-id lines are cut into sentences (at ".", "!", "?" and line
ends), gathered into chunks up to a target length (shorter with probability short_seq_prob, as
in BERT), and each chunk split into A and B: the actual continuation (nsp_labels 0) or, with
probability 1/2, a random span of another document (nsp_labels 1). One pair per row, with token
types 0/1, one segment, padded to seq_len; every sentence of a document lands in some row.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import grain
import numpy as np

from bert_jax.data.document_packing import ItemsIterator, ItemsIterDataset, empty_row, split_point

_PAIR_STREAM = 0x70616972  # "pair": separates the pairing generator from other uses of the seed


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


def pair_instances(sentences: list[np.ndarray], random_sentences: Callable[[], list[np.ndarray]],
                   spec: PairSpec, rng: np.random.Generator,
                   ) -> list[tuple[np.ndarray, np.ndarray, int]]:
    """BERT's instances from one document: (tokens_a, tokens_b, nsp_label) with 1 = random B.

    Every sentence of the document lands in some A or actual-next B; only random Bs are cut to fit.
    """
    instances = []
    target = spec.max_tokens
    if rng.random() < spec.short_seq_prob:
        target = int(rng.integers(2, spec.max_tokens + 1))
    chunk: list[np.ndarray] = []
    length = 0
    i = 0
    while i < len(sentences):
        if chunk and length + len(sentences[i]) > spec.max_tokens:
            full = True
        else:
            chunk.append(sentences[i])
            length += len(sentences[i])
            i += 1
            full = length >= target or i == len(sentences)
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
        instances.append((tokens_a, tokens_b, label))
        chunk, length = [], 0
        target = spec.max_tokens
        if rng.random() < spec.short_seq_prob:
            target = int(rng.integers(2, spec.max_tokens + 1))
    return instances


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


class PairRows:
    """Picklable map (stream index, document index) -> rows of one document.

    documents: token-id lines of each document. The rows of a document depend only on
    (seed, process_index, stream_index), so they are the same however the run is resumed.
    """

    def __init__(self, documents: grain.MapDataset, spec: PairSpec, seed: int, process_index: int):
        self.documents, self.spec, self.seed, self.process_index = (documents, spec, seed,
                                                                     process_index)

    def __call__(self, stream_index: int, document_index: int) -> list[dict[str, np.ndarray]]:
        rng = np.random.default_rng([self.seed, _PAIR_STREAM, self.process_index, stream_index])
        n = len(self.documents)

        def random_sentences():
            other = int(rng.integers(0, n - 1)) if n > 1 else 0
            other += int(n > 1 and other >= document_index)  # any document but this one
            return split_sentences(self.documents[other], self.spec)

        sentences = split_sentences(self.documents[document_index], self.spec)
        return [pair_row(a, b, label, self.spec)
                for a, b, label in pair_instances(sentences, random_sentences, self.spec, rng)]


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
