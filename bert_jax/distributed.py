"""Joining a multi-process JAX job: the flags every experiment script shares, and their effect.

--distributed=none       one process (the default).
--distributed=auto       jax.distributed.initialize() with no arguments: on Cloud TPU VMs (and
                         SLURM / Open MPI clusters) JAX finds the coordinator by itself.
--coordinator_address=host:port --num_processes=N --process_id=i
                         explicit: what launch/multihost_local.sh passes to each local process.
"""

from __future__ import annotations

import jax
from absl import flags, logging

_DISTRIBUTED = flags.DEFINE_enum("distributed", None, ["none", "auto"],
                                 "Join a multi-process job: 'auto' lets JAX find the coordinator.")
_COORDINATOR = flags.DEFINE_string("coordinator_address", None,
                                   "host:port of process 0, for explicit multi-process launch.")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Processes in the job.")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index, 0..num_processes-1.")


def initialize_from_flags() -> None:
    """Call jax.distributed.initialize as the flags say; must run before any other JAX call."""
    explicit = (_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
    if any(v is not None for v in explicit):
        if any(v is None for v in explicit):
            raise flags.ValidationError(
                "--coordinator_address, --num_processes and --process_id go together; got "
                f"{explicit}")
        if not 0 <= _PROCESS_ID.value < _NUM_PROCESSES.value:
            raise flags.ValidationError(
                f"--process_id={_PROCESS_ID.value} is outside 0..{_NUM_PROCESSES.value - 1}")
        jax.distributed.initialize(coordinator_address=_COORDINATOR.value,
                                   num_processes=_NUM_PROCESSES.value, process_id=_PROCESS_ID.value)
    elif _DISTRIBUTED.value == "auto":
        jax.distributed.initialize()
    else:
        return
    logging.info("process %d of %d; %d local of %d global devices", jax.process_index(),
                 jax.process_count(), jax.local_device_count(), jax.device_count())
