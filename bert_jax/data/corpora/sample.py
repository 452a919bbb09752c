"""A bounded, seeded, uniform sample of a corpus's documents: what a tokenizer is trained on.

`sample_documents(sources, sample_bytes, seed)` streams every document of every source once and
keeps a uniform random subset of at most `sample_bytes` (UTF-8 bytes) in memory: each document
gets a key, a keyed hash of its text (blake2b keyed by the seed), and the sample is the documents
of smallest key whose sizes add up to at most `sample_bytes` (a bottom-k reservoir bounded in
bytes: `Reservoir`). The key depends on the text and the seed only, so the sample is the same
whatever the order of the files and records (identical texts come and go together), and a
different seed draws another one. The texts come out in key order, a random order.

A mixture's sources each get their share of `sample_bytes` by weight (a source that holds less
gives all it has); the documents read and kept per source are logged and returned (`Sample`).
Memory: the kept texts (sample_bytes as Python strings: 1-4 bytes a character) plus ~100 bytes
a document, whatever the corpus's size.

`kept_sample(..., folder)` is the same sample, kept in a local folder (the tokenizer's) as
`.sample-<identity>.parquet` until `discard_samples(folder)`: the identity is a hash of the
sources' fingerprints, the budget, the seed and the record options, so a rerun of the same
preparation after a kill (e.g. during the tokenizer's training, which `tokenizers` cannot resume)
reads the sample back instead of the corpus. It is written beside its name and renamed; a
leftover of a write that was cut short is removed (and logged) by the next call.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import heapq
import json
import logging
import os
from typing import Iterable, Sequence

from bert_jax.data.corpora.records import MAX_DOCUMENT_BYTES, BadRecords
from bert_jax.data.corpora.sources import Source, source_documents
from bert_jax.runtime import paths, progress

SAMPLE_PREFIX = ".sample-"


class Reservoir:
    """The documents of smallest key seen so far whose sizes add up to at most `budget` bytes.

    A document is kept when its key is below `threshold` (the smallest key ever evicted); while
    the kept bytes exceed the budget, the largest key goes (and lowers the threshold). What is
    kept at the end is the longest run of smallest keys that fits: independent of arrival order.
    """

    def __init__(self, budget: int, seed: int = 0):
        self.budget = budget
        self.key = hashlib.blake2b(str(seed).encode("utf-8"), digest_size=32).digest()
        self.heap: list[tuple[int, str, int]] = []  # (-key, text, size): largest key on top
        self.size = 0
        self.threshold = 1 << 64
        self.seen = 0

    def add(self, text: str) -> None:
        self.seen += 1
        data = text.encode("utf-8")
        key = int.from_bytes(hashlib.blake2b(data, key=self.key, digest_size=8).digest(),
                             "little")
        if key >= self.threshold:
            return
        heapq.heappush(self.heap, (-key, text, len(data)))
        self.size += len(data)
        while self.size > self.budget:
            negative, _, size = heapq.heappop(self.heap)
            self.size -= size
            self.threshold = min(self.threshold, -negative)
        # Identical texts share a key: the ones still kept above the threshold go too.
        while self.heap and -self.heap[0][0] >= self.threshold:
            self.size -= heapq.heappop(self.heap)[2]

    def texts(self) -> list[str]:
        """The kept texts, smallest key first."""
        return [text for _, text, _ in sorted(self.heap, reverse=True)]


@dataclasses.dataclass
class Sample:
    """The sampled texts, and per source: documents read, documents kept, bytes kept."""

    texts: list[str]
    read: list[int]
    kept: list[int]
    kept_bytes: list[int]
    bad: BadRecords


def sample_documents(sources: Iterable[Source], sample_bytes: int, seed: int = 0,
                     bad_records: str = "skip",
                     max_document_bytes: int = MAX_DOCUMENT_BYTES) -> Sample:
    """A uniform random sample of at most `sample_bytes` of the sources' documents (`Reservoir`
    per source, the budget shared by weight); the texts of all sources in one list."""
    sources = list(sources)
    if sample_bytes <= 0:
        raise ValueError(f"sample_bytes={sample_bytes}; give a positive number of bytes")
    total_weight = sum(source.weight for source in sources)
    bad = BadRecords(bad_records)
    texts, read, kept, kept_bytes = [], [], [], []
    for index, source in enumerate(sources):
        reservoir = Reservoir(int(sample_bytes * source.weight / total_weight), seed)
        documents = source_documents(source, bad, max_document_bytes, index)
        for document in progress.bar(documents, desc=f"sample: {source.kind} source {index}",
                                     unit="doc"):
            reservoir.add(document.text)
        chosen = reservoir.texts()
        texts.extend(chosen)
        read.append(reservoir.seen)
        kept.append(len(chosen))
        kept_bytes.append(reservoir.size)
        logging.info("sample: source %d %s (weight %g): %d of %d documents, %d bytes", index,
                     source.spec, source.weight, len(chosen), reservoir.seen, reservoir.size)
    for line in bad.summary():
        logging.warning("sample: %s", line)
    if not texts:
        raise ValueError("the corpus holds no document to sample")
    return Sample(texts, read, kept, kept_bytes, bad)


def sample_identity(sources: Sequence[Source], sample_bytes: int, seed: int, bad_records: str,
                    max_document_bytes: int) -> str:
    """sha256 of what a sample is a function of: the sources (spec, weight, files' identity),
    the budget, the seed and the record options."""
    identity = json.dumps([[source.spec, source.weight, source.fingerprint()] for source in
                           sources] + [sample_bytes, seed, bad_records, max_document_bytes])
    return hashlib.sha256(identity.encode("utf-8")).hexdigest()


def kept_sample(sources: Sequence[Source], sample_bytes: int, seed: int, bad_records: str,
                max_document_bytes: int, folder: str) -> Sample:
    """`sample_documents`, read back from `folder` when a previous call with the same identity
    kept it there, else drawn and kept (module docstring). A remote folder keeps nothing."""
    sources = list(sources)
    if paths.is_remote(folder):
        return sample_documents(sources, sample_bytes, seed, bad_records, max_document_bytes)
    import pyarrow as pa
    import pyarrow.parquet as pq
    os.makedirs(folder, exist_ok=True)
    stale = glob.glob(os.path.join(folder, SAMPLE_PREFIX + "*.tmp-*"))
    for path in stale:
        os.remove(path)
        logging.warning("sample: removed %s, left by a write that was cut short", path)
    identity = sample_identity(sources, sample_bytes, seed, bad_records, max_document_bytes)
    path = os.path.join(folder, f"{SAMPLE_PREFIX}{identity[:16]}.parquet")
    if os.path.isfile(path):
        table = pq.read_table(path)
        counts = json.loads(table.schema.metadata[b"bert_jax.sample"])
        bad = BadRecords(bad_records)
        bad.merge(counts.pop("bad"))
        logging.info("sample: read back from %s (%d documents), not drawn again from the corpus",
                     path, table.num_rows)
        return Sample(table.column("text").to_pylist(), bad=bad, **counts)
    sample = sample_documents(sources, sample_bytes, seed, bad_records, max_document_bytes)
    counts = {"read": sample.read, "kept": sample.kept, "kept_bytes": sample.kept_bytes,
              "bad": sample.bad.as_dict()}
    table = pa.table({"text": sample.texts}).replace_schema_metadata(
        {"bert_jax.sample": json.dumps(counts)})
    paths.write_atomically(path, lambda f: pq.write_table(table, f))
    return sample


def discard_samples(folder: str) -> None:
    """Removes the samples `kept_sample` kept in `folder` (once what needed them is done)."""
    if not paths.is_remote(folder):
        for path in glob.glob(os.path.join(folder, SAMPLE_PREFIX + "*.parquet")):
            os.remove(path)
