"""What a training run keeps about itself in its workdir: a lock, and its config in each
checkpoint's metadata.

`<workdir>/run.lock` is held for the life of a run (`lock`): a second run on the same workdir
stops at once, naming the process that holds it. A lock left by a process that died is taken
over when its host is this host and its PID is gone. Each checkpoint keeps a copy of the run's
`<workdir>/config.json` (`saved_config_metadata`, in its metadata). config.json itself (written,
checked against a rerun's config, read back) is the recipes' record: bert_jax.recipes.run_record.

A workdir that cannot be written (a read-only filesystem, a full disk) stops a run at the lock
or at config.json with a WorkdirNotWritableError naming the file (`_writing`, which
run_record uses too).

A workdir is a local folder or an object-storage URI such as `gs://bucket/run`; its paths go
through `bert_jax.runtime.paths`. On a bucket the lock is created with a generation precondition, so
of two runs that start together exactly one holds it.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from typing import Iterator

import jax
from absl import logging
from etils import epath

from bert_jax.runtime import multiprocess
from bert_jax.runtime.paths import create_exclusively, read_json

CONFIG_FILE = "config.json"
LOCK_FILE = "run.lock"


class WorkdirInUseError(ValueError):
    """Another run holds the workdir's lock."""


class WorkdirNotWritableError(ValueError):
    """The workdir cannot be written (a read-only filesystem, no permission, a full disk)."""


SAVED_CONFIG_KEY = "run_config"  # the run's config.json, kept in each checkpoint's metadata


def saved_config_metadata(workdir: str) -> dict:
    """{"run_config": <workdir>/config.json} for the metadata of a checkpoint, or {} when this
    process sees no config.json (a run outside the recipes, another host's local disk)."""
    config_path = epath.Path(workdir) / CONFIG_FILE
    if not config_path.exists():
        return {}
    return {SAVED_CONFIG_KEY: read_json(config_path)}


def _not_writable(workdir: str, error: OSError) -> str:
    return (f"cannot write into {workdir} ({type(error).__name__}: {error}): a run needs a "
            "writable --workdir (free some space, or use another folder)")


@contextlib.contextmanager
def _writing(workdir: str) -> Iterator[None]:
    """An OSError of the body (a read-only filesystem, no permission, a full disk) as a
    WorkdirNotWritableError: one line naming the file."""
    try:
        yield
    except OSError as e:
        raise WorkdirNotWritableError(_not_writable(workdir, e)) from e


def _holder_is_gone(holder: dict) -> bool:
    """True when the lock's process ran on this host and no longer exists."""
    if holder.get("host") != socket.gethostname():
        return False
    try:
        os.kill(int(holder.get("pid", -1)), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, ValueError, OverflowError):
        return False
    return False


def _acquire(workdir: str) -> dict:
    """Create <workdir>/run.lock holding this process's record, taking over a dead process's
    lock."""
    lock_path = epath.Path(workdir) / LOCK_FILE
    me = {"pid": os.getpid(), "host": socket.gethostname(),
          "since": time.strftime("%Y-%m-%d %H:%M:%S")}
    for _ in range(2):
        with _writing(workdir):
            lock_path.parent.mkdir(parents=True, exist_ok=True)
            if create_exclusively(lock_path, json.dumps(me)):
                return me
        try:
            holder = read_json(lock_path)
        except (ValueError, FileNotFoundError):
            holder = {}
        if not (holder and _holder_is_gone(holder)):
            raise WorkdirInUseError(
                f"{workdir} is in use by process {holder.get('pid', '?')} on host "
                f"{holder.get('host', '?')} since {holder.get('since', '?')} ({lock_path}); "
                "wait for it to finish, or remove the lock file if that process is gone")
        logging.warning("taking over %s from process %s, which is gone", lock_path,
                        holder.get("pid"))
        with contextlib.suppress(FileNotFoundError):
            lock_path.unlink()
    raise WorkdirInUseError(f"{workdir}: another run took {lock_path} meanwhile")


@contextlib.contextmanager
def lock(workdir: str) -> Iterator[None]:
    """Hold <workdir>/run.lock while the body runs. Process 0 takes it; every process stops if
    it could not (bert_jax.runtime.multiprocess)."""
    holder = multiprocess.agree(
        lambda: _acquire(workdir) if jax.process_index() == 0 else None,
        f"taking the lock of {workdir}")
    try:
        yield
    finally:
        if holder is not None:
            lock_path = epath.Path(workdir) / LOCK_FILE
            with contextlib.suppress(FileNotFoundError, ValueError):
                saved = read_json(lock_path)
                if (saved.get("pid"), saved.get("host")) == (holder["pid"], holder["host"]):
                    lock_path.unlink()
