"""Recipes: one module per kind of run, each exposing the same two entry points.

    recipe.train_and_evaluate(config, workdir) -> loop.TrainResult   (resumes from workdir)
    recipe.evaluate(config, workdir, step=None) -> (step, metrics)  (a saved step, any process)

`config.recipe` names the module ("pretrain", "finetune"); `get(name)` imports it, which is how
experiments/evaluate.py finds the recipe of a run from its config.json.
"""

from __future__ import annotations

import importlib
from types import ModuleType

RECIPES = ("pretrain", "finetune")


def get(name: str) -> ModuleType:
    """The recipe module `bert_jax.recipes.<name>`; ValueError naming the known ones."""
    if name not in RECIPES:
        raise ValueError(f"config.recipe={name!r} is unknown; choose one of {RECIPES}")
    return importlib.import_module(f"bert_jax.recipes.{name}")
