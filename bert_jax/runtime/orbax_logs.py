"""Orbax's log records that say nothing to a user, kept out of the scripts' log.

`quiet_orbax_logs` puts a filter on absl's handler (bert_jax.cli.start calls it): it drops
Orbax's records below WARNING (its per-save INFO chatter) and the warnings in ORBAX_NOISE; Orbax's
other warnings, and every record of other libraries, still show. Nothing changes at import.
"""

from __future__ import annotations

import logging as std_logging
import os

from absl import logging

# Orbax warnings that say nothing to a user: a read-only manager (evaluate.py, predict.py,
# export) announcing the options it set itself, and our checksums folder inside a step, which
# bert_jax.train.checkpoint.checksums reads, not Orbax.
ORBAX_NOISE = ("CheckpointManagerOptions.read_only=True, setting",
               "Given directory is read only=",
               'Item "checksums" was found in the checkpoint, but could not be restored')


class _DropOrbaxChatter(std_logging.Filter):
    """Drops Orbax's records below WARNING and its ORBAX_NOISE warnings."""

    def filter(self, record: std_logging.LogRecord) -> bool:
        if "/orbax/" not in record.pathname.replace(os.sep, "/"):
            return True
        if record.levelno < std_logging.WARNING:
            return False
        message = record.getMessage()
        return not any(noise in message for noise in ORBAX_NOISE)


def quiet_orbax_logs() -> None:
    """Keep Orbax's per-save INFO chatter and its ORBAX_NOISE warnings out of the log (its other
    warnings still show); a second call adds no second filter."""
    handler = logging.get_absl_handler()
    if not any(isinstance(f, _DropOrbaxChatter) for f in handler.filters):
        handler.addFilter(_DropOrbaxChatter())
