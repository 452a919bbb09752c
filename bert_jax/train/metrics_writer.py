"""What a run logs: metrics.jsonl, eval_metrics.jsonl and TensorBoard events, from process 0.

One JSON object per line, `{"step": N, name: value, ...}`. A resumed run first drops the lines
past the step it resumes from, so each file reads as one uninterrupted run. A run killed in the
middle of writing a line leaves that last line torn: the resume drops it (with a warning), and so
does `read_metrics`; a line that is not a JSON record anywhere else in a file is an error.

The workdir may be on object storage (`gs://bucket/run`; files through etils.epath). An object
cannot be appended to, so there the writer keeps each file's text and writes the whole object
again at every logged step (one request per file and log; an object is replaced whole, so a
reader never sees a torn line). TensorBoard events go through tensorboardX, whose record writer
for such a URI is `_ObjectRecordWriter` (etils.epath again: the whole event file at each flush).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import threading
from typing import Iterator, Mapping, Optional

import jax
from absl import logging
from etils import epath

from bert_jax.runtime import paths

TRAIN_FILE = "metrics.jsonl"
EVAL_FILE = "eval_metrics.jsonl"

# Shown in a log line by their own formatting, not in the "name value" list.
_RATE_KEYS = ("learning_rate", "tokens_per_second", "mfu", "seconds_per_step")


class MetricsWriteError(ValueError):
    """A metrics file or TensorBoard's events could not be written (a full disk, a read-only
    workdir): names the file. What was trained is in the checkpoints (a rerun resumes)."""


# TensorBoard's own thread flushes its event file every this many seconds; this writer flushes
# after each record instead, in the training thread, where a failed write (a full disk) is caught
# and named rather than printed as a traceback of that thread. (A day: the thread waits on its
# queue with this timeout, and the queue's semaphore refuses a timeout too large.)
_TENSORBOARD_FLUSH_SECS = 24 * 3600


class MetricsWriter:
    """metrics.jsonl / eval_metrics.jsonl + TensorBoard events, written by process 0 only.

    A failed write (OSError: a full disk, a read-only workdir) is a MetricsWriteError naming
    the file."""

    def __init__(self, workdir: str, start_step: int):
        self.enabled = jax.process_index() == 0
        self.train_path = os.fspath(epath.Path(workdir) / TRAIN_FILE)
        self.eval_path = os.fspath(epath.Path(workdir) / EVAL_FILE)
        self.tensorboard = None
        self._tensorboard_dir = os.fspath(epath.Path(workdir) / "tensorboard")
        # On object storage: each file's text so far, written whole at every record.
        self._texts: Optional[dict[str, str]] = None
        if not self.enabled:
            return
        for path in (self.train_path, self.eval_path):
            with _writing(path):
                drop_lines_after(path, start_step)
        if paths.is_remote(workdir):
            self._texts = {path: _text_of(path) for path in (self.train_path, self.eval_path)}
        SummaryWriter = _summary_writer_class()
        if paths.is_remote(workdir):
            from tensorboardX import record_writer
            record_writer.register_writer_factory(os.fspath(workdir).split("://")[0],
                                                  _ObjectRecordWriterFactory())
        with _writing(self._tensorboard_dir, "TensorBoard's events in"):
            self.tensorboard = SummaryWriter(self._tensorboard_dir,
                                             purge_step=start_step + 1 if start_step else None,
                                             flush_secs=_TENSORBOARD_FLUSH_SECS)

    def write(self, step: int, metrics: Mapping[str, float], evaluation: bool = False) -> None:
        if not self.enabled:
            return
        record = {"step": step, **{k: float(v) for k, v in metrics.items()}}
        path = self.eval_path if evaluation else self.train_path
        with _writing(path):
            self._append(path, json.dumps(record) + "\n")
        prefix = "eval/" if evaluation else "train/"
        for name, value in metrics.items():
            self.tensorboard.add_scalar(prefix + name, float(value), step)
        with _writing(self._tensorboard_dir, "TensorBoard's events in"):
            self.tensorboard.flush()

    def _append(self, path: str, line: str) -> None:
        if self._texts is None:
            with open(path, "a", encoding="utf-8") as f:
                f.write(line)
            return
        self._texts[path] += line
        epath.Path(path).write_text(self._texts[path])

    def close(self) -> None:
        if self.tensorboard is not None:
            tensorboard, self.tensorboard = self.tensorboard, None
            with _writing(self._tensorboard_dir, "TensorBoard's events in"):
                tensorboard.close()


@contextlib.contextmanager
def _writing(path: str, what: str = "") -> Iterator[None]:
    """Turns an OSError of the body into a MetricsWriteError naming `path` (and `what` it is)."""
    try:
        yield
    except OSError as e:
        target = f"{what} {path}" if what else path
        raise MetricsWriteError(f"could not write {target}: {type(e).__name__}: {e}") from e


class _ObjectRecordWriter:
    """tensorboardX's record writer for an object-storage URI, through etils.epath: the event file
    stays in memory and is written whole at each flush that has something new (an object cannot
    be appended to). Writes come from tensorboardX's thread, flushes from both: one lock."""

    def __init__(self, path: str):
        self._path, self._buffer, self._written = epath.Path(path), io.BytesIO(), 0
        self._lock = threading.Lock()

    def write(self, data: bytes) -> None:
        with self._lock:
            self._buffer.write(data)

    def flush(self) -> None:
        with self._lock:
            if self._buffer.tell() != self._written:
                self._path.write_bytes(self._buffer.getvalue())
                self._written = self._buffer.tell()

    def close(self) -> None:
        self.flush()


class _ObjectRecordWriterFactory:
    """What tensorboardX's record_writer registry asks of a URI scheme's writers."""

    def open(self, path: str) -> _ObjectRecordWriter:
        return _ObjectRecordWriter(path)

    def directory_check(self, path: str) -> None:
        pass  # object storage has no folders to create


def _summary_writer_class():
    """tensorboardX's SummaryWriter, imported without torch. tensorboardX imports torch when it
    is installed (a test or benchmark extra here, never a run-time dependency) only to accept
    torch tensors; we write Python floats. That import costs a run seconds of start-up, so
    unless torch is already loaded it is refused for the duration of this import (a None entry
    in sys.modules makes `import torch` raise ImportError, which tensorboardX expects)."""
    if "torch" in sys.modules:
        from tensorboardX import SummaryWriter
        return SummaryWriter
    sys.modules["torch"] = None
    try:
        from tensorboardX import SummaryWriter
    finally:
        if "torch" in sys.modules and sys.modules["torch"] is None:
            del sys.modules["torch"]
    return SummaryWriter


def _text_of(path: str) -> str:
    """The whole text of a metrics file ("" when there is none)."""
    file = epath.Path(path)
    return file.read_bytes().decode("utf-8", errors="replace") if file.exists() else ""


def read_metrics(path: str) -> list[dict]:
    """The records of a metrics file, in file order. A torn last line (a run killed while writing
    it) is dropped with a warning; a bad line elsewhere raises ValueError naming file and line."""
    return [record for _, record in _read_records(path)[0]]


def drop_lines_after(path: str, step: int) -> None:
    """Rewrite a metrics file without the records of steps after `step` (and without a torn last
    line, which the next append would otherwise run into)."""
    if not epath.Path(path).exists():
        return
    records, clean = _read_records(path)
    kept = [line for line, record in records if record["step"] <= step]
    if clean and len(kept) == len(records):
        return
    # Replaced in one step: a kill now leaves the old file whole.
    paths.write_text_atomically(path, "".join(kept))


def _read_records(path: str) -> tuple[list[tuple[str, dict]], bool]:
    """([(line, record)] for each non-blank line of a metrics file, whether the file needs no
    repair: every line whole and newline-terminated). See read_metrics."""
    text = epath.Path(path).read_bytes().decode("utf-8", errors="replace")
    lines = [(number, line) for number, line in enumerate(text.splitlines(keepends=True), start=1)
             if line.strip()]
    records, clean = [], True
    for index, (number, line) in enumerate(lines):
        try:
            record = json.loads(line)
            step = record.get("step") if isinstance(record, dict) else None
            problem = None if isinstance(step, int) and not isinstance(step, bool) else \
                "a JSON value but not a record with an integer 'step'"
        except ValueError as e:  # JSONDecodeError, or a NUL byte left by a crash
            problem = f"not valid JSON ({e})"
        if problem is None:
            if not line.endswith("\n"):
                line, clean = line + "\n", False
            records.append((line, record))
        elif index == len(lines) - 1:
            logging.warning("%s: dropping the torn last line %d (%s): the run that wrote it was "
                            "stopped in the middle of writing it", path, number, problem)
            clean = False
        else:
            raise ValueError(f"{path}: line {number} is {problem}; only the last line of a metrics "
                             "file may be torn (by a run stopped while writing it)")
    return records, clean


def format_log_line(step: int, total: int, metrics: Mapping[str, float]) -> str:
    """'step 50/100: loss 2.3456, mlm_accuracy 0.1234, lr 0.001, 5000 tokens/s, MFU 1.23%'.

    The non-finite step counters show only once they are not 0 (metrics.jsonl has them always).
    """
    shown = [f"{k} {metrics[k]:.4f}" for k in sorted(metrics) if k not in _RATE_KEYS
             and not (k.startswith("nonfinite_") and metrics[k] == 0)]
    return (f"step {step}/{total}: " + ", ".join(shown)
            + f", lr {metrics.get('learning_rate', 0.0):.3g}"
            + f", {metrics.get('tokens_per_second', 0.0):.0f} tokens/s"
            + f", MFU {100 * metrics.get('mfu', 0.0):.2f}%")
