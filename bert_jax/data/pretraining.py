"""The pre-training input pipeline: documents -> WordPiece ids -> packed rows -> masked batches.

    source (TFDS array_record, random access)
      -> this host's documents: a contiguous range of the split, disjoint from the other hosts'
         (`bert_jax.data.host_shards.shard_range`: a host opens about 1/N of the files)
      -> shuffled by seed (a new order each epoch), repeated num_epochs times (None: forever)
      -> tokenized (no special tokens), a window of a document's text at a time, as its rows
         need it (`bert_jax.data.document_tokens`): a long document does not hold back a row
      -> rows of exactly seq_len tokens:
           MLM mode (default): documents packed into rows, several per row, each piece with its
             own segment id and positions (`bert_jax.data.document_packing`).
           sentence-pair mode (sentence_pairs=True): BERT's [CLS] A [SEP] B [SEP] with token types
             0/1 and an NSP label, one pair per row (`bert_jax.data.sentence_pairs`).
      -> (optional) grain worker processes (num_workers > 0)
      -> dynamic masking of each row in the main process (`bert_jax.data.masking`), from a
         generator seeded by (seed, stream, row number in the stream): the masks of a row are the
         same however the run is interrupted and resumed
      -> batches of global_batch_size // process_count rows, as numpy arrays (see `make_iterator`;
         a finite pass instead reads every document on every host and deals rows round-robin,
         so that all hosts make the same number of batches).

State: `PretrainingIterator.get_state()` is a JSON-serialisable dict; `set_state` on a fresh
iterator made with the same config, split, batch size and process layout resumes exactly. A state
saved by another number of processes cannot say where each new host is in its new range:
`set_state_of_other_layout` (given the state of the old process 0) starts a new pass over the data
in a new order instead, and says so in one warning (bert_jax.data.host_shards).

Worker processes: grain reads its absl flags when it starts them, so `make_iterator` with
num_workers > 0 needs parsed absl flags, as in a script run by `absl.app.run` (experiments/*.py);
this library never parses them itself. num_workers=0 needs no flags.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import math
import os
from typing import Any, Callable, Optional

import grain
import numpy as np
from etils import epath

from bert_jax.data import corpora, data_dir_lock, host_shards, text_corpus, wordpiece_training
from bert_jax.data import tokenizer as tok
from bert_jax.data.document_packing import PackedRowsIterDataset, PackingSpec, empty_row
from bert_jax.data.document_tokens import DocumentTokens
from bert_jax.data.masking import MaskingSpec, mask_row
from bert_jax.data.sentence_pairs import FlattenedIterDataset, PairRows, PairSpec
from bert_jax.data.subword_tokenizer import WordPieceTokenizer

_MASK_STREAM = 0x6D61736B  # "mask": separates the masking generator from other uses of the seed
STATE_VERSION = 2
_READABLE_VERSIONS = (1, 2)  # a version-1 state is one of a run that never changed its layout
# Documents are read and tokenized ahead by a few threads.
_READ_OPTIONS = grain.ReadOptions(num_threads=4, prefetch_buffer_size=32)



@dataclasses.dataclass(frozen=True)
class PretrainingDataConfig:
    """Everything that decides the batches; the same config and seed give the same batches.

    corpus: "demo", "text:GLOB" or a TFDS catalog name (see bert_jax.data.corpora).
    vocab_path: vocab.txt / tokenizer.json; empty with corpus "demo" or "text:GLOB" means a
      vocabulary of demo_vocab_size trained on the corpus on first use (`prepare_demo`,
      `prepare_text_vocabulary`).
    min_segment_tokens: a new piece starts in a row only if this many tokens (or the whole rest of
      its document) fit.
    short_seq_prob: sentence-pair mode: probability of a shorter target length (as in BERT).
    num_workers: grain worker processes making rows (0: threads of this process only; see
      benchmarks/data_throughput.py for when they pay off). num_workers > 0 needs parsed absl
      flags (module docstring).
    document_delimiter, invalid_utf8, validation_fraction: options of "text:GLOB" corpora
      (bert_jax.data.corpora); document_delimiter is the run config's data.document_delimiter.
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
        if self.document_delimiter not in text_corpus.DOCUMENT_DELIMITERS:
            raise ValueError(f"data.document_delimiter={self.document_delimiter!r}: choose one "
                             f"of {', '.join(text_corpus.DOCUMENT_DELIMITERS)}")
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

    Returns the path of vocab.txt (under data_dir/demo_vocab_<size>_<cased|uncased>/). Both are
    the same, byte for byte, in every preparation.
    """
    return _trained_once(corpora.DEMO, os.path.expanduser(data_dir), "demo", vocab_size,
                         lowercase)


def prepare_text_vocabulary(corpus: str, data_dir: str, vocab_size: int = 8192,
                            lowercase: bool = True, **text_options) -> str:
    """The vocabulary of a `text:GLOB` corpus whose run names none: a WordPiece vocabulary of
    `vocab_size` trained on the corpus's train split (prepared first, with `text_options`) on
    first use, as the demo's is. It lives in data_dir (a run's is <workdir>/data unless
    data.data_dir says otherwise) under `<corpus preparation>_vocab_<size>_<cased|uncased>/`, so
    another set of files or options trains its own; the same files give the same vocab.txt,
    byte for byte. Returns the path of vocab.txt."""
    data_dir = os.path.expanduser(data_dir)
    preparation = corpora.builder_for(corpus, data_dir, **text_options).builder_config.name
    return _trained_once(corpus, data_dir, preparation, vocab_size, lowercase, **text_options)


def _trained_once(corpus: str, data_dir: str, prefix: str, vocab_size: int, lowercase: bool,
                  **text_options) -> str:
    """vocab.txt of `corpus`'s train split in data_dir/<prefix>_vocab_<size>_<casing>/, trained
    there unless it exists (under the data dir's lock: one process trains, the others read)."""
    casing = "uncased" if lowercase else "cased"
    vocab_dir = os.path.join(data_dir, f"{prefix}_vocab_{vocab_size}_{casing}")
    vocab_path = os.path.join(vocab_dir, "vocab.txt")
    source = corpora.load_source(corpus, "train", data_dir, **text_options)
    if not epath.Path(vocab_path).is_file():  # data_dir: a local folder or gs://
        with data_dir_lock.exclusive(data_dir):
            if not epath.Path(vocab_path).is_file():  # another process may have trained it
                logging.info("training a %d-token vocabulary on the train split of %s "
                             "(config.tokenizer.path is empty) into %s", vocab_size, corpus,
                             vocab_dir)
                wordpiece_training.train_wordpiece(corpora.SourceTexts(source), vocab_size,
                                                   vocab_dir, lowercase)
    return vocab_path


def resolve_vocab_path(cfg: PretrainingDataConfig) -> str:
    if cfg.vocab_path:
        return os.path.expanduser(cfg.vocab_path)
    if cfg.corpus == corpora.DEMO:
        return prepare_demo(cfg.data_dir, cfg.demo_vocab_size, cfg.lowercase)
    if cfg.corpus.startswith(corpora.TEXT_PREFIX):
        return prepare_text_vocabulary(cfg.corpus, cfg.data_dir, cfg.demo_vocab_size,
                                       cfg.lowercase, **cfg.text_options())
    raise ValueError(f"PretrainingDataConfig.vocab_path is empty; corpus {cfg.corpus!r} needs a "
                     "vocabulary (train one with experiments/prepare_data.py)")



# ------------------------------------------------------------------------------------------------
# The grain pipeline.


class _Tokenize:
    """Picklable map: record -> DocumentTokens (no special tokens), its first window tokenized.

    The read-ahead threads thus tokenize whole the documents that fit in a window, and the first
    window of longer ones; the packer tokenizes the rest of a long document as its rows need it
    (bert_jax.data.document_tokens), so no row waits for the whole of a long document."""

    def __init__(self, vocab: WordPieceTokenizer, text_key: str):
        self.vocab, self.text_key = vocab, text_key

    def __call__(self, record) -> DocumentTokens:
        document = DocumentTokens(corpora.document_text(record, self.text_key), self.vocab.encode)
        document.ids(0, 1)
        return document


def build_rows(cfg: PretrainingDataConfig, source: corpora.TextSource,
               vocab: WordPieceTokenizer, process_index: int, process_count: int,
               num_epochs: Optional[int], layout_changes: int = 0) -> grain.IterDataset:
    """The grain dataset of this host's unmasked rows (dicts of [seq_len] int32 arrays).

    This host reads only its range of the documents (`host_shards.shard_range`); its order, and
    the random Bs of sentence pairs, come from `host_shards.pass_seed(cfg.seed, layout_changes)`.
    """
    shard = host_shards.shard_range(len(source), process_index, process_count)
    documents = grain.MapDataset.source(source)[shard.start:shard.stop]
    if len(documents) == 0:
        raise ValueError(f"corpus {cfg.corpus!r} has {len(source)} documents: none for process "
                         f"{process_index} of {process_count}")
    seed = host_shards.pass_seed(cfg.seed, layout_changes)
    if not cfg.sentence_pairs:
        tokens = documents.shuffle(seed=seed).repeat(num_epochs).map(
            _Tokenize(vocab, cfg.text_key))
        spec = PackingSpec(cfg.seq_len, vocab.cls_id, vocab.sep_id, vocab.pad_id,
                           cfg.min_segment_tokens, vocab.is_continuation, len(documents))
        return PackedRowsIterDataset(tokens.to_iter_dataset(_READ_OPTIONS), spec)
    ends = tuple(i for i in (vocab.token_to_id(t) for t in (".", "!", "?")) if i is not None)
    spec = PairSpec(cfg.seq_len, vocab.cls_id, vocab.sep_id, vocab.pad_id, ends,
                    cfg.short_seq_prob, vocab.is_continuation)
    texts = documents.map(functools.partial(corpora.document_text, text_key=cfg.text_key))
    order = grain.MapDataset.range(len(documents)).shuffle(seed=seed).repeat(num_epochs)
    row_lists = order.map_with_index(PairRows(texts, vocab.encode_batch, spec, seed,
                                              process_index))
    return FlattenedIterDataset(row_lists.to_iter_dataset(_READ_OPTIONS), len(documents))


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
        batch = {key: np.stack([row[key] for row in mine]) for key in mine[0]}
        if real < self._batch_rows:  # padding rows weigh 0 in every sum (NSP's too)
            batch["example_weights"] = (np.arange(self._batch_rows) < real).astype(np.float32)
        return batch

    def shape_examples(self, num_batches: int) -> list[dict[str, np.ndarray]]:
        """One batch of the shape every batch of this iterator has (all-padding rows; reading
        nothing): what a run compiles before its first step (bert_jax.train.program)."""
        del num_batches  # every batch has the same shape
        rows = [self._padding_row()] * self._batch_rows
        return [{key: np.stack([row[key] for row in rows]) for key in rows[0]}]

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
        process 0: a new pass over the data in a new order (bert_jax.data.host_shards), since a
        position in the old hosts' document ranges is none in the new ones. Says so in one warning.
        ValueError if the state is of another corpus, split or config."""
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



def _check_worker_flags(num_workers: int) -> None:
    """grain reads absl flags (grain_enable_multiprocess_worker_profiling, with jax installed)
    when it starts worker processes, and fails deep inside the first batch if nobody parsed them;
    fail here instead, saying what the caller must do."""
    if num_workers == 0:
        return
    from absl import flags

    if not flags.FLAGS.is_parsed():
        raise ValueError(
            f"num_workers={num_workers} starts grain worker processes, which read absl flags, "
            "but no absl flags are parsed: call make_iterator from a script run by "
            "absl.app.run, or parse the flags first (absl.flags.FLAGS(sys.argv)), or use "
            "num_workers=0")


def make_iterator(cfg: PretrainingDataConfig, split: str = "train", global_batch_size: int = 32,
                  process_index: int = 0, process_count: int = 1,
                  num_epochs: Optional[int] = None) -> PretrainingIterator:
    """This host's batches of global_batch_size // process_count rows of `split`.

    num_epochs=None (training): an endless stream of this host's documents (its contiguous
      range, `host_shards.shard_range`: no host reads the others'), in a new order each epoch.
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
    _check_worker_flags(cfg.num_workers)
    vocab = tok.load_tokenizer(resolve_vocab_path(cfg), lowercase=cfg.lowercase)
    source = corpora.load_source(cfg.corpus, split, cfg.data_dir, **(
        cfg.text_options() if cfg.corpus.startswith(corpora.TEXT_PREFIX) else {}))
    endless = num_epochs is None
    shard = (process_index, process_count) if endless else (0, 1)

    def rows_for(layout_changes: int) -> grain.IterDataset:
        rows = build_rows(cfg, source, vocab, *shard, num_epochs, layout_changes)
        if cfg.num_workers > 0:
            rows = rows.mp_prefetch(grain.MultiprocessingOptions(num_workers=cfg.num_workers))
        return rows

    masking = MaskingSpec.from_tokenizer(vocab, cfg.mask_rate, cfg.max_predictions,
                                         cfg.whole_word_masking)
    batch_rows = global_batch_size // process_count
    identity = _identity(cfg, split, process_index, process_count, batch_rows, num_epochs)
    if endless:
        return PretrainingIterator(rows_for, cfg, masking, batch_rows, stream_id=process_index,
                                   pad_id=vocab.pad_id, identity=identity)
    return PretrainingIterator(rows_for, cfg, masking, batch_rows, stream_id=0,
                               pad_id=vocab.pad_id, identity=identity, stride=process_count,
                               offset=process_index)


def _identity(cfg: PretrainingDataConfig, split: str, process_index: int, process_count: int,
              batch_rows: int, num_epochs: Optional[int]) -> StreamIdentity:
    """The fingerprint hashes the values, in the order, that version-1 states hashed: they still
    resume."""
    data = [cfg.corpus, split, cfg.seq_len, cfg.seed, cfg.sentence_pairs, cfg.min_segment_tokens]
    layout = [process_index, process_count, batch_rows, cfg.num_workers, num_epochs]
    return StreamIdentity(fingerprint=_digest(data + layout), data=_digest(data + [num_epochs]),
                          process_count=process_count)


def _digest(values: list[Any]) -> str:
    return hashlib.sha1(json.dumps(values).encode()).hexdigest()[:16]
