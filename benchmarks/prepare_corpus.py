r"""Corpus preparation, ours against the Hugging Face route, each run in its own process.

  # Needs `datasets` for the HF route (and to write the saved-dataset corpus): run it with a
  # Python that has it, e.g. a venv that adds datasets beside the project's packages.
  python benchmarks/prepare_corpus.py --size_mb=100 --workdir=/tmp/prep_bench --workers=2

Builds a corpus of real English text by REPEATING the text gensim ships (the Lee stories and the
head500 corpus, one document a line; ~2.6 MB, repeated to --size_mb: tokenizer statistics and
compression ratios are those of repeated text) in four formats of 8 files each: .txt.zst
(documents separated by blank lines), .jsonl.gz, Parquet and a saved HF dataset
(`datasets.save_to_disk`). Then, each in a fresh process, measures:

  prepare/<format>/ours  experiments' `prepare_shards` (token shards, --workers processes)
  prepare/<format>/hf    `datasets.load_dataset(...)` (load_from_disk for the saved dataset) ->
                         `.map(tokenize, batched=True, num_proc=--workers)` with the same
                         tokenizer called through `tokenizers.Tokenizer.encode_batch` (what a
                         transformers fast tokenizer calls, less its Python wrapper: a little
                         kinder to this route than run_mlm.py's AutoTokenizer)
  tokenizer/<kind>/ours  train_tokenizer on a --sample_mb sample held in memory (the sampling
                         pass timed apart)
  tokenizer/<kind>/hf    the same `tokenizers` pipeline and trainer fed by batches of a
                         `datasets` Dataset holding the same sample (HF's training scripts)
  tokenizer/same_list    with --same_list_repeats=N: both routes' training in one process on
                         one list of the sample's texts, alternating, N times a kind

With --unit_encoding, only the encoder's speed against the tokenizer's on one core (CPU seconds),
on unique and on repeating text (`unit_encoding` below).

Prints one JSON object a line: seconds, MB/s of text, tokens/s, the peak memory of the process
tree (the sum of the RSS of the process and its children, sampled every 0.1 s) and its CPU
seconds (cpu_s: user + system of the tree; the figure to compare when other jobs share the
cores, since wall time then measures the scheduler's shares as much as the work), with the
load average before and after each run (load).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FORMATS = ("txt.zst", "jsonl.gz", "parquet", "hf")
FILES = 8


def base_documents() -> list[str]:
    sys.path.insert(0, ROOT)
    from bert_jax.data.corpora.demo import LEE_CORPUS, gensim_test_data
    from bert_jax.data.corpora.text_files import documents_in
    documents = []
    for name in (LEE_CORPUS, "head500.noblanks.cor"):
        with open(os.path.join(gensim_test_data(), name), encoding="utf-8") as f:
            documents += documents_in(f.read(), "line")
    return documents


def build(workdir: str, size_mb: int, formats: list[str], files: int = FILES
          ) -> tuple[dict, dict]:
    """The corpus in each of `formats`, in `files` files of each (each built once per size and
    file count, file by file: memory does not grow with the size): ({format: spec},
    {documents, bytes, copies, formats})."""
    folder = os.path.join(workdir, f"corpus_{size_mb}mb" + ("" if files == FILES else
                                                            f"_{files}files"))
    specs = {"txt.zst": f"text:{folder}/txt/*.txt.zst",
             "jsonl.gz": f"jsonl:{folder}/jsonl/*.jsonl.gz",
             "parquet": f"parquet:{folder}/parquet/*.parquet", "hf": f"hf:{folder}/hf"}
    done = os.path.join(folder, "done")
    info = json.load(open(done)) if os.path.exists(done) else {}
    have = set(info.get("formats", FORMATS)) if info else set()  # (older folders: all four)
    wanted = [fmt for fmt in formats if fmt not in have]
    if not wanted:
        return specs, info
    base = base_documents()
    per_file, position, documents, size = size_mb * 1e6 / files, 0, 0, 0
    parquet_files = []
    for i in range(files):
        part, part_size = [], 0
        while part_size < per_file:
            doc = base[position % len(base)]
            position += 1
            part.append(doc)
            part_size += len(doc.encode("utf-8")) + 1
        documents, size = documents + len(part), size + part_size
        name = f"{i:0{max(2, len(str(files - 1)))}d}"
        write_part(folder, name, part, set(wanted) | ({"parquet"} if "hf" in wanted else set()))
        parquet_files.append(os.path.join(folder, "parquet", f"{name}.parquet"))
    if "hf" in wanted:  # a saved dataset, made from the Parquet files (memory-mapped)
        import datasets
        dataset = datasets.Dataset.from_parquet(parquet_files,
                                                cache_dir=os.path.join(folder, "cache"))
        dataset.save_to_disk(os.path.join(folder, "hf"), num_shards=files)
        import shutil
        shutil.rmtree(os.path.join(folder, "cache"), ignore_errors=True)
    info = {"documents": documents, "bytes": size, "copies": position / len(base),
            "formats": sorted(have | set(wanted) | ({"parquet"} if "hf" in wanted else set()))}
    with open(done, "w") as f:
        f.write(json.dumps(info))
    return specs, info


def write_part(folder: str, name: str, part: list[str], formats: set[str]) -> None:
    """File `name` of each format: .txt.zst (blank-line documents), .jsonl.gz, Parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zstandard
    for sub, fmt in (("txt", "txt.zst"), ("jsonl", "jsonl.gz"), ("parquet", "parquet")):
        if fmt in formats:
            os.makedirs(os.path.join(folder, sub), exist_ok=True)
    if "txt.zst" in formats:
        with open(os.path.join(folder, "txt", f"{name}.txt.zst"), "wb") as f:
            f.write(zstandard.ZstdCompressor().compress("\n\n".join(part).encode("utf-8")))
    if "jsonl.gz" in formats:
        with gzip.open(os.path.join(folder, "jsonl", f"{name}.jsonl.gz"), "wt",
                       encoding="utf-8", compresslevel=6) as f:
            f.writelines(json.dumps({"text": doc}) + "\n" for doc in part)
    if "parquet" in formats:
        pq.write_table(pa.table({"text": part}),
                       os.path.join(folder, "parquet", f"{name}.parquet"),
                       row_group_size=20_000)


def peak_rss(command: list[str], env: dict) -> tuple[int, float, str, float]:
    """(return code, peak RSS of the process tree in MB, stdout, CPU seconds of the tree) of a
    command. CPU seconds: user + system of every process of the tree, each at its last sample
    (every 0.1 s; a process's last 0.1 s before it exits may be missed): what the work cost
    whatever else runs on the machine."""
    import psutil
    process = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
    parent = psutil.Process(process.pid)
    peak, cpu = 0, {}
    while process.poll() is None:
        try:
            tree = [parent, *parent.children(recursive=True)]
            rss = 0
            for p in tree:
                with p.oneshot():
                    rss += p.memory_info().rss
                    times = p.cpu_times()
                cpu[p.pid] = times.user + times.system
            peak = max(peak, rss)
        except psutil.Error:
            pass
        time.sleep(0.1)
    out = process.stdout.read()
    return process.returncode, peak / 1e6, out, sum(cpu.values())


# ----- the measured runs (each in a child process: --run=...) ----------------------------------

def run_ours(spec: str, tokenizer: str, out: str, workers: int) -> dict:
    from bert_jax.data.corpora.preparation import prepare_shards
    started = time.perf_counter()
    manifest = prepare_shards(spec, tokenizer, out, workers=workers)
    seconds = time.perf_counter() - started
    tokens = sum(s["tokens"] for s in manifest["splits"].values())
    return {"seconds": seconds, "tokens": tokens}


def run_hf(fmt: str, spec: str, tokenizer: str, cache: str, workers: int) -> dict:
    import glob

    import datasets
    import tokenizers
    datasets.disable_progress_bars()
    started = time.perf_counter()
    location = spec.split(":", 1)[1]
    if fmt == "hf":
        dataset = datasets.load_from_disk(location)
    else:
        builder = {"txt.zst": "text", "jsonl.gz": "json", "parquet": "parquet"}[fmt]
        options = {"sample_by": "paragraph"} if builder == "text" else {}
        dataset = datasets.load_dataset(builder, data_files=sorted(glob.glob(location)),
                                        split="train", cache_dir=cache, **options)
    fast = tokenizers.Tokenizer.from_file(tokenizer)

    def tokenize(batch):  # what transformers' fast tokenizer calls, without its wrapper
        encodings = fast.encode_batch(batch["text"], add_special_tokens=False)
        return {"input_ids": [e.ids for e in encodings]}

    tokenized = dataset.map(tokenize, batched=True, num_proc=workers,
                            remove_columns=dataset.column_names,
                            cache_file_name=os.path.join(cache, "tokenized.arrow"))
    seconds = time.perf_counter() - started
    tokens = sum(len(ids) for ids in tokenized.with_format("arrow")["input_ids"].to_pylist())
    return {"seconds": seconds, "tokens": tokens}


def run_tokenizer_ours(spec: str, kind: str, sample_bytes: int, vocab: int, out: str) -> dict:
    from bert_jax.data.corpora import sample as document_sample
    from bert_jax.data.corpora import sources as corpus_sources
    from bert_jax.data.tokenizers import training as tokenizer_training
    started = time.perf_counter()
    sample = document_sample.sample_documents(corpus_sources.parse_corpus(spec), sample_bytes)
    sampled = time.perf_counter()
    tokenizer_training.train_tokenizer(sample.texts, kind, vocab, out)
    return {"seconds": time.perf_counter() - sampled, "sample_seconds": sampled - started,
            "documents": len(sample.texts)}


def hf_tokenizer_and_trainer(kind: str, vocab: int):
    """The HF route's untrained tokenizer (our pipeline of `kind`, its normaliser included) and
    the `tokenizers` trainer its training scripts would give it."""
    from tokenizers import trainers

    from bert_jax.data.tokenizers import training as tokenizer_training
    from bert_jax.data.tokenizers import wordpiece
    norm = tokenizer_training.Normalization().resolved(kind)
    if kind == "wordpiece":
        return (wordpiece.bert_wordpiece(None, norm.lowercase, norm.strip_accents),
                trainers.WordPieceTrainer(vocab_size=vocab, min_frequency=2,
                                          special_tokens=list(wordpiece.SPECIAL_TOKENS),
                                          continuing_subword_prefix="##", show_progress=False))
    tokenizer = (tokenizer_training.bpe_tokenizer(norm) if kind == "bpe" else
                 tokenizer_training.unigram_tokenizer(norm))
    return tokenizer, tokenizer_training._fairseq_trainer(kind, vocab, 2)


def run_tokenizer_hf(saved_sample: str, kind: str, vocab: int, out: str) -> dict:
    import datasets
    started = time.perf_counter()
    dataset = datasets.load_from_disk(saved_sample)
    tokenizer, trainer = hf_tokenizer_and_trainer(kind, vocab)

    def batches():
        for i in range(0, len(dataset), 1000):
            yield dataset[i:i + 1000]["text"]

    tokenizer.train_from_iterator(batches(), trainer, length=len(dataset))
    os.makedirs(out, exist_ok=True)
    tokenizer.save(os.path.join(out, "tokenizer.json"))
    return {"seconds": time.perf_counter() - started}


def saved_sample(workdir: str, sample_mb: int, parquet_spec: str) -> str:
    """The folder of our --sample_mb sample of the Parquet corpus saved as a `datasets` Dataset
    (made on first use): what the HF route trains on."""
    saved = os.path.join(workdir, f"sample_{sample_mb}mb")
    if not os.path.exists(saved):
        import datasets

        from bert_jax.data.corpora import sample as document_sample
        from bert_jax.data.corpora import sources as corpus_sources
        texts = document_sample.sample_documents(corpus_sources.parse_corpus(parquet_spec),
                                                 sample_mb * 1_000_000).texts
        datasets.Dataset.from_dict({"text": texts}).save_to_disk(saved)
    return saved


def trainers_on_one_list(saved_sample: str, kinds: list[str], vocab: int, repeats: int) -> dict:
    """Both routes' training in one process on the same list of texts (the saved sample), in
    alternating order, `repeats` times a kind: wall and CPU seconds of each run."""
    import resource
    import tempfile

    import datasets

    from bert_jax.data.tokenizers import training as tokenizer_training
    texts = datasets.load_from_disk(saved_sample)["text"]

    def hf(kind: str) -> None:
        tokenizer, trainer = hf_tokenizer_and_trainer(kind, vocab)
        tokenizer.train_from_iterator(
            (texts[i:i + 1000] for i in range(0, len(texts), 1000)), trainer, length=len(texts))

    def ours(kind: str) -> None:
        with tempfile.TemporaryDirectory() as out:
            tokenizer_training.train_tokenizer(texts, kind, vocab, out)

    runs: dict = {}
    started_all = time.perf_counter()
    for kind in kinds:
        for repeat in range(repeats):
            for route, train in (("ours", ours), ("hf", hf))[::1 if repeat % 2 == 0 else -1]:
                before = resource.getrusage(resource.RUSAGE_SELF)
                started = time.perf_counter()
                train(kind)
                after = resource.getrusage(resource.RUSAGE_SELF)
                runs.setdefault(f"{kind}/{route}", []).append(
                    [round(time.perf_counter() - started, 2),
                     round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
                           2)])
    return {"seconds": time.perf_counter() - started_all, "runs_wall_cpu": runs}


def wikipedia_articles() -> list[str]:
    """The English Wikipedia articles gensim ships (206 articles, 2.9M characters of plain text):
    text that does not repeat, the chunk cache's cold case."""
    import bz2
    import html
    import re
    sys.path.insert(0, ROOT)
    from bert_jax.data.corpora.demo import gensim_test_data, wiki_plain_text
    name = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
    with bz2.open(os.path.join(gensim_test_data(), name)) as f:
        pages = re.findall(r"<text[^>]*>(.*?)</text>", f.read().decode("utf-8"), re.S)
    texts = [wiki_plain_text(html.unescape(page)) for page in pages]
    return [text for text in texts if text.strip()]


def unit_encoding(tokenizer_file: str) -> None:
    """One core, CPU seconds: the preparation's encoder (`UnitEncoder.records`, 256 documents a
    batch, a fresh cache for each text) against the tokenizer's `encode_batch` and
    `encode_batch_fast` on the same documents; prints one JSON line per text."""
    import numpy as np
    import tokenizers

    from bert_jax.data.corpora.unit_encoding import UnitEncoder
    os.environ["RAYON_NUM_THREADS"] = "1"
    tokenizer = tokenizers.Tokenizer.from_file(tokenizer_file)
    tokenizer.no_truncation()
    base = base_documents()
    texts = {"wikipedia (unique)": wikipedia_articles(), "gensim lee+head500 (unique)": base,
             "gensim lee+head500 x5 (repeating)": base * 5}
    for name, docs in texts.items():
        seconds = {}
        started = time.process_time()
        reference = [e.ids for e in tokenizer.encode_batch(docs, add_special_tokens=False)]
        seconds["encode_batch"] = time.process_time() - started
        started = time.process_time()
        tokenizer.encode_batch_fast(docs, add_special_tokens=False)
        seconds["encode_batch_fast"] = time.process_time() - started
        encoder, records = UnitEncoder(tokenizer), []
        started = time.process_time()
        for i in range(0, len(docs), 256):
            records += encoder.records(docs[i:i + 256], "<u4")
        seconds["unit_encoder"] = time.process_time() - started
        assert [np.frombuffer(r, "<u4").tolist() for r in records] == reference
        tokens = sum(map(len, reference))
        print(json.dumps({"text": name, "documents": len(docs), "tokens": tokens,
                          "chars": sum(map(len, docs)),
                          **{f"{k}_tokens_per_cpu_s": round(tokens / v) for k, v in
                             seconds.items()},
                          "unit_encoder_vs_encode_batch": round(
                              seconds["encode_batch"] / seconds["unit_encoder"], 2)}),
              flush=True)


# ----- the driver ------------------------------------------------------------------------------

def child(args) -> None:
    run = json.loads(args.run)
    result = globals()[run.pop("fn")](**run)
    print(json.dumps(result))


def measure(name: str, fn: str, env: dict, text_bytes: float, **kwargs) -> dict:
    command = [sys.executable, os.path.abspath(__file__),
               "--run=" + json.dumps({"fn": fn, **kwargs})]
    load_before = os.getloadavg()[0]
    code, peak, out, cpu_seconds = peak_rss(command, env)
    if code != 0:
        result = {"name": name, "error": f"exit {code}"}
    else:
        result = {"name": name, **json.loads(out.strip().splitlines()[-1]),
                  "peak_rss_mb": round(peak), "cpu_s": round(cpu_seconds, 1)}
        result["mb_per_s"] = round(text_bytes / 1e6 / result["seconds"], 2)
        if "tokens" in result:
            result["tokens_per_s"] = round(result["tokens"] / result["seconds"])
        result["seconds"] = round(result["seconds"], 1)
    result["load"] = [round(load_before, 1), round(os.getloadavg()[0], 1)]
    print(json.dumps(result), flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size_mb", type=int, default=100)
    parser.add_argument("--workdir", default="/tmp/prepare_corpus_bench")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--file_mb", type=float, default=0,
                        help="files of about this size (0: 8 files whatever the size)")
    parser.add_argument("--routes", default="ours,hf")
    parser.add_argument("--tokenizer_kinds", default="wordpiece,bpe,unigram")
    parser.add_argument("--sample_mb", type=int, default=20)
    parser.add_argument("--vocab_size", type=int, default=30522)
    parser.add_argument("--same_list_repeats", type=int, default=0,
                        help="also train each --tokenizer_kinds kind by both routes in one "
                        "process on the same list of texts (the saved sample), alternating, "
                        "this many times")
    parser.add_argument("--unit_encoding", action="store_true",
                        help="only the encoder against the tokenizer, one core (on the WordPiece "
                        "vocabulary of --workdir, made first if missing)")
    parser.add_argument("--run", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        child(args)
        return
    import shutil
    env = dict(os.environ, PYTHONPATH=ROOT, TOKENIZERS_PARALLELISM="true")
    formats = [fmt for fmt in args.formats.split(",") if fmt]
    files = max(1, round(args.size_mb / args.file_mb)) if args.file_mb else FILES
    specs, info = build(args.workdir, args.size_mb,
                        formats or (["parquet"] if args.tokenizer_kinds else []), files)
    print(json.dumps({"corpus": info, "cpus": os.cpu_count()}), flush=True)
    routes = args.routes.split(",")
    # The vocabulary every preparation uses: WordPiece on a sample (ours), made once.
    vocab_dir = os.path.join(args.workdir, f"wordpiece_{args.vocab_size}")
    tokenizer_file = os.path.join(vocab_dir, "tokenizer.json")
    sample_bytes = args.sample_mb * 1_000_000
    for kind in filter(None, args.tokenizer_kinds.split(",")):
        out = os.path.join(args.workdir, f"tok_{kind}")
        if "ours" in routes:
            measure(f"tokenizer/{kind}/ours", "run_tokenizer_ours", env, sample_bytes,
                    spec=specs["parquet"], kind=kind, sample_bytes=sample_bytes,
                    vocab=args.vocab_size, out=out)
        if "hf" in routes:
            saved = saved_sample(args.workdir, args.sample_mb, specs["parquet"])
            measure(f"tokenizer/{kind}/hf", "run_tokenizer_hf", env, sample_bytes,
                    saved_sample=saved, kind=kind, vocab=args.vocab_size, out=out + "_hf")
    if args.same_list_repeats:
        measure("tokenizer/same_list", "trainers_on_one_list", env, sample_bytes,
                saved_sample=saved_sample(args.workdir, args.sample_mb, specs["parquet"]),
                kinds=args.tokenizer_kinds.split(","), vocab=args.vocab_size,
                repeats=args.same_list_repeats)
    if not os.path.exists(tokenizer_file):
        from bert_jax.data.corpora import sample as document_sample
        from bert_jax.data.corpora import sources as corpus_sources
        from bert_jax.data.tokenizers import training as tokenizer_training
        texts = document_sample.sample_documents(corpus_sources.parse_corpus(specs["parquet"]),
                                                 sample_bytes).texts
        tokenizer_training.train_tokenizer(texts, "wordpiece", args.vocab_size, vocab_dir)
    if args.unit_encoding:
        unit_encoding(tokenizer_file)
        return
    for fmt in filter(None, args.formats.split(",")):
        for route in routes:
            out = os.path.join(args.workdir, f"out_{fmt}_{route}")
            shutil.rmtree(out, ignore_errors=True)
            if route == "ours":
                measure(f"prepare/{fmt}/ours", "run_ours", env, info["bytes"], spec=specs[fmt],
                        tokenizer=vocab_dir, out=out, workers=args.workers)
            else:
                os.makedirs(out)
                measure(f"prepare/{fmt}/hf", "run_hf", env, info["bytes"], fmt=fmt,
                        spec=specs[fmt], tokenizer=tokenizer_file, cache=out,
                        workers=args.workers)
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
