"""Reading prepared token shards: `ShardDocuments`, one split's documents by global index, and
their token counts.

The format (written by the corpus preparation, `bert_jax.token_shards` version 1):

  DIR/manifest.json   {format, format_version, dtype ("uint16" | "uint32", little-endian),
                       tokenizer: {vocab_size, fingerprint, kind, [path]},
                       shards: {split: [{file, documents, tokens, bytes, ...}, ...]}, ...}
  DIR/<file>          ArrayRecord, group_size 1: record j is one document's token ids without
                      special tokens, as little-endian `dtype` bytes.

Documents are numbered split-wide, shard by shard in manifest order. The per-document token
counts (the packing plan needs them, `bert_jax.data.pretraining.shard_rows`) are not in the
manifest: `document_tokens()` reads them from DIR/document_tokens.<split>.npy when it is there
and agrees with the manifest (its length is the split's document count and its sum the split's
token count), else counts them once by reading every record of the split (about 1 s per 100 MB
of shards on one core) and writes that file beside the manifest (atomically; a folder that is not
writable keeps them in memory only, with one log line). A preparation may write the file itself.
Memory: 4 bytes per document (int32).
"""

from __future__ import annotations

import json
import logging
import os
from typing import Sequence

import numpy as np

from bert_jax.data.textfiles import DataError

FORMAT = "bert_jax.token_shards"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
PREFIX = "shards:"
_COUNT_BATCH = 4096  # records read at a time while counting tokens


def read_manifest(directory: str) -> dict:
    """The manifest of a prepared folder; DataError naming the folder when there is none or it
    is of another format."""
    path = os.path.join(directory, MANIFEST)
    if not os.path.isfile(path):
        raise DataError(f"{directory}: no {MANIFEST}: not a prepared token-shard folder, or its "
                        "preparation has not finished")
    with open(path, encoding="utf-8") as f:
        manifest = json.load(f)
    if manifest.get("format") != FORMAT or manifest.get("format_version") != FORMAT_VERSION:
        raise DataError(f"{path}: format {manifest.get('format')!r} version "
                        f"{manifest.get('format_version')!r}; this code reads {FORMAT!r} "
                        f"version {FORMAT_VERSION}")
    return manifest


def shards_directory(corpus: str) -> str:
    """DIR of a `shards:DIR` corpus spec."""
    if not corpus.startswith(PREFIX) or not corpus[len(PREFIX):]:
        raise ValueError(f"corpus {corpus!r} is not {PREFIX}DIR")
    return os.path.abspath(os.path.expanduser(corpus[len(PREFIX):]))


class ShardDocuments:
    """The documents of one split of a prepared folder: `len`, `[i]` -> np.ndarray of token ids
    (the stored dtype), `read(indices)` -> list of arrays; `document_tokens()` -> [n] int32.

    Attributes: directory, split, manifest, dtype, vocab_size, tokens (the split's total), files.
    Opening stats every shard against the manifest's size (O(shards), no data read).
    """

    def __init__(self, directory: str, split: str = "train"):
        from array_record.python.array_record_data_source import ArrayRecordDataSource
        self.directory = os.path.abspath(os.path.expanduser(directory))
        self.manifest = read_manifest(self.directory)
        if split not in self.manifest.get("shards", {}):
            raise DataError(f"{self.directory} has no split {split!r}; it has "
                            f"{sorted(self.manifest.get('shards', {}))}")
        self.split = split
        self.dtype = np.dtype(self.manifest["dtype"]).newbyteorder("<")
        self.vocab_size = int(self.manifest["tokenizer"]["vocab_size"])
        shards = [s for s in self.manifest["shards"][split] if s["documents"]]
        if not shards:
            raise DataError(f"{self.directory}: the {split} split holds no document")
        self.files = [os.path.join(self.directory, s["file"]) for s in shards]
        for path, shard in zip(self.files, shards):
            size = os.path.getsize(path) if os.path.exists(path) else None
            if size != shard["bytes"]:
                raise DataError(f"{path}: {'missing' if size is None else f'{size:,} bytes'}, "
                                f"the manifest says {shard['bytes']:,} bytes: prepare the corpus "
                                "again")
        self.tokens = sum(int(s["tokens"]) for s in shards)
        self._documents = sum(int(s["documents"]) for s in shards)
        self._shards = shards
        self._source = ArrayRecordDataSource(
            [f"{path}[0:{s['documents']}]" for path, s in zip(self.files, shards)])
        self._lengths: np.ndarray | None = None

    def __len__(self) -> int:
        return self._documents

    def __getitem__(self, index: int) -> np.ndarray:
        return np.frombuffer(self._source[int(index)], self.dtype)

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
        return os.path.join(self.directory, f"document_tokens.{self.split}.npy")

    def document_tokens(self) -> np.ndarray:
        """[len(self)] int32: each document's token count (module docstring: where from)."""
        if self._lengths is None:
            self._lengths = self._cached_lengths()
            if self._lengths is None:
                self._lengths = self._count_lengths()
                self._write_lengths(self._lengths)
        return self._lengths

    def _agrees(self, lengths: np.ndarray) -> bool:
        return lengths.shape == (len(self),) and int(lengths.sum(dtype=np.int64)) == self.tokens

    def _cached_lengths(self) -> np.ndarray | None:
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
        temporary = f"{self.lengths_path}.tmp-{os.getpid()}.npy"
        try:
            np.save(temporary, lengths)
            os.replace(temporary, self.lengths_path)
        except OSError as e:
            logging.info("token counts of %s kept in memory only (cannot write %s: %s)",
                         self.directory, self.lengths_path, e)
            if os.path.exists(temporary):
                os.remove(temporary)
