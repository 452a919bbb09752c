"""The record a training run keeps of its config in its workdir (`<workdir>/config.json`).

Recipes write the resolved config (file + --config.<key> overrides) once, from process 0, after
checking it; evaluate.py and `finetune.py --mode=evaluate` read it back in a new process.
"""

from __future__ import annotations

import json
import os

import jax
import ml_collections

CONFIG_FILE = "config.json"


def save_config(config: ml_collections.ConfigDict, workdir: str) -> None:
    """Write `config` as <workdir>/config.json (process 0 only)."""
    if jax.process_index() == 0:
        os.makedirs(workdir, exist_ok=True)
        with open(os.path.join(workdir, CONFIG_FILE), "w", encoding="utf-8") as f:
            json.dump(config.to_dict(), f, indent=2, sort_keys=True)


def load_config(workdir: str) -> ml_collections.ConfigDict:
    """<workdir>/config.json as a ConfigDict (every key of the run's resolved config)."""
    path = os.path.join(workdir, CONFIG_FILE)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} not found: --workdir must be the workdir of a training "
                                "run (pretrain.py and finetune.py write config.json there)")
    try:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is not valid JSON ({e})") from None
    return ml_collections.ConfigDict(saved)
