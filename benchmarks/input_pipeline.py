r"""Tokens/s of masked 128-token rows delivered by the token-shard pre-training iterator from one
core, beside a host's need and beside Hugging Face's DataCollatorForLanguageModeling on the same
pre-tokenized rows.

  python benchmarks/input_pipeline.py                        # ~50M tokens of shards, batch 256
  python benchmarks/input_pipeline.py --tokens=5e6 --seconds=5
  python benchmarks/input_pipeline.py --processes=2      # also 2 processes, one a core

The shards: the demo corpus's real English text (the gensim wheel's Wikipedia sample and Lee
news stories, bert_jax.data.corpora.demo) tokenized once with MiniLM's WordPiece vocabulary and
REPEATED until --tokens tokens (the same documents many times: the reads and the packing are as
for a corpus of that size, the text is not), written as ArrayRecord shards with a manifest in
--shards_dir (kept for the next run).

Each setting runs in its own process pinned to one core (os.sched_setaffinity), the iterator
(bert_jax.data.pretraining.shard_iterator: read, pack, mask) driven for --seconds after 3
warm-up batches; the HF collator (torch tensors, 15%, 80/10/10; whole-word masking with
DataCollatorForWholeWordMask) is given the same unmasked rows as lists of ids, as a `datasets`
dataset after group_texts hands them. Prints one JSON object per setting and a table with the
need of a host at BERT-base, 128-token rows (674 MFLOP/token): v5e-8 at 40% MFU ~0.94M
tokens/s, 8xH100 at 50% ~5.9M.
"""

import argparse
import json
import os
import subprocess
import sys
import time

NEEDS = {"v5e-8 at 40% MFU": 0.94e6, "8xH100 at 50% MFU": 5.9e6}
SEQ_LEN = 128


def prepare_shards(directory: str, tokens: int) -> str:
    """The demo text tokenized with MiniLM's vocabulary, repeated to `tokens` tokens."""
    import numpy as np
    from array_record.python.array_record_module import ArrayRecordWriter

    from bert_jax.convert import hf
    from bert_jax.data.corpora.demo import demo_documents
    from bert_jax.data.tokenizers import load
    if os.path.exists(os.path.join(directory, "manifest.json")):
        return directory
    os.makedirs(directory, exist_ok=True)
    vocab = os.path.join(hf.packaged_minilm_dir(), "vocab.txt")
    tokenizer = load.load_tokenizer(vocab)
    documents = [np.asarray(ids, "<u2") for ids in tokenizer.encode_batch(demo_documents())]
    documents = [d for d in documents if len(d)]
    once = sum(len(d) for d in documents)
    repeats = max(1, -(-tokens // once))
    files, shards = 8, []
    every = [d for _ in range(repeats) for d in documents]
    bounds = np.linspace(0, len(every), files + 1).astype(int)
    for unit in range(files):
        name = f"train-{unit:05d}-of-{files:05d}.array_record"
        writer = ArrayRecordWriter(os.path.join(directory, name), "group_size:1")
        part = every[bounds[unit]:bounds[unit + 1]]
        for d in part:
            writer.write(d.tobytes())
        writer.close()
        shards.append({"file": name, "documents": len(part),
                       "tokens": int(sum(len(d) for d in part)),
                       "bytes": os.path.getsize(os.path.join(directory, name))})
    import shutil
    shutil.copy(vocab, os.path.join(directory, "vocab.txt"))
    manifest = {"format": "bert_jax.token_shards", "format_version": 1, "dtype": "uint16",
                "tokenizer": {"vocab_size": tokenizer.vocab_size, "path": "vocab.txt"},
                "shards": {"train": shards}, "note": f"demo text repeated {repeats} times"}
    with open(os.path.join(directory, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    return directory


def time_ours(directory: str, batch: int, seconds: float, whole_word: bool,
              process: tuple[int, int] = (0, 1)) -> dict:
    from bert_jax.data.pretraining.shard_iterator import make_shard_iterator
    from bert_jax.recipes.inputs import schema_data_config
    cfg = schema_data_config(corpus=f"shards:{directory}", seq_len=SEQ_LEN,
                             max_predictions=20, whole_word_masking=whole_word)
    started = time.perf_counter()
    it = make_shard_iterator(cfg, global_batch_size=batch, process_index=process[0],
                             process_count=process[1])
    opened = time.perf_counter() - started
    for _ in range(3):
        next(it)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        next(it)
        count += 1
    elapsed = time.perf_counter() - start
    return {"implementation": "bert_jax shards", "whole_word": whole_word, "batches": count,
            "tokens_per_s": count * batch // process[1] * SEQ_LEN / elapsed,
            "open_s": round(opened, 2),
            "documents": len(it.rows.documents), "tokens": int(it.rows.documents.tokens)}


def time_hf(directory: str, batch: int, seconds: float, whole_word: bool) -> dict:
    import transformers

    from bert_jax.data.pretraining.shard_iterator import make_shard_iterator
    from bert_jax.recipes.inputs import schema_data_config
    cfg = schema_data_config(corpus=f"shards:{directory}", seq_len=SEQ_LEN)
    it = make_shard_iterator(cfg, global_batch_size=batch)
    rows = [list(map(int, r)) for r in it.rows.rows(0, 40 * batch)["input_ids"]]
    tokenizer = transformers.BertTokenizerFast(os.path.join(directory, "vocab.txt"))
    collator = (transformers.DataCollatorForWholeWordMask if whole_word else
                transformers.DataCollatorForLanguageModeling)(tokenizer, mlm_probability=0.15)
    examples = [{"input_ids": r} for r in rows]
    for i in range(3):
        collator(examples[i * batch:(i + 1) * batch])
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        i = count % 40
        collator(examples[i * batch:(i + 1) * batch])
        count += 1
    elapsed = time.perf_counter() - start
    return {"implementation": f"transformers {transformers.__version__} "
            f"{type(collator).__name__}", "whole_word": whole_word, "batches": count,
            "tokens_per_s": count * batch * SEQ_LEN / elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=float, default=50e6)
    parser.add_argument("--shards_dir", default="/tmp/bert_jax_input_pipeline_shards")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--core", type=int, default=0, help="the core each setting is pinned to")
    parser.add_argument("--skip_hf", action="store_true")
    parser.add_argument("--processes", type=int, default=1,
                        help="also run ours as this many processes at once, process p pinned to "
                        "core p and taking its share of every global batch (as hosts do): the "
                        "tokens/s of all together")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: one setting, this process
    parser.add_argument("--process", default="0/1", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        os.sched_setaffinity(0, {args.core})
        kind, whole_word = args.one.split(":")
        if kind == "ours":
            index, count = map(int, args.process.split("/"))
            result = time_ours(args.shards_dir, args.batch, args.seconds, whole_word == "1",
                               (index, count))
        else:
            result = time_hf(args.shards_dir, args.batch, args.seconds, whole_word == "1")
        print(json.dumps(result))
        return
    prepare_shards(args.shards_dir, int(args.tokens))
    results = []
    if args.processes > 1:
        for whole_word in ("0", "1"):
            children = [subprocess.Popen(
                [sys.executable, __file__, f"--one=ours:{whole_word}", f"--batch={args.batch}",
                 f"--seconds={args.seconds}", f"--shards_dir={args.shards_dir}",
                 f"--core={p % os.cpu_count()}", f"--process={p}/{args.processes}"],
                stdout=subprocess.PIPE, text=True) for p in range(args.processes)]
            parts = [json.loads(c.communicate()[0].strip().splitlines()[-1]) for c in children]
            result = {"implementation": f"bert_jax shards, {args.processes} processes",
                      "whole_word": whole_word == "1",
                      "tokens_per_s": sum(part["tokens_per_s"] for part in parts),
                      "per_process": [round(part["tokens_per_s"]) for part in parts]}
            print(json.dumps(result), flush=True)
            results.append(result)
    settings = [("ours", "0"), ("ours", "1")] + ([] if args.skip_hf else
                                                [("hf", "0"), ("hf", "1")])
    for kind, whole_word in settings:
        done = subprocess.run(
            [sys.executable, __file__, f"--one={kind}:{whole_word}", f"--batch={args.batch}",
             f"--seconds={args.seconds}", f"--shards_dir={args.shards_dir}",
             f"--core={args.core}"], capture_output=True, text=True, check=False)
        if done.returncode:
            print(done.stderr[-2000:], file=sys.stderr)
            continue
        result = json.loads(done.stdout.strip().splitlines()[-1])
        print(json.dumps(result), flush=True)
        results.append(result)
    print(f"\n{'implementation':48s} {'whole word':>10s} {'tokens/s':>12s}  "
          + "  ".join(f"x {need}" for need in NEEDS))
    for r in results:
        print(f"{r['implementation']:48s} {r['whole_word']!s:>10s} "
              f"{r['tokens_per_s'] / 1e6:10.2f} M  " + "  ".join(
                  f"{r['tokens_per_s'] / value:>{len(need) + 2}.2f}" for need, value in
                  NEEDS.items()))


if __name__ == "__main__":
    main()
