"""The files of a corpus: found by a glob, opened as a stream of decompressed bytes, identified.

Paths are local or on object storage (`gs://bucket/corpus/*.jsonl.zst`, read through
etils.epath; a remote glob through fsspec, which epath itself uses for gs://).

`matched_files(pattern)`: the sorted files a glob matches ("**" recurses); a ValueError naming
the glob when none. `compression_of(path)`: "gzip", "bz2", "zstd" or None, by extension
(COMPRESSIONS). `open_bytes(path)`: a binary stream of the file's decompressed bytes, read a
block at a time (never the whole file). `file_identity(path)`: [path, size, modification time]
(the object's generation or etag on object storage), what a preparation's fingerprint hashes.
"""

from __future__ import annotations

import bz2
import glob as globlib
import gzip
import io
import os
from typing import BinaryIO

from etils import epath

from bert_jax.runtime import paths

COMPRESSIONS = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd", ".zstd": "zstd"}
_READ_BLOCK = 1 << 20


def compression_of(path: str) -> str | None:
    """The compression a file's extension says: "gzip", "bz2", "zstd", or None (plain)."""
    return COMPRESSIONS.get(os.path.splitext(path)[1].lower())


def matched_files(pattern: str, what: str = "corpus") -> list[str]:
    """Sorted files matched by `pattern` ("**" recurses; local or gs://); ValueError naming the
    glob when it matches none."""
    if paths.is_remote(pattern):
        import fsspec
        filesystem, inner = fsspec.core.url_to_fs(pattern)
        protocol = pattern.split("://", 1)[0]
        found = sorted(f"{protocol}://{p}" for p in filesystem.glob(inner)
                       if filesystem.isfile(p))
    else:
        found = sorted(p for p in globlib.glob(os.path.expanduser(pattern), recursive=True)
                       if os.path.isfile(p))
    if not found:
        raise ValueError(f"{what}: the glob {pattern!r} matches no file")
    return found


def open_raw(path: str) -> BinaryIO:
    """The file's bytes as stored (seekable): a local file or an object-storage stream."""
    if paths.is_remote(path):
        return epath.Path(path).open("rb")
    return open(path, "rb", buffering=_READ_BLOCK)


def open_bytes(path: str) -> BinaryIO:
    """A buffered binary stream of the file's decompressed bytes (by extension, `compression_of`);
    `readline(limit)` reads a line at most `limit` bytes at a time."""
    raw = open_raw(path)
    compression = compression_of(path)
    if compression == "gzip":
        return io.BufferedReader(gzip.GzipFile(fileobj=raw, mode="rb"), _READ_BLOCK)
    if compression == "bz2":
        return io.BufferedReader(bz2.BZ2File(raw, mode="rb"), _READ_BLOCK)
    if compression == "zstd":
        import zstandard
        stream = zstandard.ZstdDecompressor().stream_reader(raw, read_size=_READ_BLOCK,
                                                            closefd=True)
        return io.BufferedReader(stream, _READ_BLOCK)
    return raw


def file_size(path: str) -> int:
    if paths.is_remote(path):
        return int(epath.Path(path).stat().length)
    return os.path.getsize(path)


def file_identity(path: str) -> list:
    """[path, size, version]: the modification time in ns locally; on object storage the
    object's generation, etag or mtime, the first its filesystem reports."""
    if not paths.is_remote(path):
        stat = os.stat(path)
        return [path, stat.st_size, stat.st_mtime_ns]
    import fsspec
    filesystem, inner = fsspec.core.url_to_fs(path)
    info = filesystem.info(inner)
    version = next((str(info[key]) for key in ("generation", "etag", "ETag", "mtime", "updated")
                    if info.get(key)), "")
    return [path, int(info.get("size", 0)), version]
