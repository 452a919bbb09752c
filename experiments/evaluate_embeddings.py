"""Evaluate sentence embeddings on a BEIR retrieval split or an STS pair file.

    python experiments/evaluate_embeddings.py --hf_dir=HF_FOLDER | --workdir=RUN [--step=N] \
        --beir_dir=FOLDER [--split=test] [--similarity=cos|dot] | --sts_file=PAIRS \
        --output=metrics.json [--pooling=mean|cls] [--batch_size=64] [--max_seq_len=N]

BEIR: recall@1/10/100, MRR@10 and nDCG@10 over the judged queries of the split, the corpus
searched exactly on all devices. STS (--sts_file: .tsv/.csv/.jsonl, --sts_columns names the two
sentences' and the score's columns): Spearman and Pearson of the pairs' cosine against the gold
scores. How: bert_jax/embeddings/evaluate.py.

The embedding settings are the model's own unless a flag says otherwise, as for --mteb_tasks
below: a contrastive run's pooling and cosine, another run's mean pooling, an HF folder's
modules.json (mean pooling and cosine without one); max_seq_len the run's (the folder's
sentence_bert_config.json, else the model's max_position_embeddings). BEIR scores by cosine
unless the model's similarity is dot (euclidean and manhattan: cosine).

Writes --output: {"model", "data", "split" (BEIR), "pooling", "max_seq_len", "similarity"
(BEIR), "metrics": {name: number}} with the counts read and scored among the metrics; prints one
summary line.
Exit status: 0 done; 1 with one line `evaluate_embeddings.py: error: <what, naming the file and
line>` for bad input (a bad row, a missing file, folder or checkpoint); nothing is written then.

MTEB (mteb 2.x, Python >= 3.12: pip install 'mteb>=2.26,<3'):

    python experiments/evaluate_embeddings.py --hf_dir=HF_FOLDER | --workdir=RUN [--step=N] \
        --mteb_tasks=TASK[,TASK...] --output_dir=DIR [--model_name=ORG/NAME] \
        [--pooling=mean|cls] [--similarity=cos|dot] [--max_seq_len=N] [--batch_size=64]

runs the tasks through `mteb.evaluate` with our encoder (bert_jax/embeddings/mteb_encoder.py) and
writes MTEB's own result files: DIR/results/<ORG>__<NAME>/<revision>/<task>.json (all splits,
all scores, main_score), model_meta.json. A TASK is an MTEB task name (mteb.get_tasks: the data
comes from the Hugging Face Hub), or, read locally with no network, an existing folder in BEIR
layout (corpus.jsonl, queries.jsonl, qrels/<--split>.tsv: a retrieval task, main score nDCG@10)
or an STS pairs file (--sts_columns, --sts_format: an STS task, main score the cosines'
Spearman), named after the folder or file stem. The embedding settings are the model's own: a
contrastive run's pooling, L2 normalisation and cosine, another run's mean pooling, an HF folder's
modules.json (a sentence-transformers folder; mean pooling without one), max_seq_len the run's
(the folder's sentence_bert_config.json), as `convert.py --format=sentence_transformers` exports
them; --pooling, --similarity and --max_seq_len given on the command line override them. The
model name defaults to bert_jax/<the run's or folder's name>, the revision is the run's step
("step-N"; None for a folder). Prints one line per task: its main score and its result file.

The standard English MTEB tasks, for a user with network (the data sets are downloaded from the
Hugging Face Hub into its cache; the run takes hours on one accelerator, days on a CPU):

    python - <<'PY'
    import mteb
    print(",".join(t.metadata.name for t in mteb.get_benchmark("MTEB(eng, v2)").tasks))
    PY
    python experiments/evaluate_embeddings.py --workdir=RUN --mteb_tasks=<that list> \
        --output_dir=mteb_results

or a few of them, e.g. --mteb_tasks=STSBenchmark,SciFact,NFCorpus,Banking77Classification.
"""

import json
import os

import jax
from absl import app, flags, logging

from bert_jax import cli
from bert_jax.embeddings import encode as sentence_embeddings
from bert_jax.embeddings import evaluate
from bert_jax.runtime import distributed, paths
from bert_jax.tools import convert_runs, saved_runs

FLAGS = flags.FLAGS
SCRIPT = "evaluate_embeddings.py"
SEARCH_SIMILARITY = {"cosine": "cos", "dot": "dot"}  # the model's similarity -> --similarity
SUMMARY_KEYS = ("ndcg@10", "mrr@10", "recall@1", "recall@10", "recall@100", "spearman",
                "pearson")


def run() -> dict:
    data = evaluate.load(beir_dir=FLAGS.beir_dir, split=FLAGS.split, sts_file=FLAGS.sts_file,
                         sts_format=FLAGS.sts_format, sts_columns=FLAGS.sts_columns)
    encoder = saved_runs.load_encoder(hf_dir=FLAGS.hf_dir, workdir=FLAGS.workdir,
                                      step=FLAGS.step)
    settings = embedding_settings(encoder)
    similarity = FLAGS.similarity if FLAGS["similarity"].present else SEARCH_SIMILARITY.get(
        settings["similarity"], "cos")
    logging.info("evaluating %s on %s (%s pooling, %d tokens)", encoder.source,
                 FLAGS.beir_dir or FLAGS.sts_file, settings["pooling"], settings["max_seq_len"])
    metrics = evaluate.evaluate(encoder, data, pooling=settings["pooling"],
                                similarity=similarity, batch_size=FLAGS.batch_size,
                                max_seq_len=settings["max_seq_len"],
                                query_block=FLAGS.query_block, progress=True)
    report = {"model": encoder.source, "data": FLAGS.beir_dir or FLAGS.sts_file,
              "pooling": settings["pooling"], "max_seq_len": settings["max_seq_len"]}
    if FLAGS.beir_dir:
        report.update(split=FLAGS.split, similarity=similarity)
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


def embedding_settings(encoder) -> dict:
    """pooling, normalize, similarity (cosine/dot), max_seq_len of the model (module docstring),
    the flags given on the command line winning."""
    given = {"pooling": FLAGS.pooling if FLAGS["pooling"].present else None,
             "similarity": ({"cos": "cosine"}.get(FLAGS.similarity, FLAGS.similarity)
                            if FLAGS["similarity"].present else None),
             "max_seq_len": FLAGS.max_seq_len}
    given = {k: v for k, v in given.items() if v is not None}
    if FLAGS.workdir:
        return convert_runs.embedding_settings(FLAGS.workdir, encoder.cfg, given)
    from bert_jax.convert import sentence_transformers_folder
    found = {k: v for k, v in (sentence_transformers_folder.read_settings(FLAGS.hf_dir) or {}
                               ).items() if v is not None}
    return convert_runs.embedding_settings(None, encoder.cfg, {**found, **given})


def mteb_tasks(names: list[str]) -> list:
    """The MTEB tasks of --mteb_tasks: local folders and files first read (module docstring)."""
    from bert_jax.embeddings import mteb_encoder
    tasks, named = [], []
    for name in names:
        if os.path.isdir(name):
            tasks.append(mteb_encoder.local_retrieval_task(name, FLAGS.split))
        elif os.path.isfile(name):
            tasks.append(mteb_encoder.local_sts_task(name, FLAGS.sts_format, FLAGS.sts_columns))
        else:
            named.append(name)
    if named:
        import mteb
        try:
            tasks += list(mteb.get_tasks(tasks=named))
        except KeyError as e:
            raise ValueError(f"--mteb_tasks: {e.args[0] if e.args else e}") from None
    return tasks


def run_mteb() -> list[tuple[str, str, float, str]]:
    """(task, main score name, its value (the mean over the task's splits), result file) of
    each task."""
    import mteb

    from bert_jax.embeddings import mteb_encoder
    tasks = mteb_tasks(FLAGS.mteb_tasks)
    encoder = saved_runs.load_encoder(hf_dir=FLAGS.hf_dir, workdir=FLAGS.workdir,
                                      step=FLAGS.step)
    settings = embedding_settings(encoder)
    revision = None
    if FLAGS.workdir:
        from bert_jax.train.checkpoint import params, store
        revision = f"step-{params.resolve_step(store.checkpoint_dir(FLAGS.workdir), FLAGS.step)}"
    source = FLAGS.workdir or FLAGS.hf_dir
    name = FLAGS.model_name or f"bert_jax/{os.path.basename(os.path.normpath(source))}"
    model = mteb_encoder.wrap(encoder, name=name, revision=revision,
                              batch_size=FLAGS.batch_size, **settings)
    logging.info("MTEB on %s (%s): %s", source, settings, [t.metadata.name for t in tasks])
    cache = mteb.ResultCache(FLAGS.output_dir)
    results = mteb.evaluate(model, tasks, cache=cache, overwrite_strategy="always",
                            show_progress_bar=False)
    main_scores = {task.metadata.name: task.metadata.main_score for task in tasks}
    return [(result.task_name, main_scores.get(result.task_name, "main_score"),
             result.get_score(), str(cache.get_task_result_path(result.task_name,
                                                                 model.mteb_model_meta)))
            for result in results.task_results]


def main(argv):
    cli.start(argv)
    if FLAGS.mteb_tasks:
        with cli.interrupts_stop(SCRIPT):
            scores = cli.run_or_exit(SCRIPT, run_mteb)
        if jax.process_index() == 0:
            for task, metric, value, path in scores:
                print(f"{task}: {metric} {value:.6f} -> {path}")
        return
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
                      "mean: over the real tokens; cls: the [CLS] vector (default: the model's).")
    flags.DEFINE_enum("similarity", "cos", ["cos", "dot"],
                      "--beir_dir: score documents by cosine or dot product (default: the "
                      "model's).")
    flags.DEFINE_integer("batch_size", 64, "Texts per embedding batch.", lower_bound=1)
    flags.DEFINE_integer("max_seq_len", None,
                         "Tokens per text with [CLS] and [SEP] (default: the model's, module "
                         "docstring).", lower_bound=1)
    flags.DEFINE_integer("query_block", 256, "--beir_dir: queries searched at once.", lower_bound=1)
    flags.DEFINE_list("mteb_tasks", None,
                      "MTEB tasks to run (names, BEIR folders, STS files) instead of "
                      "--beir_dir/--sts_file; their result files go to --output_dir.")
    flags.DEFINE_string("output_dir", None, "--mteb_tasks: the folder of MTEB's result files.")
    flags.DEFINE_string("model_name", None,
                        "--mteb_tasks: the model's name, ORG/NAME (default bert_jax/<folder>).")
    flags.register_multi_flags_validator(
        ["hf_dir", "workdir"], lambda f: (f["hf_dir"] is None) != (f["workdir"] is None),
        message="give exactly one of --hf_dir (a Hugging Face folder) and --workdir (a run)")
    flags.register_multi_flags_validator(
        ["beir_dir", "sts_file", "mteb_tasks"],
        lambda f: [f["beir_dir"], f["sts_file"], f["mteb_tasks"]].count(None) == 2,
        message="give exactly one of --beir_dir (a BEIR folder), --sts_file (STS pairs) and "
                "--mteb_tasks (MTEB tasks)")
    flags.register_multi_flags_validator(
        ["mteb_tasks", "output", "output_dir"],
        lambda f: (f["output_dir"] is not None and f["output"] is None if f["mteb_tasks"]
                   else f["output"] is not None and f["output_dir"] is None),
        message="--mteb_tasks writes to --output_dir, --beir_dir and --sts_file to --output")
    flags.register_validator("sts_columns", lambda c: len(c) == 3,
                             message="--sts_columns takes three names: sentence1,sentence2,score")
    distributed.define_flags()
    app.run(main, flags_parser=cli.parse_flags)
