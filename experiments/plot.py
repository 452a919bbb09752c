"""Draw the training and held-out curves of one or more runs into one PNG, to compare them.

    python experiments/plot.py --workdir=workdir/demo --output=demo.png
    python experiments/plot.py --workdir=runs/fp32 runs/bf16 --output=cmp.png \
        --metrics=loss,mlm_accuracy --x=seconds

Each run is a workdir holding metrics.jsonl / eval_metrics.jsonl (written by the training loop).
One subplot per metric; one colour per run, training as a solid line, held-out as markers on a
dashed line; the legend names runs by their workdir's basename. --x=step plots against the
optimizer step, --x=seconds against cumulative training seconds (seconds_per_step x the steps
between log lines; evaluation excluded). Runs are named by repeating --workdir or by listing them
after the flags. Prints one JSON line {"output", "runs", "metrics", "x"}; bad input (a missing
workdir, a run without metrics, a metric no run logged) is one line `plot.py: error: ...`,
exit status 1. The logic is in bert_jax/tools/plotting.py.
"""

import json

from absl import app, flags

from bert_jax import cli
from bert_jax.tools import plotting

FLAGS = flags.FLAGS
SCRIPT = "plot.py"


def main(argv):
    workdirs = list(FLAGS.workdir) + list(argv[1:])
    metrics = list(FLAGS.metrics) if FLAGS.metrics else None
    cli.check_output(SCRIPT, FLAGS.output)
    summary = cli.run_or_exit(SCRIPT, lambda: plotting.plot_workdirs(
        workdirs, FLAGS.output, metrics, FLAGS.x))
    print(json.dumps(summary))


if __name__ == "__main__":
    flags.DEFINE_multi_string("workdir", None, "A run's workdir (repeat the flag, or list more "
                              "workdirs after the flags).")
    flags.DEFINE_string("output", None, "The PNG file to write.")
    flags.DEFINE_list("metrics", None, "Comma-separated metric names, one subplot each (default: "
                      f"those of {','.join(plotting.DEFAULT_METRICS)} that the runs logged).")
    flags.DEFINE_enum("x", "step", list(plotting.X_AXES), "The x axis: optimizer step, or "
                      "cumulative training seconds.")
    flags.mark_flags_as_required(["workdir", "output"])
    app.run(main, flags_parser=cli.parse_flags)
