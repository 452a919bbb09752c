r"""Pre-training end to end on a non-English corpus that ships in a package: Bulgarian Wikipedia.

    python experiments/non_english_demo.py --output_dir=/tmp/bert_bulgarian

The gensim wheel ships a shortened Bulgarian Wikipedia dump (gensim/test/test_data/
bgwiki-latest-pages-articles-shortened.xml.bz2, UTF-16 XML, 486 KB: one article, "Григориански
календар", and two project pages of namespace 4, the editing help and the village pump's
archive of late 2005). Every step is the one a user takes with a corpus of their own:

  1 corpus     the pages' plain text, parsed as the English demo corpus is
               (`bert_jax.data.corpora.demo.wiki_articles`, namespaces 0 and 4, mwparserfromhell),
               cut at paragraph boundaries into passages of at most --passage_chars characters
               (the documents: the held-out split takes whole passages), written as JSONL
               compressed with gzip in --corpus_files files: DIR/corpus/bgwiki-*.jsonl.gz;
  2 tokenizer  + shards: experiments/prepare_shards.py --corpus=jsonl:DIR/corpus/*.jsonl.gz
               --train_tokenizer=wordpiece --vocab_size=2048 --lowercase=true
               --strip_accents=false --validation_fraction=0.1 --workers=2 (DIR/tokenizer,
               DIR/shards). WordPiece, lowercased, because it is the vocabulary the other recipes
               use (whole-word masking reads its "##"), and lowercasing helps a 32,000-word
               corpus; accents kept, because BERT's accent stripping (NFD, marks dropped) turns
               the letter "й" into "и". 2,048 pieces: ~1.9 pieces a word here, against ~1.6 at
               4,096 pieces, and ~30 occurrences a piece on average;
  3 pre-train  experiments/pretrain.py --config=experiments/configs/bulgarian.py
               --config.data.corpus=shards:DIR/shards --workdir=DIR/run (extra keys with
               --pretrain_flag=--config.KEY=VALUE, repeated), held-out evaluation every 100 steps;
  4 summary    the held-out curve (DIR/run/eval_metrics.jsonl) beside chance (1 / vocabulary)
               and the unigram baseline measured on the shards (the training split's piece
               frequencies scored on the held-out pieces: accuracy of always guessing the most
               frequent piece, cross-entropy of the frequencies, add-one smoothed), printed and
               written to DIR/summary.json with the corpus's size and each step's seconds.

Rerunning the same command continues: the corpus files are kept when there, prepare_shards.py
skips its finished shards and reuses the tokenizer, pretrain.py resumes its workdir.
Expected runtime and result: experiments/configs/bulgarian.py. Exit status 1 with one line
`non_english_demo.py: error: ...` when a step fails (its last output lines printed above it).
"""

import gzip
import json
import os
import subprocess
import sys
import time

from absl import app, flags

from bert_jax import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = "non_english_demo.py"
BGWIKI = "bgwiki-latest-pages-articles-shortened.xml.bz2"
NAMESPACES = ("0", "4")  # articles and the project's own pages

FLAGS = flags.FLAGS
flags.DEFINE_string("output_dir", None, "Folder of the corpus, tokenizer, shards and run.")
flags.DEFINE_integer("vocab_size", 2048, "WordPiece vocabulary size.")
flags.DEFINE_integer("workers", 2, "prepare_shards.py worker processes.")
flags.DEFINE_integer("corpus_files", 4, "JSONL files the corpus is written as (the work units "
                     "the workers share).")
flags.DEFINE_integer("passage_chars", 1000, "Longest passage (document) in characters; a "
                     "longer paragraph is a passage of its own.")
flags.DEFINE_float("validation_fraction", 0.1, "Share of passages held out.")
flags.DEFINE_string("config", os.path.join(ROOT, "experiments", "configs", "bulgarian.py"),
                    "Pre-training config file.")
flags.DEFINE_multi_string("pretrain_flag", [], "Extra pretrain.py flag, e.g. "
                          "--config.total_steps=200 (repeat the flag for more).")
flags.mark_flags_as_required(["output_dir"])


def bulgarian_pages() -> list[str]:
    """Plain text of the Bulgarian sample's pages (articles and project pages)."""
    from bert_jax.data.corpora.demo import gensim_test_data, wiki_articles
    path = os.path.join(gensim_test_data(), BGWIKI)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} is missing: a gensim wheel without its test data?")
    return list(wiki_articles(path, NAMESPACES))


def passages(pages: list[str], max_chars: int) -> list[str]:
    """Each page cut at paragraph (line) boundaries into runs of at most max_chars characters."""
    out = []
    for page in pages:
        current: list[str] = []
        size = 0
        for paragraph in page.split("\n"):
            if current and size + 1 + len(paragraph) > max_chars:
                out.append("\n".join(current))
                current, size = [], -1
            current.append(paragraph)
            size += 1 + len(paragraph)
        if current:
            out.append("\n".join(current))
    return out


def write_corpus(documents: list[str], folder: str, files: int) -> list[str]:
    """documents as `files` gzip JSONL files of consecutive documents ({"text": ...} a line),
    the same bytes every time (gzip's time stamp 0); a folder that holds them is kept as is."""
    names = [f"bgwiki-{i:05d}-of-{files:05d}.jsonl.gz" for i in range(files)]
    paths = [os.path.join(folder, name) for name in names]
    if all(os.path.isfile(p) for p in paths):
        return paths
    os.makedirs(folder, exist_ok=True)
    bounds = [len(documents) * i // files for i in range(files + 1)]
    for i, path in enumerate(paths):
        lines = "".join(json.dumps({"text": d}, ensure_ascii=False) + "\n"
                        for d in documents[bounds[i]:bounds[i + 1]])
        temporary = path + ".tmp"
        with open(temporary, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
            f.write(lines.encode("utf-8"))
        os.replace(temporary, path)
    return paths


def run_step(name: str, command: list[str]) -> float:
    """Runs one script in its own process, its output streamed; returns its seconds."""
    print(f"\n== {name}: {' '.join(command[1:])}", flush=True)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    if done.returncode:
        cli.fail(SCRIPT, f"{name} failed with exit status {done.returncode} (output above)")
    return time.perf_counter() - started


def unigram_baseline(shards: str) -> dict:
    """The training split's piece frequencies scored on the held-out pieces."""
    import numpy as np

    from bert_jax.data.corpora.token_shards import TokenShards
    counts = {}
    for split in ("train", "validation"):
        data = TokenShards(shards, split)
        ids = np.concatenate(data.read(range(len(data))) or [np.zeros(0, data.dtype)])
        counts[split] = np.bincount(ids.astype(np.int64), minlength=data.vocab_size)
    train, held_out = counts["train"], counts["validation"]
    probabilities = (train + 1) / (train.sum() + len(train))
    return {"accuracy": float(held_out[int(train.argmax())] / max(held_out.sum(), 1)),
            "loss": float(-(held_out * np.log(probabilities)).sum() / max(held_out.sum(), 1)),
            "vocab_size": len(train)}


def read_jsonl(path: str) -> list[dict]:
    if not os.path.isfile(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def demo() -> dict:
    output = os.path.abspath(os.path.expanduser(FLAGS.output_dir))
    corpus_dir, tokenizer_dir = (os.path.join(output, name) for name in ("corpus", "tokenizer"))
    shards, workdir = os.path.join(output, "shards"), os.path.join(output, "run")
    seconds = {}
    started = time.perf_counter()
    pages = bulgarian_pages()
    documents = passages(pages, FLAGS.passage_chars)
    write_corpus(documents, corpus_dir, FLAGS.corpus_files)
    seconds["corpus"] = time.perf_counter() - started
    corpus = {"source": f"gensim wheel: gensim/test/test_data/{BGWIKI}", "pages": len(pages),
              "passages": len(documents), "characters": sum(len(d) for d in documents),
              "words": sum(len(d.split()) for d in documents)}
    print(f"corpus: {corpus['pages']} pages, {corpus['passages']} passages, "
          f"{corpus['characters']:,} characters, {corpus['words']:,} words in {corpus_dir}")
    seconds["tokenizer_and_shards"] = run_step("tokenizer and shards", [
        sys.executable, os.path.join(ROOT, "experiments", "prepare_shards.py"),
        f"--corpus=jsonl:{corpus_dir}/*.jsonl.gz", "--train_tokenizer=wordpiece",
        f"--vocab_size={FLAGS.vocab_size}", "--lowercase=true", "--strip_accents=false",
        f"--validation_fraction={FLAGS.validation_fraction}", f"--workers={FLAGS.workers}",
        f"--tokenizer={tokenizer_dir}", f"--output_dir={shards}"])
    seconds["pretrain"] = run_step("pre-training", [
        sys.executable, os.path.join(ROOT, "experiments", "pretrain.py"),
        f"--config={FLAGS.config}", f"--workdir={workdir}",
        f"--config.data.corpus=shards:{shards}", *FLAGS.pretrain_flag])
    with open(os.path.join(shards, "manifest.json")) as f:
        splits = json.load(f)["splits"]
    baseline = unigram_baseline(shards)
    curve = [{key: record[key] for key in ("step", "loss", "mlm_accuracy") if key in record}
             for record in read_jsonl(os.path.join(workdir, "eval_metrics.jsonl"))]
    summary = {"corpus": corpus,
               "tokens": {split: splits[split]["tokens"] for split in splits},
               "documents": {split: splits[split]["documents"] for split in splits},
               "tokenizer": {"kind": "wordpiece", "vocab_size": baseline["vocab_size"],
                             "lowercase": True, "strip_accents": False},
               "chance_accuracy": 1 / baseline["vocab_size"],
               "unigram": {"accuracy": baseline["accuracy"], "loss": baseline["loss"]},
               "held_out_curve": curve,
               "seconds": {k: round(v, 1) for k, v in seconds.items()}}
    with open(os.path.join(output, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1, ensure_ascii=False)
    print(f"\ntokens: {summary['tokens']}, documents: {summary['documents']}")
    print(f"chance {summary['chance_accuracy']:.2%}; unigram baseline: accuracy "
          f"{baseline['accuracy']:.2%}, loss {baseline['loss']:.3f}")
    print("held-out masked LM:  step  accuracy  loss")
    for point in curve:
        print(f"{point['step']:>24}  {point.get('mlm_accuracy', float('nan')):8.2%}  "
              f"{point.get('loss', float('nan')):.3f}")
    print(f"seconds: {summary['seconds']}; summary: {os.path.join(output, 'summary.json')}")
    return summary


def main(argv):
    if len(argv) > 1:
        cli.fail(SCRIPT, f"unexpected arguments {argv[1:]}")
    with cli.interrupts_stop(SCRIPT):
        cli.run_or_exit(SCRIPT, demo)


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags)
