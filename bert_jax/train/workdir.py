"""What a training run keeps about itself in its workdir: its config and a lock.

`<workdir>/config.json` is the resolved config (file + --config.<key> overrides), written by the
recipe from process 0 after checking it, and read back by evaluate.py in a new process. A rerun
on the same workdir continues the same run, so its config must be the same in everything that
changes what the run computes (`check_same_run`); `allow_config_change` says a change is meant.

`<workdir>/run.lock` is held for the life of a run (`lock`): a second run on the same workdir
stops at once, naming the process that holds it. A lock left by a process that died is taken
over when its host is this host and its PID is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from typing import Any, Iterator

import jax
import ml_collections
from absl import logging

from bert_jax import pytree

CONFIG_FILE = "config.json"
LOCK_FILE = "run.lock"

# Keys that change how a run is watched, saved or laid out, not what it computes: a rerun may
# change them freely (checkpoints restore onto any mesh; padding rows weigh 0 in evaluation).
RUN_NEUTRAL_KEYS = frozenset({
    "log_every_steps", "eval_every_steps", "checkpoint_every_steps", "keep_checkpoints",
    "async_checkpoints", "peak_flops_per_device", "eval_batch_size", "mesh.data", "mesh.fsdp",
    "mesh.tensor", "allow_config_change", "nonfinite", "max_nonfinite_in_a_row",
    "data.seconds_per_batch"})


class WorkdirInUseError(ValueError):
    """Another run holds the workdir's lock."""


class ConfigChangedError(ValueError):
    """A rerun's config differs from the one the workdir's run was started with."""


def _flat(config: Any) -> dict[str, Any]:
    tree = config.to_dict() if isinstance(config, ml_collections.ConfigDict) else config
    return {".".join(path): value for path, value in pytree.flatten_dict(tree).items()}


def config_differences(saved: dict, config: ml_collections.ConfigDict) -> list[str]:
    """'key: saved -> new' for every key (but the run-neutral ones) that differs."""
    old, new = _flat(saved), _flat(json.loads(json.dumps(config.to_dict())))
    keys = sorted((set(old) | set(new)) - RUN_NEUTRAL_KEYS)
    missing = object()
    return [f"{k}: {old.get(k, '(absent)')!r} -> {new.get(k, '(absent)')!r}" for k in keys
            if old.get(k, missing) != new.get(k, missing)]


def record_config(config: ml_collections.ConfigDict, workdir: str) -> None:
    """Check a rerun's config against config.json, then write config.json (process 0).

    A difference in a key that changes the run raises ConfigChangedError naming the keys,
    unless config.allow_config_change; then the previous file is kept as
    config.previous-<time>.json beside the new one.
    """
    path = os.path.join(workdir, CONFIG_FILE)
    if os.path.exists(path):
        saved = _read_json(path)
        differences = config_differences(saved, config)
        if differences and not config.get("allow_config_change", False):
            raise ConfigChangedError(
                f"{workdir} holds a run started with another config ("
                + "; ".join(differences[:8]) + ("; ..." if len(differences) > 8 else "")
                + "): use another --workdir, or --config.allow_config_change=true if the "
                "change is meant")
        if differences and jax.process_index() == 0:
            kept = os.path.join(workdir, f"config.previous-{time.strftime('%Y%m%d-%H%M%S')}.json")
            os.replace(path, kept)
            logging.warning("config changed (%s); the previous config is kept as %s",
                            "; ".join(differences), kept)
    if jax.process_index() == 0:  # written whole, then renamed: other processes read either
        os.makedirs(workdir, exist_ok=True)
        temporary = f"{path}.tmp-{os.getpid()}"
        with open(temporary, "w", encoding="utf-8") as f:
            json.dump(config.to_dict(), f, indent=2, sort_keys=True)
        os.replace(temporary, path)


def _read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is not valid JSON ({e})") from None


def load_config(workdir: str) -> ml_collections.ConfigDict:
    """<workdir>/config.json as a ConfigDict (every key of the run's resolved config)."""
    path = os.path.join(workdir, CONFIG_FILE)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} not found: --workdir must be the workdir of a training "
                                "run (pretrain.py and finetune.py write config.json there)")
    return ml_collections.ConfigDict(_read_json(path))


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


@contextlib.contextmanager
def lock(workdir: str) -> Iterator[None]:
    """Hold <workdir>/run.lock while the body runs (process 0; other processes pass through)."""
    if jax.process_index() != 0:
        yield
        return
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, LOCK_FILE)
    me = {"pid": os.getpid(), "host": socket.gethostname(),
          "since": time.strftime("%Y-%m-%d %H:%M:%S")}
    for _ in range(2):
        try:
            descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                holder = _read_json(path)
            except (ValueError, FileNotFoundError):
                holder = {}
            if holder and _holder_is_gone(holder):
                logging.warning("taking over %s from process %s, which is gone", path,
                                holder.get("pid"))
                os.remove(path)
                continue
            raise WorkdirInUseError(
                f"{workdir} is in use by process {holder.get('pid', '?')} on host "
                f"{holder.get('host', '?')} since {holder.get('since', '?')} ({path}); wait for "
                "it to finish, or remove the lock file if that process is gone") from None
        with os.fdopen(descriptor, "w", encoding="utf-8") as f:
            json.dump(me, f)
        break
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError, ValueError):
            if _read_json(path).get("pid") == me["pid"]:
                os.remove(path)
