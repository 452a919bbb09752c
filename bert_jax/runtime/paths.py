"""One spelling of every path a run reads or writes: a local path or an object-storage URI.

A workdir (and every path a run reads: init weights, vocabularies, data) is a local folder or a
URI such as `gs://bucket/run`. Every file goes through etils.epath (as Orbax's and TFDS's do),
which reads `gs://` through gcsfs. Object storage has no rename and no append, but an object is
written whole or not at all, so a file written "atomically" there is one object write; an
exclusive create carries a generation precondition (`ifGenerationMatch=0`), so of several
processes exactly one creates the file, as `os.link` decides it on a local disk.
"""

from __future__ import annotations

import json
import os
import posixpath
from typing import BinaryIO, Callable

from etils import epath


def is_remote(location: str | os.PathLike) -> bool:
    """True for an object-storage URI (`gs://bucket/run`), False for a local path."""
    return "://" in os.fspath(location)


def path(location: str | os.PathLike) -> epath.Path:
    """The one spelling of a run's paths: a URI as it is, a local path made absolute."""
    if is_remote(location):
        return epath.Path(os.fspath(location))
    return epath.Path(os.path.abspath(os.fspath(location)))


def write_atomically(file: str | os.PathLike, write: Callable[[BinaryIO], None]) -> None:
    """Write a whole file with `write(binary_file)` so that a reader (or a crash) never sees a
    part: locally a temporary file beside it (`<file>.tmp-<pid>`) renamed into place, removed
    when the write fails (a full disk: an OSError naming `file`, whose errno it keeps); on object
    storage one object write, which is all or nothing."""
    if is_remote(file):
        with epath.Path(file).open("wb") as f:
            write(f)
        return
    file = os.fspath(file)
    os.makedirs(os.path.dirname(os.path.abspath(file)), exist_ok=True)
    temporary = f"{file}.tmp-{os.getpid()}"
    try:
        with open(temporary, "wb") as f:
            write(f)
        os.replace(temporary, file)
    except BaseException as e:  # a full disk, a kill: the file stays as it was, no part beside
        if os.path.exists(temporary):
            os.remove(temporary)
        if isinstance(e, OSError) and e.errno is not None:  # named by the file meant, not its part
            raise OSError(e.errno, f"{e.strerror} (it was left as it was)", file) from e
        raise


def write_text_atomically(file: str | os.PathLike, text: str) -> None:
    """`write_atomically` of `text` in UTF-8."""
    write_atomically(file, lambda f: f.write(text.encode("utf-8")))


def read_json(file: str | os.PathLike) -> dict:
    """A JSON file's content; ValueError naming the file when it is not valid JSON."""
    try:
        return json.loads(epath.Path(file).read_bytes().decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{file} is not valid JSON ({e})") from None


def create_exclusively(file: epath.Path, text: str) -> bool:
    """Create `file` holding `text` unless it exists; False if it did. Of several processes that
    try at once, exactly one creates it: locally a temporary file is linked into place (the file
    never exists half-written); on object storage the write carries a precondition that the
    object does not exist yet (gcsfs mode="create": `ifGenerationMatch=0` on gs://)."""
    if is_remote(file):
        import fsspec  # the filesystem epath itself reads gs:// through
        filesystem, inner = fsspec.core.url_to_fs(os.fspath(file))
        try:
            filesystem.pipe_file(inner, text.encode("utf-8"), mode="create")
            return True
        except FileExistsError:
            return False
    temporary = f"{file}.tmp-{os.getpid()}"
    with open(temporary, "w", encoding="utf-8") as f:
        f.write(text)
    try:
        os.link(temporary, file)
        return True
    except FileExistsError:
        return False
    finally:
        os.remove(temporary)


def _filesystem(location: str):
    import fsspec  # the filesystem epath itself reads gs:// through
    return fsspec.core.url_to_fs(location)


def _kind(location: str) -> str | None:
    """"file", "directory" (a prefix holding objects) or None (nothing there) at an
    object-storage URI. A failed read (no credentials, no network, 403) is an OSError naming
    `location`, never taken for "nothing there" (fsspec's exists/isdir would say False)."""
    filesystem, inner = _filesystem(location)
    try:
        return filesystem.info(inner).get("type")
    except FileNotFoundError:
        return None
    except Exception as e:  # storage clients raise their own exception types
        raise OSError(f"{location}: {type(e).__name__}: {e}") from e


def remote_exists(location: str) -> bool:
    """Whether an object or a folder is at an object-storage URI; OSError when the storage
    cannot be read (`_kind`)."""
    return _kind(location) is not None


def remote_is_dir(location: str) -> bool:
    """Whether an object-storage URI is a folder (a prefix holding objects); OSError as above."""
    return _kind(location) == "directory"


def remote_names(location: str) -> list[str]:
    """The sorted names in the folder at an object-storage URI ([] when it is none); OSError
    when the storage cannot be read."""
    if _kind(location) != "directory":
        return []
    filesystem, inner = _filesystem(location)
    try:
        listed = filesystem.ls(inner, detail=False)
    except Exception as e:  # as in _kind
        raise OSError(f"{location}: {type(e).__name__}: {e}") from e
    return sorted({posixpath.basename(p.rstrip("/")) for p in listed} - {""})
