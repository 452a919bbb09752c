"""Fine-tune BERT on a classification, regression, multi-label, NER or span-QA task.

    python experiments/finetune.py --config=experiments/configs/finetune_polarity.py \
        --workdir=/tmp/polarity [--config.learning_rate=5e-5 ...]
    python experiments/evaluate.py --workdir=/tmp/polarity     (reload and score, new process)
    python experiments/finetune.py --workdir=/tmp/polarity --mode=evaluate [--step=N]  (the same)

Every key of the config can be overridden with --config.<key>=<value> (--help lists every key
with its default and meaning; the schema is bert_jax/config/run.py). Training resumes by itself
from --workdir. It writes there: config.json (the resolved config),
task.json (task kind, label map), metrics.jsonl, eval_metrics.jsonl, checkpoints/ and, for the
final step, predictions/step_<N>/{metrics.json, predictions.*}; evaluation writes
evaluation/step_<N>/ with the same metrics. Exit status: 0 done, 1 bad input (one line says
what), 143 after SIGTERM and 130 after Ctrl-C (state saved). The recipe:
bert_jax.recipes.finetune.
"""

import json

from absl import app, flags

from bert_jax import cli
from bert_jax.config import settings
from bert_jax.recipes import finetune, run_record

FLAGS = flags.FLAGS


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    cli.define_run_flags(config_required=False, recipe="finetune", flag_values=flag_values)
    flags.mark_flag_as_required("workdir", flag_values=flag_values)
    flags.DEFINE_enum("mode", "train", ["train", "evaluate"], "Train (then evaluate), or only "
                      "evaluate a saved step of --workdir.", flag_values=flag_values)
    flags.DEFINE_integer("step", None, "With --mode=evaluate: the step (default: the newest).",
                         flag_values=flag_values)


def main(argv):
    if FLAGS.mode == "train":
        if FLAGS.config is None:
            cli.fail("finetune.py", "--config is required to train (--mode=evaluate reads the "
                     "run's own config.json)")
        cli.train_main(argv, "finetune.py", finetune.train_and_evaluate)
        return
    cli.start(argv)

    def evaluate():
        if FLAGS.config is not None:  # a new config: the schema's check first
            settings.check_config(FLAGS.config, "finetune")
        config = FLAGS.config if FLAGS.config is not None else run_record.load_config(
            FLAGS.workdir)
        settings.fit_mesh_to_devices(config)  # the run's mesh if it fits, else data-parallel
        return finetune.evaluate(config, FLAGS.workdir, FLAGS.step)  # read once there

    with cli.interrupts_stop("finetune.py"):
        step, metrics = cli.run_or_exit("finetune.py", evaluate)
    print(json.dumps({"step": step, "metrics": metrics}))


if __name__ == "__main__":
    define_flags()
    app.run(main, flags_parser=cli.parse_flags)
