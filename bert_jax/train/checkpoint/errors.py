"""The errors of reading and writing checkpoints, each naming the step and the item at fault.

    CheckpointMismatchError    the step is readable but does not fit this run (another model
                               shape, head or optimizer; another number of processes)
    CheckpointUnreadableError  the step cannot be read: "checkpoint <dir>/<step> cannot be read:
                               <item> is missing (...)" or "...: <item>: <error class>: <first line
                               of the error>" (a truncated file, a corrupt manifest, a deleted
                               folder); raised by restore, read_metadata, load_model_config and
                               load_params, never a raw Orbax/tensorstore/JSON traceback
    CheckpointWriteError       a save failed (disk full, no permission): "could not write the
                               checkpoint <dir>/<step>: ...", raised by save, or for an
                               asynchronous save by the next save or the manager's
                               wait_until_finished/close; Orbax leaves the partial step in
                               a `<step>.orbax-checkpoint-tmp*` folder, which is not a step
All three are ValueErrors, so the scripts print them as one line and exit with status 1.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import traceback


class CheckpointMismatchError(ValueError):
    """A checkpoint on disk does not fit the model or train state of the current run."""


class CheckpointUnreadableError(ValueError):
    """A checkpoint step on disk cannot be read (a truncated or missing file); names the step."""


class CheckpointWriteError(ValueError):
    """A checkpoint could not be written (disk full, no permission); names the step folder."""


def describe(error: BaseException) -> str:
    """'<class>: <first line>' of the root cause of `error` (Orbax wraps tensorstore's errors)."""
    seen = {id(error)}
    while True:
        cause = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
        if cause is None or id(cause) in seen:
            break
        seen.add(id(cause))
        error = cause
    text = str(error).strip()
    line = text.splitlines()[0] if text else ""
    if len(line) > 400:
        line = line[:400] + "..."
    return f"{type(error).__name__}: {line}" if line else type(error).__name__


class _StrayReadCallbacks(logging.Filter):
    """Orbax reads a step's arrays concurrently in an event loop of its own; when one read fails
    it closes that loop while tensorstore still finishes the others. Each of their callbacks then
    meets the closed loop (`RuntimeError: Event loop is closed`), each abandoned read coroutine
    raises its own read error when it is garbage collected, and asyncio logs the gathered reads'
    "exception was never retrieved": hundreds of tracebacks around the one-line error, the last
    ones at interpreter exit. Those reads belong to a step being reported unreadable, so these
    three are dropped (through sys.unraisablehook and a filter on the `asyncio` logger; every
    other report goes where it went), and `settle` waits, after a failed read, until they have
    stopped arriving. A read's error is known by an Orbax frame in its traceback, or, for a
    tensorstore read future that asyncio's task awaited itself (no Orbax frame), by the
    tensorstore spec its message names, while a read runs or once one has failed: a tensorstore
    error at any other time (a save's, say) is reported as it was."""

    QUIET_SECONDS = 0.3  # no stray callback for this long: the other reads have finished
    MOST_SECONDS = 5.0

    def __init__(self):
        super().__init__()
        self.previous, self.last = None, 0.0
        self.reading, self.failed = 0, False  # reads under way; whether one has failed

    def install(self) -> None:
        if sys.unraisablehook != self.hook:  # bound methods compare equal, never identical
            self.previous, sys.unraisablehook = sys.unraisablehook, self.hook
        asyncio_logger = logging.getLogger("asyncio")
        if self not in asyncio_logger.filters:
            asyncio_logger.addFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        """False (drop) for asyncio's report of a read's error never retrieved (class docstring)."""
        error = record.exc_info[1] if record.exc_info else None
        if error is None or "exception was never retrieved" not in str(record.msg):
            return True
        frames = traceback.extract_tb(error.__traceback__)
        tensorstore_read = "tensorstore_spec=" in str(error) and (self.reading or self.failed)
        if not (any(_is_orbax(frame.filename) for frame in frames) or tensorstore_read):
            return True
        self.last = time.monotonic()
        return False

    def hook(self, unraisable) -> None:
        if self.is_stray(unraisable):
            self.last = time.monotonic()
        else:
            self.previous(unraisable)

    @staticmethod
    def is_stray(unraisable) -> bool:
        error, source = unraisable.exc_value, unraisable.object
        if isinstance(error, RuntimeError) and str(error) == "Event loop is closed":
            return True
        code = getattr(source, "cr_code", None)  # a coroutine closed unfinished
        return code is not None and _is_orbax(code.co_filename)

    def settle(self) -> None:
        start = time.monotonic()
        while time.monotonic() - start < self.MOST_SECONDS:
            time.sleep(self.QUIET_SECONDS / 3)
            now = time.monotonic()
            if now - max(self.last, start) >= self.QUIET_SECONDS:
                return


def _is_orbax(filename: str) -> bool:
    return "/orbax/checkpoint/" in filename.replace("\\", "/")


_stray_read_callbacks = _StrayReadCallbacks()


class Reading:
    """`with Reading(where, item):` turns any error but ours into CheckpointUnreadableError (and,
    as any failed read may leave Orbax's other reads running, drops their stray callbacks)."""

    def __init__(self, where: str, item: str):
        self.where, self.item = where, item

    def __enter__(self):
        _stray_read_callbacks.install()  # before the read: its loop may close before __exit__
        _stray_read_callbacks.reading += 1
        return self

    def __exit__(self, kind, error, traceback):
        _stray_read_callbacks.reading -= 1
        if error is None or not isinstance(error, Exception) or isinstance(
                error, (CheckpointMismatchError, CheckpointUnreadableError)):
            return False
        _stray_read_callbacks.failed = True
        _stray_read_callbacks.settle()
        raise CheckpointUnreadableError(
            f"checkpoint {self.where} cannot be read: {self.item}: {describe(error)}") from error


def unreadable(where: str, what: str) -> CheckpointUnreadableError:
    return CheckpointUnreadableError(f"checkpoint {where} cannot be read: {what}")


class _OrbaxErrorsInOneLine(logging.Filter):
    """Orbax logs a failed write with its traceback (from its background threads too) before it
    hands the error on, and `save` or the manager's wait raise it as a CheckpointWriteError
    naming the step: the log keeps the error's class and first line, not the traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and "/orbax/" in record.pathname.replace(os.sep, "/"):
            error = record.exc_info[1]
            message = record.getMessage()
            record.msg = f"{message} ({describe(error)})" if error is not None else message
            record.args, record.exc_info, record.exc_text = None, None, None
        return True


def orbax_errors_in_one_line() -> None:
    """Install _OrbaxErrorsInOneLine on the absl logger, through which Orbax logs (once)."""
    logger = logging.getLogger("absl")
    if not any(isinstance(f, _OrbaxErrorsInOneLine) for f in logger.filters):
        logger.addFilter(_OrbaxErrorsInOneLine())
