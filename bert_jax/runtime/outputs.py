"""Outputs that never destroy what they replace: the one rule for every file and folder a script
writes (predict.py --output, embed.py's files, evaluate.py --output, convert.py's export folder,
a training run's workdir).

1. Before anything is written (`fault`): an output is not a symbolic link, a character device,
   a FIFO or a socket (nothing is written through); it never equals, contains or lies inside
   an input it was given (the file predicted, a run's config.json and checkpoints, the model
   folder a run starts from); a folder output is not a model folder it did not write
   (`foreign_folder_fault`).
2. While writing: every file and folder is written beside its target under the name
   `.<name>.partial-<pid>` (`temporary_beside`) and renamed into place when complete, so a
   killed or failed write (SIGKILL, a full disk) leaves the previous version whole. The next
   write to the same target names each such leftover and removes it (`clear_leftovers`). A
   write that fails (a full disk, a read-only folder) is an OSError naming the target, not the
   part beside it or no file at all (`naming`).
3. An export folder holds the files of one export only: it is written whole beside the old one
   and swapped in (`replace_folder`), so stale files of a previous export go with it; a folder
   of ours is recognised by its marker file, anything else is refused, never merged into.

Object storage (gs://): an object is written whole or not at all, and there are no links or
devices, so rule 1 is the path rule: an output never equals, contains or lies inside an input or
a run's file on the same storage (compared as written, `bucket/key` with `.`, `..` and repeated
slashes resolved: `_location`), and a folder output is listed for another model's or run's
files; an output on one storage never meets an input on another. When the bucket cannot be read
to check it (no credentials, no network), the output is refused in one line (`_unchecked`).
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import shutil
import stat
from typing import Callable, Iterable, Iterator, Optional, Sequence

from absl import logging

from bert_jax.runtime import paths

PARTIAL = ".partial-"
PREVIOUS = ".previous-"
# Files that make a folder a model folder (Hugging Face) or a run's workdir (ours).
MODEL_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
               "tf_model.h5", "flax_model.msgpack")
RUN_FILES = ("checkpoints", "task.json", "run.lock")

# (what it is, its path): an input a write must not touch, e.g. ("the input file", "in.txt").
Protected = Sequence[tuple[str, Optional[str]]]


def _real(path: str) -> str:
    return os.path.realpath(os.path.abspath(path))


def _inside(inner: str, outer: str) -> bool:
    """True when real path `inner` lies strictly below real path `outer`."""
    return inner != outer and inner.startswith(outer.rstrip(os.sep) + os.sep)


def kind_fault(path: str, flag: str, folder: bool = False) -> Optional[str]:
    """What stands at `path` that must not be written through or over: a symbolic link, a
    device, FIFO or socket; a folder where a file goes (or a file where a folder goes)."""
    if os.path.islink(path):
        return (f"{flag}={path} is a symbolic link (to {os.readlink(path)}): nothing is written "
                "through a link; name the real path")
    if not os.path.exists(path):
        return None
    mode = os.stat(path).st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        what = ("a character device" if stat.S_ISCHR(mode) else "a block device"
                if stat.S_ISBLK(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a socket"
                if stat.S_ISSOCK(mode) else "not a regular file")
        return f"{flag}={path} is {what}: name a regular file to write"
    if folder and not stat.S_ISDIR(mode):
        return f"{flag}={path} is a file, not a folder"
    if not folder and stat.S_ISDIR(mode):
        return (f"{flag}={path} is a folder: name a file to write (e.g. "
                f"{os.path.join(path, '')}...)")
    return None


def _location(path: str) -> tuple[str, str]:
    """(storage, where): ("", the real path) for a local path, (scheme, "bucket/key" normalised)
    for an object-storage URI."""
    if not paths.is_remote(path):
        return "", _real(path)
    scheme, rest = path.split("://", 1)
    return scheme, posixpath.normpath("/" + rest).lstrip("/")


def _exists(path: str) -> bool:
    return paths.remote_exists(path) if paths.is_remote(path) else os.path.exists(path)


def _unchecked(path: str, flag: str, error: Exception) -> str:
    return (f"{flag}={path} cannot be checked against the inputs it must not replace (reading "
            f"the bucket failed: {type(error).__name__}: {error}); nothing was written: make the "
            "bucket readable, or name a local path")


def overlap_fault(path: str, flag: str, protected: Protected) -> Optional[str]:
    """What `path` would destroy among `protected`: it is one of them (a hard link too), holds
    one, or lies inside one that is a folder. Local and object-storage paths alike (module doc);
    an output and an input on different storages never meet."""
    storage, real = _location(path)
    for what, other in protected:
        if not other:
            continue
        other_storage, other_real = _location(other)
        if other_storage != storage or (storage and not (
                real == other_real or _inside(other_real, real) or _inside(real, other_real))):
            continue  # locally a hard link to `other` lies anywhere: samefile below
        try:
            if not _exists(other):
                continue
            same = real == other_real or (not storage and os.path.exists(path)
                                          and os.path.samefile(path, other))
            inside_folder = _inside(real, other_real) and (
                paths.remote_is_dir(other) if storage else os.path.isdir(other_real))
        except OSError as e:  # the bucket could not be read
            return _unchecked(path, flag, e)
        if same:
            return (f"{flag}={path} is {what} ({other}): writing there would replace it; "
                    "name another path")
        if _inside(other_real, real):
            return (f"{flag}={path} holds {what} ({other}): writing there could replace it; "
                    "name another path")
        if inside_folder:
            return (f"{flag}={path} lies inside {what} ({other}), which a write must not "
                    "change; name a path outside it")
    return None


def fault(path: str, flag: str, protected: Protected = (), folder: bool = False
          ) -> Optional[str]:
    """Rule 1 of the module docstring for one output; None when it may be written."""
    if not path:
        return f"{flag} is empty: name the {'folder' if folder else 'file'} to write"
    if paths.is_remote(path):  # no links or devices on object storage
        return overlap_fault(path, flag, protected)
    return kind_fault(path, flag, folder) or overlap_fault(path, flag, protected)


def foreign_folder_fault(path: str, flag: str, marker: Optional[str] = None,
                         workdir: bool = False) -> Optional[str]:
    """A folder output that holds what it did not write: a Hugging Face model folder (a run's
    workdir must not be one); for an export (`marker` given), any non-empty folder without the
    marker of an earlier export (another model, a training run, anything else)."""
    if paths.is_remote(path):
        try:
            names = paths.remote_names(path)
        except OSError as e:
            return _unchecked(path, flag, e)
    elif os.path.isdir(path):
        names = sorted(os.listdir(path))
    else:
        return None
    model_files = [n for n in names if n in MODEL_FILES]
    if workdir:
        if model_files:
            return (f"{flag}={path} is a model folder (it holds {model_files[0]}), not the "
                    "workdir of a run: a run would write its files over it; name a new folder "
                    "(start from the model with --config.init.hf_dir)")
        return None
    if not names or (marker is not None and marker in names):
        return None
    run_files = [n for n in names if n in RUN_FILES]
    if run_files:
        return (f"{flag}={path} is the workdir of a training run (it holds {run_files[0]}): an "
                "export never writes into a run; name a new folder")
    listed = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    return (f"{flag}={path} holds files that no export of ours wrote ({listed}): an export "
            "replaces its folder whole, so it writes only into a new or empty folder or one of "
            f"its own earlier exports ({marker}); name another folder or empty this one")


def temporary_beside(target: str) -> str:
    """Where a write of `target` goes before it is renamed into place."""
    directory, name = os.path.split(os.path.abspath(target))
    return os.path.join(directory, f".{name}{PARTIAL}{os.getpid()}")


def leftovers(target: str) -> list[str]:
    """Partial writes of `target` that a killed write left beside it (`temporary_beside`, and
    the previous folder `replace_folder` moves aside)."""
    directory, name = os.path.split(os.path.abspath(target))
    if not os.path.isdir(directory):
        return []
    return sorted(os.path.join(directory, n) for n in os.listdir(directory)
                  if n.startswith((f".{name}{PARTIAL}", f".{name}{PREVIOUS}")))


def clear_leftovers(target: str) -> list[str]:
    """Name (a warning each) and remove the partial writes a killed write of `target` left;
    a previous folder set aside by a replace that was killed is moved back when `target` is
    missing. Returns what was found."""
    found = leftovers(target)
    for leftover in found:
        if PREVIOUS in os.path.basename(leftover) and not os.path.exists(target):
            os.rename(leftover, target)
            logging.warning("%s is the previous version of %s, set aside by a write that was "
                            "killed before it completed: moved back", leftover, target)
            continue
        logging.warning("%s is a partial write of %s left by a write that was killed or failed: "
                        "removed (%s was left as it was)", leftover, target, target)
        if os.path.isdir(leftover) and not os.path.islink(leftover):
            shutil.rmtree(leftover)
        else:
            os.remove(leftover)
    return found


@contextlib.contextmanager
def naming(target: str) -> Iterator[None]:
    """Within: an OSError with an errno (ENOSPC, EROFS, ...) becomes one naming `target` and
    saying that what stood there was left whole, e.g. "out.jsonl: No space left on device
    (while writing it; what was there before is as it was)". A full disk often raises without
    a file name, or with that of the part written beside the target."""
    try:
        yield
    except OSError as e:
        if e.errno is None:
            raise
        raise OSError(e.errno, f"{e.strerror} (while writing it; what was there before is as "
                      "it was)", target) from e


def write_bytes(target: str, content: bytes) -> None:
    """`content` into `target` whole: written beside it, then renamed into place."""
    os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
    temporary = temporary_beside(target)
    with naming(target):
        try:
            with open(temporary, "wb") as f:
                f.write(content)
            os.replace(temporary, target)
        except BaseException:
            if os.path.exists(temporary):
                os.remove(temporary)
            raise


def replace_folder(target: str, write: Callable[[str], None], marker: str,
                   marker_content: dict) -> None:
    """Write a folder with `write(folder)` beside `target`, add the `marker` file, and swap it
    in place of `target`: the old folder (an earlier export) goes whole, a failed or killed
    write leaves it whole. Object storage: written in place (no rename there)."""
    def mark(folder: str) -> None:
        text = json.dumps(marker_content, indent=2, sort_keys=True) + "\n"
        if paths.is_remote(folder):
            paths.write_text_atomically(os.path.join(folder, marker), text)
        else:
            with open(os.path.join(folder, marker), "w", encoding="utf-8") as f:
                f.write(text)

    if paths.is_remote(target):
        write(target)
        mark(target)
        return
    clear_leftovers(target)
    os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
    temporary = temporary_beside(target)
    try:
        with naming(target):
            write(temporary)
            mark(temporary)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    if os.path.exists(target):
        directory, name = os.path.split(os.path.abspath(target))
        previous = os.path.join(directory, f".{name}{PREVIOUS}{os.getpid()}")
        os.rename(target, previous)
        os.rename(temporary, target)
        shutil.rmtree(previous)
    else:
        os.rename(temporary, target)


def protected_files(folder: Optional[str], names: Iterable[str], what: str) -> list[tuple]:
    """(what, folder/name) for each name: the files of a run that an output must not touch."""
    if not folder:
        return []
    return [(f"{what}'s {name}", os.path.join(folder, name)) for name in names]


# What a run's workdir holds that an output of predict.py, evaluate.py, embed.py or convert.py
# must never replace (an output file beside them, e.g. <workdir>/new.jsonl, is fine).
RUN_CONTENTS = ("config.json", "task.json", "checkpoints", "run.lock", "predictions", "data",
                "metrics.jsonl", "eval_metrics.jsonl", "inputs.json")
# The run's record of its inputs (bert_jax.recipes.inputs writes it): {"files": {path: {"role":
# ...}}, "folders": {folder: role}}.
INPUTS_RECORD = "inputs.json"


def run_files(workdir: Optional[str]) -> list[tuple]:
    """(what, path) of each of RUN_CONTENTS in `workdir` (none for None), and of each input the
    run recorded in its inputs.json (its tokenizer files, training and held-out files, corpus
    folders): an output of a script reading the run never replaces what the run was trained
    on."""
    return protected_files(workdir, RUN_CONTENTS, "the run") + recorded_inputs(workdir)


def recorded_inputs(workdir: Optional[str]) -> list[tuple]:
    """(what, path) of each file and folder in a local run's inputs.json; [] when it has none
    or it cannot be read (the run's own checks name that)."""
    if not workdir or paths.is_remote(workdir):
        return []
    try:
        with open(os.path.join(workdir, INPUTS_RECORD), encoding="utf-8") as f:
            record = json.load(f)
        entries = [(path, saved.get("role")) for path, saved in record["files"].items()]
        entries += list(record.get("folders", {}).items())
    except (OSError, ValueError, KeyError, AttributeError, TypeError):
        return []
    return [(f"the run's {role}", path) for path, role in entries]
