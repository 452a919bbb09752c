"""A run's record of its config: <workdir>/config.json, and what a changed config does.

`<workdir>/config.json` is the resolved config (file + --config.<key> overrides), written by the
recipe from process 0 after checking it, and read back by evaluate.py in a new process
(`load_config`). A rerun on a workdir that holds a checkpoint continues the same run, so its
config must be the same in everything that changes what the run computes (`record_config`);
`allow_config_change` says a change is meant. Each checkpoint keeps a copy
(`bert_jax.train.checkpoint.workdir.saved_config_metadata`, in its metadata), so a rerun whose
config.json is gone is checked against the newest readable checkpoint's: refused when they differ, a
warning when they do not (or when the checkpoint predates saved configs). A config.json that cannot
be written stops the run with a WorkdirNotWritableError naming the file.

What a changed config does to a resumed run's learning rate: the schedule is a function of
total_steps (its warm-up, config.warmup_fraction x total_steps, and its decay both end where
total_steps says), so extending a run with allow_config_change restarts it: at the restored step
the rate jumps to where the new schedule puts that step (e.g. back into a longer warm-up).
`restart_line` says so in one line before the first resumed step, naming the old and new
total_steps, the rates before and after, and the new tail; keeping the warm-up
(config.warmup_steps) stretches the decay from its end to the new total_steps, which moves the
rate at the restored step too and is said the same way. From there the run follows the new
schedule exactly as an uninterrupted run of the new config would.

The workdir's other files (run.lock, checkpoints) are bert_jax.train's (workdir.py,
checkpointing); this record is the recipes', the one writer of config.json.
"""

from __future__ import annotations

import json
import math
import time
from typing import TYPE_CHECKING, Any, Mapping, Optional

import jax
from absl import logging
from etils import epath

from bert_jax.config import run as run_config
from bert_jax.config.settings import OptimizerConfig, warmup_steps
from bert_jax.runtime import multiprocess, pytree
from bert_jax.runtime.paths import read_json, write_text_atomically
from bert_jax.train import optimizer
from bert_jax.train.checkpoint.workdir import CONFIG_FILE, SAVED_CONFIG_KEY, _writing

if TYPE_CHECKING:  # annotations only: ml_collections is imported where a saved config is read
    import ml_collections

Config = Any  # a run config: an ml_collections.ConfigDict, or its plain dict


# Keys that change how a run is watched, saved or laid out, not what it computes: a rerun may
# change them freely (checkpoints restore onto any mesh; padding rows weigh 0 in evaluation).
RUN_NEUTRAL_KEYS = frozenset({
    "log_every_steps", "eval_every_steps", "checkpoint_every_steps", "keep_checkpoints",
    "async_checkpoints", "peak_flops_per_device", "eval_batch_size", "mesh.data", "mesh.fsdp",
    "mesh.tensor", "allow_config_change", "allow_changed_inputs", "nonfinite",
    "max_nonfinite_in_a_row",
    "data.seconds_per_batch", "data.eval_mask_rate", "data.bucket_lengths"})


# Neutral only without dropout: the masks are drawn at the shape of a batch, which the buckets
# set, so a changed bucket_lengths changes what a run with dropout computes from the next step on.
NEUTRAL_WITHOUT_DROPOUT = frozenset({"data.bucket_lengths"})


def _has_dropout(flat: Mapping[str, Any]) -> bool:
    return any(key.endswith("dropout_prob") and isinstance(value, (int, float)) and value > 0
               for key, value in flat.items())


# A key the saved config lacks (it was written before the key existed) reads as the schema's
# default (bert_jax.config.run.complete); one outside the schema that the new config sets to one
# of these "off" values keeps the behaviour the run had without it.
OFF_VALUES = (None, False, 0, "")


class ConfigChangedError(ValueError):
    """A rerun's config differs from the one the workdir's run was started with."""


def _tree(config: Any) -> dict[str, Any]:
    """A config as a plain dict: a ConfigDict's to_dict(), a mapping as it is."""
    return config.to_dict() if hasattr(config, "to_dict") else dict(config)


def _flat(config: Any) -> dict[str, Any]:
    tree = _tree(config)
    return {".".join(keys): value for keys, value in pytree.flatten_dict(tree).items()}


def config_differences(saved: dict, config: Config) -> list[str]:
    """'key: saved -> new' for every key (but the run-neutral ones) that differs; `config` a
    ConfigDict or its plain dict. data.bucket_lengths counts when either config has dropout
    (NEUTRAL_WITHOUT_DROPOUT)."""
    old = _flat(run_config.complete(saved))
    new = _flat(run_config.complete(json.loads(json.dumps(_tree(config)))))
    neutral = RUN_NEUTRAL_KEYS - (NEUTRAL_WITHOUT_DROPOUT if _has_dropout(old) or _has_dropout(new)
                                  else frozenset())
    keys = sorted((set(old) | set(new)) - neutral)
    missing = object()
    return [f"{k}: {old.get(k, '(absent)')!r} -> {new.get(k, '(absent)')!r}" for k in keys
            if old.get(k, missing) != new.get(k, missing)
            and not (k not in old and new.get(k) in OFF_VALUES)]


def record_config(config: Config, workdir: str) -> None:
    """Check a rerun's config (a ConfigDict or its plain dict: settings.RunSettings.record)
    against config.json, then write config.json.

    Once the workdir holds a checkpoint, a difference in a key that changes the run raises
    ConfigChangedError naming the keys, unless config.allow_config_change; then the previous
    file is kept as config.previous-<time>.json beside the new one. (Before the first
    checkpoint nothing has been trained: a corrected rerun simply replaces config.json.)
    Process 0 reads and writes; every process raises if it failed (bert_jax.runtime.multiprocess).
    """
    multiprocess.agree(lambda: _record(config, workdir) if jax.process_index() == 0 else None,
                       f"recording the config in {workdir}")


def _has_checkpoint(workdir: str) -> bool:
    directory = epath.Path(workdir) / "checkpoints"
    return directory.is_dir() and any(p.name.isdigit() for p in directory.iterdir())


def _checkpoint_config(workdir: str) -> tuple[Optional[int], Optional[dict]]:
    """(step, the config saved in its metadata) of the newest checkpoint whose metadata can be
    read; (step, None) when that checkpoint predates saved configs; (None, None) when none can."""
    # orbax: only where a checkpoint is read
    from bert_jax.train.checkpoint import store as checkpointing
    directory = epath.Path(workdir) / checkpointing.CHECKPOINTS
    for step in sorted((int(p.name) for p in directory.iterdir() if p.name.isdigit()),
                       reverse=True):
        try:
            metadata = checkpointing.read_step_metadata(directory, step)
        except checkpointing.CheckpointUnreadableError:
            continue
        return step, metadata.get(SAVED_CONFIG_KEY)
    return None, None


def _check_against_checkpoint(config: Config, workdir: str) -> None:
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
    if differences and not config["allow_config_change"]:
        raise ConfigChangedError(
            f"{config_path} is missing, and the newest checkpoint (step {step}) was saved with "
            "another config (" + "; ".join(differences[:8])
            + ("; ..." if len(differences) > 8 else "") + "): rerun with the config it was "
            "saved with, or --config.allow_config_change=true if the change is meant")
    logging.warning("%s was missing; %s", config_path,
                    f"the config differs from checkpoint step {step}'s as allowed ("
                    + "; ".join(differences) + ")" if differences else
                    f"this config is the one checkpoint step {step} was saved with, written anew")


def _record(config: Config, workdir: str) -> None:
    config_path = epath.Path(workdir) / CONFIG_FILE
    if not config_path.exists() and _has_checkpoint(workdir):
        _check_against_checkpoint(config, workdir)
    elif config_path.exists() and _has_checkpoint(workdir):
        differences = config_differences(read_json(config_path), config)
        if differences and not config["allow_config_change"]:
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
        write_text_atomically(config_path, json.dumps(_tree(config), indent=2,
                                                      sort_keys=True))


def load_config(workdir: str) -> ml_collections.ConfigDict:
    """<workdir>/config.json as a ConfigDict: every key of the run's resolved config, and the
    schema's default for a key added after the run was started (bert_jax.config.run.complete)."""
    config_path = epath.Path(workdir) / CONFIG_FILE
    if not config_path.exists():
        raise FileNotFoundError(f"{config_path} not found: --workdir must be the workdir of a "
                                "training run (pretrain.py and finetune.py write config.json "
                                "there)")
    import ml_collections  # only where a saved config is read back
    return ml_collections.ConfigDict(run_config.complete(read_json(config_path)))


def _warn_if_schedule_restarts(old: dict, config: Config, workdir: str) -> None:
    """One warning line when the changed config moves the learning rate at the newest step."""
    directory = epath.Path(workdir) / "checkpoints"
    steps = [int(p.name) for p in directory.iterdir() if p.name.isdigit()]
    line = restart_line(old, _tree(config), max(steps)) if steps else None
    if line:
        logging.warning("%s", line)


def rate_at(config: Mapping[str, Any], total_steps: int, step: int) -> float:
    """The learning rate `config`'s schedule over total_steps gives at `step`; `config` a
    whole one (a saved one completed: bert_jax.config.run.complete)."""
    options = dict(config["optimizer"])
    opt = OptimizerConfig(learning_rate=float(config["learning_rate"]),
                          total_steps=total_steps,
                          warmup_steps=warmup_steps(config, total_steps), **options)
    return float(optimizer.learning_rate_schedule(opt)(step))


def restart_line(old: Mapping[str, Any], new: Mapping[str, Any], step: int
                 ) -> Optional[str]:
    """One warning line, said before the first resumed step, whenever resuming at `step` with
    `new` gives another learning rate than `old`'s schedule had there: the rate before and
    after, and the new schedule's tail. Either the schedule restarts (the warm-up length
    changes: back into a longer warm-up, say) or, with the warm-up kept (config.warmup_steps),
    the decay is stretched from its end to the new total_steps, which also moves the rate at
    `step` (a 200-step run extended to 300 jumps from its near-end rate back up). None when the
    rate at `step` is the same. Only for explicit total_steps on both sides (a run counted in
    epochs knows its steps from the data, later). After the line the run follows the new
    schedule exactly as an uninterrupted run of the new config would from `step` on."""
    old, new = run_config.complete(old), run_config.complete(new)  # keys a saved one lacks
    old_total, new_total = int(old["total_steps"] or 0), int(new["total_steps"])
    if not old_total or not new_total or not 0 < step <= min(old_total, new_total):
        return None
    try:
        before, after = rate_at(old, old_total, step), rate_at(new, new_total, step)
        end = rate_at(new, new_total, new_total)
    except (KeyError, TypeError, ValueError):
        return None  # a config the schedule cannot be read from: the run's own checks say why
    if math.isclose(before, after, rel_tol=1e-6, abs_tol=1e-12):
        return None
    old_warmup, new_warmup = warmup_steps(old, old_total), warmup_steps(new, new_total)
    tail = (f"from step {step} the rate follows the new schedule, as a run of "
            f"total_steps={new_total} started anew would, down to {end:.3g} at step {new_total}")
    if new_warmup == old_warmup:
        return (f"the learning-rate schedule is stretched at step {step}: total_steps "
                f"{old_total} -> {new_total} with the warm-up kept at {old_warmup} steps moves "
                f"the rate from {before:.3g} to {after:.3g}; {tail}")
    return (f"the learning-rate schedule restarts at step {step}: total_steps {old_total} -> "
            f"{new_total} moves the rate from {before:.3g} to {after:.3g} (warm-up "
            f"{old_warmup} -> {new_warmup} steps); {tail}; to keep the warm-up instead, "
            f"--config.warmup_steps={old_warmup} (the decay is then stretched to "
            f"total_steps={new_total}, which moves the rate too)")
