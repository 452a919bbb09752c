"""Whether a saved checkpoint fits the run about to resume from it, from what was saved with it
(its metadata's model config and its train state's array metadata), before any array is read.

A checkpoint fits when it holds a model of the run's family, in the run's layer layout (a run
resumes in the layout it was trained in: its optimizer state is laid out so), of the run's shape
(every shape field of the family's config; a field the checkpoint predates counts as its
default), and a train state with the same leaves of the same shapes as the run's. Anything else
is a CheckpointMismatchError naming what differs and what to do.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import jax

from bert_jax.config.bert import BertConfig
from bert_jax.model import families
from bert_jax.runtime import pytree
from bert_jax.train.checkpoint.errors import CheckpointMismatchError


def check_model(where: str, saved_config: Mapping[str, Any], model_config: BertConfig) -> None:
    """Raise CheckpointMismatchError unless the checkpoint `where`'s saved model config (its
    metadata's model_config) has the family, layer layout and shape of `model_config`."""
    ours = dataclasses.asdict(model_config)
    saved_family = saved_config.get(families.FAMILY_KEY, families.BERT)
    if saved_family != families.name_of(model_config):
        raise CheckpointMismatchError(
            f"the checkpoint {where} holds a {saved_family} model and this config a "
            f"{families.name_of(model_config)} one (model.family). Use another --workdir.")
    saved_scanned = saved_config.get("scan_layers", False)
    if saved_scanned != model_config.scan_layers:
        raise CheckpointMismatchError(
            f"the checkpoint {where} was trained with model.scan_layers={saved_scanned}, and this "
            f"config has {model_config.scan_layers}: resume it with scan_layers={saved_scanned}, "
            "or start a new run from its weights (config.init.checkpoint), which converts them "
            "to either layout.")
    defaults = families.shape_defaults(model_config)
    shape_fields = families.of(model_config).shape_fields
    saved = {name: saved_config.get(name, defaults[name]) for name in shape_fields}
    differing = [f"{name}: checkpoint {saved[name]!r} vs config {ours[name]!r}"
                 for name in shape_fields if saved[name] != ours[name]]
    if differing:
        raise CheckpointMismatchError(
            f"the checkpoint {where} holds a model of another shape ("
            + "; ".join(differing) + "). Use another --workdir, or the model config it was "
            "trained with.")


def _shapes_by_path(tree: Any) -> dict[str, tuple[int, ...]]:
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {pytree.path_name(path): tuple(leaf.shape) for path, leaf in leaves}


def check_state(where: str, saved_state: Any, abstract_state: Any) -> None:
    """Raise CheckpointMismatchError unless the saved train state's array metadata has the
    leaves and shapes of this run's `abstract_state` (naming up to five of each difference)."""
    saved = _shapes_by_path(saved_state)
    wanted = _shapes_by_path(abstract_state)
    missing = sorted(set(wanted) - set(saved))
    unexpected = sorted(set(saved) - set(wanted))
    wrong = sorted(p for p in set(saved) & set(wanted) if saved[p] != wanted[p])
    if missing or unexpected or wrong:
        problems = ([f"shape of {p}: checkpoint {saved[p]} vs run {wanted[p]}" for p in wrong[:5]]
                    + [f"missing in checkpoint: {p}" for p in missing[:5]]
                    + [f"not in this run: {p}" for p in unexpected[:5]])
        raise CheckpointMismatchError(
            f"the train state in {where} does not match this run's ("
            + "; ".join(problems) + "). Different model head or optimizer?")
