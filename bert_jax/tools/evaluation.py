"""Evaluating a saved run, whatever its recipe (what experiments/evaluate.py runs):
`evaluate_run(workdir, step, input_path, file_format, long_inputs)` -> (step, metrics, extra).

The run's config.json chooses the recipe (`bert_jax.recipes.get`); its own held-out data by
default, or for a fine-tuning run another labelled file (`input_path`: the run's columns, labels
and tokenizer, the file standing in for its data), whose results go to a folder of their own,
evaluation/<input name>/ (`input_folder_name`: never a run's own step_<N>). A classification run
adds its per-class table and confusion matrix (`classification_tables`).
"""

from __future__ import annotations

import json
import os
import re
from typing import Optional

from bert_jax import recipes
from bert_jax.config import settings
from bert_jax.recipes import run_record
from bert_jax.runtime import paths
from bert_jax.train.checkpoint import params as params_loading
from bert_jax.train.checkpoint import store as checkpointing


def input_folder_name(input_path: str) -> str:
    """The folder under evaluation/ of an input file: its name, made safe, never a run's own
    step_<N> name (an input called step_3.tsv goes to input_step_3.tsv)."""
    name = re.sub(r"[^\w.+-]", "_", os.path.basename(input_path.rstrip("/"))) or "input"
    return f"input_{name}" if re.match(r"step_\d+", name) else name


def classification_tables(workdir: str, directory: str) -> dict:
    """{"per_class", "confusion_matrix"} from <directory>/predictions.jsonl and the run's
    label_map (classification runs only; {} for any other kind)."""
    from bert_jax.recipes.finetune import metrics as metrics_lib
    from bert_jax.recipes.finetune import task_data
    task = task_data.read_task_file(workdir) or {}
    predictions = paths.path(directory) / "predictions.jsonl"
    if task.get("task") != "classification" or not predictions.exists():
        return {}
    records = [json.loads(line) for line in predictions.read_text().splitlines() if line]
    return metrics_lib.classification_tables(records, task["label_map"])


def evaluate_run(workdir: str, step: Optional[int], input_path: Optional[str],
                 file_format: Optional[str], long_inputs: Optional[str] = None
                 ) -> tuple[int, dict, dict]:
    """(step, metrics, what the evaluation JSON adds: the input, its rows, the tables)."""
    config = run_record.load_config(workdir)
    settings.fit_mesh_to_devices(config)
    if long_inputs is not None:
        if config.recipe != "finetune":
            raise ValueError(f"--long_inputs is for fine-tuning runs; {workdir} holds a "
                             f"{config.recipe!r} run")
        config.data.long_inputs = long_inputs
    if input_path is None:
        step, metrics = recipes.get(config.recipe).evaluate(config, workdir, step)
        directory = os.fspath(paths.path(workdir) / "evaluation" / f"step_{step}")
        extra = (classification_tables(workdir, directory)
                 if config.recipe == "finetune" else {})
        return step, metrics, extra
    if config.recipe != "finetune":
        raise ValueError(f"--input evaluates fine-tuning runs; {workdir} holds a "
                         f"{config.recipe!r} run (evaluate it on its own held-out data)")
    if not os.path.isfile(input_path):
        raise FileNotFoundError(f"--input={input_path}: no such file")
    from bert_jax.recipes.finetune import kinds
    from bert_jax.recipes.finetune import recipe as finetune
    # The run's columns, labels (task.json) and tokenizer stay; the training file is not needed
    # (labels come from the run) and its format may differ, so the input stands in for it.
    config.data.eval_path = config.data.train_path = input_path
    config.data.heldout_fraction, config.data.tfds_name = 0.0, ""
    if file_format:
        config.data.format = file_format
    step = params_loading.resolve_step(checkpointing.checkpoint_dir(workdir), step)
    folder = paths.path(workdir) / "evaluation" / input_folder_name(input_path)
    directory = os.fspath(folder / f"step_{step}")
    step, metrics = finetune.evaluate(config, workdir, step, output_dir=directory)
    rows = len(kinds.get(config.task).read(input_path, settings.typed(config)))
    extra = {"input": os.path.abspath(input_path), "input_rows": rows,
             "output": os.fspath(folder / f"step_{step}.json"),
             **classification_tables(workdir, directory)}
    return step, metrics, extra
