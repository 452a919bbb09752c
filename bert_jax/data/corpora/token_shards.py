"""Token shards: a corpus tokenized once, one document's token ids per ArrayRecord record.

A prepared folder (written by `bert_jax.data.corpora.preparation.prepare_shards`) holds

  {split}-{unit:05d}-of-{units:05d}.array_record   one file per work unit and split ("train",
      "validation"), ArrayRecord written with "group_size:1" (random access by record); record j
      is one document's token ids, no special tokens, as little-endian `dtype` bytes (uint16 when
      the vocabulary has at most 65,536 ids, else uint32): np.frombuffer(record, "<u2").
  manifest.json   written last: its presence means the folder is complete (`MANIFEST` below).

The manifest (format FORMAT, FORMAT_VERSION):
  format, format_version, dtype ("uint16" | "uint32", little-endian),
  tokenizer: {fingerprint (sha256 of its tokenizer.json), vocab_size, kind, path},
  options: {validation_fraction, unit_bytes, max_document_bytes, bad_records},
  sources: [{spec, weight, fingerprint, files, units, documents: {split: n}, tokens: {split: n}}],
  shards: {split: [{file, unit, source, documents, tokens, bytes, blake2b}]}, one per work
      unit in unit order (empty shards included),
  splits: {split: {documents, tokens, bytes, shards}},
  bad_records: {total, by_reason, examples, cut_documents, cut_examples}.

`TokenShards(directory, split)` reads them: a grain-compatible random-access data source
(`len`, `[i]` -> np.ndarray of ids, `__getitems__`) over all shards of the split, indexed by a
global document index (shard by shard in unit order). Opening checks every shard's size against
the manifest (a stat per shard: O(shards), no data read) and, with verify="hash", its blake2b
too (reads every byte once: about 1 s per GB on one core); a mismatch is a DataError naming the
file. `shard_digest` is the hash the manifest records.
"""

from __future__ import annotations

import hashlib
import os
from typing import Sequence

import numpy as np

from bert_jax.data.textfiles import DataError
from bert_jax.runtime import paths

FORMAT = "bert_jax.token_shards"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
SPLITS = ("train", "validation")
WRITER_OPTIONS = "group_size:1"
VERIFY = ("size", "hash", "none")


def token_dtype(vocab_size: int) -> np.dtype:
    """Little-endian uint16 for vocabularies of at most 65,536 ids, else uint32."""
    return np.dtype("<u2") if vocab_size <= 1 << 16 else np.dtype("<u4")


def shard_name(split: str, unit: int, units: int) -> str:
    return f"{split}-{unit:05d}-of-{units:05d}.array_record"


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
    """The documents of one split of a prepared folder: `len`, `[i]` -> token ids.

    A grain-compatible random-access data source (grain.MapDataset.source(TokenShards(...))).
    Attributes: manifest, split, dtype, vocab_size, tokens (the split's total), paths.
    """

    def __init__(self, directory: str, split: str = "train", verify: str = "size"):
        if verify not in VERIFY:
            raise ValueError(f"verify={verify!r}; choose one of {', '.join(VERIFY)}")
        from array_record.python.array_record_data_source import ArrayRecordDataSource
        self.directory = os.path.expanduser(os.fspath(directory))
        self.manifest = read_manifest(self.directory)
        if split not in self.manifest["shards"]:
            raise DataError(f"{self.directory} has no split {split!r}; it has "
                            f"{sorted(self.manifest['shards'])}")
        self.split = split
        self.dtype = np.dtype(self.manifest["dtype"]).newbyteorder("<")
        self.vocab_size = self.manifest["tokenizer"]["vocab_size"]
        shards = [s for s in self.manifest["shards"][split] if s["documents"]]
        for shard in shards if verify != "none" else ():
            fault = shard_fault(self.directory, shard, verify)
            if fault:
                raise DataError(fault)
        self.tokens = sum(shard["tokens"] for shard in shards)
        self.paths = [os.path.join(self.directory, s["file"]) for s in shards]
        if not shards:
            raise DataError(f"{self.directory}: the {split} split holds no document")
        # "path[0:n]": the record count comes from the manifest, no file is opened here.
        self._source = ArrayRecordDataSource(
            [f"{path}[0:{s['documents']}]" for path, s in zip(self.paths, shards)])

    def __len__(self) -> int:
        return len(self._source)

    def __getitem__(self, index: int) -> np.ndarray:
        return np.frombuffer(self._source[index], self.dtype)

    def __getitems__(self, indices: Sequence[int]) -> list[np.ndarray]:
        return [np.frombuffer(record, self.dtype)
                for record in self._source.__getitems__(list(indices))]

    def __repr__(self) -> str:
        return (f"TokenShards({self.directory!r}, split={self.split!r}: {len(self):,} documents, "
                f"{self.tokens:,} tokens in {len(self.paths)} shards)")
