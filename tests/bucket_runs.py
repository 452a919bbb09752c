"""Tiny fine-tuning tasks whose texts span every length bucket, shared by the bucketing and the
example-packing tests: the task files, their config, and a counter of XLA compilations."""

import json
import logging
import os

import jax
import numpy as np

from finetune_runs import tiny_finetune_config

WORDS = ["john", "mary", "paris", "berlin", "acme", "globex", "book", "car", "visited", "met",
         "works", "at", "in", "the", "today", "and", "is", "old", "red", "where", "who", "."]
ENTITIES = {"john": "PER", "mary": "PER", "paris": "LOC", "berlin": "LOC", "acme": "ORG",
            "globex": "ORG"}
MAX_LEN = 64


def write_vocab(path) -> str:
    path.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS) + "\n",
                    encoding="utf-8")
    return str(path)


def sentence(rng, length):
    return [str(w) for w in rng.choice(WORDS, length)]


def lengths_short_to_long():
    """24 word counts rising along the set, so that in-order batches of 4 fall in every bucket
    (the longest cut to max_seq_len)."""
    return [int(n) for part in (np.linspace(2, 6, 8), np.linspace(12, 24, 8),
                                np.linspace(30, MAX_LEN + 10, 8)) for n in part]


def write_task_files(root, task, rng):
    """(train, eval) files of `task`: texts whose lengths span every bucket."""
    train_lengths = [int(n) for n in np.where(rng.random(48) < 0.7, rng.integers(3, 12, 48),
                                              rng.integers(3, MAX_LEN, 48))]
    paths = []
    for name, lengths in (("train", train_lengths), ("eval", lengths_short_to_long())):
        sentences = [sentence(rng, n) for n in lengths]
        if task == "classification":
            path = root / f"{name}.tsv"
            path.write_text("text\tlabel\n" + "".join(
                f"{' '.join(s)}\t{'a' if len(s) % 2 else 'b'}\n" for s in sentences))
        elif task == "token_classification":
            path = root / f"{name}.conll"
            path.write_text("".join("".join(f"{w} {'B-' + ENTITIES[w] if w in ENTITIES else 'O'}"
                                            "\n" for w in s) + "\n" for s in sentences))
        else:
            path = root / f"{name}.json"
            paragraphs = []
            for i, s in enumerate(sentences):
                context = " ".join(s + ["paris"])
                paragraphs.append({"context": context, "qas": [{
                    "id": f"{name}{i}", "question": "where is",
                    "answers": [{"text": "paris", "answer_start": context.rindex("paris")}]}]})
            path.write_text(json.dumps({"data": [{"paragraphs": paragraphs}]}))
        paths.append(str(path))
    return paths


def task_config(tmp_path, task, **changes):
    train, evaluation_path = write_task_files(tmp_path, task, np.random.default_rng(4))
    return tiny_finetune_config(
        task, write_vocab(tmp_path / "vocab.txt"), hidden_size=32, num_hidden_layers=1,
        max_position_embeddings=MAX_LEN, max_seq_len=MAX_LEN, eval_batch_size=4,
        **{"data.train_path": train, "data.eval_path": evaluation_path,
           "squad.doc_stride": 16, "squad.max_query_len": 8, "model.initializer_range": 0.2,
           **changes})


class CompileCounter(logging.Handler):
    """Counts XLA compilations of jitted functions by name (JAX's jax_log_compiles records)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.names: list[str] = []

    def emit(self, record):
        message = record.getMessage()
        if message.startswith("Finished XLA compilation of jit("):
            self.names.append(message[len("Finished XLA compilation of jit("):].split(")")[0])

    def __enter__(self):
        self.previous = jax.config.jax_log_compiles
        jax.config.update("jax_log_compiles", True)
        logging.getLogger("jax").addHandler(self)
        return self

    def __exit__(self, *exc):
        logging.getLogger("jax").removeHandler(self)
        jax.config.update("jax_log_compiles", self.previous)

    def count(self, name):
        return self.names.count(name)


def read_losses(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line)["loss"] for line in f]
