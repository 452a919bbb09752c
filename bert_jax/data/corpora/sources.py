"""Corpus specs -> sources -> work units -> documents, streamed.

A corpus spec names one source or a weighted mixture of several:

  text:GLOB            plain UTF-8 text files (.gz, .bz2, .zst/.zstd by extension); documents
                       end at a blank line (default), a line end or the file's end
                       (document_delimiter: "blank_line", "line", "file", as text_corpus)
  jsonl:GLOB           one JSON object a line (compressed or not), the text in `text_key`
  parquet:GLOB         a text column (`text_key`) of Parquet files, read by row group
  hf:PATH              a dataset saved by `datasets.save_to_disk` (Arrow files listed in its
                       state.json; a DatasetDict's `split` folder, "train" by default), or a
                       folder of Parquet (else Arrow) files of a Hub dataset snapshot (those of
                       `split` when some file or folder is named after it, else all). Read with
                       pyarrow; `datasets` is not needed.
  mix:W*SPEC,W*SPEC... a mixture: e.g. "mix:0.7*jsonl:a/*.jsonl.zst,0.3*text:b/*.txt"; weights
                       are relative (they need not add up to 1)

Per-source options go in brackets after the kind and override the defaults given to
`parse_corpus`: "jsonl[text_key=content]:x/*.jsonl", "text[document_delimiter=line]:y/*.txt",
"hf[split=validation,text_key=body]:/data/saved". GLOB and PATH are local or gs://.

A `Source` lists its files (`files`), fingerprints them (`fingerprint`: the spec and each file's
path, size and version) and plans its `WorkUnit`s: an uncompressed text or JSONL file in byte
ranges of about `unit_bytes` cut between documents, a Parquet file in runs of row groups, an
Arrow file in runs of record batches, a compressed file whole. The plan depends on the files and
`unit_bytes` only, never on how many processes read them. `WorkUnit.documents(bad, max_bytes)`
streams a unit's documents (`bert_jax.data.corpora.readers`); `source_documents` streams a whole
source. The mixture's weights are used where documents are drawn from the sources
(`bert_jax.data.corpora.sample`) and recorded with prepared shards.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import os
import re
from typing import Iterator

from etils import epath

from bert_jax.data.corpora import readers as corpus_readers
from bert_jax.data.corpora.files import compression_of, file_identity, file_size, matched_files
from bert_jax.data.corpora.records import MAX_DOCUMENT_BYTES, BadRecords, Document
from bert_jax.runtime import paths

KINDS = ("text", "jsonl", "parquet", "hf")
MIX_PREFIX = "mix:"
DOCUMENT_DELIMITERS = ("blank_line", "line", "file")
DEFAULT_UNIT_BYTES = 64 << 20
_OPTIONS = {"text": ("document_delimiter",), "jsonl": ("text_key",), "parquet": ("text_key",),
            "hf": ("text_key", "split")}
_SPEC = re.compile(r"^(?P<kind>[a-z]+)(\[(?P<options>[^\]]*)\])?:(?P<location>.+)$", re.S)
_MIX_ITEM = re.compile(r"^\s*(?P<weight>[0-9]*\.?[0-9]+(e-?[0-9]+)?)\s*\*\s*(?P<spec>.+)$")


@dataclasses.dataclass(frozen=True)
class WorkUnit:
    """A part of one file that one process reads whole: bytes [start, end) of a text or JSONL
    file, row groups [start, end) of a Parquet file, record batches [start, end) of an Arrow
    file (end -1: to the end). `option` is the text key, or the document delimiter for text."""

    source: int
    reader: str  # "text", "jsonl", "parquet", "arrow"
    path: str
    start: int = 0
    end: int = -1
    option: str = "text"

    def documents(self, bad: BadRecords | None = None,
                  max_bytes: int = MAX_DOCUMENT_BYTES) -> Iterator[Document]:
        read = getattr(corpus_readers, f"{self.reader}_documents")
        return read(self.path, self.start, self.end, self.option, max_bytes, bad)

    def __str__(self) -> str:
        what = {"text": "bytes", "jsonl": "bytes", "parquet": "row groups",
                "arrow": "record batches"}[self.reader]
        end = "end" if self.end < 0 else self.end
        return f"{self.path} ({what} {self.start}-{end})"


@dataclasses.dataclass(frozen=True)
class Source:
    """One corpus source: a kind (KINDS), where its files are, and its options."""

    kind: str
    location: str
    weight: float = 1.0
    text_key: str = "text"
    document_delimiter: str = "blank_line"
    split: str = "train"

    @property
    def spec(self) -> str:
        """The spec that names this source with all its options."""
        options = ",".join(f"{name}={getattr(self, name)}" for name in _OPTIONS[self.kind])
        return f"{self.kind}[{options}]:{self.location}"

    @functools.cached_property
    def files(self) -> tuple[tuple[str, str], ...]:
        """(reader, path) of each file, in a fixed (sorted) order."""
        if self.kind == "hf":
            return tuple(hf_files(self.location, self.split))
        return tuple((self.kind, path) for path in matched_files(self.location, self.spec))

    def fingerprint(self) -> str:
        """sha256 of the spec and each file's path, size and version (mtime or generation)."""
        identity = json.dumps([self.spec, [file_identity(path) for _, path in self.files]])
        return hashlib.sha256(identity.encode("utf-8")).hexdigest()

    def units(self, index: int = 0, unit_bytes: int | None = DEFAULT_UNIT_BYTES
              ) -> list[WorkUnit]:
        """The work units of this source (the `index`-th of its corpus); unit_bytes None: one
        unit per file."""
        option = self.document_delimiter if self.kind == "text" else self.text_key
        units = []
        for reader, path in self.files:
            for start, end in _ranges(reader, path, option, unit_bytes):
                units.append(WorkUnit(index, reader, path, start, end, option))
        return units


def _ranges(reader: str, path: str, option: str, unit_bytes: int | None) -> list[tuple[int, int]]:
    if unit_bytes is None or compression_of(path):
        return [(0, -1)]  # a compressed file is read whole (its stream cannot be entered)
    if reader in ("text", "jsonl"):
        delimiter = option if reader == "text" else "line"
        cuts = corpus_readers.text_cuts(path, unit_bytes, delimiter, file_size(path))
        return list(itertools.pairwise(cuts))
    if reader == "parquet":
        parts = corpus_readers.parquet_row_groups(path)
    elif paths.is_remote(path):
        return [(0, -1)]  # Arrow on object storage: whole files (a stream has no index)
    else:
        parts = corpus_readers.arrow_batches(path)
    ranges, first, size = [], 0, 0
    for number, (_, nbytes) in enumerate(parts):
        size += nbytes
        if size >= unit_bytes:
            ranges.append((first, number + 1))
            first, size = number + 1, 0
    if first < len(parts) or not ranges:
        ranges.append((first, len(parts)))
    return ranges


def hf_files(location: str, split: str = "train") -> list[tuple[str, str]]:
    """(reader, path) of the data files of a saved dataset or a Hub snapshot folder."""
    folder = epath.Path(os.path.expanduser(location))
    if not folder.is_dir():
        raise ValueError(f"hf:{location}: no such folder (a folder written by "
                         "datasets.save_to_disk, or a Hub dataset snapshot: e.g. "
                         "`huggingface-cli download --repo-type dataset NAME --local-dir DIR`)")
    if (folder / "state.json").is_file():
        state = paths.read_json(folder / "state.json")
        names = [entry["filename"] for entry in state.get("_data_files", [])]
        if not names:
            raise ValueError(f"hf:{location}: state.json lists no data files")
        return [("arrow", os.fspath(folder / name)) for name in names]
    if (folder / "dataset_dict.json").is_file():
        splits = paths.read_json(folder / "dataset_dict.json").get("splits", [])
        if split not in splits:
            raise ValueError(f"hf:{location} has no split {split!r}; it has {splits} (choose "
                             f"one: hf[split=NAME]:{location})")
        return hf_files(os.fspath(folder / split), split)
    for extension, reader in (("parquet", "parquet"), ("arrow", "arrow")):
        try:
            found = matched_files(os.path.join(os.fspath(folder), "**", f"*.{extension}"))
        except ValueError:
            continue
        named = [path for path in found if _names_split(path, os.fspath(folder), split)]
        return [(reader, path) for path in (named or found)]
    raise ValueError(f"hf:{location}: neither state.json, dataset_dict.json nor .parquet or "
                     ".arrow files")


def _names_split(path: str, folder: str, split: str) -> bool:
    """Whether a snapshot file belongs to `split`: a folder of its path is named so, or its
    file name starts with "<split>-", "<split>_" or "<split>."."""
    parts = os.path.relpath(path, folder).split(os.sep)
    return split in parts[:-1] or re.match(rf"{re.escape(split)}[-_.]", parts[-1]) is not None


def parse_source(spec: str, text_key: str = "text", document_delimiter: str = "blank_line",
                 split: str = "train", weight: float = 1.0) -> Source:
    """The Source a one-source spec names ("jsonl[text_key=body]:a/*.jsonl"); ValueError
    naming the spec when it is not one."""
    match = _SPEC.match(spec.strip())
    if not match or match["kind"] not in KINDS:
        raise ValueError(f"corpus {spec!r}: a source is KIND:LOCATION or KIND[OPTIONS]:LOCATION "
                         f"with KIND one of {', '.join(KINDS)}, or a mixture "
                         "mix:W*SPEC,W*SPEC,...")
    kind = match["kind"]
    options = dict(text_key=text_key, document_delimiter=document_delimiter, split=split)
    for item in filter(None, (match["options"] or "").split(",")):
        name, _, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if name not in _OPTIONS[kind] or not value:
            raise ValueError(f"corpus {spec!r}: option {item!r}; a {kind} source takes "
                             f"{', '.join(o + '=VALUE' for o in _OPTIONS[kind])}")
        options[name] = value
    if options["document_delimiter"] not in DOCUMENT_DELIMITERS:
        raise ValueError(f"corpus {spec!r}: document_delimiter={options['document_delimiter']!r};"
                         f" choose one of {', '.join(DOCUMENT_DELIMITERS)}")
    return Source(kind, match["location"].strip(), weight, **options)


def parse_corpus(spec: str, text_key: str = "text", document_delimiter: str = "blank_line",
                 split: str = "train") -> list[Source]:
    """The sources of a corpus spec: one, or those of a mixture "mix:W*SPEC,W*SPEC,..."."""
    if not spec.startswith(MIX_PREFIX):
        return [parse_source(spec, text_key, document_delimiter, split)]
    items = re.split(r",(?=\s*[0-9]*\.?[0-9]+(?:e-?[0-9]+)?\s*\*)", spec[len(MIX_PREFIX):])
    sources = []
    for item in items:
        match = _MIX_ITEM.match(item)
        if not match or float(match["weight"]) <= 0:
            raise ValueError(f"corpus {spec!r}: {item!r} is not WEIGHT*SPEC with a positive "
                             "weight (e.g. mix:0.7*jsonl:a/*.jsonl,0.3*text:b/*.txt)")
        sources.append(parse_source(match["spec"], text_key, document_delimiter, split,
                                    float(match["weight"])))
    if len(sources) < 2:
        raise ValueError(f"corpus {spec!r}: a mixture names at least two sources")
    return sources


def work_units(sources: list[Source], unit_bytes: int = DEFAULT_UNIT_BYTES) -> list[WorkUnit]:
    """Every work unit of the corpus: source by source, file by file, in order."""
    return [unit for index, source in enumerate(sources)
            for unit in source.units(index, unit_bytes)]


def source_documents(source: Source, bad: BadRecords | None = None,
                     max_bytes: int = MAX_DOCUMENT_BYTES, index: int = 0) -> Iterator[Document]:
    """Every document of a source, file by file in order, streamed."""
    bad = bad if bad is not None else BadRecords()
    for unit in source.units(index, unit_bytes=None):
        yield from unit.documents(bad, max_bytes)
