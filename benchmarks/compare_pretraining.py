r"""Time to held-out masked-LM accuracy: five pre-training implementations side by side.

    python benchmarks/compare_pretraining.py --output_dir=/tmp/race --corpus=demo \
        --preset=mini --vocab_size=8192 --budget_seconds=600 --seeds=0,1 --targets=0.1,0.2,0.3
    python benchmarks/compare_pretraining.py --output_dir=/tmp/race \
        --corpus='text:/data/books/*.txt' --implementations=ours_classic,hf_torch

Implementations (benchmarks/peers/):
  ours_classic    bert_jax's pre-training recipe, BERT as published (post-LN, learned absolute
                  positions, GELU, AdamW with linear warm-up and decay, 15% dynamic masking)
  ours_efficient  bert_jax with experiments/configs/efficient.py (all of it but the size,
                  corpus, rows and budget; a placeholder while that file does not exist)
  ours_modern     bert_jax with experiments/configs/modern.py's 128-token phase (the same but
                  the size, corpus, rows and budget): a ModernBERT of the comparison's hidden
                  size, layers and heads, 30% masking in training
  hf_flax         transformers' FlaxBertForMaskedLM, trained as its run_mlm_flax.py example does
  hf_torch        transformers' BertForMaskedLM in torch, the same recipe

What is the same for all: the corpus and its train/held-out split, one WordPiece vocabulary
trained once on the train split with bert_jax's trainer, the model size (--preset and the size
flags; a gated FFN keeps the dense one's parameters), 128-token rows, random initialisation and
the budget. The classic recipes (ours_classic, hf_flax, hf_torch) also share every
hyper-parameter: --batch_size, --learning_rate, --warmup_fraction, and BERT's AdamW (betas 0.9,
0.999, eps 1e-6, weight decay 0.01 off biases and LayerNorm, gradients clipped to norm 1.0).
ours_efficient and ours_modern keep their own unless one of those three flags is given.
ours_modern's local layers see a window of 128 tokens (modern.py's), 64 on each side of the
query: at 128-token rows about 75% of a full row's query-key pairs, not the whole row; what the
window saves (memory linear in the row length) pays only at longer rows than this comparison's.

What counts (benchmarks/peers/clocked.py): training wall-clock from parameter initialisation on,
compilation and each step's input processing (masking; ours also tokenizes and packs as it
streams) included, evaluation excluded. Outside every clock: starting the process, the one-off
shared inputs (the vocabulary, the held-out rows, the peers' tokenized blocks, made once as
run_mlm_flax makes them before training) and a calibration in a separate process, from which
each run plans its learning-rate schedule to end at the budget. Each run
is evaluated at the same points, budget x k / --eval_points (k = 1 ..), on the SAME held-out
rows: --eval_rows rows of 128 tokens of the held-out split, made by bert_jax's pipeline and
masked once at 15% with a fixed seed, saved once as <output_dir>/shared/heldout.npz and read by
every worker (its digest checked). The figures are masked-LM accuracy and cross-entropy over the
masked tokens. Sample size: a row holds about 19 masked tokens, so 1024 rows give about 19,000
predictions, a binomial standard error under 0.4 accuracy points; the seed-to-seed spread
(--seeds: initialisation, data order, masks and dropout all change with the seed) is usually
larger and is reported beside each mean.

Procedure: one implementation at a time, each run in its own process (torch and JAX in one
process slow each other down), seed by seed so that a drift of the machine touches all alike.
Nothing else may run on the machine meanwhile: the figures are wall-clock seconds.

Output: <output_dir>/compare_pretraining.json (the settings, the held-out rows' description,
every evaluation point of every run with implementation, seed, seconds, steps, examples,
accuracy and loss, each run's time to every --targets accuracy, and per implementation the
seed-to-seed spread), <output_dir>/compare_pretraining.png (accuracy against seconds, one colour
per implementation, seeds as thin lines), the time to reach each target printed, and a last
stdout line {"json", "png"}. Each run's log: <output_dir>/logs/. Exit status 1 with one line
`compare_pretraining.py: error: ...` for bad flags, a corpus that cannot be read, or a run
that failed (its log named).
"""

import json
import os
import sys

from absl import app, flags

from benchmarks import peers
from bert_jax import cli

FLAGS = flags.FLAGS
SCRIPT = "compare_pretraining.py"
SIZE_FLAGS = {"hidden_size": "hidden_size", "num_layers": "num_hidden_layers",
              "num_heads": "num_attention_heads", "intermediate_size": "intermediate_size"}
TRAIN_FLAGS = ("batch_size", "learning_rate", "warmup_fraction")


def _numbers(name: str, values, kind):
    try:
        return tuple(kind(v) for v in values)
    except ValueError as e:
        raise ValueError(f"--{name}={','.join(values)}: not a list of {kind.__name__}s") from e


def settings(fv: flags.FlagValues = FLAGS):
    """(race.Settings, targets) of the parsed flags; ValueError names a bad one."""
    from benchmarks.peers import race  # pylint: disable=import-outside-toplevel

    if peers.HF_FLAX in fv.implementations and peers.flax_peer_fault():
        raise ValueError(f"--implementations: {peers.flax_peer_fault()}")
    targets = _numbers("targets", fv.targets, float)
    if any(not 0.0 < t <= 1.0 for t in targets):
        raise ValueError(f"--targets={','.join(fv.targets)}: accuracies must be in (0, 1]")
    return race.Settings(
        corpus=fv.corpus, output_dir=fv.output_dir,
        data_dir=fv.data_dir or os.path.join(fv.output_dir, "data"),
        preset=fv.preset, sizes={field: fv[flag].value for flag, field in SIZE_FLAGS.items()},
        vocab_size=fv.vocab_size, budget_seconds=fv.budget_seconds,
        batch_size=fv.batch_size, learning_rate=fv.learning_rate,
        warmup_fraction=fv.warmup_fraction, seeds=_numbers("seeds", fv.seeds, int),
        implementations=tuple(fv.implementations), eval_points=fv.eval_points,
        eval_rows=fv.eval_rows,
        explicit=tuple(name for name in TRAIN_FLAGS if fv[name].present),
        torch_threads=fv.torch_threads), targets


def compare(flag_values: flags.FlagValues = FLAGS) -> dict:
    """Runs the comparison; returns {"json", "png"}."""
    from benchmarks.peers import race, report  # pylint: disable=import-outside-toplevel

    config, targets = settings(flag_values)
    shared = race.prepare_shared(config)
    print(f"held-out: {shared['heldout']['rows']} rows, {shared['heldout']['masked_tokens']} "
          f"masked tokens; vocabulary: {shared['vocab_size']} pieces", flush=True)
    results = race.run_all(config, shared, report=lambda line: print(line, flush=True),
                           one_process=flag_values.smoke_one_process)
    summary = report.summarize(results, targets)
    record = {"settings": {**config.__dict__, "targets": list(targets)},
              "shared": shared, "runs": report.run_records(results, targets), "summary": summary}
    paths = {"json": os.path.join(os.path.abspath(config.output_dir), "compare_pretraining.json"),
             "png": os.path.join(os.path.abspath(config.output_dir), "compare_pretraining.png")}
    with open(paths["json"], "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
    report.plot(results, paths["png"], targets)
    for line in report.target_lines(summary, targets):
        print(line)
    return paths


def main(argv):
    if len(argv) > 1:
        sys.exit(f"{SCRIPT}: error: unexpected arguments {argv[1:]}")
    from benchmarks.harness import worker  # pylint: disable=import-outside-toplevel

    try:
        paths = cli.run_or_exit(SCRIPT, compare)
    except worker.WorkerError as e:
        sys.exit(f"{SCRIPT}: error: {e}")
    print(json.dumps(paths))


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """The script's flags, on `flag_values` (the script's own run: absl's FLAGS)."""
    fv = {"flag_values": flag_values}
    flags.DEFINE_string("output_dir", None, "Where the shared inputs, runs, logs, JSON and PNG "
                        "go.", required=True, **fv)
    flags.DEFINE_string("corpus", "demo", "'demo' (the project's demo corpus) or 'text:GLOB' "
                        "(local text files, documents separated by blank lines).", **fv)
    flags.DEFINE_string("data_dir", "", "Where the corpus and vocabulary are prepared (default: "
                        "<output_dir>/data).", **fv)
    flags.DEFINE_enum("preset", "mini", ["tiny", "mini", "small", "medium", "base", "large"],
                      "Model size preset of every implementation.", **fv)
    flags.DEFINE_integer("hidden_size", None, "Overrides the preset's hidden size.", **fv)
    flags.DEFINE_integer("num_layers", None, "Overrides the preset's number of layers.", **fv)
    flags.DEFINE_integer("num_heads", None, "Overrides the preset's attention heads.", **fv)
    flags.DEFINE_integer("intermediate_size", None, "Overrides the preset's FFN width.", **fv)
    flags.DEFINE_integer("vocab_size", 8192, "WordPiece vocabulary size (trained once, shared).",
                         **fv)
    flags.DEFINE_float("budget_seconds", 600.0, "Training seconds per run.", **fv)
    flags.DEFINE_integer("batch_size", 32, "Rows of 128 tokens per step.", **fv)
    flags.DEFINE_float("learning_rate", 5e-4, "Peak learning rate.", **fv)
    flags.DEFINE_float("warmup_fraction", 0.1, "Warm-up, as a fraction of each run's steps.",
                       **fv)
    flags.DEFINE_list("seeds", ["0"], "Seeds; every implementation runs once per seed.", **fv)
    flags.DEFINE_list("implementations", [
        "ours_classic", "ours_efficient", "ours_modern",
        *([] if peers.flax_peer_fault() else [peers.HF_FLAX]), "hf_torch"],
        "Which to run, in this order (hf_flax only where transformers has Flax classes: 4.57).",
        **fv)
    flags.DEFINE_integer("eval_points", 10, "Evaluations per run, evenly spaced in the budget.",
                         **fv)
    flags.DEFINE_list("targets", ["0.1", "0.2", "0.3"], "Accuracies for 'time to reach X'.",
                      **fv)
    flags.DEFINE_integer("torch_threads", 0, "CPU threads of hf_torch (0: torch's default, "
                         "one per core; on a busy machine 1 avoids its threads spinning).", **fv)
    flags.DEFINE_integer("eval_rows", 1024, "Held-out rows scored (0: the whole held-out split).",
                         **fv)
    flags.DEFINE_boolean("smoke_one_process", False, "Smoke runs only (tests): every run, its "
                         "calibration and its clocked run, one after another in ONE worker "
                         "process (log: <output_dir>/logs/smoke_runs.log), so the imports are "
                         "shared, compilation is not cold and torch and JAX share the process: "
                         "the seconds are not comparable.", **fv)

if __name__ == "__main__":
    define_flags()
    app.run(main, flags_parser=cli.parse_flags)
