"""Fine-tune BERT on a classification, pair, NER or span-QA task, or evaluate a fine-tuned run.

    python experiments/finetune.py --config=experiments/configs/finetune_polarity.py \
        --workdir=/tmp/polarity [--config.learning_rate=5e-5 ...]
    python experiments/finetune.py --workdir=/tmp/polarity --mode=evaluate [--step=N]
    python experiments/evaluate.py --workdir=/tmp/polarity        (the same evaluation)

Training resumes by itself from --workdir. It writes there: config.json (the resolved config),
task.json (task kind, label map), metrics.jsonl, eval_metrics.jsonl, checkpoints/ and, for the
final step, predictions/step_<N>/{metrics.json, predictions.*}. `--mode=evaluate` reloads a saved
step in this (new) process, with the config.json of the run unless --config is given, and writes
evaluation/step_<N>/{metrics.json, predictions.*}: the same metrics as at the end of training.
Exit status 143 after a SIGTERM (state saved; run the same command again to continue).
"""

from __future__ import annotations

import json
import sys
from typing import Optional

import ml_collections
from absl import app, flags, logging
from ml_collections import config_flags

from bert_jax import distributed  # defines --distributed, --coordinator_address, ...
from bert_jax import ConfigError
from bert_jax.data.tasks import DataError
from bert_jax.train import finetuning, loop
from bert_jax.train import workdir as workdir_lib

FLAGS = flags.FLAGS


def evaluate_checkpoint(config: ml_collections.ConfigDict, workdir: str,
                        step: Optional[int] = None) -> tuple[int, dict[str, float]]:
    """What experiments/evaluate.py calls for fine-tuning runs (see bert_jax.train.finetuning)."""
    if not isinstance(config, ml_collections.ConfigDict) or "squad" not in config:
        config = workdir_lib.load_config(workdir, finetuning.default_config())
    return finetuning.evaluate_checkpoint(config, workdir, step)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    distributed.initialize_from_flags()
    if FLAGS.workdir is None:
        raise app.UsageError("--workdir is required")
    loop.quiet_orbax_logs()
    try:
        if FLAGS.mode == "train":
            if FLAGS.config is None:
                raise app.UsageError("--config is required to train")
            workdir_lib.save_config(FLAGS.config, FLAGS.workdir)
            result, final = finetuning.train_and_evaluate(FLAGS.config, FLAGS.workdir)
            if result.preempted:
                logging.warning("preempted at step %d; run the same command again to resume",
                                result.step)
                sys.exit(143)
            print(json.dumps({"step": result.step, "metrics": final}))
        elif FLAGS.mode == "evaluate":
            config = FLAGS.config
            if config is None:
                config = workdir_lib.load_config(FLAGS.workdir, finetuning.default_config())
            step, final = finetuning.evaluate_checkpoint(config, FLAGS.workdir, FLAGS.step)
            print(json.dumps({"step": step, "metrics": final}))
        else:
            raise app.UsageError(f"--mode={FLAGS.mode!r}: use train or evaluate")
    except (ValueError, ConfigError, DataError, FileNotFoundError) as e:  # bad input: no traceback
        logging.error("%s", e)
        sys.exit(f"finetune.py: error: {e}")


def define_flags() -> None:
    """Flags are defined only when run as a script, so evaluate.py can import this module."""
    config_flags.DEFINE_config_file("config", None, "Path to a config file (get_config()).",
                                    lock_config=True)
    flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics and predictions.")
    flags.DEFINE_enum("mode", "train", ["train", "evaluate"], "Train (then evaluate), or only "
                      "evaluate a saved step of --workdir.")
    flags.DEFINE_integer("step", None, "With --mode=evaluate: the step (default: the newest).")


if __name__ == "__main__":
    define_flags()
    app.run(main)
