"""Checksums of a checkpoint step's files: recorded when the step is finalized, verified before
its arrays are read, so that bit rot (or a partial copy) is found instead of trained on.

    <directory>/<step>/checksums/process_<i>.json
        {"format": 1, "algorithm": "crc32", "process_index": i, "process_count": n,
         "files": {"state/ocdbt.process_0/d/<name>": {"size": 1234, "digest": "<hex>"}, ...}}

Each process records the files it wrote (`owner`): process i its array shards
(`state/ocdbt.process_<i>/...`), their metadata (`state/array_metadatas/process_<i>`) and its
data-iterator state (`data_iterator/process_<i>-of-<n>.json`); process 0 also everything else of
the step (Orbax's metadata and merged manifest, the
model config). bert_jax.train.checkpoint.store calls `record` right after Orbax finalizes a step (in
Orbax's finalize thread for an asynchronous save, so training does not wait for it), and `verify`
before it reads a step's arrays.

A step is damaged (`verify` raises CheckpointUnreadableError naming the step and the file) when a
file's size or digest differs from its record, a recorded file is gone, a file that a restore
would read (`read_by_orbax`) is in no process's record, or one of the `process_count` records is
missing or unreadable. Any other file in no record (a note, an editor's backup, .DS_Store) is
harmless, as a restore never opens it: one warning line names it and the step is read. A step
without a `checksums` folder: `verify` returns False, and the caller decides (the step's metadata
says whether it was saved to have a record: bert_jax.train.checkpoint.store.verify_checksums).
Files are read in chunks through etils.epath, so a gs:// step is checked like a local one.

The digest is CRC32 (zlib), as object stores check their objects (Cloud Storage: CRC32C): it is
meant to find bit rot and partial copies, not deliberate changes, and costs under a third of a
BLAKE2b-128 pass (benchmarks/checksum_cost.py, two runs: 0.79 and 1.09 s/GB against 2.70 and
3.79, on 2 cores that five other processes shared, load average 15-24). A record naming
"blake2b-128" is verified as such.
"""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from typing import Iterator, Optional

from absl import logging
from etils import epath

from bert_jax.runtime import paths
from bert_jax.train.checkpoint.errors import unreadable

FOLDER = "checksums"
ALGORITHM = "crc32"  # what `record` writes; `verify` reads any of ALGORITHMS
FORMAT = 1
_CHUNK = 8 << 20  # bytes read at a time: large enough to stream, small enough to stay in cache
_PROCESS_FOLDER = re.compile(r"ocdbt\.process_(\d+)")
_PROCESS_FILE = re.compile(r"process_(\d+)(?:-of-\d+\.json)?")  # an iterator state, array metadata
_RECORD_FILE = re.compile(r"process_\d+\.json")  # not a temporary file left by a crash


def record_name(process_index: int) -> str:
    """The record of process `process_index`, relative to the step folder."""
    return f"{FOLDER}/process_{process_index}.json"


class _Crc32:
    """zlib.crc32 with hashlib's update/hexdigest."""

    def __init__(self):
        self.value = 0

    def update(self, data: bytes) -> None:
        self.value = zlib.crc32(data, self.value)

    def hexdigest(self) -> str:
        return f"{self.value:08x}"


ALGORITHMS = {"crc32": _Crc32, "blake2b-128": lambda: hashlib.blake2b(digest_size=16)}


def digest(file: epath.Path, algorithm: str = ALGORITHM) -> tuple[int, str]:
    """(size in bytes, hex digest) of a file, read in chunks."""
    hasher, size = ALGORITHMS[algorithm](), 0
    with file.open("rb") as f:
        while chunk := f.read(_CHUNK):
            hasher.update(chunk)
            size += len(chunk)
    return size, hasher.hexdigest()


def step_files(step_dir: epath.Path) -> Iterator[tuple[str, epath.Path]]:
    """(path relative to the step folder, path) of every file of a step but its checksums, in
    name order."""
    def walk(folder: epath.Path, prefix: str) -> Iterator[tuple[str, epath.Path]]:
        for entry in sorted(folder.iterdir(), key=lambda p: p.name):
            name = prefix + entry.name
            if name == FOLDER:
                continue
            if entry.is_dir():
                yield from walk(entry, name + "/")
            else:
                yield name, entry
    yield from walk(step_dir, "")


def owner(relative: str) -> int:
    """The process that wrote a step's file (module docstring): the index in an
    `ocdbt.process_<i>` folder or a `process_<i>-of-<n>.json` iterator state, else process 0."""
    parts = relative.split("/")
    for part in parts[:-1]:
        match = _PROCESS_FOLDER.fullmatch(part)
        if match:
            return int(match.group(1))
    match = _PROCESS_FILE.fullmatch(parts[-1])
    return int(match.group(1)) if match and len(parts) > 1 else 0


# Names that Orbax reads in a step folder by name (not through a manifest), wherever they are:
# a file of one of these names that no record lists could be read by a restore.
_READ_BY_NAME = frozenset({"_CHECKPOINT_METADATA", "_METADATA", "_sharding", "manifest.ocdbt",
                           "commit_success.txt", "metadata", "descriptor"})


def read_by_orbax(relative: str) -> bool:
    """Whether a restore could read the step's file `relative` were it added after the save:
    a name Orbax opens by name, an array-metadata file, an iterator state. Any other added file
    (an editor's backup, a note, .DS_Store, a file in an ocdbt `d/` folder, which only the
    recorded manifests could name) is never read."""
    parts = relative.split("/")
    name = parts[-1]
    return (name in _READ_BY_NAME or "array_metadatas" in parts[:-1]
            or (len(parts) > 1 and parts[0] != "state" and _PROCESS_FILE.fullmatch(name)
                is not None))


def record(step_dir: epath.Path, process_index: int, process_count: int) -> int:
    """Write `checksums/process_<process_index>.json` for the files this process wrote into the
    finalized step `step_dir`; returns how many bytes were hashed."""
    files = {}
    for relative, file in step_files(step_dir):
        if owner(relative) == process_index:
            size, hexdigest = digest(file)
            files[relative] = {"size": size, "digest": hexdigest}
    paths.write_text_atomically(step_dir / record_name(process_index), json.dumps(
        {"format": FORMAT, "algorithm": ALGORITHM, "process_index": process_index,
         "process_count": process_count, "files": files}, indent=1, sort_keys=True))
    return sum(entry["size"] for entry in files.values())


def _read_records(step_dir: epath.Path, where: str) -> Optional[dict[int, dict]]:
    """Every process's record by process index; None when the step has none (module doc)."""
    folder = step_dir / FOLDER
    if not folder.exists():
        return None
    records = {}
    for file in sorted(folder.iterdir(), key=lambda p: p.name):
        if not _RECORD_FILE.fullmatch(file.name):
            continue
        relative = f"{FOLDER}/{file.name}"
        try:
            content = json.loads(file.read_bytes().decode("utf-8"))
            index, count = int(content["process_index"]), int(content["process_count"])
            files = content["files"]
            if content.get("algorithm") not in ALGORITHMS or not isinstance(files, dict):
                raise ValueError(f"not a record of {' or '.join(ALGORITHMS)} digests")
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
            raise unreadable(where, f"{relative}: not a checksum record ({e})") from None
        if relative != record_name(index):
            raise unreadable(where, f"{relative}: holds the record of process {index}")
        records[index] = {"count": count, "files": files, "algorithm": content["algorithm"]}
    if not records:
        return None
    count = max(r["count"] for r in records.values())
    missing = [i for i in range(count) if i not in records]
    if missing:
        raise unreadable(where, f"{record_name(missing[0])} is missing (the step's files were "
                                f"recorded by {count} processes)")
    return records


def verify(step_dir: epath.Path, where: str, share: Optional[tuple[int, int]] = None) -> bool:
    """Check a step's files against its records before its arrays are read.

    share: (index, count) of this process among `count` processes that verify together: it
    hashes the files of the records of processes p with p % count == index (the others hash the
    rest, and the caller combines the outcomes); None hashes every file. Every caller checks that
    each file is recorded and each recorded file exists (a listing, no reading).
    Returns False when the step has no checksums (module docstring), True when it matches; raises
    CheckpointUnreadableError naming the step and the first file at fault.
    """
    records = _read_records(step_dir, where)
    if records is None:
        return False
    recorded = {relative: (index, entry) for index, r in records.items()
                for relative, entry in r["files"].items()}
    algorithms = {index: r["algorithm"] for index, r in records.items()}
    present = dict(step_files(step_dir))
    strays = [relative for relative in present if relative not in recorded]
    for relative in strays:
        if read_by_orbax(relative):
            raise unreadable(where, f"{relative} is in none of the step's checksum records "
                                    f"({FOLDER}/), and a restore would read it: a file added "
                                    "or replaced after the step was saved")
    if strays:
        logging.warning("checkpoint %s holds %s that none of its checksum records lists (added "
                        "after it was saved): ignored, as a restore reads only recorded files",
                        where, ", ".join(strays[:5]) + (f" and {len(strays) - 5} more"
                                                        if len(strays) > 5 else ""))
    for relative, (index, entry) in sorted(recorded.items()):
        if relative not in present:
            item = relative.split("/")[0]
            if "/" in relative and not (step_dir / item).exists():  # a whole item is gone
                raise unreadable(where, f"{item} is missing (no folder {step_dir / item})")
            raise unreadable(where, f"{relative} is missing (recorded in "
                                    f"{record_name(index)})")
        if share is not None and index % share[1] != share[0]:
            continue
        size, hexdigest = digest(present[relative], algorithms[index])
        if size != entry["size"]:
            raise unreadable(where, f"{relative} has {size} bytes, and {entry['size']} were "
                                    "saved (a truncated or partly copied file)")
        if hexdigest != entry["digest"]:
            raise unreadable(where, f"{relative} does not match its checksum (its bytes changed "
                                    "after it was saved: bit rot, or a damaged copy)")
    return True
