"""Check every checkpoint step of a run without training it or building its model
(experiments/verify_checkpoints.py).

    checks = check_run(workdir)     # one StepCheck per step folder, oldest first
    print(describe(check))          # "<dir>/8: damaged: state/...: does not match its checksum..."

A step is intact when its files match the checksums recorded when it was saved
(bert_jax.train.checkpoint.checksums) and its metadata, the metadata of its arrays and its
data-iterator states can be read (checkpointing.check_readable); one saved before checksums were
recorded is only checked for the latter, and says so. Every file is read once, by this one process.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

import orbax.checkpoint as ocp

from bert_jax.runtime import paths
from bert_jax.train.checkpoint import checksums, step_folders
from bert_jax.train.checkpoint import store as checkpointing


@dataclasses.dataclass(frozen=True)
class StepCheck:
    where: str  # the step folder
    step: int
    problem: Optional[str]  # None: intact; else what is wrong (the file at fault first)
    verified: bool  # its files matched their checksums (False: none recorded, or damaged)
    files: int  # files of the step (its checksum records not counted)
    size: int  # their bytes


def checkpoints_of(workdir: str | os.PathLike) -> str:
    """The checkpoints folder of `workdir`, or `workdir` itself when it holds the step folders.
    FileNotFoundError naming the folder when there is none."""
    directory = paths.path(checkpointing.checkpoint_dir(workdir))
    if directory.is_dir():
        return os.fspath(directory)
    given = paths.path(workdir)
    if given.is_dir() and any(p.name.isdigit() for p in given.iterdir()):
        return os.fspath(given)
    raise FileNotFoundError(f"no checkpoints in {workdir}: expected the workdir of a training run "
                            f"(with {checkpointing.CHECKPOINTS}/) or its checkpoints folder")


def check_run(workdir: str | os.PathLike) -> list[StepCheck]:
    """A StepCheck per step folder of the run at `workdir` (module docstring), oldest first.
    FileNotFoundError when there is no checkpoint folder or no step in it."""
    directory = paths.path(checkpoints_of(workdir))
    steps = step_folders.step_numbers(directory)
    not_steps = [StepCheck(f"{directory}/{step}", step, f"{what}: not a checkpoint step", False,
                           0, 0) for step, what in step_folders.not_step_folders(directory)]
    if not steps and not not_steps:
        raise FileNotFoundError(f"{directory} holds no checkpoint steps (expected folders named "
                                "by step)")
    manager = ocp.CheckpointManager(
        directory, item_handlers=checkpointing.item_handlers(ocp.StandardCheckpointHandler()),
        options=ocp.CheckpointManagerOptions(read_only=True))
    try:
        return sorted([_check_step(manager, step) for step in steps] + not_steps,
                      key=lambda check: check.step)
    finally:
        manager.close()


def _check_step(manager: ocp.CheckpointManager, step: int) -> StepCheck:
    where = checkpointing.step_name(manager, step)
    step_dir = manager.directory / str(step)
    files = list(checksums.step_files(step_dir))
    size = sum(file.stat().length for _, file in files)
    problem, verified = None, False
    try:
        verified = checkpointing.check_readable(manager, step, data_iterator=True)
    except checkpointing.CheckpointUnreadableError as e:
        problem = str(e).removeprefix(f"checkpoint {where} cannot be read: ")
    except checkpointing.CheckpointMismatchError as e:  # iterator states of another layout
        problem = str(e)
    return StepCheck(where, step, problem, verified, len(files), size)


def describe(check: StepCheck) -> str:
    """One line: '<dir>/<step>: ok (...)', '... damaged: <what>' or '... not verified: ...'."""
    if check.problem is not None:
        return f"{check.where}: damaged: {check.problem}"
    extent = f"{check.files} files, {check.size / 1e6:.1f} MB"
    if check.verified:
        return f"{check.where}: ok ({extent} match their checksums)"
    return (f"{check.where}: readable, not verified ({extent}; no checksums: saved before they "
            "were recorded)")
