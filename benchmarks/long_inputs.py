r"""Inputs longer than a row, end to end: a classifier fine-tuned on short texts, evaluated on long
ones by truncating them (`data.long_inputs=truncate`) and by sliding windows over them (`slide`:
the mean of the windows' logits), through finetune.py and evaluate.py as a user runs them.

    python benchmarks/long_inputs.py --output_dir=/tmp/long_inputs [--max_seq_len=128] \
        [--variants=4] [--docs_per_sentence=2] [--seed=0]

Design, fixed before the run. The task: the sentiment of gensim's 200 polarity sentences
(positive / negative, 100 each), hidden in neutral narrative text (the news
articles of lee_background.cor, also in gensim's test data). The sentences are split in two by
position: even ones for training, odd ones for evaluation (no sentence in both). Training rows
are short: one sentence with 10-40 words of narrative around it, --variants rows per sentence
(each with other narrative), all within a --max_seq_len row. Evaluation documents are long:
about 1.5 rows of narrative, then two evaluation sentences of one label with narrative between
them, then about a row more of narrative (--docs_per_sentence documents per evaluation
sentence, each sentence with a different partner): the first row of every document is narrative
only, so truncation leaves the classifier nothing to go on, while some windows of the slide hold
the sentences. The encoder is the packaged MiniLM (finetune_classification.py's recipe, 3 epochs,
batch 16). What counts: evaluation accuracy of the same checkpoint with truncate and with slide on
the same documents (rows in = documents out, each document counted once), against the majority
baseline (0.5); the windows per document are reported. One seed; the figure's sampling error at
200 documents is about 3.5 points (binomial, p = 0.5).

Output: <output_dir>/{train,long_eval}.tsv, the run's workdir, the two evaluations' JSON and a
last stdout line {"truncate": accuracy, "slide": accuracy, ...}.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import numpy as np
from absl import app, flags

FLAGS = flags.FLAGS
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def narrative_words() -> list[str]:
    """The words of gensim's lee_background.cor (English news), in order."""
    from bert_jax.data.corpora import catalog as corpora
    path = os.path.join(corpora.gensim_test_data(), "lee_background.cor")
    with open(path, encoding="utf-8") as f:
        return f.read().split()


def polarity_rows() -> list[tuple[str, str]]:
    from bert_jax.data.corpora import catalog as corpora
    from bert_jax.data.finetuning import readers
    path = os.path.join(corpora.gensim_test_data(), "pang_lee_polarity.cor")
    return [(example.text, example.label) for example in readers.read_fasttext(path, "cp1252")]


def write_tsv(path: str, rows: list[tuple[str, str]]) -> None:
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, dialect="excel-tab")
        writer.writerow(["text", "label"])
        writer.writerows(rows)


def make_data(output_dir: str, max_seq_len: int, variants: int, docs_per_sentence: int,
              seed: int) -> dict:
    """Writes train.tsv and long_eval.tsv (module docstring); returns their row counts."""
    rng = np.random.default_rng(seed)
    words = narrative_words()
    sentences = polarity_rows()

    def narrative(count: int) -> str:
        start = int(rng.integers(0, len(words) - count))
        return " ".join(words[start:start + count])

    train = []
    for text, label in sentences[0::2]:
        for _ in range(variants):
            before, after = rng.integers(5, 21, size=2)
            train.append((f"{narrative(before)} {text} {narrative(after)}", label))
    held_out = sentences[1::2]
    by_label: dict[str, list[str]] = {}
    for text, label in held_out:
        by_label.setdefault(label, []).append(text)
    # About 0.7 words a token for this text: 1.5 rows of narrative first, one more row last.
    lead, tail = int(1.5 * max_seq_len * 0.7), int(max_seq_len * 0.7)
    documents = []
    for text, label in held_out:
        partners = [t for t in by_label[label] if t != text]
        for partner in rng.choice(partners, size=docs_per_sentence, replace=False):
            documents.append((f"{narrative(lead)} {text} {narrative(20)} {partner} "
                              f"{narrative(tail)}", label))
    order = rng.permutation(len(train))
    write_tsv(os.path.join(output_dir, "train.tsv"), [train[i] for i in order])
    write_tsv(os.path.join(output_dir, "long_eval.tsv"), documents)
    return {"train_rows": len(train), "eval_documents": len(documents)}


def run(command: list[str]) -> str:
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"long_inputs.py: error: {' '.join(command[:2])} failed: "
                 f"{(done.stderr.strip().splitlines() or ['(no output)'])[-1]}")
    return done.stdout


def main(argv):
    del argv
    os.makedirs(FLAGS.output_dir, exist_ok=True)
    counts = make_data(FLAGS.output_dir, FLAGS.max_seq_len, FLAGS.variants,
                       FLAGS.docs_per_sentence, FLAGS.seed)
    workdir = os.path.join(FLAGS.output_dir, "run")
    python = sys.executable
    run([python, "experiments/finetune.py",
         "--config=experiments/configs/finetune_classification.py", f"--workdir={workdir}",
         f"--config.data.train_path={os.path.join(FLAGS.output_dir, 'train.tsv')}",
         "--config.data.eval_path=", "--config.data.heldout_fraction=0.1",
         f"--config.max_seq_len={FLAGS.max_seq_len}", f"--config.seed={FLAGS.seed}"])
    report = dict(counts, max_seq_len=FLAGS.max_seq_len)
    for mode in ("truncate", "slide"):
        output = os.path.join(FLAGS.output_dir, f"eval_{mode}.json")
        run([python, "experiments/evaluate.py", f"--workdir={workdir}",
             f"--input={os.path.join(FLAGS.output_dir, 'long_eval.tsv')}",
             f"--long_inputs={mode}", f"--output={output}"])
        with open(output, encoding="utf-8") as f:
            metrics = json.load(f)
        report[mode] = metrics.get("metrics", metrics)
    print(json.dumps(report, indent=1))
    print(json.dumps({mode: report[mode].get("accuracy") for mode in ("truncate", "slide")}))


if __name__ == "__main__":
    flags.DEFINE_string("output_dir", None, "Where the data, the run and the reports go.",
                        required=True)
    flags.DEFINE_integer("max_seq_len", 128, "Tokens per row (training and evaluation).")
    flags.DEFINE_integer("variants", 4, "Training rows per training sentence.")
    flags.DEFINE_integer("docs_per_sentence", 2, "Long documents per evaluation sentence.")
    flags.DEFINE_integer("seed", 0, "Data, initialisation and order.")
    app.run(main)
