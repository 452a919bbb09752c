"""Fine-tune every task of a suite, seed by seed, and write one table of the results.

    python experiments/suite.py --suite=experiments/configs/glue.py --workdir=/tmp/glue \
        [--init=<Hugging Face folder or our run>] [--seeds=5] [--tasks=cola,sst2,...] \
        [--glue_dir=/data/glue] [--tokenizer=vocab.txt] [--suite.<key>=<value> ...]

Each (task, seed) is an ordinary fine-tuning run in <workdir>/<task>/seed_<n>/
(experiments/evaluate.py and predict.py work on it); the table is <workdir>/suite.md,
suite.json and suite.png: per task its benchmark's metrics, their median and min-max over seeds,
and the suite score. The same command resumes: a finished (task, seed) is not run again, an
interrupted one resumes from its checkpoint. Exit status: 0 every run done; 1 with one line for
bad input (an unknown task, a missing data file) or when any run failed (each named in the table
and suite.json, with its error); 143 after SIGTERM and 130 after Ctrl-C (the run in progress
saved). The library: bert_jax.recipes.suite.
"""

import json
import sys

from absl import app, flags

from bert_jax import cli
from bert_jax.runtime import distributed

FLAGS = flags.FLAGS


def main(argv):
    cli.start(argv)
    fault = cli.workdir_fault(FLAGS.workdir)
    if fault:
        cli.fail("suite.py", fault)
    from bert_jax.recipes import suite as suite_lib

    plan = cli.run_or_exit("suite.py", lambda: suite_lib.make_plan(
        FLAGS.suite, FLAGS.workdir, tasks=FLAGS.tasks, seeds=FLAGS.seeds,
        data_dir=FLAGS.glue_dir, init=FLAGS.init, tokenizer=FLAGS.tokenizer))
    outcome = suite_lib.run_suite(plan)
    score = outcome.table["score"]
    print(json.dumps({"workdir": plan.workdir, "score": score["value"],
                      "tasks": score["tasks"], "missing": score["missing"],
                      "failed": [f"{r['task']} seed {r['seed']}: {r['error']}"
                                 for r in outcome.failed]}))
    if outcome.signal_number is not None:
        sys.exit(128 + outcome.signal_number)
    if outcome.failed:
        names = sorted({f"{r['task']} seed {r['seed']}" for r in outcome.failed})
        sys.exit(f"suite.py: error: {len(outcome.failed)} run(s) failed ({', '.join(names)}); "
                 f"see {plan.workdir}/suite.md")


if __name__ == "__main__":
    cli.define_config_file_flag("suite", "The suite's config file (get_config()).")
    flags.DEFINE_string("workdir", None, "Folder of the suite's runs and table.")
    flags.DEFINE_string("init", None, "Where every run starts: a Hugging Face folder or our "
                        "run's workdir or checkpoints (default: the suite's).")
    flags.DEFINE_integer("seeds", None, "Seeds per task, 0..n-1 (default: the suite's).",
                         lower_bound=1)
    flags.DEFINE_string("tasks", None, "Comma-separated tasks (default: the suite's).")
    flags.DEFINE_string("glue_dir", None, "The benchmark's folder (default: the suite's; "
                        "empty: TFDS).")
    flags.DEFINE_string("tokenizer", None, "vocab.txt, tokenizer.json or folder (default: the "
                        "init's).")
    flags.mark_flags_as_required(["suite", "workdir"])
    distributed.define_flags()
    app.run(main, flags_parser=cli.parse_flags)
