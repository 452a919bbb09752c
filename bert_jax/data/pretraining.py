"""The pre-training input pipeline: documents -> WordPiece ids -> packed rows -> masked batches.

    source (TFDS array_record, random access)
      -> this host's documents: source[process_index::process_count]
      -> shuffled by seed (a new order each epoch), repeated num_epochs times (None: forever)
      -> tokenized (no special tokens)
      -> rows of exactly seq_len tokens:
           MLM mode (default): documents packed greedily, each piece as [CLS] piece [SEP] with its
             own segment id (1, 2, ...) and positions restarting at 0; a document that does not fit
             the rest of a row continues in the next one (split before a word start, never
             dropped); a row is closed (padded) only when fewer than 2 + min_segment_tokens
             places are left.
           sentence-pair mode (sentence_pairs=True): BERT's [CLS] A [SEP] B [SEP] with token types
             0/1 and an NSP label (1: B is a random span of another document, probability 1/2),
             one pair per row, sentences cut at ".", "!", "?" and line ends.
      -> (optional) grain worker processes (num_workers > 0)
      -> dynamic masking of each row in the main process, from a generator seeded by
         (seed, stream, row number in the stream): the masks of a row are the same however the
         run is interrupted and resumed
      -> batches of global_batch_size // process_count rows, as numpy arrays (see `make_iterator`;
         a finite pass instead reads every document on every host and deals rows round-robin,
         so that all hosts make the same number of batches).

Masking (Devlin et al. 2019): a fraction `mask_rate` of the maskable tokens of a row (all but
[PAD] [UNK] [CLS] [SEP] [MASK]) is chosen, rounded stochastically so the expected fraction is
exactly the rate, at most max_predictions; of the chosen, 80% become [MASK], 10% a random ordinary
token (no bracketed token such as [unused1]), 10% stay. Whole-word masking chooses whole words
(a first piece and its "##" continuations) until the count is reached, never part of a word.

State: `PretrainingIterator.get_state()` is a JSON-serialisable dict; `set_state` on a fresh
iterator made with the same config, split, batch size and process layout resumes exactly.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
from typing import Any, Callable, Optional, Sequence

import grain
import numpy as np

from bert_jax.data import corpora
from bert_jax.data import tokenizer as tok

_MASK_STREAM = 0x6D61736B  # "mask": separates the masking generator from other uses of the seed
_PAIR_STREAM = 0x70616972  # "pair"
STATE_VERSION = 1
# Documents are read and tokenized ahead by a few threads.
_READ_OPTIONS = grain.ReadOptions(num_threads=4, prefetch_buffer_size=32)


@dataclasses.dataclass(frozen=True)
class PretrainingDataConfig:
    """Everything that decides the batches; the same config and seed give the same batches.

    corpus: "demo", "text:GLOB" or a TFDS catalog name (see bert_jax.data.corpora).
    vocab_path: vocab.txt / tokenizer.json; empty with corpus "demo" means the demo vocabulary,
      trained on first use (`prepare_demo`).
    min_segment_tokens: a new piece starts in a row only if this many tokens (or the whole rest of
      its document) fit.
    short_seq_prob: sentence-pair mode: probability of a shorter target length (as in BERT).
    num_workers: grain worker processes making rows (0: threads of this process only). On 2 cores
      they pay off only in sentence-pair mode (see experiments/data_throughput.py).
    document_delimiter, invalid_utf8, validation_fraction: options of "text:GLOB" corpora.
    """

    corpus: str = "demo"
    data_dir: str = "~/bert_jax_data"
    vocab_path: str = ""
    lowercase: bool = True
    text_key: str = "text"
    seq_len: int = 128
    max_predictions: int = 20
    mask_rate: float = 0.15
    whole_word_masking: bool = False
    sentence_pairs: bool = False
    short_seq_prob: float = 0.1
    min_segment_tokens: int = 8
    seed: int = 0
    num_workers: int = 0
    demo_vocab_size: int = 8192
    document_delimiter: str = "blank_line"
    invalid_utf8: str = "fail"
    validation_fraction: float = 0.02

    def __post_init__(self):
        if self.seq_len < 8 or self.seq_len < 2 + self.min_segment_tokens:
            raise ValueError(f"PretrainingDataConfig.seq_len={self.seq_len} is too short (at least "
                             f"8 and 2 + min_segment_tokens={self.min_segment_tokens})")
        if self.min_segment_tokens < 1:
            raise ValueError("PretrainingDataConfig.min_segment_tokens must be at least 1")
        if not 0.0 < self.mask_rate < 1.0:
            raise ValueError(f"PretrainingDataConfig.mask_rate={self.mask_rate} must be in (0, 1)")
        if not 1 <= self.max_predictions <= self.seq_len:
            raise ValueError(f"PretrainingDataConfig.max_predictions={self.max_predictions} must "
                             f"be in [1, seq_len={self.seq_len}]")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise ValueError("PretrainingDataConfig.short_seq_prob must be in [0, 1]")
        if not 0 <= self.seed < 2**32:
            raise ValueError(f"PretrainingDataConfig.seed={self.seed} must be in [0, 2**32)")
        if self.num_workers < 0:
            raise ValueError("PretrainingDataConfig.num_workers must be >= 0")
        expected = math.ceil((self.seq_len - 2) * self.mask_rate)
        if self.max_predictions < expected:
            logging.warning("max_predictions=%d < ceil((seq_len - 2) * mask_rate)=%d: rows of "
                            "seq_len tokens get fewer masks than the rate asks",
                            self.max_predictions, expected)

    def text_options(self) -> dict[str, Any]:
        return dict(document_delimiter=self.document_delimiter, invalid_utf8=self.invalid_utf8,
                    validation_fraction=self.validation_fraction)


# ------------------------------------------------------------------------------------------------
# Demo corpus and vocabulary.


def prepare_demo(data_dir: str, vocab_size: int = 8192, lowercase: bool = True) -> str:
    """Prepares the demo corpus and trains its vocabulary on the train split (both only once).

    Returns the path of vocab.txt (under data_dir/demo_vocab_<size>_<cased|uncased>/). Takes
    ~15 s on 2 cores the first time, ~1 s after.
    """
    data_dir = os.path.expanduser(data_dir)
    name = f"demo_vocab_{vocab_size}_{'uncased' if lowercase else 'cased'}"
    vocab_path = os.path.join(data_dir, name, "vocab.txt")
    source = corpora.load_source(corpora.DEMO, "train", data_dir)
    if not os.path.isfile(vocab_path):
        with corpora.exclusive(data_dir):
            if not os.path.isfile(vocab_path):  # another process may have trained it meanwhile
                texts = (corpora.document_text(source[i]) for i in range(len(source)))
                tok.train_wordpiece(texts, vocab_size, os.path.dirname(vocab_path), lowercase)
    return vocab_path


def resolve_vocab_path(cfg: PretrainingDataConfig) -> str:
    if cfg.vocab_path:
        return os.path.expanduser(cfg.vocab_path)
    if cfg.corpus == corpora.DEMO:
        return prepare_demo(cfg.data_dir, cfg.demo_vocab_size, cfg.lowercase)
    raise ValueError(f"PretrainingDataConfig.vocab_path is empty; corpus {cfg.corpus!r} needs a "
                     "vocabulary (train one with experiments/prepare_data.py)")


# ------------------------------------------------------------------------------------------------
# Masking: pure functions of (row, generator).


@dataclasses.dataclass(frozen=True)
class MaskingSpec:
    """What masking needs to know about the vocabulary, and how much to mask."""

    mask_id: int
    special_ids: np.ndarray        # [n] ids never masked
    replacement_ids: np.ndarray    # [m] ids a token may be replaced with (10% case)
    is_continuation: np.ndarray    # [vocab] bool: "##" pieces
    mask_rate: float = 0.15
    max_predictions: int = 20
    whole_word: bool = False

    @classmethod
    def from_tokenizer(cls, vocab: tok.WordPieceTokenizer, mask_rate: float, max_predictions: int,
                       whole_word: bool) -> "MaskingSpec":
        special = np.asarray(vocab.special_ids, np.int32)
        replacement = np.flatnonzero(vocab.is_ordinary).astype(np.int32)
        replacement = replacement[~np.isin(replacement, special)]
        return cls(vocab.mask_id, special, replacement, vocab.is_continuation, mask_rate,
                   max_predictions, whole_word)


def word_starts(input_ids: np.ndarray, maskable: np.ndarray, is_continuation: np.ndarray):
    """[seq] bool: maskable tokens that begin a word (not "##", or first after a special token)."""
    previous_maskable = np.concatenate([[False], maskable[:-1]])
    return maskable & (~is_continuation[input_ids] | ~previous_maskable)


def choose_masked_positions(input_ids: np.ndarray, spec: MaskingSpec,
                            rng: np.random.Generator) -> np.ndarray:
    """Sorted positions to predict in one row [seq]; at most spec.max_predictions."""
    maskable = ~np.isin(input_ids, spec.special_ids)
    candidates = np.flatnonzero(maskable)
    expected = len(candidates) * spec.mask_rate
    count = int(expected) + int(rng.random() < expected - int(expected))
    count = min(count, spec.max_predictions, len(candidates))
    if count == 0:
        return np.zeros([0], np.int64)
    if not spec.whole_word:
        return np.sort(rng.choice(candidates, size=count, replace=False))
    starts = word_starts(input_ids, maskable, spec.is_continuation)[candidates]
    words = np.split(candidates, np.flatnonzero(starts)[1:])
    chosen: list[np.ndarray] = []
    total = 0
    for index in rng.permutation(len(words)):
        if total + len(words[index]) <= count:
            chosen.append(words[index])
            total += len(words[index])
            if total == count:
                break
    return np.sort(np.concatenate(chosen)) if chosen else np.zeros([0], np.int64)


def mask_row(input_ids: np.ndarray, spec: MaskingSpec, rng: np.random.Generator):
    """Dynamic masking of one row.

    input_ids: [seq] -> (masked input_ids [seq], masked_positions [P], masked_ids [P],
    masked_weights [P]) with P = spec.max_predictions, pad slots (position 0, id 0) weighted 0.
    """
    positions = choose_masked_positions(input_ids, spec, rng)
    n = len(positions)
    original = input_ids[positions]
    corrupted = input_ids.copy()
    decision = rng.random(n)
    to_mask = decision < 0.8
    to_random = (decision >= 0.8) & (decision < 0.9)
    corrupted[positions[to_mask]] = spec.mask_id
    corrupted[positions[to_random]] = rng.choice(spec.replacement_ids, size=int(to_random.sum()))
    p = spec.max_predictions
    masked_positions = np.zeros([p], np.int32)
    masked_ids = np.zeros([p], np.int32)
    masked_weights = np.zeros([p], np.float32)
    masked_positions[:n] = positions
    masked_ids[:n] = original
    masked_weights[:n] = 1.0
    return corrupted, masked_positions, masked_ids, masked_weights


# ------------------------------------------------------------------------------------------------
# Packing documents into rows (MLM mode).


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
    is_continuation: np.ndarray
    documents_per_epoch: int


def empty_row(seq_len: int, pad_id: int = 0) -> dict[str, np.ndarray]:
    return {"input_ids": np.full([seq_len], pad_id, np.int32),
            "token_type_ids": np.zeros([seq_len], np.int32),
            "segment_ids": np.zeros([seq_len], np.int32),
            "position_ids": np.zeros([seq_len], np.int32)}


class _ResumableItems:
    """Reads a parent grain iterator one item at a time, remembering the parent state before the
    current item, so a consumer can be checkpointed in the middle of an item.

    Empty items are skipped; `items_per_epoch` empty items in a row mean the data holds nothing
    at all (every document tokenizes to nothing), an error rather than an endless loop.
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
            if len(self.item):
                return True
        raise ValueError(f"{self.items_per_epoch} documents in a row gave no tokens: the corpus "
                         "holds no text this vocabulary can tokenize")

    def get_state(self) -> dict[str, Any]:
        if self.item is None:
            return {"parent": self.parent.get_state(), "offset": -1}
        return {"parent": self.state_before_item, "offset": self.offset}

    def set_state(self, state: dict[str, Any]) -> None:
        self.parent.set_state(state["parent"])
        self.item = None
        if state["offset"] >= 0:
            if not self.advance():
                raise ValueError("iterator state points past the end of its data")
            self.offset = state["offset"]


class _PackedRowsIterator(grain.DatasetIterator):
    def __init__(self, parent: grain.DatasetIterator, spec: PackingSpec):
        super().__init__(parent)
        self._docs = _ResumableItems(parent, spec.documents_per_epoch)
        self._spec = spec

    def __next__(self) -> dict[str, np.ndarray]:
        spec, docs = self._spec, self._docs
        row = empty_row(spec.seq_len, spec.pad_id)
        used = segment = 0
        while True:
            if (docs.item is None or docs.offset >= len(docs.item)) and not docs.advance():
                break
            tokens, start = docs.item, docs.offset
            remaining = len(tokens) - start
            space = spec.seq_len - used - 2
            if space < min(spec.min_segment_tokens, remaining):
                break
            end = start + min(remaining, space)
            if end < len(tokens):
                end = split_point(tokens, end, start, spec.is_continuation)
            length = end - start + 2
            segment += 1
            row["input_ids"][used:used + length] = np.concatenate(
                [[spec.cls_id], tokens[start:end], [spec.sep_id]])
            row["segment_ids"][used:used + length] = segment
            row["position_ids"][used:used + length] = np.arange(length)
            used += length
            docs.offset = end
        if used == 0:
            raise StopIteration
        return row

    def get_state(self) -> dict[str, Any]:
        return self._docs.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        self._docs.set_state(state)


class PackedRowsIterDataset(grain.IterDataset):
    """Token-id documents [n_i] -> rows [seq_len] with segment and position ids (module doc)."""

    def __init__(self, parent: grain.IterDataset, spec: PackingSpec):
        super().__init__(parent)
        self._spec = spec

    def __iter__(self) -> _PackedRowsIterator:
        return _PackedRowsIterator(self._parent.__iter__(), self._spec)


# ------------------------------------------------------------------------------------------------
# Sentence pairs with next-sentence labels.


@dataclasses.dataclass(frozen=True)
class PairSpec:
    seq_len: int
    cls_id: int
    sep_id: int
    pad_id: int
    sentence_end_ids: tuple[int, ...]
    short_seq_prob: float
    is_continuation: np.ndarray

    @property
    def max_tokens(self) -> int:
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


class _FlattenedIterator(grain.DatasetIterator):
    def __init__(self, parent: grain.DatasetIterator, lists_per_epoch: int):
        super().__init__(parent)
        self._lists = _ResumableItems(parent, lists_per_epoch)

    def __next__(self):
        lists = self._lists
        while lists.item is None or lists.offset >= len(lists.item):
            if not lists.advance():
                raise StopIteration
        lists.offset += 1
        return lists.item[lists.offset - 1]

    def get_state(self) -> dict[str, Any]:
        return self._lists.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        self._lists.set_state(state)


class FlattenedIterDataset(grain.IterDataset):
    """Lists -> their elements, one at a time, with a state that can point inside a list."""

    def __init__(self, parent: grain.IterDataset, lists_per_epoch: int):
        super().__init__(parent)
        self._lists_per_epoch = lists_per_epoch

    def __iter__(self) -> _FlattenedIterator:
        return _FlattenedIterator(self._parent.__iter__(), self._lists_per_epoch)


# ------------------------------------------------------------------------------------------------
# The grain pipeline.


class _Tokenize:
    """Picklable map: record -> token ids [n] int32 (no special tokens)."""

    def __init__(self, vocab: tok.WordPieceTokenizer, text_key: str):
        self.vocab, self.text_key = vocab, text_key

    def __call__(self, record) -> np.ndarray:
        return np.asarray(self.vocab.encode(corpora.document_text(record, self.text_key)), np.int32)


class _TokenizeLines(_Tokenize):
    """record -> list of token-id lines (paragraphs) of the document."""

    def __call__(self, record) -> list[list[int]]:
        lines = [line for line in corpora.document_text(record, self.text_key).split("\n")
                 if line.strip()]
        return self.vocab.encode_batch(lines) if lines else []


class _PairRows:
    """Picklable map (stream index, document index) -> rows of one document in pair mode."""

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


def build_rows(cfg: PretrainingDataConfig, source: corpora.TextSource,
               vocab: tok.WordPieceTokenizer, process_index: int, process_count: int,
               num_epochs: Optional[int]) -> grain.IterDataset:
    """The grain dataset of this host's unmasked rows (dicts of [seq_len] int32 arrays)."""
    documents = grain.MapDataset.source(source)[process_index::process_count]
    if len(documents) == 0:
        raise ValueError(f"corpus {cfg.corpus!r} has {len(source)} documents: none for process "
                         f"{process_index} of {process_count}")
    if not cfg.sentence_pairs:
        tokens = documents.shuffle(seed=cfg.seed).repeat(num_epochs).map(
            _Tokenize(vocab, cfg.text_key))
        spec = PackingSpec(cfg.seq_len, vocab.cls_id, vocab.sep_id, vocab.pad_id,
                           cfg.min_segment_tokens, vocab.is_continuation, len(documents))
        return PackedRowsIterDataset(tokens.to_iter_dataset(_READ_OPTIONS), spec)
    ends = tuple(i for i in (vocab.token_to_id(t) for t in (".", "!", "?")) if i is not None)
    spec = PairSpec(cfg.seq_len, vocab.cls_id, vocab.sep_id, vocab.pad_id, ends,
                    cfg.short_seq_prob, vocab.is_continuation)
    lines = documents.map(_TokenizeLines(vocab, cfg.text_key))
    order = grain.MapDataset.range(len(documents)).shuffle(seed=cfg.seed).repeat(num_epochs)
    row_lists = order.map_with_index(_PairRows(lines, spec, cfg.seed, process_index))
    return FlattenedIterDataset(row_lists.to_iter_dataset(_READ_OPTIONS), len(documents))


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
    """

    def __init__(self, rows: grain.IterDataset, cfg: PretrainingDataConfig, masking: MaskingSpec,
                 batch_rows: int, stream_id: int, pad_id: int, fingerprint: str,
                 stride: int = 1, offset: int = 0):
        self._rows = iter(rows)
        self._cfg, self._masking, self._batch_rows = cfg, masking, batch_rows
        self._stream_id, self._pad_id, self._fingerprint = stream_id, pad_id, fingerprint
        self._stride, self._offset = stride, offset
        self._rows_read = 0
        self._finished = False

    def __iter__(self) -> "PretrainingIterator":
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
        while len(mine) < self._batch_rows:
            mine.append(self._padding_row())
        return {key: np.stack([row[key] for row in mine]) for key in mine[0]}

    def _mask(self, row: dict[str, np.ndarray], row_number: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng([self._cfg.seed, _MASK_STREAM, self._stream_id, row_number])
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

    def get_state(self) -> dict[str, Any]:
        """JSON-serialisable: {"version", "fingerprint", "rows_read", "finished", "grain"}."""
        return {"version": STATE_VERSION, "fingerprint": self._fingerprint,
                "rows_read": self._rows_read, "finished": self._finished,
                "grain": _jsonable(self._rows.get_state())}

    def set_state(self, state: dict[str, Any] | str | bytes) -> None:
        """Resumes from `get_state()` of an iterator made with the same config and layout."""
        if isinstance(state, (str, bytes)):
            state = json.loads(state)
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"pipeline state version {state.get('version')!r}, expected "
                             f"{STATE_VERSION}")
        if state["fingerprint"] != self._fingerprint:
            raise ValueError("pipeline state was saved by a pipeline with another corpus, seed, "
                             "sequence length, mode, batch size, process layout or worker count; "
                             "it cannot resume this one")
        self._rows.set_state(state["grain"])
        self._rows_read = int(state["rows_read"])
        self._finished = bool(state["finished"])

    def close(self) -> None:
        close = getattr(self._rows, "close", None)
        if close is not None:
            close()


def _jsonable(value):
    """grain states hold ints, strings, lists and dicts, sometimes numpy scalars: plain JSON."""
    plain = lambda v: v.item() if hasattr(v, "item") else str(v)  # noqa: E731
    return json.loads(json.dumps(value, default=plain))


def _parse_absl_flags_if_needed() -> None:
    """grain's worker processes read absl flags; outside an absl app (tests, notebooks) nobody has
    parsed them, so parse the defaults (an absl app has already parsed them: nothing changes)."""
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS(["bert_jax"], known_only=True)


def make_iterator(cfg: PretrainingDataConfig, split: str = "train", global_batch_size: int = 32,
                  process_index: int = 0, process_count: int = 1,
                  num_epochs: Optional[int] = None) -> PretrainingIterator:
    """This host's batches of global_batch_size // process_count rows of `split`.

    num_epochs=None (training): an endless stream of this host's documents
      (source[process_index::process_count]), in a new order each epoch.
    num_epochs=k (evaluation): k passes over the whole split, then StopIteration. Every host reads
      all documents and keeps every process_count-th row, so all hosts make the same number of
      batches (no host waits alone in a collective); the last batch is padded with zero-weight
      rows. A host thus tokenizes the whole split: meant for held-out sets, not for huge corpora.
    """
    if global_batch_size % process_count:
        raise ValueError(f"global_batch_size={global_batch_size} is not divisible by "
                         f"process_count={process_count}")
    if not 0 <= process_index < process_count:
        raise ValueError(f"process_index={process_index} not in [0, {process_count})")
    if num_epochs is not None and num_epochs < 1:
        raise ValueError(f"num_epochs={num_epochs} must be None (endless) or positive")
    vocab = tok.load_tokenizer(resolve_vocab_path(cfg), lowercase=cfg.lowercase)
    source = corpora.load_source(cfg.corpus, split, cfg.data_dir, **(
        cfg.text_options() if cfg.corpus.startswith(corpora.TEXT_PREFIX) else {}))
    endless = num_epochs is None
    shard = (process_index, process_count) if endless else (0, 1)
    rows = build_rows(cfg, source, vocab, *shard, num_epochs)
    if cfg.num_workers > 0:
        _parse_absl_flags_if_needed()
        rows = rows.mp_prefetch(grain.MultiprocessingOptions(num_workers=cfg.num_workers))
    masking = MaskingSpec.from_tokenizer(vocab, cfg.mask_rate, cfg.max_predictions,
                                         cfg.whole_word_masking)
    batch_rows = global_batch_size // process_count
    identity = [cfg.corpus, split, cfg.seq_len, cfg.seed, cfg.sentence_pairs,
                cfg.min_segment_tokens, process_index, process_count, batch_rows, cfg.num_workers, num_epochs]
    fingerprint = hashlib.sha1(json.dumps(identity).encode()).hexdigest()[:16]
    if endless:
        return PretrainingIterator(rows, cfg, masking, batch_rows, stream_id=process_index,
                                   pad_id=vocab.pad_id, fingerprint=fingerprint)
    return PretrainingIterator(rows, cfg, masking, batch_rows, stream_id=0, pad_id=vocab.pad_id,
                               fingerprint=fingerprint, stride=process_count, offset=process_index)
