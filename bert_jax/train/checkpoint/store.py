"""Checkpoints with Orbax: train state, data-iterator state and model config, saved together.

One checkpoint step (a folder `<directory>/<step>/`) holds three items:

    state          the TrainState (step, params, optimizer state, rng), every leaf a global
                   jax.Array (Orbax refuses host-local arrays when there are several processes)
    data_iterator  each process's grain iterator state (`process_<i>-of-<n>.json`)
    metadata       JSON: the BertConfig of the model and whatever the caller adds (task, labels)

plus `checksums/process_<i>.json`: each process's checksum of every file it wrote, recorded
right after Orbax finalizes the step (bert_jax.train.checkpoint.checksums) and verified before a
restore reads the arrays, so that a file whose bytes changed since (bit rot, a damaged copy) makes
the step unreadable instead of being trained on.

Saves are asynchronous (training continues while the arrays are written) and only the newest
`keep` steps stay on disk. Restoring takes the target shardings of the *current* mesh, so a
checkpoint written on (2, 2, 2) devices restores onto one device, or any other mesh.
The directory is a local folder or an object-storage URI (`gs://bucket/run/checkpoints`, see
`workdir.path`): tensorstore writes the arrays, etils.epath every other file.

Another run's parameters alone (for fine-tuning, evaluation, export) are read by
bert_jax.train.checkpoint.params (`load_params`, `load_model_config`, `resolve_step`).

Errors (bert_jax.train.checkpoint.errors, importable from here too) say which step and which
item: CheckpointMismatchError (readable, but does not fit this run), CheckpointUnreadableError
(a truncated, missing or changed file), CheckpointWriteError (a save failed); all are ValueErrors.
Whether a step fits the run (`check_compatible`) is bert_jax.train.checkpoint.fit's judgement.
`check_readable` (a step's checksums, then its metadata files) and `restore` (the arrays, each
process its own shards) read without any collective and without Orbax's restore barrier, so
that an error on one process never leaves the others waiting: with several processes the caller
agrees on the outcome (see bert_jax.train.state, which falls back to the previous step).
`set_aside` moves an unreadable step to `<directory>_unreadable/<step>`, as it moves an entry
named as a step that is no step folder (`step_folders.not_step_folders`: a dangling symbolic
link, a file).
A step whose metadata says it was saved with a checksum record (CHECKSUMS_KEY) and that has none
is unreadable: its files cannot be verified (`verify_checksums`).
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping, Optional

import jax
import orbax.checkpoint as ocp
from absl import logging
from etils import epath

from bert_jax.config.bert import BertConfig
from bert_jax.model import families
from bert_jax.runtime import paths
from bert_jax.train.checkpoint import checksums
from bert_jax.train.checkpoint import fit as checkpoint_fit
from bert_jax.train.checkpoint.errors import (
    CheckpointMismatchError,
    CheckpointWriteError,
    Reading,
    describe,
    orbax_errors_in_one_line,
    unreadable,
)

# Re-exported (`x as x`): callers catch checkpointing.CheckpointUnreadableError.
from bert_jax.train.checkpoint.errors import CheckpointUnreadableError as CheckpointUnreadableError

STATE, DATA, METADATA = "state", "data_iterator", "metadata"
CHECKPOINTS = "checkpoints"  # the folder of a run's checkpoints inside its workdir
UNREADABLE_SUFFIX = "_unreadable"  # <directory>_unreadable/<step>: steps set aside by set_aside


def checkpoint_dir(workdir: str | os.PathLike) -> str:
    """<workdir>/checkpoints."""
    return os.path.join(os.fspath(workdir), CHECKPOINTS)


def unreadable_dir(directory: str | os.PathLike) -> epath.Path:
    """Where set_aside moves unreadable steps: `<workdir>/checkpoints_unreadable`."""
    directory = paths.path(directory)
    return directory.parent / (directory.name + UNREADABLE_SUFFIX)


class _Manager(ocp.CheckpointManager):
    """A CheckpointManager that records each finalized step's checksums and whose waits for an
    asynchronous save name the step that failed."""

    pending_step: Optional[int] = None

    def _finalize(self, step: int, *args, **kwargs):
        """Orbax's finalisation of a saved step (every process; in Orbax's finalize thread when
        saves are asynchronous), then this process's checksums of the files it wrote. An error
        here surfaces as the save's error (wait_until_finished). Private on purpose: Orbax's
        public hook (AsyncOptions.post_finalization_callback) refuses synchronous saves, takes no
        step and runs before the step's folder is in place. Tested on orbax-checkpoint 0.12.8
        (both stacks); tests/faults/test_checkpoint_faults.py fails if Orbax stops calling it."""
        super()._finalize(step, *args, **kwargs)
        step_dir = self.directory / str(step)
        if step_dir.is_dir():  # not when Orbax skipped the finalisation of a failed save
            checksums.record(step_dir, jax.process_index(), jax.process_count())

    def wait_until_finished(self):
        try:
            super().wait_until_finished()
        except Exception as e:  # the error of a background save, re-raised here by Orbax
            if isinstance(e, CheckpointWriteError):
                raise
            step = self.pending_step
            where = f"{self.directory}/{step}" if step is not None else str(self.directory)
            raise CheckpointWriteError(
                f"could not write the checkpoint {where} (saved in the background): "
                f"{describe(e)}") from e
        self.pending_step = None


def make_manager(directory: str | os.PathLike, keep: int = 3,
                 async_saves: bool = True) -> ocp.CheckpointManager:
    """A CheckpointManager over `directory` that keeps the newest `keep` steps. Orbax's log
    records of failed writes lose their tracebacks from here on (orbax_errors_in_one_line)."""
    orbax_errors_in_one_line()
    options = ocp.CheckpointManagerOptions(
        max_to_keep=keep, create=True, enable_async_checkpointing=async_saves)
    return _Manager(paths.path(directory), options=options,
                    item_handlers=item_handlers(ocp.StandardCheckpointHandler()))


def _grain_checkpoint():
    """grain's Orbax handler of iterator states, imported where a checkpoint is made or read, so
    that importing this module (and the train state, the loop) does not load grain."""
    from grain import checkpoint as grain_checkpoint
    return grain_checkpoint


def item_handlers(state_handler) -> dict[str, Any]:
    """Handlers by item, so that a fresh manager can read metadata before any save/restore."""
    return {STATE: state_handler, DATA: _grain_checkpoint().CheckpointHandler(),
            METADATA: ocp.JsonCheckpointHandler()}


# ----- the data iterator's state, through grain's Orbax handler --------------------------------

class _IteratorSnapshot:
    """The iterator's state taken *now*, handed to grain's handler (which may write it later)."""

    def __init__(self, iterator: Any):
        self._state = json.dumps(iterator.get_state(), indent=1).encode()

    def get_state(self) -> bytes:
        return self._state


class _IteratorStateReceiver:
    """Receives the state grain's handler reads back; the caller then sets it on its iterator."""

    state: Optional[Any] = None

    def set_state(self, state: bytes) -> None:
        self.state = json.loads(state.decode())

    def start_prefetch(self) -> None:
        pass


# ----- save --------------------------------------------------------------------------------------

# In a step's metadata: the format of the checksum record the step is saved to have. A step that
# carries it and has no record lost it (a kill between Orbax's finalisation and the record, a
# removed folder): its files cannot be verified, so it is not read (`verify_checksums`).
CHECKSUMS_KEY = "checksums"


def metadata_for(model_config: BertConfig, extra: Optional[Mapping[str, Any]] = None) -> dict:
    """The model config with its family (bert_jax.model.families), the checksum format the step
    will be recorded with (CHECKSUMS_KEY), and the caller's keys."""
    return {"model_config": families.config_to_dict(model_config),
            CHECKSUMS_KEY: checksums.FORMAT, **dict(extra or {})}


def save(manager: ocp.CheckpointManager, step: int, state: Any, *,
         model_config: BertConfig, data_iterator: Any = None,
         extra_metadata: Optional[Mapping[str, Any]] = None, force: bool = False) -> bool:
    """Start an (asynchronous) save of `state` and the iterator's current state at `step`.

    Raises CheckpointWriteError naming the step folder if this save, or the asynchronous one
    still in flight, fails.
    """
    items = {STATE: ocp.args.StandardSave(state),
             METADATA: ocp.args.JsonSave(metadata_for(model_config, extra_metadata))}
    if data_iterator is not None:
        items[DATA] = _grain_checkpoint().CheckpointSave(_IteratorSnapshot(data_iterator))
    try:  # Orbax's save first waits for the one in flight: _Manager names that one's step
        saved = manager.save(step, args=ocp.args.Composite(**items), force=force)
    except (OSError, ValueError) as e:
        if isinstance(e, CheckpointWriteError):
            raise
        raise CheckpointWriteError(
            f"could not write the checkpoint {manager.directory}/{step}: {describe(e)}") from e
    if saved and isinstance(manager, _Manager):
        manager.pending_step = step
    return saved


# ----- reading a step --------------------------------------------------------------------------

def step_name(manager: ocp.CheckpointManager, step: int) -> str:
    """How errors name a step: its folder."""
    return f"{manager.directory}/{step}"


def _read_metadata_item(step_dir: epath.Path, where: str) -> dict:
    """The metadata JSON of a step folder, read by the handler itself (no collective)."""
    if not (step_dir / METADATA).exists():
        raise unreadable(where, f"{METADATA} is missing (no folder {step_dir / METADATA})")
    with Reading(where, METADATA):
        metadata = ocp.JsonCheckpointHandler().restore(step_dir / METADATA)
    if not isinstance(metadata, Mapping):
        raise unreadable(where, f"{METADATA}: not a JSON object")
    return dict(metadata)


def read_metadata(manager: ocp.CheckpointManager, step: int) -> dict:
    """The metadata JSON of `step` (model_config and the task's extra keys)."""
    return _read_metadata_item(manager.directory / str(step), step_name(manager, step))


def read_step_metadata(directory: str | os.PathLike, step: int) -> dict:
    """read_metadata without a manager: the metadata JSON of `<directory>/<step>`."""
    directory = paths.path(directory)
    return _read_metadata_item(directory / str(step), f"{directory}/{step}")


def state_metadata(manager: ocp.CheckpointManager, step: int) -> Any:
    """The saved TrainState's tree of array metadata (shapes, dtypes), without reading arrays."""
    where = step_name(manager, step)
    if not (manager.directory / str(step) / STATE).exists():
        raise unreadable(where, f"{STATE} is missing (no folder {where}/{STATE})")
    with Reading(where, STATE):
        items = manager.item_metadata(step)
        saved = items[STATE] if STATE in items else None
    if saved is None:
        raise unreadable(where, f"{STATE}: Orbax finds no metadata of the saved arrays")
    return saved


def _data_iterator_file(manager: ocp.CheckpointManager, step: int) -> Optional[epath.Path]:
    """This process's iterator-state file of `step`, or None if the step was saved without one.
    For a step saved by one other number of processes: process 0's file of that layout (see
    `_other_layout_state`).

    Raises CheckpointUnreadableError if the step was saved with one that is gone, and
    CheckpointMismatchError if it was saved by several other numbers of processes.
    """
    where = step_name(manager, step)
    folder = manager.directory / str(step) / DATA
    index, count = jax.process_index(), jax.process_count()
    if not folder.exists():
        with Reading(where, "the step's Orbax metadata"):
            saved_items = manager.metadata(step).item_handlers or {}
        if DATA in saved_items:
            raise unreadable(where, f"{DATA} is missing (no folder {folder})")
        return None
    path = folder / f"process_{index}-of-{count}.json"
    if not path.exists():
        counts = sorted({p.name.rsplit("-of-", 1)[-1][:-len(".json")] for p in folder.iterdir()
                         if p.name.startswith("process_") and "-of-" in p.name
                         and p.name.endswith(".json")})
        if len(counts) > 1 and str(count) not in counts:
            raise CheckpointMismatchError(
                f"checkpoint {where} holds the data-iterator state of {' or '.join(counts)} "
                f"process(es), and this run has {count}: resume with as many processes")
        if counts and str(count) not in counts:
            path = folder / f"process_0-of-{counts[0]}.json"
        if not path.exists():
            raise unreadable(where, f"{DATA} is missing this process's state (no file {path})")
    return path


def _other_layout_state(data_iterator: Any, path: epath.Path, where: str) -> Optional[Any]:
    """None if `path` is this process's own state file. Otherwise (a step saved by another number
    of processes) the state in it, which only an iterator with `set_state_of_other_layout` can
    start from (bert_jax.data.pretraining.pipeline: a new pass over the data); any other iterator is
    a CheckpointMismatchError."""
    saved_count = int(path.name.rsplit("-of-", 1)[-1][:-len(".json")])
    if saved_count == jax.process_count():
        return None
    if not hasattr(data_iterator, "set_state_of_other_layout"):
        raise CheckpointMismatchError(
            f"checkpoint {where} holds the data-iterator state of {saved_count} process(es), and "
            f"this run has {jax.process_count()}: resume with as many processes")
    with Reading(where, DATA):
        return json.loads(path.read_text())


def check_readable(manager: ocp.CheckpointManager, step: int, *,
                   data_iterator: bool = False) -> bool:
    """Raise CheckpointUnreadableError naming the item (or the file) unless `step`'s files match
    their checksums (this process's share of them, see `verify_checksums`), and its metadata
    JSON, the metadata of its saved arrays and (if asked) this process's data-iterator state can
    be read. Returns whether the files were verified (False: the step has no checksums).

    The checksums come first, so that Orbax never reads a file whose bytes changed. Reads files
    only, without any collective, so that each process can check on its own; the arrays
    themselves are read only by restore (in a step without checksums, a truncated data file
    shows there).
    """
    where = step_name(manager, step)
    step_dir = manager.directory / str(step)
    if not step_dir.is_dir():
        raise unreadable(where, "the folder is missing")
    verified = verify_checksums(step_dir, where, share=(jax.process_index(), jax.process_count()))
    read_metadata(manager, step)
    state_metadata(manager, step)
    if data_iterator:
        path = _data_iterator_file(manager, step)
        if path is not None:
            with Reading(where, DATA):
                json.loads(path.read_text())
    return verified


def check_compatible(manager: ocp.CheckpointManager, step: int, abstract_state: Any,
                     model_config: BertConfig) -> None:
    """Raise CheckpointMismatchError naming what differs between the checkpoint and this run
    (bert_jax.train.checkpoint.fit; CheckpointUnreadableError if what it compares cannot be
    read)."""
    where = step_name(manager, step)
    saved_config = read_metadata(manager, step).get("model_config", {})
    checkpoint_fit.check_model(where, saved_config, model_config)
    with Reading(where, STATE):  # a metadata leaf without a shape is an unreadable state
        checkpoint_fit.check_state(where, state_metadata(manager, step), abstract_state)


def restore(manager: ocp.CheckpointManager, step: int, abstract_state: Any, *,
            model_config: BertConfig, data_iterator: Any = None, checked: bool = False) -> Any:
    """The TrainState at `step`, placed with the shardings of `abstract_state` (any mesh).

    abstract_state: a tree of jax.ShapeDtypeStruct with `.sharding` set, e.g. from
    jax.eval_shape plus the state shardings. The iterator, if given, is set to its saved state
    (only once everything was read). Raises CheckpointMismatchError if the step does not fit this
    run, CheckpointUnreadableError (naming the item, or the file) if it cannot be read or its
    files do not match their checksums (`check_readable`, unless `checked` says the caller has
    just called it for this step; each process checks its share of the files, and the caller
    combines the outcomes as below).

    Each process reads its own shards through the item handlers, without the barrier that
    `manager.restore` ends with, so that an error on one process cannot leave the others waiting
    in a collective: with several processes the caller must agree on the outcome afterwards (one
    allgather that every process reaches, as bert_jax.train.state does), which is also the
    barrier.
    """
    where = step_name(manager, step)
    step_dir = manager.directory / str(step)
    if not checked:
        check_readable(manager, step, data_iterator=data_iterator is not None)
    check_compatible(manager, step, abstract_state, model_config)
    receiver, other_layout = _IteratorStateReceiver(), None
    if data_iterator is not None:
        path = _data_iterator_file(manager, step)
        if path is None:
            raise CheckpointMismatchError(
                f"checkpoint {where} has no data-iterator state to resume from")
        other_layout = _other_layout_state(data_iterator, path, where)
        if other_layout is None:
            grain_checkpoint = _grain_checkpoint()
            with Reading(where, DATA):
                grain_checkpoint.CheckpointHandler().restore(
                    step_dir / DATA, args=grain_checkpoint.CheckpointRestore(receiver))
    handler = ocp.StandardCheckpointHandler()
    try:
        with Reading(where, STATE):
            state = handler.restore(step_dir / STATE,
                                    args=ocp.args.StandardRestore(abstract_state))
    finally:
        handler.close()
    if other_layout is not None:
        data_iterator.set_state_of_other_layout(other_layout)
    elif data_iterator is not None:
        data_iterator.set_state(receiver.state)
    return state


def verify_checksums(step_dir: epath.Path, where: str,
                     share: Optional[tuple[int, int]] = None) -> bool:
    """checksums.verify, with one log line for a step saved before checksums were recorded
    (its metadata lacks CHECKSUMS_KEY; restored as before, unverified); False for such a step.
    Raises CheckpointUnreadableError naming the step and the damaged file, or saying that the
    record of a step saved to have one is gone (not read: its files cannot be verified)."""
    with Reading(where, checksums.FOLDER):
        verified = checksums.verify(step_dir, where, share)
    if not verified:
        if CHECKSUMS_KEY in _read_metadata_item(step_dir, where):
            raise unreadable(where, f"its checksum record ({checksums.FOLDER}/) is gone, and the "
                             "step was saved to have one (its run stopped between Orbax's "
                             "finalisation of the step and the record, or the folder was "
                             "removed): its files cannot be verified, so it is not read")
        logging.warning("checkpoint %s has no checksums (saved before they were recorded): its "
                        "files are read unverified", where)
    return verified


def set_aside(directory: str | os.PathLike, step: int) -> epath.Path:
    """Move the step folder `<directory>/<step>` to `<directory>_unreadable/<step>` (with a
    suffix `.1`, `.2`, ... if that exists) and return where it went. Nothing is deleted; call it
    from one process only, and `manager.reload()` afterwards."""
    source = paths.path(directory) / str(step)
    aside = unreadable_dir(directory)
    aside.mkdir(parents=True, exist_ok=True)
    target, n = aside / str(step), 0
    while target.exists() or os.path.islink(os.fspath(target)):
        n += 1
        target = aside / f"{step}.{n}"
    source.rename(target)
    return target
