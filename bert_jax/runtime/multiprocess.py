"""One decision for all the processes of a job, where a step can fail on some of them only.

With several processes, a check or a write that raises on one process while the others go on
into a collective leaves the others waiting for ever. `agree(fn, what)` runs fn on this process
and then lets every process learn whether any failed (one small all-gather): the process that
failed raises its own error, every other process a ValueError naming it. With one process it is
just fn().
"""

from __future__ import annotations

from typing import Callable, TypeVar

import jax
import numpy as np

T = TypeVar("T")


def agree(fn: Callable[[], T], what: str) -> T:
    """fn(), or an error on every process if fn raised on any (module docstring)."""
    result, error = None, None
    try:
        result = fn()
    except Exception as e:  # noqa: BLE001 - re-raised below, once every process knows
        error = e
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils
        failed = np.flatnonzero(np.asarray(multihost_utils.process_allgather(
            np.int32(error is not None))).reshape(-1))
        if error is None and failed.size:
            raise ValueError(f"{what} failed on process(es) {[int(i) for i in failed]} "
                             "(their logs say why)")
    if error is not None:
        raise error
    return result
