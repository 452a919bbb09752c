"""Prepared token shards written by the tests themselves, in the format the corpus preparation
writes (bert_jax.data.pretraining.shard_source): ArrayRecord files (group_size 1, one document's
ids a record, little-endian uint16), a manifest, and MiniLM's WordPiece vocabulary beside them.

The documents are made-up words from syllables, so that many words split into "##" pieces."""

import json
import os
import random
import shutil

import numpy as np

SYLLABLES = ("ka", "to", "ri", "mun", "sel", "da", "ve", "lo", "pin", "gar", "tu", "ne", "bo",
             "sha", "mi", "ter", "quo", "fa", "ly", "zen")


def texts(count: int, seed: int = 0, min_words: int = 3, max_words: int = 80) -> list[str]:
    rng = random.Random(seed)
    words = ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4)))
             for _ in range(400)]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(min_words, max_words))) + "."
            for _ in range(count)]


def minilm_vocab() -> str:
    from bert_jax.convert import hf
    return os.path.join(hf.packaged_minilm_dir(), "vocab.txt")


def write_shards(directory: str, splits: dict[str, list[list[int]]], vocab_size: int,
                 files_per_split: int = 3, tokenizer_file: str | None = None) -> str:
    """Writes `splits` (split -> documents as id lists) as shards in `directory`; returns it."""
    from array_record.python.array_record_module import ArrayRecordWriter
    os.makedirs(directory, exist_ok=True)
    dtype = np.dtype("<u2") if vocab_size <= 1 << 16 else np.dtype("<u4")
    shards = {}
    for split, documents in splits.items():
        shards[split] = []
        bounds = np.linspace(0, len(documents), files_per_split + 1).astype(int)
        for unit in range(files_per_split):
            name = f"{split}-{unit:05d}-of-{files_per_split:05d}.array_record"
            path = os.path.join(directory, name)
            writer = ArrayRecordWriter(path, "group_size:1")
            part = documents[bounds[unit]:bounds[unit + 1]]
            for ids in part:
                writer.write(np.asarray(ids, dtype).tobytes())
            writer.close()
            shards[split].append({"file": name, "unit": unit, "documents": len(part),
                                  "tokens": int(sum(len(d) for d in part)),
                                  "bytes": os.path.getsize(path)})
    tokenizer = {"vocab_size": vocab_size, "fingerprint": "", "kind": "WordPiece"}
    if tokenizer_file:
        shutil.copy(tokenizer_file, os.path.join(directory, os.path.basename(tokenizer_file)))
        tokenizer["path"] = os.path.basename(tokenizer_file)
    manifest = {"format": "bert_jax.token_shards", "format_version": 1, "dtype": dtype.name,
                "tokenizer": tokenizer, "shards": shards,
                "splits": {s: {"documents": sum(x["documents"] for x in v),
                               "tokens": sum(x["tokens"] for x in v)} for s, v in shards.items()}}
    with open(os.path.join(directory, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    return directory


def prepare(directory: str, train_documents: int = 300, validation_documents: int = 40,
            seed: int = 0) -> str:
    """Shards of made-up text tokenized with MiniLM's vocabulary (vocab.txt beside them)."""
    from bert_jax.data.tokenizers import load
    vocab_path = minilm_vocab()
    tokenizer = load.load_tokenizer(vocab_path)
    all_texts = texts(train_documents + validation_documents, seed)
    ids = tokenizer.encode_batch(all_texts)
    return write_shards(directory, {"train": ids[:train_documents],
                                    "validation": ids[train_documents:]},
                        tokenizer.vocab_size, tokenizer_file=vocab_path)


def assert_resumes_as(cfg, state: dict, expected_batches: list, global_batch_size: int,
                      process_counts=(1, 2)) -> None:
    """Iterators restored from `state` under each process count (1: set_state, more:
    set_state_of_other_layout) give `expected_batches` (the uninterrupted run's global batches
    from the saved one on), their shares concatenated, bit for bit."""
    from bert_jax.data.pretraining import shard_iterator
    for count in process_counts:
        resumed = [shard_iterator.make_shard_iterator(cfg, "train", global_batch_size, p, count)
                   for p in range(count)]
        for it in resumed:
            (it.set_state if count == 1 else it.set_state_of_other_layout)(dict(state))
        for expected in expected_batches:
            got = [next(it) for it in resumed]
            for key in expected:
                np.testing.assert_array_equal(np.concatenate([g[key] for g in got]),
                                              expected[key])


def assert_same(a: list, b: list) -> None:
    """Two lists of batches (dicts of arrays) equal, key by key, bit for bit."""
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert sorted(x) == sorted(y)
        for key in x:
            np.testing.assert_array_equal(x[key], y[key], err_msg=key)
