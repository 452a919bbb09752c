"""Token shards: a corpus tokenized once, one document's token ids per ArrayRecord record.

A prepared folder (written by `bert_jax.data.corpora.preparation.prepare_shards`, or by the
same preparation on Apache Beam, `bert_jax.data.corpora.beam_preparation`) holds

  {split}-{unit:05d}-of-{units:05d}.array_record   one file per work unit and split ("train",
      "validation"), ArrayRecord written with "group_size:1" (random access by record); record j
      is one document's token ids, no special tokens, as little-endian `dtype` bytes (uint16 when
      the vocabulary has at most 65,536 ids, else uint32): np.frombuffer(record, "<u2").
  document_tokens.{split}.npy   each document's token count, int32, in the split's document
      order (what the packing plan needs: training opens the folder without reading a record).
  tokenizer.json   the tokenizer the shards were made with (its sha256 is the manifest's
      tokenizer fingerprint): training needs no tokenizer.path.
  manifest.json   written last: its presence means the folder is complete (`MANIFEST` below).

The manifest (format FORMAT, FORMAT_VERSION):
  format, format_version, dtype ("uint16" | "uint32", little-endian),
  tokenizer: {fingerprint (sha256 of its tokenizer.json), vocab_size, kind, path (the file in
      the folder), files (every tokenizer file in the folder)},
  options: {validation_fraction, unit_bytes, max_document_bytes, bad_records},
  sources: [{spec, weight, fingerprint, files, units, documents: {split: n}, tokens: {split: n}}],
  shards: {split: [{file, unit, source, documents, tokens, bytes, blake2b}]}, one per work
      unit in unit order (empty shards included),
  splits: {split: {documents, tokens, bytes, shards}},
  document_tokens: {split: file name},
  bad_records: {total, by_reason, examples, cut_documents, cut_examples}.
Folders prepared before tokenizer.json and document_tokens were written lack those keys (and
may name a tokenizer `path` copied there by hand); they are read all the same (below).

`TokenShards(directory, split)` reads them, the one reader of the format (the training pipeline's
`ShardDocuments` is this class): a grain-compatible random-access data source (`len`, `[i]` ->
np.ndarray of ids, `__getitems__`, `read(indices)`) over all shards of the split, indexed by a
global document index (shard by shard in unit order). Opening checks every shard's size against
the manifest (a stat per shard: O(shards), no data read) and, with verify="hash", its blake2b
too (reads every byte once: about 1 s per GB on one core); a mismatch is a DataError naming the
file. `shard_digest` is the hash the manifest records.

`document_tokens()` -> [documents] int32 comes from the file the manifest names (or
document_tokens.<split>.npy) when it agrees with the manifest (its length is the split's document
count and its sum the split's token count); a folder without one (prepared before) is counted once
by reading every record (about 1 s per 100 MB of shards on one core) and the file written beside
the manifest (atomically; a folder that is not writable keeps the counts in memory only, with one
log line). Memory: 4 bytes per document.
"""

from __future__ import annotations

import hashlib
import logging
import os
from typing import Sequence

import numpy as np

from bert_jax.data.textfiles import DataError
from bert_jax.runtime import paths

FORMAT = "bert_jax.token_shards"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
TOKENIZER_FILE = "tokenizer.json"
SPLITS = ("train", "validation")
WRITER_OPTIONS = "group_size:1"
VERIFY = ("size", "hash", "none")
_COUNT_BATCH = 4096  # records read at a time while counting tokens


def token_dtype(vocab_size: int) -> np.dtype:
    """Little-endian uint16 for vocabularies of at most 65,536 ids, else uint32."""
    return np.dtype("<u2") if vocab_size <= 1 << 16 else np.dtype("<u4")


def shard_name(split: str, unit: int, units: int) -> str:
    return f"{split}-{unit:05d}-of-{units:05d}.array_record"


def document_tokens_name(split: str) -> str:
    """The file of a split's per-document token counts."""
    return f"document_tokens.{split}.npy"


def shard_digest(path: str) -> str:
    """blake2b (16 bytes, hex) of a file's bytes, read 4 MiB at a time."""
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while block := f.read(4 << 20):
            digest.update(block)
    return digest.hexdigest()


def shard_fault(directory: str, shard: dict, verify: str = "size") -> str | None:
    """What is wrong with one shard of the manifest (missing, another size, another hash), or
    None; verify "size" stats the file, "hash" reads it too."""
    path = os.path.join(directory, shard["file"])
    try:
        size = os.path.getsize(path)
    except FileNotFoundError:
        return f"{path}: missing (the manifest lists it)"
    if size != shard["bytes"]:
        return (f"{path}: {size:,} bytes, the manifest says {shard['bytes']:,}: the shard is cut "
                "short or was changed; prepare the corpus again")
    if verify == "hash" and shard_digest(path) != shard["blake2b"]:
        return (f"{path}: its blake2b differs from the manifest's: the shard was changed; "
                "prepare the corpus again")
    return None


def read_manifest(directory: str) -> dict:
    """The manifest of a prepared folder; DataError naming the folder when it has none (an
    unfinished preparation) or one of another format."""
    path = os.path.join(directory, MANIFEST)
    if not os.path.isfile(path):
        raise DataError(f"{directory}: no {MANIFEST}: not a prepared token-shard folder, or its "
                        "preparation has not finished (run prepare_shards.py again to finish it)")
    manifest = paths.read_json(path)
    if manifest.get("format") != FORMAT or manifest.get("format_version") != FORMAT_VERSION:
        raise DataError(f"{path}: format {manifest.get('format')!r} version "
                        f"{manifest.get('format_version')!r}; this code reads {FORMAT!r} version "
                        f"{FORMAT_VERSION}")
    return manifest


class TokenShards:
    """The documents of one split of a prepared folder: `len`, `[i]` -> token ids,
    `read(indices)` -> list of arrays, `document_tokens()` -> [n] int32.

    A grain-compatible random-access data source (grain.MapDataset.source(TokenShards(...))).
    Attributes: directory (absolute), manifest, split, dtype, vocab_size, tokens (the split's
    total), paths (the files of the split's non-empty shards; `files` is the same list).
    """

    def __init__(self, directory: str, split: str = "train", verify: str = "size"):
        if verify not in VERIFY:
            raise ValueError(f"verify={verify!r}; choose one of {', '.join(VERIFY)}")
        from array_record.python.array_record_data_source import ArrayRecordDataSource
        self.directory = os.path.abspath(os.path.expanduser(os.fspath(directory)))
        self.manifest = read_manifest(self.directory)
        if split not in self.manifest.get("shards", {}):
            raise DataError(f"{self.directory} has no split {split!r}; it has "
                            f"{sorted(self.manifest.get('shards', {}))}")
        self.split = split
        self.dtype = np.dtype(self.manifest["dtype"]).newbyteorder("<")
        self.vocab_size = int(self.manifest["tokenizer"]["vocab_size"])
        shards = [s for s in self.manifest["shards"][split] if s["documents"]]
        for shard in shards if verify != "none" else ():
            fault = shard_fault(self.directory, shard, verify)
            if fault:
                raise DataError(fault)
        if not shards:
            raise DataError(f"{self.directory}: the {split} split holds no document")
        self.tokens = sum(int(shard["tokens"]) for shard in shards)
        self.paths = [os.path.join(self.directory, s["file"]) for s in shards]
        self._documents = sum(int(s["documents"]) for s in shards)
        self._shards = shards
        self._lengths: np.ndarray | None = None
        # "path[0:n]": the record count comes from the manifest, no file is opened here.
        self._source = ArrayRecordDataSource(
            [f"{path}[0:{s['documents']}]" for path, s in zip(self.paths, shards)])

    @property
    def files(self) -> list[str]:
        return self.paths

    def __len__(self) -> int:
        return self._documents

    def __getitem__(self, index: int) -> np.ndarray:
        return np.frombuffer(self._source[int(index)], self.dtype)

    def __getitems__(self, indices: Sequence[int]) -> list[np.ndarray]:
        return self.read(indices)

    def read(self, indices: Sequence[int]) -> list[np.ndarray]:
        """The documents at `indices` (any order), each as a read-only array of `dtype`."""
        records = self._source.__getitems__([int(i) for i in indices])
        return [np.frombuffer(record, self.dtype) for record in records]

    def identity(self) -> list:
        """What names this split's data: its shards' files, document and token counts, sizes."""
        return [self.manifest["dtype"], self.vocab_size,
                [[s["file"], s["documents"], s["tokens"], s["bytes"]] for s in self._shards]]

    @property
    def lengths_path(self) -> str:
        """The split's token-count file: the one the manifest names, else the default name."""
        name = self.manifest.get("document_tokens", {}).get(self.split)
        return os.path.join(self.directory, name or document_tokens_name(self.split))

    def document_tokens(self) -> np.ndarray:
        """[len(self)] int32: each document's token count (module docstring: where from)."""
        if self._lengths is None:
            self._lengths = self._stored_lengths()
            if self._lengths is None:
                self._lengths = self._count_lengths()
                self._write_lengths(self._lengths)
        return self._lengths

    def _agrees(self, lengths: np.ndarray) -> bool:
        return lengths.shape == (len(self),) and int(lengths.sum(dtype=np.int64)) == self.tokens

    def _stored_lengths(self) -> np.ndarray | None:
        try:
            lengths = np.load(self.lengths_path).astype(np.int32, copy=False)
        except (OSError, ValueError):
            return None
        if not self._agrees(lengths):
            logging.warning("%s does not agree with the manifest (another preparation?): the "
                            "token counts are read again", self.lengths_path)
            return None
        return lengths

    def _count_lengths(self) -> np.ndarray:
        lengths = np.empty(len(self), np.int32)
        for start in range(0, len(self), _COUNT_BATCH):
            stop = min(start + _COUNT_BATCH, len(self))
            records = self._source.__getitems__(list(range(start, stop)))
            lengths[start:stop] = [len(r) for r in records]
        lengths //= self.dtype.itemsize
        if not self._agrees(lengths):
            raise DataError(f"{self.directory}: the {self.split} split holds "
                            f"{int(lengths.sum(dtype=np.int64)):,} tokens, the manifest says "
                            f"{self.tokens:,}: prepare the corpus again")
        return lengths

    def _write_lengths(self, lengths: np.ndarray) -> None:
        try:
            paths.write_atomically(self.lengths_path, lambda f: np.save(f, lengths))
        except OSError as e:
            logging.info("token counts of %s kept in memory only (cannot write %s: %s)",
                         self.directory, self.lengths_path, e)

    def __repr__(self) -> str:
        return (f"TokenShards({self.directory!r}, split={self.split!r}: {len(self):,} documents, "
                f"{self.tokens:,} tokens in {len(self.paths)} shards)")
