"""Joining a multi-process JAX job: the flags the experiment scripts share, and their effect.

--distributed=none       one process (the default).
--distributed=auto       jax.distributed.initialize() with no arguments: on Cloud TPU VMs, SLURM
                         and Open MPI clusters JAX finds the coordinator by itself. Under SLURM
                         (launch/slurm.sbatch) it needs SLURM_JOB_ID, SLURM_STEP_NODELIST,
                         SLURM_NTASKS, SLURM_PROCID and SLURM_LOCALID, all set by srun: the
                         coordinator is the first host of the node list at port 61440 +
                         SLURM_JOB_ID % 4096 (JAX_COORDINATOR_PORT overrides), and a process
                         drives only GPU SLURM_LOCALID unless JAX_LOCAL_DEVICE_IDS says otherwise.
--coordinator_address=host:port --num_processes=N --process_id=i
                         explicit: what launch/multihost_local.sh passes to each local process.

The flags exist once a script calls `define_flags()` (library imports define none).

jax.distributed.initialize also starts JAX's preemption sync manager, which catches SIGTERM for
the whole process: bert_jax.train.preemption (StopSignals) relies on it to stop all processes at
one step when any of them is told to stop.
"""

from __future__ import annotations

import jax
from absl import flags, logging


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    flags.DEFINE_enum("distributed", None, ["none", "auto"],
                      "Join a multi-process job: 'auto' lets JAX find the coordinator.",
                      flag_values=flag_values)
    flags.DEFINE_string("coordinator_address", None,
                        "host:port of process 0, for explicit multi-process launch.",
                        flag_values=flag_values)
    flags.DEFINE_integer("num_processes", None, "Processes in the job.", flag_values=flag_values)
    flags.DEFINE_integer("process_id", None, "This process's index, 0..num_processes-1.",
                         flag_values=flag_values)


def initialize_from_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Call jax.distributed.initialize as the flags say; must run before any other JAX call."""
    explicit = (flag_values.coordinator_address, flag_values.num_processes,
                flag_values.process_id)
    if any(v is not None for v in explicit):
        if any(v is None for v in explicit):
            raise flags.ValidationError(
                "--coordinator_address, --num_processes and --process_id go together; got "
                f"{explicit}")
        if not 0 <= flag_values.process_id < flag_values.num_processes:
            raise flags.ValidationError(f"--process_id={flag_values.process_id} is outside "
                                        f"0..{flag_values.num_processes - 1}")
        jax.distributed.initialize(coordinator_address=flag_values.coordinator_address,
                                   num_processes=flag_values.num_processes,
                                   process_id=flag_values.process_id)
    elif flag_values.distributed == "auto":
        jax.distributed.initialize()
    else:
        return
    logging.info("process %d of %d; %d local of %d global devices", jax.process_index(),
                 jax.process_count(), jax.local_device_count(), jax.device_count())
