"""Pre-train BERT with masked LM (and next-sentence prediction) on a corpus.

    python experiments/pretrain.py --config=experiments/configs/demo.py --workdir=/tmp/bert_demo \
        [--config.total_steps=500 --config.mesh.fsdp=2 ...]

Every key of the config file can be overridden with --config.<key>=<value> (--help lists every
key with its default and meaning; the schema is bert_jax/config/run.py). The run resumes by
itself from the newest checkpoint in --workdir (same command after a preemption or a crash).
Writes into --workdir: config.json (the resolved config, read by evaluate.py), metrics.jsonl,
eval_metrics.jsonl, tensorboard/, checkpoints/<step>/ and, for the demo, data/ (corpus + vocab).
Exit status: 0 done, 1 bad input (one line says what), 143 after SIGTERM and 130 after Ctrl-C
(state saved: the same command continues).
The recipe: bert_jax.recipes.pretrain.
"""

from absl import app, flags

from bert_jax import cli
from bert_jax.recipes import pretrain


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    cli.define_run_flags(recipe="pretrain", flag_values=flag_values)


def main(argv):
    cli.train_main(argv, "pretrain.py", pretrain.train_and_evaluate)


if __name__ == "__main__":
    define_flags()
    app.run(main, flags_parser=cli.parse_flags)
