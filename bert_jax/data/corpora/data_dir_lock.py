"""One process at a time prepares data in a data dir: `exclusive(data_dir)`.

An advisory lock (fcntl) on data_dir/LOCK_FILE for a local folder; on object storage (gs://),
which has no advisory locks, an object created only if absent, waited for while another process
holds it (`_object_lock`). Corpus preparation (`bert_jax.data.corpora.catalog.prepare`) and
vocabulary training (`bert_jax.data.pretraining.vocab`) hold it, so that the processes of one job
prepare their data once instead of racing on the same files.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import time

from etils import epath

from bert_jax.runtime import paths

LOCK_FILE = ".bert_jax.lock"  # in data_dir, held while a corpus or vocabulary is prepared


@contextlib.contextmanager
def exclusive(data_dir: str):
    """Holds an advisory lock on data_dir, so that processes of one job (e.g. several local
    hosts) prepare a corpus or vocabulary once instead of racing on the same files. On object
    storage (gs://), which has no advisory locks: `_object_lock`."""
    if paths.is_remote(data_dir):
        with _object_lock(epath.Path(data_dir) / LOCK_FILE):
            yield
        return
    os.makedirs(data_dir, exist_ok=True)
    with open(os.path.join(data_dir, LOCK_FILE), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextlib.contextmanager
def _object_lock(lock: epath.Path, poll_seconds: float = 2.0):
    """Hold `lock`, an object created only if absent (workdir.create_exclusively), waiting while
    another process holds it. A process killed while holding it leaves it behind: the wait says
    so once, naming the object to remove."""
    holder = json.dumps({"pid": os.getpid(), "host": socket.gethostname()})
    waited = False
    while not paths.create_exclusively(lock, holder):
        if not waited:
            logging.warning("waiting for %s (another process prepares this data); remove it if "
                            "no process does", lock)
            waited = True
        time.sleep(poll_seconds)
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)
