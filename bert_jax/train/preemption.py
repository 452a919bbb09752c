"""Preemption: SIGTERM or Ctrl-C asks a training run to save its step and stop (`StopSignals`).

bert_jax.train.loop enters a StopSignals around its steps and asks `should_stop(step)` after each
one; on True it saves that step, stops and reports the signal (TrainResult.signal_number). Its
own module because the signal handling (Python handlers, JAX's preemption sync manager across
processes) is a job of its own, apart from stepping, logging and checkpointing.
"""

from __future__ import annotations

import os
import signal
from typing import Any, Optional

import jax
import numpy as np

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
    """SIGTERM and SIGINT (Ctrl-C) ask the run to save and stop; a second SIGINT aborts at once.

    All processes agree on the step (any process signalled = all save that step and stop).

    One process: Python handlers for both signals set a flag, read after every step.

    Several processes: jax.distributed.initialize starts JAX's preemption sync manager, whose
    notifier catches SIGTERM itself (a C handler, installed at initialize and left in place).
    Once any process gets SIGTERM, the coordination service tells every process in the
    background and they settle on one step (the largest step any of them reached, plus one);
    `multihost_utils.reached_preemption_sync_point(step)` turns True at that step on all of
    them. Checking it is a local read (well under a microsecond): no collective per step.
    SIGINT gets a Python handler that records it and sends this process SIGTERM, so that the
    same protocol carries it; a process stops with the signal it got itself (Ctrl-C: 130) and
    one that only learned of another's signal stops as after SIGTERM (143). SIGTERM before the
    loop starts is held by the notifier and stops the run at its first steps; SIGTERM after
    the loop (the final evaluation) is not acted on. Without the preemption service
    (jax_enable_preemption_service=False) the processes all-gather the flags after every step.
    """

    def __init__(self):
        self.received: Optional[int] = None
        self._previous: dict[int, Any] = {}
        self._sync_point = False  # several processes, through JAX's preemption sync manager

    def __enter__(self):
        self._sync_point = jax.process_count() > 1 and _preemption_sync_manager() is not None
        # With the sync manager, SIGTERM stays with JAX's notifier (see the class docstring).
        signals = (signal.SIGINT,) if self._sync_point else STOP_SIGNALS
        for signum in signals:
            try:
                self._previous[signum] = signal.signal(signum, self._handle)
            except ValueError:  # not the main thread: no handler, the run is not preemptible
                pass
        return self

    def _handle(self, signum, frame):
        del frame
        self.received = self.received or signum
        if signum == signal.SIGINT:  # the next Ctrl-C raises KeyboardInterrupt right away
            signal.signal(signal.SIGINT, signal.default_int_handler)
            if self._sync_point:  # tell the others through JAX's SIGTERM notifier
                os.kill(os.getpid(), signal.SIGTERM)

    def __exit__(self, *exc):
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)

    def should_stop(self, step: Optional[int] = None) -> bool:
        """Whether to save this step and stop; with several processes, call it after every
        step with the step reached (the same on all processes)."""
        if jax.process_count() == 1:
            return self.received is not None
        from jax.experimental import multihost_utils
        if self._sync_point:
            if step is None:
                raise ValueError("should_stop needs the step with several processes")
            if not multihost_utils.reached_preemption_sync_point(step):
                return False
            self.received = self.received or signal.SIGTERM
            return True
        received = np.int32(self.received or 0)
        signals = multihost_utils.process_allgather(received)
        self.received = self.received or (int(np.max(signals)) or None)
        return self.received is not None


def _preemption_sync_manager() -> Any:
    """JAX's preemption sync manager, made by jax.distributed.initialize (None: not there)."""
    try:
        from jax._src import distributed as jax_distributed
    except ImportError:  # pragma: no cover - a JAX without it: all-gather instead
        return None
    return getattr(jax_distributed.global_state, "preemption_sync_manager", None)
