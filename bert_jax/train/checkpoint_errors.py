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


class Reading:
    """`with Reading(where, item):` turns any error but ours into CheckpointUnreadableError."""

    def __init__(self, where: str, item: str):
        self.where, self.item = where, item

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback):
        if error is None or not isinstance(error, Exception) or isinstance(
                error, (CheckpointMismatchError, CheckpointUnreadableError)):
            return False
        raise CheckpointUnreadableError(
            f"checkpoint {self.where} cannot be read: {self.item}: {describe(error)}") from error


def unreadable(where: str, what: str) -> CheckpointUnreadableError:
    return CheckpointUnreadableError(f"checkpoint {where} cannot be read: {what}")
