"""Tokenize a corpus once, on every core, into token shards (`bert_jax.data.corpora.token_shards`).

`prepare_shards(corpus, tokenizer, output_dir, workers)`:

  1. plans the corpus's work units (`bert_jax.data.corpora.sources.work_units`: files, byte
     ranges, row groups, record batches); the plan depends on the files and `unit_bytes` only;
  2. tokenizes each unit in a worker process (a `multiprocessing` pool of `workers`, started by
     a fork server; workers=1 works in this process): the unit's documents are streamed, encoded
     in batches (no special tokens; `bert_jax.data.corpora.unit_encoding`: exact, 2-3.5x the
     tokenizer's speed for a BERT WordPiece tokenizer), sent to "train" or "validation" by a
     stable hash of their text (`bert_jax.data.corpora.splits.unit_hash` <
     validation_fraction, the rule of the other corpora), and written to that unit's two
     shards. Shard i is a function of unit i alone, so the bytes are the same whatever the
     number of workers. A worker holds one batch of documents and a bounded chunk cache; only
     unit descriptions and small result dicts cross processes: memory does not grow with the
     corpus. Each unit's per-document token counts go to `.units/unit-<i>.<split>.npy`;
  3. joins those counts into document_tokens.<split>.npy (a unit's counts in memory at a time),
     writes the tokenizer as tokenizer.json and manifest.json last (the folder's layout and the
     manifest's schema: `bert_jax.data.corpora.token_shards`). The folder is self-contained:
     training opens it without a tokenizer path and without reading a record.

Resuming: each shard is written under a temporary name (`<name>.tmp-<pid>`) and renamed when
complete, then its counts file, then its unit's record (sizes, counts, blake2b) goes to
`.units/unit-<i>.json`. A
rerun with the same corpus, tokenizer and options (plan.json; anything else in the folder is
an error naming what differs) removes stale temporaries (logging their names), skips the units
whose shards match their record (size and hash) and whose counts files are there, and does
the rest: the final bytes are those of
an uninterrupted run. A full disk (ENOSPC) ends with an OSError naming the folder; run again to
continue. The folder is held by the data-dir lock (`bert_jax.data.corpora.data_dir_lock`) meanwhile.
Local output folders only (ArrayRecord files are written through the local filesystem).
"""

from __future__ import annotations

import array
import errno
import glob
import hashlib
import io
import json
import logging
import multiprocessing
import os
import time
from typing import Iterable, Iterator, Sequence

import numpy as np
import tokenizers

from bert_jax.data.corpora import data_dir_lock
from bert_jax.data.corpora.records import MAX_DOCUMENT_BYTES, BadRecords, check_policy
from bert_jax.data.corpora.sources import (
    DEFAULT_UNIT_BYTES,
    Source,
    WorkUnit,
    parse_corpus,
    work_units,
)
from bert_jax.data.corpora.splits import unit_hash
from bert_jax.data.corpora.token_shards import (
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    SPLITS,
    TOKENIZER_FILE,
    WRITER_OPTIONS,
    document_tokens_name,
    shard_digest,
    shard_fault,
    shard_name,
    token_dtype,
)
from bert_jax.data.corpora.unit_encoding import UnitEncoder
from bert_jax.data.tokenizers.subword import SubwordTokenizer
from bert_jax.runtime import paths, progress

PLAN = "plan.json"
UNITS_FOLDER = ".units"
_BATCH_DOCUMENTS = 256
_BATCH_BYTES = 1 << 20


def tokenizer_fingerprint(tokenizer: tokenizers.Tokenizer) -> str:
    """sha256 of the tokenizer's tokenizer.json (normaliser, pre-tokeniser, model: all of it)."""
    return hashlib.sha256(tokenizer.to_str().encode("utf-8")).hexdigest()


def _unit_record_path(output_dir: str, index: int) -> str:
    return os.path.join(output_dir, UNITS_FOLDER, f"unit-{index:05d}.json")


def unit_counts_name(index: int, split: str) -> str:
    """A unit's per-document token counts of one split, under UNITS_FOLDER (int32 .npy)."""
    return f"unit-{index:05d}.{split}.npy"


# ----- one work unit (in a worker process) ---------------------------------------------------

_worker: dict = {}


def worker_encoder(tokenizer_json: str) -> UnitEncoder:
    """The encoder of a worker process, single-threaded: the workers are the parallelism
    (`tokenizers`' own thread pool in each would oversubscribe the cores)."""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    os.environ["RAYON_NUM_THREADS"] = "1"
    return UnitEncoder(tokenizers.Tokenizer.from_str(tokenizer_json))


def _init_worker(tokenizer_json: str, settings: dict) -> None:
    """A worker's start: the tokenizer and the unit settings."""
    _worker["tokenizer"] = worker_encoder(tokenizer_json)
    _worker["settings"] = settings


def _work(task: tuple[int, WorkUnit]) -> dict:
    index, unit = task
    return tokenize_unit(unit, index, _worker["tokenizer"], **_worker["settings"])


def tokenize_unit(unit: WorkUnit, index: int, tokenizer: tokenizers.Tokenizer | UnitEncoder,
                  output_dir: str, units: int, dtype: str, validation_fraction: float,
                  max_document_bytes: int, bad_records: str) -> dict:
    """Tokenizes one unit into its train and validation shards (temporary names, renamed when
    complete) and records it in .units/unit-<index>.json; returns that record. `tokenizer`:
    a tokenizers.Tokenizer, or its `UnitEncoder` made once per worker (the ids are the same)."""
    from array_record.python.array_record_module import ArrayRecordWriter
    bad = BadRecords(bad_records)
    encode = tokenizer if isinstance(tokenizer, UnitEncoder) else UnitEncoder(tokenizer)
    dtype = np.dtype(dtype)
    names = {split: shard_name(split, index, units) for split in SPLITS}
    temporaries = {split: os.path.join(output_dir, f"{name}.tmp-{os.getpid()}")
                   for split, name in names.items()}
    counts = {split: {"documents": 0, "tokens": 0} for split in SPLITS}
    lengths = {split: array.array("i") for split in SPLITS}  # 4 bytes a document
    writers = {}
    try:
        writers = {split: ArrayRecordWriter(path, WRITER_OPTIONS)
                   for split, path in temporaries.items()}

        def write(texts: list[str]) -> None:
            for text, record in zip(texts, encode.records(texts, dtype)):
                if not record:
                    continue
                split = "validation" if unit_hash(text) < validation_fraction else "train"
                writers[split].write(record)
                tokens = len(record) // dtype.itemsize
                counts[split]["documents"] += 1
                counts[split]["tokens"] += tokens
                lengths[split].append(tokens)

        batch, size = [], 0
        for document in unit.documents(bad, max_document_bytes):
            batch.append(document.text)
            size += len(document.text)
            if len(batch) >= _BATCH_DOCUMENTS or size >= _BATCH_BYTES:
                write(batch)
                batch, size = [], 0
        write(batch)
        for writer in writers.values():
            writer.close()
        writers = {}
        shards = {}
        for split in SPLITS:
            shards[split] = {"file": names[split], "unit": index, "source": unit.source,
                             **counts[split], "bytes": os.path.getsize(temporaries[split]),
                             "blake2b": shard_digest(temporaries[split])}
            os.replace(temporaries[split], os.path.join(output_dir, names[split]))
        for split in SPLITS:
            paths.write_atomically(
                os.path.join(output_dir, UNITS_FOLDER, unit_counts_name(index, split)),
                _npy(np.frombuffer(lengths[split], np.int32)))
    except BaseException:
        for writer in writers.values():
            try:
                writer.close()
            except Exception:  # noqa: BLE001 - closing after a failure; the first error counts
                pass
        for path in temporaries.values():
            if os.path.exists(path):
                os.remove(path)
        raise
    record = {"unit": index, "source": unit.source, "work": str(unit), "shards": shards,
              "bad_records": bad.as_dict()}
    paths.write_text_atomically(_unit_record_path(output_dir, index), json.dumps(record))
    return record


def _npy(array: np.ndarray):
    """A writer of `array` as a .npy file (for `paths.write_atomically`)."""
    return lambda f: np.save(f, array)


# ----- the whole preparation ---------------------------------------------------------------

def _finished_unit(output_dir: str, index: int, verify: str) -> dict | None:
    """The unit's record when its shards are complete and match it (size and hash)."""
    path = _unit_record_path(output_dir, index)
    if not os.path.isfile(path):
        return None
    try:
        record = paths.read_json(path)
    except ValueError:
        return None
    for split, shard in record["shards"].items():
        fault = shard_fault(output_dir, shard, verify) or _counts_fault(output_dir, index, split,
                                                                        shard["documents"])
        if fault:
            logging.warning("prepare_shards: unit %d is done again: %s", index, fault)
            return None
    return record


def _counts_fault(output_dir: str, index: int, split: str, documents: int) -> str | None:
    path = os.path.join(output_dir, UNITS_FOLDER, unit_counts_name(index, split))
    try:
        shape = np.load(path, mmap_mode="r").shape
    except (OSError, ValueError):
        return f"{path}: missing or unreadable"
    return None if shape == (documents,) else f"{path}: {shape}, not ({documents},)"


def _remove_stale_temporaries(output_dir: str) -> None:
    stale = sorted(glob.glob(os.path.join(output_dir, "*.tmp-*")) +
                   glob.glob(os.path.join(output_dir, UNITS_FOLDER, "*.tmp-*")))
    for path in stale:
        os.remove(path)
    if stale:
        logging.warning("prepare_shards: removed %d stale temporary file(s) of an interrupted "
                        "run: %s", len(stale), ", ".join(os.path.basename(p) for p in stale))


def check_same_plan(output_dir: str, recorded: dict, plan: dict) -> None:
    """ValueError naming what differs unless the folder's recorded plan is `plan` (another
    corpus, tokenizer or options: another folder is needed); any runner's check."""
    differs = [key for key in plan if recorded.get(key) != plan[key]]
    if differs:
        raise ValueError(f"{output_dir} holds shards of another preparation (its {PLAN} "
                         f"differs in: {', '.join(differs)}); use another output folder or "
                         "remove this one")


def _check_plan(output_dir: str, plan: dict) -> None:
    """Records the plan, or checks that the folder's is the same (`check_same_plan`)."""
    path = os.path.join(output_dir, PLAN)
    if os.path.isfile(path):
        check_same_plan(output_dir, paths.read_json(path), plan)
        return
    paths.write_text_atomically(path, json.dumps(plan, indent=1))


def _full_disk(error: OSError, output_dir: str) -> OSError:
    return OSError(errno.ENOSPC, "no space left on device; the completed shards are kept: free "
                   "some space and run the same command again to continue", output_dir)


def prepare_shards(corpus: str | Sequence[Source], tokenizer: SubwordTokenizer | str,
                   output_dir: str, workers: int = 1, validation_fraction: float = 0.02,
                   unit_bytes: int = DEFAULT_UNIT_BYTES,
                   max_document_bytes: int = MAX_DOCUMENT_BYTES, bad_records: str = "skip",
                   verify: str = "hash", text_key: str = "text",
                   document_delimiter: str = "blank_line") -> dict:
    """Tokenizes `corpus` (a spec or parsed sources) into token shards in `output_dir` with
    `workers` processes; resumes an interrupted preparation there. Returns the manifest.

    verify: how a rerun checks the shards already there, "hash" (reads them) or "size"."""
    check_policy(bad_records)
    if paths.is_remote(output_dir):
        raise ValueError(f"output folder {output_dir}: token shards are written to a local "
                         "folder (copy it to object storage afterwards)")
    if not 0 <= validation_fraction < 1:
        raise ValueError(f"validation_fraction={validation_fraction}; give a number in [0, 1)")
    if workers < 1:
        raise ValueError(f"workers={workers}; give at least 1")
    output_dir = os.path.abspath(os.path.expanduser(output_dir))
    sources = (parse_corpus(corpus, text_key, document_delimiter) if isinstance(corpus, str)
               else list(corpus))
    if isinstance(tokenizer, str):
        from bert_jax.data.tokenizers.load import load_tokenizer
        tokenizer = load_tokenizer(tokenizer)
    started = time.perf_counter()
    units = work_units(sources, unit_bytes)
    plan = preparation_plan(sources, units, tokenizer, validation_fraction, unit_bytes,
                            max_document_bytes, bad_records)
    os.makedirs(output_dir, exist_ok=True)
    with data_dir_lock.exclusive(output_dir):
        try:
            _check_plan(output_dir, plan)
            os.makedirs(os.path.join(output_dir, UNITS_FOLDER), exist_ok=True)
            _remove_stale_temporaries(output_dir)
            records = {i: _finished_unit(output_dir, i, verify) for i in range(len(units))}
            pending = [(i, unit) for i, unit in enumerate(units) if records[i] is None]
            if len(pending) < len(units):
                logging.info("prepare_shards: %d of %d units already done in %s", len(units) -
                             len(pending), len(units), output_dir)
            settings = dict(output_dir=output_dir, **unit_settings(plan))
            tokenizer_json = tokenizer.tokenizer.to_str()
            for record in _run(pending, tokenizer_json, settings, workers):
                records[record["unit"]] = record
            records = [records[i] for i in range(len(units))]
            for split in SPLITS:
                _write_document_tokens(output_dir, split, records)
            paths.write_text_atomically(os.path.join(output_dir, TOKENIZER_FILE), tokenizer_json)
            manifest = manifest_of(plan, records)
            paths.write_text_atomically(os.path.join(output_dir, MANIFEST),
                                        json.dumps(manifest, indent=1))
        except OSError as e:
            if e.errno == errno.ENOSPC:
                raise _full_disk(e, output_dir) from None
            raise
    log_summary(manifest, output_dir, time.perf_counter() - started)
    return manifest


def preparation_plan(sources: Sequence[Source], units: Sequence[WorkUnit],
                     tokenizer: SubwordTokenizer, validation_fraction: float, unit_bytes: int,
                     max_document_bytes: int, bad_records: str) -> dict:
    """What a preparation is (plan.json): format, tokenizer, dtype, options, sources, units. Two
    runs with the same plan write the same bytes."""
    return {"format": FORMAT, "format_version": FORMAT_VERSION,
            "tokenizer": {"fingerprint": tokenizer_fingerprint(tokenizer.tokenizer),
                          "vocab_size": tokenizer.vocab_size, "kind": tokenizer.kind},
            "dtype": token_dtype(tokenizer.vocab_size).name,
            "options": {"validation_fraction": validation_fraction, "unit_bytes": unit_bytes,
                        "max_document_bytes": max_document_bytes, "bad_records": bad_records},
            "sources": [{"spec": source.spec, "weight": source.weight,
                         "fingerprint": source.fingerprint(), "files": len(source.files)}
                        for source in sources],
            "units": [str(unit) for unit in units]}


def unit_settings(plan: dict) -> dict:
    """The keyword arguments of `tokenize_unit` that come from the plan (all but output_dir)."""
    options = plan["options"]
    return dict(units=len(plan["units"]), dtype=np.dtype(plan["dtype"]).newbyteorder("<").str,
                validation_fraction=options["validation_fraction"],
                max_document_bytes=options["max_document_bytes"],
                bad_records=options["bad_records"])


def document_tokens_pieces(parts: Iterable[np.ndarray], total: int) -> Iterator[bytes]:
    """The bytes of document_tokens.<split>.npy ([total] int32, the units' counts one after
    another), piece by piece: the .npy header, then each unit's counts (one in memory at a
    time)."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<i4", "fortran_order": False, "shape": (total,)})
    yield header.getvalue()
    written = 0
    for part in parts:
        written += len(part)
        yield np.ascontiguousarray(part, "<i4").tobytes()
    if written != total:
        raise ValueError(f"the units' token counts hold {written} documents, not {total}")


def _write_document_tokens(output_dir: str, split: str, records: list[dict]) -> None:
    parts = (np.load(os.path.join(output_dir, UNITS_FOLDER, unit_counts_name(r["unit"], split)))
             for r in records)
    total = sum(r["shards"][split]["documents"] for r in records)
    def write(f) -> None:
        for piece in document_tokens_pieces(parts, total):
            f.write(piece)

    paths.write_atomically(os.path.join(output_dir, document_tokens_name(split)), write)


def _run(pending: list[tuple[int, WorkUnit]], tokenizer_json: str, settings: dict,
         workers: int):
    """The records of the pending units, as they finish (in this process for workers=1)."""
    bar = progress.bar(total=len(pending), desc="shards: units", unit="unit")
    if workers == 1 or len(pending) <= 1:
        tokenizer = UnitEncoder(tokenizers.Tokenizer.from_str(tokenizer_json))
        for index, unit in pending:
            yield tokenize_unit(unit, index, tokenizer, **settings)
            bar.update(1)
        bar.close()
        return
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    with context.Pool(min(workers, len(pending)), _init_worker,
                      (tokenizer_json, settings)) as pool:
        for record in pool.imap_unordered(_work, pending):
            yield record
            bar.update(1)
    bar.close()


def manifest_of(plan: dict, records: list[dict]) -> dict:
    """The manifest of a finished preparation: its plan and its units' records (in unit
    order); the folder also holds TOKENIZER_FILE and the document_tokens files."""
    bad = BadRecords()
    shards = {split: [record["shards"][split] for record in records] for split in SPLITS}
    for record in records:
        bad.merge(record["bad_records"])
    described = []
    for index, source in enumerate(plan["sources"]):
        mine = [r for r in records if r["source"] == index]
        described.append({**source, "units": len(mine),
                          "documents": {s: sum(r["shards"][s]["documents"] for r in mine)
                                        for s in SPLITS},
                          "tokens": {s: sum(r["shards"][s]["tokens"] for r in mine)
                                     for s in SPLITS}})
    splits = {split: {key: sum(shard[key] for shard in shards[split])
                      for key in ("documents", "tokens", "bytes")} for split in SPLITS}
    for split in SPLITS:
        splits[split]["shards"] = len(shards[split])
    return {"format": FORMAT, "format_version": FORMAT_VERSION, "dtype": plan["dtype"],
            "tokenizer": {**plan["tokenizer"], "path": TOKENIZER_FILE,
                          "files": [TOKENIZER_FILE]},
            "options": plan["options"], "sources": described, "shards": shards,
            "splits": splits, "document_tokens": {s: document_tokens_name(s) for s in SPLITS},
            "bad_records": bad.as_dict()}


def log_summary(manifest: dict, output_dir: str, seconds: float | None = None) -> None:
    """Logs a finished preparation's totals, per source and split, and its bad records."""
    for index, source in enumerate(manifest["sources"]):
        logging.info("prepare_shards: source %d %s (weight %g): %s documents, %s tokens",
                     index, source["spec"], source["weight"], source["documents"],
                     source["tokens"])
    for split, totals in manifest["splits"].items():
        logging.info("prepare_shards: %s: %d documents, %d tokens, %d bytes in %d shards",
                     split, totals["documents"], totals["tokens"], totals["bytes"],
                     totals["shards"])
    bad = BadRecords()
    bad.merge(manifest["bad_records"])
    for line in bad.summary():
        logging.warning("prepare_shards: %s", line)
    if manifest["splits"]["validation"]["documents"] == 0:
        logging.warning("prepare_shards: no document went to validation (validation_fraction="
                        "%g); the corpus is small or the fraction 0", manifest["options"][
                            "validation_fraction"])
    if seconds is not None:
        logging.info("prepare_shards: %s in %.1f s", output_dir, seconds)
