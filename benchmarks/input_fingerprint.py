r"""What the input fingerprint (bert_jax.recipes.inputs) costs at the start of a run: a prepared
raw-text corpus of about --corpus_gb GB (the demo corpus's documents repeated into text files,
prepared as TFDS array_record by bert_jax.data.corpora.catalog.prepare; its files copied until
the folder holds --prepared_gb GB, as TFDS prepares at most ~1 GB of records without TensorFlow)
and a --tsv_mb MB
fine-tuning TSV (the polarity sentences repeated), each fingerprinted as a run's start does,
with the files in the page cache (warm) and, where this process may drop the cache, read from
disk (cold).

    python benchmarks/input_fingerprint.py --folder=/tmp/fingerprint_bench --corpus_gb=1 \
        --tsv_mb=100

Prints one JSON line per measurement. The corpus and TSV are kept in --folder for a rerun.
"""

import json
import os
import shutil
import subprocess
import sys
import time

from absl import app, flags

from bert_jax.data.corpora import catalog, demo
from bert_jax.recipes import inputs

FLAGS = flags.FLAGS
flags.DEFINE_string("folder", "/tmp/fingerprint_bench", "Where the corpus and TSV are built.")
flags.DEFINE_float("corpus_gb", 1.0, "Raw text of the corpus, GB (TFDS without TensorFlow "
                   "prepares at most ~1 GB of records: its shuffle spills through TensorFlow).")
flags.DEFINE_float("prepared_gb", 1.0, "Prepared corpus to fingerprint, GB: the prepared files "
                   "are copied (real copies, not links) until the folder holds this much.")
flags.DEFINE_float("tsv_mb", 100.0, "Size of the TSV, MB.")
flags.DEFINE_integer("repeats", 3, "Warm measurements of each.")


def demo_documents() -> list[str]:
    source = catalog.load_source(catalog.DEMO, "train", os.path.join(FLAGS.folder, "demo"))
    return [catalog.document_text(source[i]) for i in range(len(source))]


def build_corpus() -> str:
    text_dir = os.path.join(FLAGS.folder, "text")
    if not os.path.isdir(text_dir):
        os.makedirs(text_dir)
        documents, target = demo_documents(), int(FLAGS.corpus_gb * 1e9)
        written, part = 0, 0
        while written < target:
            with open(os.path.join(text_dir, f"part{part:03d}.txt"), "w", encoding="utf-8") as f:
                for k, document in enumerate(documents):  # each copy a distinct document
                    chunk = f"{document} ({part}.{k})\n\n"
                    f.write(chunk)
                    written += len(chunk.encode("utf-8"))
                    if written >= target:
                        break
            part += 1
    corpus = f"text:{text_dir}/*.txt"
    start = time.perf_counter()
    builder = catalog.prepare(corpus, os.path.join(FLAGS.folder, "data"))
    print(json.dumps({"prepared": os.fspath(builder.data_dir),
                      "seconds": round(time.perf_counter() - start, 1)}), flush=True)
    return os.fspath(builder.data_dir)


def grow(corpus_dir: str) -> str:
    """A folder of at least --prepared_gb GB: the prepared files, copied round-robin."""
    names = sorted(n for n in os.listdir(corpus_dir) if ".array_record-" in n)
    total = sum(os.path.getsize(os.path.join(corpus_dir, n)) for n in names)
    if total >= FLAGS.prepared_gb * 1e9:
        return corpus_dir
    grown = os.path.join(FLAGS.folder, "prepared_copies")
    if not os.path.isdir(grown):
        os.makedirs(grown)
        size, i = 0, 0
        while size < FLAGS.prepared_gb * 1e9:
            name = names[i % len(names)]
            shutil.copyfile(os.path.join(corpus_dir, name),
                            os.path.join(grown, f"{name}.copy{i // len(names)}"))
            size += os.path.getsize(os.path.join(corpus_dir, name))
            i += 1
    return grown


def build_tsv() -> str:
    path = os.path.join(FLAGS.folder, "train.tsv")
    if not os.path.exists(path):
        sentences = [line.strip() for line in open(
            os.path.join(demo.gensim_test_data(), "lee_background.cor"), encoding="utf-8")
            if line.strip()]
        target, written, i = int(FLAGS.tsv_mb * 1e6), 0, 0
        with open(path, "w", encoding="utf-8") as f:
            f.write("text\tlabel\n")
            while written < target:
                line = f"{sentences[i % len(sentences)][:300]}\t{'pos' if i % 2 else 'neg'}\n"
                f.write(line)
                written += len(line.encode("utf-8"))
                i += 1
    return path


def drop_caches() -> bool:
    try:
        subprocess.run(["sync"], check=True)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def measure(name: str, files: dict[str, str]) -> None:
    size = sum(os.path.getsize(p) for p in files)
    sampled = sum(1 for p, role in files.items()
                  if role == inputs.CORPUS and os.path.getsize(p) > inputs.SAMPLE_ABOVE)
    for cache in ["cold"] + ["warm"] * FLAGS.repeats:
        if cache == "cold" and not drop_caches():
            continue
        start = time.perf_counter()
        inputs.fingerprints(files)
        seconds = time.perf_counter() - start
        print(json.dumps({"what": name, "cache": cache, "files": len(files),
                          "bytes": size, "sampled_files": sampled,
                          "seconds": round(seconds, 4)}), flush=True)


def main(argv):
    del argv
    os.makedirs(FLAGS.folder, exist_ok=True)
    corpus_dir = grow(build_corpus())
    corpus = {os.path.join(corpus_dir, n): inputs.CORPUS for n in sorted(os.listdir(corpus_dir))}
    measure("prepared corpus", corpus)
    measure("fine-tuning TSV", {build_tsv(): inputs.TRAIN_DATA})


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    app.run(main)
