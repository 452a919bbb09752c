"""The parameters of a saved run, for fine-tuning, evaluation and export.

    load_params(checkpoint_dir, step=None, shardings=None, scan_layers=None) -> (BertConfig, params)
    load_model_config(checkpoint_dir, step=None) -> BertConfig
    resolve_step(checkpoint_dir, step=None) -> int

`checkpoint_dir` is `<workdir>/checkpoints` (or one step folder in it) of a run written on any
mesh, local or on object storage; only the `params` of the saved TrainState are read, each leaf
straight into the shards it is given (bert_jax.train.checkpoint.store writes and restores whole
train states). Errors name the folder or step (bert_jax.train.checkpoint.errors).
"""

from __future__ import annotations

import os
from typing import Any, Optional

import jax
import numpy as np
import orbax.checkpoint as ocp
from absl import logging
from etils import epath

from bert_jax.config.bert import BertConfig
from bert_jax.model import families, scan
from bert_jax.runtime import paths, pytree
from bert_jax.train.checkpoint import step_folders
from bert_jax.train.checkpoint import store as checkpointing
from bert_jax.train.checkpoint.errors import CheckpointMismatchError, Reading


def _resolve_step_dir(checkpoint_dir: str | os.PathLike, step: Optional[int]
                      ) -> tuple[epath.Path, int]:
    root = paths.path(checkpoint_dir)
    if not root.exists():
        raise FileNotFoundError(f"no checkpoint directory at {root}")
    steps = step_folders.step_numbers(root)
    step_folders.warn_misnamed(root)
    not_steps = dict(step_folders.not_step_folders(root))
    for other, what in not_steps.items():
        if step is None and (not steps or other > steps[-1]):
            logging.warning("%s/%d is %s: not a checkpoint step, so the newest step read is %s",
                            root, other, what, steps[-1] if steps else "none")
    if step is not None and step in not_steps:
        raise FileNotFoundError(f"{root}/{step} is {not_steps[step]}: not a checkpoint step; "
                                f"the steps there are {steps}")
    if not steps and (root / checkpointing.STATE).exists() and root.name.isdigit():
        return root.parent, int(root.name)  # a step folder itself was given
    if not steps:
        raise FileNotFoundError(f"{root} holds no checkpoint steps (expected folders named by "
                                "step)")
    if step is None:
        return root, steps[-1]
    if step not in steps:
        raise FileNotFoundError(f"{root} has no checkpoint for step {step}; it has {steps}")
    return root, step


def resolve_step(checkpoint_dir: str | os.PathLike, step: Optional[int] = None) -> int:
    """`step` if `checkpoint_dir` holds it, else the newest step there; errors name the folder.

    It only lists the folder: reading the step (load_model_config, load_params) says whether it
    can be read.
    """
    return _resolve_step_dir(checkpoint_dir, step)[1]


def _read_only_manager(root: epath.Path) -> ocp.CheckpointManager:
    return ocp.CheckpointManager(  # the PyTree handler reads Standard saves, and partially
        root, item_handlers=checkpointing.item_handlers(ocp.PyTreeCheckpointHandler()),
        options=ocp.CheckpointManagerOptions(read_only=True))


def _model_config(manager: ocp.CheckpointManager, step: int) -> BertConfig:
    metadata = checkpointing.read_metadata(manager, step)
    where = f"{manager.directory}/{step}/{checkpointing.METADATA}"
    if "model_config" not in metadata:
        raise ValueError(f"{where} has no model_config")
    return families.config_from_dict(metadata["model_config"], where)  # no family key: BERT


def load_model_config(checkpoint_dir: str | os.PathLike, step: Optional[int] = None
                      ) -> BertConfig:
    """The BertConfig saved with the newest (or the given) step, without reading any array."""
    root, step = _resolve_step_dir(checkpoint_dir, step)
    manager = _read_only_manager(root)
    try:
        return _model_config(manager, step)
    finally:
        manager.close()


def load_params(checkpoint_dir: str | os.PathLike, step: Optional[int] = None,
                shardings: Any = None, scan_layers: Optional[bool] = None
                ) -> tuple[BertConfig, Any]:
    """(BertConfig, params) of the newest (or the given) step in `checkpoint_dir`.

    checkpoint_dir: `<workdir>/checkpoints` (or one step folder in it), written on any mesh.
    shardings: where the parameters land: None (the first local device), one Sharding for every
    leaf, or a tree of Shardings shaped like the params (e.g. `sharding.param_shardings` of this
    run's model on its mesh), in which case each leaf is read straight into its shards.
    A step that cannot be read, or whose files do not match the checksums recorded when it was
    saved (bert_jax.train.checkpoint.checksums), is a CheckpointUnreadableError naming it (no
    fallback: the caller asked for this step, or for the newest).
    scan_layers: the layout of the encoder layers returned (BertConfig.scan_layers, which the
    returned config then holds): None keeps the checkpoint's, or takes that of a tree of
    `shardings`; the other layout is converted (bert_jax.model.scan).
    """
    root, step = _resolve_step_dir(checkpoint_dir, step)
    manager = _read_only_manager(root)
    where = checkpointing.step_name(manager, step)
    try:
        checkpointing.verify_checksums(root / str(step), where)  # before Orbax reads a file
        model_config = _model_config(manager, step)
        saved = checkpointing.state_metadata(manager, step)
        if "params" not in saved:
            raise ValueError(f"{root}/{step}/{checkpointing.STATE} holds no params")
        saved_params = dict(saved["params"])
        family, saved_scanned = families.of(model_config), bool(scan.is_scanned(saved_params))
        scan_layers = scan.wanted_layout(scan_layers, shardings, saved_scanned)
        target = jax.tree.map(
            lambda m, s: jax.ShapeDtypeStruct(tuple(m.shape), np.dtype(m.dtype), sharding=s),
            saved_params, _sharding_tree(
                family.shardings_in_layout(shardings, model_config, saved_scanned),
                saved_params, where))
        with Reading(where, checkpointing.STATE):
            restored = manager.restore(step, args=ocp.args.Composite(**{
                checkpointing.STATE: ocp.args.PyTreeRestore(
                    item={"params": target}, restore_args=ocp.checkpoint_utils
                    .construct_restore_args({"params": target}), partial_restore=True)}))
        params = restored[checkpointing.STATE]["params"]
        if scan_layers != saved_scanned:
            params = family.relayout(params, scan_layers, model_config)
            params = jax.device_put(params, _sharding_tree(shardings, params, where))
        return model_config.replace(scan_layers=scan_layers), params
    finally:
        manager.close()


def _sharding_tree(shardings: Any, saved_params: Any, where: str) -> Any:
    """A Sharding per saved leaf: the one given, or the matching leaf of a tree of them."""
    if shardings is None:
        shardings = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    if isinstance(shardings, jax.sharding.Sharding):
        return jax.tree.map(lambda _: shardings, saved_params)
    given = {pytree.path_name(p): s for p, s in jax.tree_util.tree_flatten_with_path(
        shardings, is_leaf=lambda x: isinstance(x, jax.sharding.Sharding))[0]}
    stored = [pytree.path_name(p) for p, _ in jax.tree_util.tree_flatten_with_path(saved_params)[0]]
    missing = sorted(set(given) ^ set(stored))
    if missing:
        raise CheckpointMismatchError(
            f"the params in {where} do not match the model they are loaded into: "
            + ", ".join(f"{p} ({'not in the checkpoint' if p in given else 'not in the model'})"
                        for p in missing[:5]))
    return jax.tree_util.tree_map_with_path(lambda p, _: given[pytree.path_name(p)], saved_params)
