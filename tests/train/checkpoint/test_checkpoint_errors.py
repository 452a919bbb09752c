"""checkpoint_errors: a failed read is one CheckpointUnreadableError naming the step and item,
and the stray callbacks of Orbax's other reads are dropped, nothing else."""

import sys

import pytest

from bert_jax.train.checkpoint import errors as checkpoint_errors
from bert_jax.train.checkpoint.errors import CheckpointUnreadableError, Reading


def test_a_failed_read_names_the_step_item_and_root_cause(monkeypatch):
    strays = checkpoint_errors._stray_read_callbacks
    monkeypatch.setattr(strays, "failed", False)  # the process's own state comes back after
    with pytest.raises(CheckpointUnreadableError) as raised:
        with Reading("/w/checkpoints/20", "state"):
            try:
                raise OSError("Error decoding manifest\nsecond line")
            except OSError as e:
                raise ValueError("wrapped") from e
    assert str(raised.value) == ("checkpoint /w/checkpoints/20 cannot be read: state: OSError: "
                                 "Error decoding manifest")
    assert strays.reading == 0 and strays.failed  # the read is over, and it failed


def test_only_the_closed_loop_error_of_stray_reads_is_dropped(monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(str(u.exc_value)))
    strays = checkpoint_errors._StrayReadCallbacks()
    strays.install()
    strays.install()  # twice: still one hook in front of the one that was there

    class Raising:
        def __init__(self, error):
            self.error = error

        def __del__(self):
            raise self.error

    Raising(RuntimeError("Event loop is closed"))
    Raising(RuntimeError("another error"))
    Raising(ValueError("Event loop is closed"))
    assert seen == ["another error", "Event loop is closed"]
    assert strays.last > 0


def test_asyncio_drops_only_orbax_reads_never_retrieved(monkeypatch):
    import logging
    strays = checkpoint_errors._StrayReadCallbacks()

    def record(message, filename, text="read failed"):
        code = compile(f"raise ValueError({text!r})", filename, "exec")
        try:
            exec(code)
        except ValueError as e:
            error = e
        return logging.LogRecord("asyncio", logging.ERROR, filename, 1, message, None,
                                 (ValueError, error, error.__traceback__))

    orbax = "/site-packages/orbax/checkpoint/_src/serialization/serialization.py"
    assert not strays.filter(record("Future exception was never retrieved", orbax))
    assert strays.filter(record("Future exception was never retrieved", "/ours/read.py"))
    assert strays.filter(record("Task was destroyed but it is pending!", orbax))
    # tensorstore's read future awaited by asyncio's task itself: no Orbax frame, its spec named;
    # a stray read only while a read runs or after one failed
    tensorstore = "DATA_LOSS: Error opening \"zarr\" driver [tensorstore_spec='{}']"
    asyncio_task = "/lib/python3.11/asyncio/tasks.py"
    never_retrieved = "Task exception was never retrieved"
    assert strays.filter(record(never_retrieved, asyncio_task, tensorstore))
    strays.reading = 1
    assert not strays.filter(record(never_retrieved, asyncio_task, tensorstore))
    strays.reading, strays.failed = 0, True
    assert not strays.filter(record(never_retrieved, asyncio_task, tensorstore))
