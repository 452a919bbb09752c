"""Evaluate a saved checkpoint of a training run in a new process.

    python experiments/evaluate.py --workdir=/tmp/bert_demo [--step=2500]

Reads `<workdir>/config.json` (written by the training run), picks its recipe from the config's
`recipe` key (bert_jax.recipes.<recipe>.evaluate), reloads the newest (or the named) checkpoint
on the devices at hand and evaluates it on the held-out data of that config. The metrics are
printed as one JSON line and written to `<workdir>/evaluation/step_<N>.json` (or --output): for
pre-training the held-out masked-LM loss and accuracy (plus NSP), the figures the run logged at
that step in eval_metrics.jsonl; for fine-tuning the task's metrics, with the predictions under
`<workdir>/evaluation/step_<N>/`.
"""

import json
import os

import jax
from absl import app, flags, logging

from bert_jax import cli, distributed, paths, recipes
from bert_jax.recipes import common
from bert_jax.train import workdir as workdir_lib

FLAGS = flags.FLAGS
SCRIPT = "evaluate.py"


def evaluate_run(workdir: str, step):
    config = workdir_lib.load_config(workdir)
    common.fit_mesh_to_devices(config)
    return recipes.get(config.recipe).evaluate(config, workdir, step)


def main(argv):
    cli.start(argv)
    if FLAGS.output is not None:
        cli.check_output(SCRIPT, FLAGS.output)
    with cli.interrupts_stop(SCRIPT):
        step, metrics = cli.run_or_exit(SCRIPT, lambda: evaluate_run(FLAGS.workdir, FLAGS.step))
    if jax.process_index() != 0:
        return
    output = FLAGS.output or os.fspath(
        paths.path(FLAGS.workdir) / "evaluation" / f"step_{step}.json")
    record = {"workdir": os.fspath(paths.path(FLAGS.workdir)), "step": step,
              "metrics": metrics}
    try:
        paths.write_text_atomically(output, json.dumps(record, indent=2))
    except OSError as e:
        cli.fail(SCRIPT, f"cannot write {output} ({e.strerror}); the metrics were {metrics}: "
                 "point --output at a writable file")
    logging.info("wrote %s", output)
    print(json.dumps(record))


if __name__ == "__main__":
    flags.DEFINE_string("workdir", None, "The workdir of a training run (holds config.json).",
                        required=True)
    flags.DEFINE_integer("step", None, "Checkpoint step to evaluate (default: the newest).",
                         lower_bound=0)
    flags.DEFINE_string("output", None, "Where to write the metrics JSON "
                        "(default: <workdir>/evaluation/step_<N>.json).")
    distributed.define_flags()
    app.run(main, flags_parser=cli.parse_flags)
