"""Evaluate sentence embeddings on a BEIR retrieval split or an STS pair file.

    python experiments/evaluate_embeddings.py --hf_dir=HF_FOLDER | --workdir=RUN [--step=N] \
        --beir_dir=FOLDER [--split=test] [--similarity=cos|dot] | --sts_file=PAIRS \
        --output=metrics.json [--pooling=mean|cls] [--batch_size=64] [--max_seq_len=N]

BEIR: recall@1/10/100, MRR@10 and nDCG@10 over the judged queries of the split, the corpus
searched exactly on all devices. STS (--sts_file: .tsv/.csv/.jsonl, --sts_columns names the two
sentences' and the score's columns): Spearman and Pearson of the pairs' cosine against the gold
scores. How: bert_jax/embeddings/evaluate.py.

Writes --output: {"model", "data", "split" (BEIR), "pooling", "similarity" (BEIR), "metrics":
{name: number}} with the counts read and scored among the metrics; prints one summary line.
Exit status: 0 done; 1 with one line `evaluate_embeddings.py: error: <what, naming the file and
line>` for bad input (a bad row, a missing file, folder or checkpoint); nothing is written then.
"""

import json

import jax
from absl import app, flags, logging

from bert_jax import cli
from bert_jax.embeddings import encode as sentence_embeddings
from bert_jax.embeddings import evaluate
from bert_jax.runtime import distributed, paths
from bert_jax.tools import saved_runs

FLAGS = flags.FLAGS
SCRIPT = "evaluate_embeddings.py"
SUMMARY_KEYS = ("ndcg@10", "mrr@10", "recall@1", "recall@10", "recall@100", "spearman",
                "pearson")


def run() -> dict:
    data = evaluate.load(beir_dir=FLAGS.beir_dir, split=FLAGS.split, sts_file=FLAGS.sts_file,
                         sts_format=FLAGS.sts_format, sts_columns=FLAGS.sts_columns)
    encoder = saved_runs.load_encoder(hf_dir=FLAGS.hf_dir, workdir=FLAGS.workdir,
                                      step=FLAGS.step)
    logging.info("evaluating %s on %s (%s pooling)", encoder.source,
                 FLAGS.beir_dir or FLAGS.sts_file, FLAGS.pooling)
    metrics = evaluate.evaluate(encoder, data, pooling=FLAGS.pooling,
                                similarity=FLAGS.similarity, batch_size=FLAGS.batch_size,
                                max_seq_len=FLAGS.max_seq_len, query_block=FLAGS.query_block,
                                progress=True)
    report = {"model": encoder.source, "data": FLAGS.beir_dir or FLAGS.sts_file,
              "pooling": FLAGS.pooling}
    if FLAGS.beir_dir:
        report.update(split=FLAGS.split, similarity=FLAGS.similarity)
    report["metrics"] = metrics
    return report


def summary(report: dict) -> str:
    metrics = report["metrics"]
    values = " ".join(f"{k} {metrics[k]:.4f}" for k in SUMMARY_KEYS if k in metrics)
    if "pairs" in metrics:
        counted = f"{metrics['pairs']} pairs"
    else:
        counted = (f"{metrics['queries']} of {metrics['queries_judged']} judged queries scored "
                   f"({metrics['queries_read']} read), {metrics['documents']} documents")
    where = report["data"] + (f" [{report['split']}]" if "split" in report else "")
    return f"{where}: {values} ({counted}) -> {FLAGS.output}"


def write(path: str, report: dict) -> None:
    """The JSON report, written aside and renamed (a reader never sees half a file)."""
    paths.write_text_atomically(path, json.dumps(report, indent=1, ensure_ascii=False) + "\n")


def main(argv):
    cli.start(argv)
    cli.check_output(SCRIPT, FLAGS.output)
    with cli.interrupts_stop(SCRIPT):
        report = cli.run_or_exit(SCRIPT, run)
    if jax.process_index() == 0:
        write(FLAGS.output, report)
        print(summary(report))


if __name__ == "__main__":
    flags.DEFINE_string("hf_dir", None, "A Hugging Face BERT folder (config.json, weights, vocab).")
    flags.DEFINE_string("workdir", None, "A pre-training or fine-tuning run's workdir.")
    flags.DEFINE_integer("step", None, "--workdir: the checkpoint step (default: the newest).",
                         lower_bound=0)
    flags.DEFINE_string("beir_dir", None, "A BEIR folder: corpus.jsonl, queries.jsonl, qrels/.")
    flags.DEFINE_string("split", "test", "--beir_dir: the qrels split (qrels/<split>.tsv).")
    flags.DEFINE_string("sts_file", None, "STS pairs with gold scores: .tsv, .csv or .jsonl.")
    flags.DEFINE_enum("sts_format", "auto", ["auto", "tsv", "csv", "jsonl"],
                      "--sts_file format (auto: by extension).")
    flags.DEFINE_list("sts_columns", ["sentence1", "sentence2", "score"],
                      "--sts_file: the columns (JSONL keys) of the two sentences and the score.")
    flags.DEFINE_string("output", None, "The JSON file of the metrics to write.")
    flags.DEFINE_enum("pooling", "mean", list(sentence_embeddings.POOLINGS),
                      "mean: over the real tokens; cls: the [CLS] vector.")
    flags.DEFINE_enum("similarity", "cos", ["cos", "dot"],
                      "--beir_dir: score documents by cosine or dot product.")
    flags.DEFINE_integer("batch_size", 64, "Texts per embedding batch.", lower_bound=1)
    flags.DEFINE_integer("max_seq_len", None,
                         "Tokens per text with [CLS] and [SEP] (default: max_position_embeddings).",
                         lower_bound=1)
    flags.DEFINE_integer("query_block", 256, "--beir_dir: queries searched at once.", lower_bound=1)
    flags.mark_flags_as_required(["output"])
    flags.register_multi_flags_validator(
        ["hf_dir", "workdir"], lambda f: (f["hf_dir"] is None) != (f["workdir"] is None),
        message="give exactly one of --hf_dir (a Hugging Face folder) and --workdir (a run)")
    flags.register_multi_flags_validator(
        ["beir_dir", "sts_file"], lambda f: (f["beir_dir"] is None) != (f["sts_file"] is None),
        message="give exactly one of --beir_dir (a BEIR folder) and --sts_file (STS pairs)")
    flags.register_validator("sts_columns", lambda c: len(c) == 3,
                             message="--sts_columns takes three names: sentence1,sentence2,score")
    distributed.define_flags()
    app.run(main, flags_parser=cli.parse_flags)
