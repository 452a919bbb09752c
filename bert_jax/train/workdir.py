"""What a training run keeps about itself in its workdir: its config and a lock.

`<workdir>/config.json` is the resolved config (file + --config.<key> overrides), written by the
recipe from process 0 after checking it, and read back by evaluate.py in a new process. A rerun
on a workdir that holds a checkpoint continues the same run, so its config must be the same in
everything that changes what the run computes (`record_config`); `allow_config_change` says a
change is meant. Each checkpoint keeps a copy (`saved_config_metadata`, in its metadata), so a
rerun whose config.json is gone is checked against the newest readable checkpoint's: refused
when they differ, a warning when they do not (or when the checkpoint predates saved configs).

A workdir that cannot be written (a read-only filesystem, a full disk) stops a run at the lock
or at config.json with a WorkdirNotWritableError naming the file.

`<workdir>/run.lock` is held for the life of a run (`lock`): a second run on the same workdir
stops at once, naming the process that holds it. A lock left by a process that died is taken
over when its host is this host and its PID is gone.

A workdir is a local folder or an object-storage URI such as `gs://bucket/run`; its paths go
through `bert_jax.paths` (re-exported here). On a bucket the lock is created with a generation
precondition, so of two runs that start together exactly one holds it.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from typing import TYPE_CHECKING, Any, Iterator, Optional

import jax
from absl import logging
from etils import epath

from bert_jax import multiprocess, pytree
from bert_jax.paths import create_exclusively, read_json, write_text_atomically

if TYPE_CHECKING:  # annotations only: ml_collections is imported where a saved config is read
    import ml_collections

CONFIG_FILE = "config.json"
LOCK_FILE = "run.lock"

# Keys that change how a run is watched, saved or laid out, not what it computes: a rerun may
# change them freely (checkpoints restore onto any mesh; padding rows weigh 0 in evaluation).
RUN_NEUTRAL_KEYS = frozenset({
    "log_every_steps", "eval_every_steps", "checkpoint_every_steps", "keep_checkpoints",
    "async_checkpoints", "peak_flops_per_device", "eval_batch_size", "mesh.data", "mesh.fsdp",
    "mesh.tensor", "allow_config_change", "nonfinite", "max_nonfinite_in_a_row",
    "data.seconds_per_batch", "data.eval_mask_rate", "data.bucket_lengths"})
# A key the saved config lacks (it was written before the key existed) reads as the schema's
# default (bert_jax.config.run.complete); one outside the schema that the new config sets to one
# of these "off" values keeps the behaviour the run had without it.
OFF_VALUES = (None, False, 0, "")


class WorkdirInUseError(ValueError):
    """Another run holds the workdir's lock."""


class ConfigChangedError(ValueError):
    """A rerun's config differs from the one the workdir's run was started with."""


class WorkdirNotWritableError(ValueError):
    """The workdir cannot be written (a read-only filesystem, no permission, a full disk)."""


SAVED_CONFIG_KEY = "run_config"  # the run's config.json, kept in each checkpoint's metadata


def saved_config_metadata(workdir: str) -> dict:
    """{"run_config": <workdir>/config.json} for the metadata of a checkpoint, or {} when this
    process sees no config.json (a run outside the recipes, another host's local disk)."""
    config_path = epath.Path(workdir) / CONFIG_FILE
    if not config_path.exists():
        return {}
    return {SAVED_CONFIG_KEY: read_json(config_path)}


def _flat(config: Any) -> dict[str, Any]:
    tree = config.to_dict() if hasattr(config, "to_dict") else config
    return {".".join(keys): value for keys, value in pytree.flatten_dict(tree).items()}


def config_differences(saved: dict, config: ml_collections.ConfigDict) -> list[str]:
    """'key: saved -> new' for every key (but the run-neutral ones) that differs."""
    from bert_jax.config import run as run_config
    old = _flat(run_config.complete(saved))
    new = _flat(run_config.complete(json.loads(json.dumps(config.to_dict()))))
    keys = sorted((set(old) | set(new)) - RUN_NEUTRAL_KEYS)
    missing = object()
    return [f"{k}: {old.get(k, '(absent)')!r} -> {new.get(k, '(absent)')!r}" for k in keys
            if old.get(k, missing) != new.get(k, missing)
            and not (k not in old and new.get(k) in OFF_VALUES)]


def record_config(config: ml_collections.ConfigDict, workdir: str) -> None:
    """Check a rerun's config against config.json, then write config.json.

    Once the workdir holds a checkpoint, a difference in a key that changes the run raises
    ConfigChangedError naming the keys, unless config.allow_config_change; then the previous
    file is kept as config.previous-<time>.json beside the new one. (Before the first
    checkpoint nothing has been trained: a corrected rerun simply replaces config.json.)
    Process 0 reads and writes; every process raises if it failed (bert_jax.multiprocess).
    """
    multiprocess.agree(lambda: _record(config, workdir) if jax.process_index() == 0 else None,
                       f"recording the config in {workdir}")


def _has_checkpoint(workdir: str) -> bool:
    directory = epath.Path(workdir) / "checkpoints"
    return directory.is_dir() and any(p.name.isdigit() for p in directory.iterdir())


def _checkpoint_config(workdir: str) -> tuple[Optional[int], Optional[dict]]:
    """(step, the config saved in its metadata) of the newest checkpoint whose metadata can be
    read; (step, None) when that checkpoint predates saved configs; (None, None) when none can."""
    from bert_jax.train import checkpointing  # orbax: only where a checkpoint is read
    directory = epath.Path(workdir) / checkpointing.CHECKPOINTS
    for step in sorted((int(p.name) for p in directory.iterdir() if p.name.isdigit()),
                       reverse=True):
        try:
            metadata = checkpointing.read_step_metadata(directory, step)
        except checkpointing.CheckpointUnreadableError:
            continue
        return step, metadata.get(SAVED_CONFIG_KEY)
    return None, None


def _check_against_checkpoint(config: ml_collections.ConfigDict, workdir: str) -> None:
    """config.json is gone but checkpoints exist: compare with the config the newest readable
    checkpoint was saved with; refuse a difference unless allow_config_change, else warn."""
    config_path = epath.Path(workdir) / CONFIG_FILE
    step, saved = _checkpoint_config(workdir)
    if saved is None:
        logging.warning("%s is missing and %s: this config cannot be checked against the run's, "
                        "so the run goes on with it", config_path,
                        f"checkpoint step {step} predates saved configs" if step is not None
                        else "no checkpoint's metadata can be read")
        return
    differences = config_differences(saved, config)
    if differences and not config.allow_config_change:
        raise ConfigChangedError(
            f"{config_path} is missing, and the newest checkpoint (step {step}) was saved with "
            "another config (" + "; ".join(differences[:8])
            + ("; ..." if len(differences) > 8 else "") + "): rerun with the config it was "
            "saved with, or --config.allow_config_change=true if the change is meant")
    logging.warning("%s was missing; %s", config_path,
                    f"the config differs from checkpoint step {step}'s as allowed ("
                    + "; ".join(differences) + ")" if differences else
                    f"this config is the one checkpoint step {step} was saved with, written anew")


def _not_writable(workdir: str, error: OSError) -> str:
    return (f"cannot write into {workdir} ({type(error).__name__}: {error}): a run needs a "
            "writable --workdir (free some space, or use another folder)")


@contextlib.contextmanager
def _writing(workdir: str) -> Iterator[None]:
    """An OSError of the body (a read-only filesystem, no permission, a full disk) as a
    WorkdirNotWritableError: one line naming the file."""
    try:
        yield
    except OSError as e:
        raise WorkdirNotWritableError(_not_writable(workdir, e)) from e


def _record(config: ml_collections.ConfigDict, workdir: str) -> None:
    config_path = epath.Path(workdir) / CONFIG_FILE
    if not config_path.exists() and _has_checkpoint(workdir):
        _check_against_checkpoint(config, workdir)
    elif config_path.exists() and _has_checkpoint(workdir):
        differences = config_differences(read_json(config_path), config)
        if differences and not config.allow_config_change:
            raise ConfigChangedError(
                f"{workdir} holds a run started with another config ("
                + "; ".join(differences[:8]) + ("; ..." if len(differences) > 8 else "")
                + "): use another --workdir, or --config.allow_config_change=true if the "
                "change is meant")
        if differences:
            kept = config_path.parent / f"config.previous-{time.strftime('%Y%m%d-%H%M%S')}.json"
            with _writing(workdir):
                config_path.copy(kept, overwrite=True)
            logging.warning("config changed (%s); the previous config is kept as %s",
                            "; ".join(differences), kept)
            _warn_if_schedule_restarts(read_json(kept), config, workdir)
    with _writing(workdir):
        write_text_atomically(config_path, json.dumps(config.to_dict(), indent=2,
                                                      sort_keys=True))


def _warn_if_schedule_restarts(old: dict, config: ml_collections.ConfigDict,
                               workdir: str) -> None:
    """One warning line when the changed config moves the learning rate at the newest step."""
    from bert_jax.train import schedule_change
    directory = epath.Path(workdir) / "checkpoints"
    steps = [int(p.name) for p in directory.iterdir() if p.name.isdigit()]
    line = schedule_change.restart_line(old, config.to_dict(), max(steps)) if steps else None
    if line:
        logging.warning("%s", line)


def load_config(workdir: str) -> ml_collections.ConfigDict:
    """<workdir>/config.json as a ConfigDict: every key of the run's resolved config, and the
    schema's default for a key added after the run was started (bert_jax.config.run.complete)."""
    config_path = epath.Path(workdir) / CONFIG_FILE
    if not config_path.exists():
        raise FileNotFoundError(f"{config_path} not found: --workdir must be the workdir of a "
                                "training run (pretrain.py and finetune.py write config.json "
                                "there)")
    import ml_collections  # only where a saved config is read back

    from bert_jax.config import run as run_config
    return ml_collections.ConfigDict(run_config.complete(read_json(config_path)))


def _holder_is_gone(holder: dict) -> bool:
    """True when the lock's process ran on this host and no longer exists."""
    if holder.get("host") != socket.gethostname():
        return False
    try:
        os.kill(int(holder.get("pid", -1)), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, ValueError, OverflowError):
        return False
    return False


def _acquire(workdir: str) -> dict:
    """Create <workdir>/run.lock holding this process's record, taking over a dead process's
    lock."""
    lock_path = epath.Path(workdir) / LOCK_FILE
    me = {"pid": os.getpid(), "host": socket.gethostname(),
          "since": time.strftime("%Y-%m-%d %H:%M:%S")}
    for _ in range(2):
        with _writing(workdir):
            lock_path.parent.mkdir(parents=True, exist_ok=True)
            if create_exclusively(lock_path, json.dumps(me)):
                return me
        try:
            holder = read_json(lock_path)
        except (ValueError, FileNotFoundError):
            holder = {}
        if not (holder and _holder_is_gone(holder)):
            raise WorkdirInUseError(
                f"{workdir} is in use by process {holder.get('pid', '?')} on host "
                f"{holder.get('host', '?')} since {holder.get('since', '?')} ({lock_path}); "
                "wait for it to finish, or remove the lock file if that process is gone")
        logging.warning("taking over %s from process %s, which is gone", lock_path,
                        holder.get("pid"))
        with contextlib.suppress(FileNotFoundError):
            lock_path.unlink()
    raise WorkdirInUseError(f"{workdir}: another run took {lock_path} meanwhile")


@contextlib.contextmanager
def lock(workdir: str) -> Iterator[None]:
    """Hold <workdir>/run.lock while the body runs. Process 0 takes it; every process stops if
    it could not (bert_jax.multiprocess)."""
    holder = multiprocess.agree(
        lambda: _acquire(workdir) if jax.process_index() == 0 else None,
        f"taking the lock of {workdir}")
    try:
        yield
    finally:
        if holder is not None:
            lock_path = epath.Path(workdir) / LOCK_FILE
            with contextlib.suppress(FileNotFoundError, ValueError):
                saved = read_json(lock_path)
                if (saved.get("pid"), saved.get("host")) == (holder["pid"], holder["host"]):
                    lock_path.unlink()
