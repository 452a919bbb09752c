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
from typing import Optional

import jax
from absl import app, flags, logging

from bert_jax import cli
from bert_jax.recipes import inputs as run_inputs
from bert_jax.runtime import distributed, outputs, paths
from bert_jax.tools.evaluation import evaluate_run

FLAGS = flags.FLAGS
SCRIPT = "evaluate.py"


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
