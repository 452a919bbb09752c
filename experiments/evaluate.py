"""Evaluate a saved checkpoint of a training run in a new process.

    python experiments/evaluate.py --workdir=/tmp/bert_demo [--step=2500]
    python experiments/evaluate.py --workdir=RUN --input=other_labelled.tsv [--format=tsv]
    python experiments/evaluate.py --workdir=RUN --long_inputs=slide

Reads `<workdir>/config.json` (written by the training run), picks its recipe from the config's
`recipe` key (bert_jax.recipes.<recipe>.evaluate), reloads the newest (or the named) checkpoint
on the devices at hand and evaluates it on the held-out data of that config. The metrics are
printed as one JSON line and written to `<workdir>/evaluation/step_<N>.json` (or --output): for
pre-training the held-out masked-LM loss and accuracy (plus NSP), the figures the run logged at
that step in eval_metrics.jsonl; for fine-tuning the task's metrics, with the predictions under
`<workdir>/evaluation/step_<N>/` (evaluating again rewrites the folder and its JSON together).
A classification run's JSON adds the per-class precision/recall/F1 table ("per_class") and the
confusion matrix (rows gold, columns predicted), read from the predictions written.

--input=FILE (fine-tuning runs) evaluates on another labelled file, in any format fine-tuning
reads (--format, default: the run's config.data.format; auto goes by the extension), with the
run's columns and labels: it writes to a folder of its own, `<workdir>/evaluation/<file
name>/step_<N>.json` and `.../step_<N>/` (the predictions), recording the input's path and row
count, and never touches the run's own `evaluation/step_<N>*`.

--long_inputs=truncate|slide (fine-tuning runs; default: the run's config.data.long_inputs)
says how inputs longer than a row are evaluated: truncated, or read in sliding windows
(bert_jax/config/run.py's data.long_inputs says how the windows are folded).
"""

import json
import os
import re
from typing import Optional

import jax
from absl import app, flags, logging

from bert_jax import cli, recipes
from bert_jax.config import settings
from bert_jax.recipes import inputs as run_inputs
from bert_jax.recipes import run_record
from bert_jax.runtime import distributed, outputs, paths
from bert_jax.train.checkpoint import params as params_loading
from bert_jax.train.checkpoint import store as checkpointing

FLAGS = flags.FLAGS
SCRIPT = "evaluate.py"


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
    rows = len(kinds.get(config.task).read(input_path, config))
    extra = {"input": os.path.abspath(input_path), "input_rows": rows,
             "output": os.fspath(folder / f"step_{step}.json"),
             **classification_tables(workdir, directory)}
    return step, metrics, extra


def write_record(workdir: str, step: int, metrics: dict, extra: dict,
                 output: Optional[str] = None) -> dict:
    """Write the evaluation JSON (to `output`, else the default of the evaluation: step_<N>.json
    under evaluation/ or evaluation/<input name>/) and return it."""
    default = extra.pop("output", None) or os.fspath(
        paths.path(workdir) / "evaluation" / f"step_{step}.json")
    record = {"workdir": os.fspath(paths.path(workdir)), "step": step, "metrics": metrics,
              **extra}
    output = output or default
    try:
        paths.write_text_atomically(output, json.dumps(record, indent=2))
    except OSError as e:
        cli.fail(SCRIPT, f"cannot write {output} ({e.strerror}); the metrics were {metrics}: "
                 "point --output at a writable file")
    logging.info("wrote %s", output)
    return record


def main(argv):
    cli.start(argv)
    if FLAGS.output is not None:
        protected = [("the input (--input)", FLAGS.input)] + outputs.run_files(FLAGS.workdir)
        cli.check_output(SCRIPT, FLAGS.output, protected=protected)
    if FLAGS.format is not None and FLAGS.input is None:
        cli.fail(SCRIPT, "--format is the format of --input: give --input=FILE with it")
    with cli.interrupts_stop(SCRIPT):
        cli.run_or_exit(SCRIPT, lambda: run_inputs.check_run(
            FLAGS.workdir, SCRIPT, allow=FLAGS.allow_changed_inputs))
        step, metrics, extra = cli.run_or_exit(
            SCRIPT, lambda: evaluate_run(FLAGS.workdir, FLAGS.step, FLAGS.input, FLAGS.format,
                                         FLAGS.long_inputs))
    if jax.process_index() == 0:
        print(json.dumps(write_record(FLAGS.workdir, step, metrics, extra, FLAGS.output)))


if __name__ == "__main__":
    flags.DEFINE_string("workdir", None, "The workdir of a training run (holds config.json).",
                        required=True)
    flags.DEFINE_integer("step", None, "Checkpoint step to evaluate (default: the newest).",
                         lower_bound=0)
    flags.DEFINE_string("output", None, "Where to write the metrics JSON "
                        "(default: <workdir>/evaluation/step_<N>.json, or "
                        "<workdir>/evaluation/<input name>/step_<N>.json with --input).")
    flags.DEFINE_string("input", None, "A labelled file to evaluate a fine-tuning run on "
                        "instead of its own held-out data (written under "
                        "<workdir>/evaluation/<file name>/).")
    flags.DEFINE_enum("format", None, ["auto", "csv", "tsv", "csv_no_header", "tsv_no_header",
                                       "jsonl", "fasttext", "conll", "json", "squad"],
                      "The format of --input (default: the run's config.data.format).")
    flags.DEFINE_enum("long_inputs", None, ["truncate", "slide"],
                      "Fine-tuning runs: inputs longer than a row truncated, or read in "
                      "sliding windows (default: the run's config.data.long_inputs).")
    flags.DEFINE_bool("allow_changed_inputs", False,
                      "Go on when a file the run was trained with (its tokenizer, data or "
                      "corpus files) "
                      "changed since it started (<workdir>/inputs.json); the change is recorded "
                      "there.")
    distributed.define_flags()
    app.run(main, flags_parser=cli.parse_flags)
