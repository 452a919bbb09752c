"""launch/slurm.sbatch without SLURM: two local processes started the way srun starts its tasks
(the per-task part of the script, `launch/slurm.sbatch --task SCRIPT ...`), with the variables
srun sets and JAX's SLURM detection reads (SLURM_JOB_ID, SLURM_STEP_NODELIST, SLURM_NTASKS,
SLURM_PROCID, SLURM_LOCALID) set by hand; --distributed=auto finds the job from them alone.

Such a job trains, checkpoints and resumes; preempted, SIGTERM (or Ctrl-C) to ONE of the two
processes makes both save one checkpoint at the same step and stop, and the same command resumes
to the losses of an uninterrupted run, bit for bit."""

import os
import re
import signal
import socket
import subprocess
import sys
import time

import xla_flags

from pretrain_runs import PRETRAIN, ROOT, TINY_RUN, last_logged_step, losses

SBATCH = os.path.join(ROOT, "launch", "slurm.sbatch")
SLOW = "--config.data.seconds_per_batch=0.05"  # so that a signal lands mid-run
# The bookkeeping is per model, not per layer: one layer halves what every process traces.
ONE_LAYER = "--config.model.num_hidden_layers=1"


def free_job_id() -> str:
    """A SLURM_JOB_ID whose port (JAX: 61440 + job_id % 4096) is free on this machine."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        if port >= 61440:
            return str(port - 61440 + 4096 * 7)
        with socket.socket() as s:  # the OS gave a low port: try one in JAX's range
            candidate = 61440 + int.from_bytes(os.urandom(2), "little") % 4096
            try:
                s.bind(("", candidate))
            except OSError:
                continue
        return str(candidate - 61440 + 4096 * 7)
    raise RuntimeError("no free port in 61440..65535")


def slurm_env(job_id: str, process: int) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "OMPI_", "PMI_", "JAX_", "CUDA_VISIBLE"))
           or k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE"))}
    env.update(JAX_PLATFORMS="cpu", PYTHONPATH=ROOT, PYTHON=sys.executable,
               XLA_FLAGS=xla_flags.with_devices(2),
               SLURM_JOB_ID=job_id, SLURM_STEP_NODELIST="localhost", SLURM_NTASKS="2",
               SLURM_PROCID=str(process), SLURM_LOCALID=str(process))
    return env


def start(workdir: str, logdir: str, *extra: str) -> list[subprocess.Popen]:
    """Both tasks of a 2-process job step, as srun would start them on one node."""
    os.makedirs(logdir, exist_ok=True)
    job_id = free_job_id()
    processes = []
    for i in range(2):
        with open(os.path.join(logdir, f"process_{i}.log"), "w") as log:
            processes.append(subprocess.Popen(
                ["bash", SBATCH, "--task", PRETRAIN, f"--workdir={workdir}", *TINY_RUN,
                 "--config.mesh.fsdp=2", "--config.async_checkpoints=False", ONE_LAYER, *extra],
                cwd=ROOT, env=slurm_env(job_id, i), stdout=log, stderr=subprocess.STDOUT))
    return processes


def log_of(logdir: str, i: int) -> str:
    with open(os.path.join(logdir, f"process_{i}.log")) as f:
        return f.read()


def finish(processes, logdir: str, timeout=400) -> list[int]:
    try:
        return [p.wait(timeout=timeout) for p in processes]
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()


def run_job(workdir: str, logdir: str, *extra: str) -> None:
    codes = finish(start(workdir, logdir, *extra), logdir)
    assert codes == [0, 0], "".join(log_of(logdir, i)[-3000:] for i in range(2))
    for i in range(2):
        assert f"process {i} of 2; 2 local of 4 global devices" in log_of(logdir, i)


def checkpoints(workdir: str) -> list[int]:
    return sorted(int(s) for s in os.listdir(os.path.join(workdir, "checkpoints")))


def interrupt_one(workdir: str, logdir: str, signum: int, after_step: int) -> list[int]:
    """Start the 30-step job slowed down, send `signum` to process 1 alone mid-run."""
    processes = start(workdir, logdir, "--config.total_steps=30",
                      "--config.checkpoint_every_steps=10", SLOW)
    try:
        deadline = time.time() + 300
        while last_logged_step(workdir) < after_step:
            assert all(p.poll() is None for p in processes), "a process ended before the signal"
            assert time.time() < deadline, "timed out waiting for the run"
            time.sleep(0.01)
        # bash exec'd Python: the Popen pid is the Python process.
        processes[1].send_signal(signum)
    except BaseException:
        finish(processes, logdir, timeout=1)
        raise
    return finish(processes, logdir)


def saved_steps_in_logs(logdir: str) -> list[int]:
    return [int(m.group(1)) for i in range(2) for m in
            re.finditer(r"received: saving step (\d+) and stopping", log_of(logdir, i))]


def test_sigterm_to_one_of_two_processes_saves_one_step_on_both_and_resumes_exactly(tmp_path):
    reference = str(tmp_path / "reference")
    run_job(reference, str(tmp_path / "logs_reference"), "--config.total_steps=30",
            "--config.checkpoint_every_steps=10")
    assert sorted(losses(reference)) == list(range(1, 31))  # written once, by process 0
    assert checkpoints(reference) == [10, 20, 30]

    workdir, logs = str(tmp_path / "run"), str(tmp_path / "logs")
    codes = interrupt_one(workdir, logs, signal.SIGTERM, after_step=12)
    assert codes == [143, 143], "".join(log_of(logs, i)[-3000:] for i in range(2))
    stopped = saved_steps_in_logs(logs)
    assert len(stopped) == 2 and stopped[0] == stopped[1], stopped  # the same step on both
    assert 12 <= stopped[0] < 30
    assert checkpoints(workdir) == [10, stopped[0]]
    assert last_logged_step(workdir) == stopped[0]

    # The same command resumes on both and ends with the losses of the uninterrupted run.
    run_job(workdir, str(tmp_path / "logs_resume"), "--config.total_steps=30",
            "--config.checkpoint_every_steps=10", SLOW)
    for i in range(2):
        assert "resuming from" in log_of(str(tmp_path / "logs_resume"), i)
    assert losses(workdir) == losses(reference)


def test_ctrl_c_to_one_of_two_processes_stops_both_at_one_saved_step(tmp_path):
    workdir, logs = str(tmp_path / "run"), str(tmp_path / "logs")
    codes = interrupt_one(workdir, logs, signal.SIGINT, after_step=12)
    # Process 1 got Ctrl-C (130); process 0 stops because another one was told to (as SIGTERM).
    assert codes == [143, 130], "".join(log_of(logs, i)[-3000:] for i in range(2))
    stopped = saved_steps_in_logs(logs)
    assert len(stopped) == 2 and stopped[0] == stopped[1], stopped
    assert checkpoints(workdir) == [10, stopped[0]]
    assert "KeyboardInterrupt" not in log_of(logs, 1)
