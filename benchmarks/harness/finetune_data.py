"""The data and timing that every implementation of benchmarks/harness/finetune_mode.py shares:
the texts, the examples made from them, our encoding of them into rows, the order of batches,
and the warm-up then timed steps.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Callable, Iterator

import numpy as np

TASKS = ("classification", "token_classification", "span_qa")
DEFAULT_TEXTS = "pang_lee_polarity.cor"  # in gensim's test data, cp1252
LEARNING_RATE = 5e-5


# ----- the data every implementation trains on --------------------------------------------------

def texts_path(settings: dict) -> tuple[str, str]:
    """(path, encoding) of the texts: --texts, or the polarity sentences."""
    if settings["texts"]:
        return settings["texts"], settings["texts_encoding"] or "utf-8"
    from bert_jax.data.corpora import catalog as corpora
    return os.path.join(corpora.gensim_test_data(), DEFAULT_TEXTS), "cp1252"


def read_texts(settings: dict) -> list[str]:
    """The good rows' texts (DataError naming the file for an unreadable one or none)."""
    from bert_jax.data.finetuning import readers, unlabelled
    path, encoding = texts_path(settings)
    rows = unlabelled.read_unlabelled_text(path, settings["texts_format"], encoding=encoding)
    if not rows.examples:
        raise readers.DataError(f"{path}: holds no texts")
    return [e.text for e in rows.examples]


def make_examples(task: str, texts: list[str]) -> list:
    """Examples of `task` made from the texts (benchmarks/harness/finetune_mode.py)."""
    from bert_jax.data.finetuning import readers
    if task == "classification":
        return [readers.TextExample(t, label="ab"[i % 2]) for i, t in enumerate(texts)]
    if task == "token_classification":
        return [readers.TaggedSentence(tuple(t.split()), word_tags(t.split())) for t in texts]
    examples = []
    for i, text in enumerate(texts):
        answer = max(text.split(), key=len)
        examples.append(readers.qa_example(str(i), f"where is {answer}?", text,
                                           [(answer, text.index(answer))], False, "texts"))
    return examples


def word_tags(words: list[str]) -> tuple[str, ...]:
    """BIO tags of three made-up entity types, so that a lower-cased text still has several
    classes: CAP (capitalised), LONG (7 letters or more; a run of them is one entity), SYM (no
    letter)."""
    tags, previous = [], None
    for word in words:
        kind = ("CAP" if word[:1].isupper() else "SYM" if not any(c.isalpha() for c in word)
                else "LONG" if len(word) >= 7 else None)
        tags.append("O" if kind is None else f"{'I' if kind == previous else 'B'}-{kind}")
        previous = kind
    return tuple(tags)


def tokenizer_dir(settings: dict) -> str:
    """The vocabulary of every implementation: --hf_dir's, else the packaged MiniLM's."""
    from bert_jax.convert import hf
    return settings["hf_dir"] or hf.packaged_minilm_dir()


def finetune_config(settings: dict):
    """The fine-tuning config of these settings (bert_jax/config/run.py)."""
    from bert_jax.config import run as run_config
    config = run_config.finetune_config(settings["task"])
    config.init.hf_dir = settings["hf_dir"]
    config.tokenizer.path = tokenizer_dir(settings)
    config.model.preset = settings["preset"]
    config.dtype, config.remat = settings["dtype"], settings["remat"]
    config.max_seq_len, config.batch_size = settings["max_seq_len"], settings["batch_size"]
    config.learning_rate = LEARNING_RATE
    config.data.bucket_lengths = settings["bucket_lengths"]
    config.data.group_by_length = settings["group_by_length"]
    config.data.pack_examples = settings["pack_examples"]
    config.dropout_rng = settings["dropout_rng"]
    if settings["dropout"] is not None:
        config.model.hidden_dropout_prob = settings["dropout"]
        config.model.attention_probs_dropout_prob = settings["dropout"]
    config.squad.max_query_len = max(4, settings["max_seq_len"] // 4)
    config.squad.doc_stride = max(1, settings["max_seq_len"] // 2)
    # the schedule's length: every step run, the first calls of each batch shape included
    config.total_steps = settings["warmup"] + settings["steps"] + settings["max_seq_len"]
    return config


@dataclasses.dataclass
class Rows:
    """The encoded rows: our features [N, L] (MODEL_INPUTS + the kind's targets), each row's
    length [N], the labels, and what made them."""

    config: Any  # the ConfigDict (the peers read its hyper-parameters)
    run: Any  # its RunSettings (settings.read), what the recipe's functions take
    kind: Any
    labels: dict
    examples: list
    features: dict[str, np.ndarray]
    lengths: np.ndarray
    tokenizer: Any

    @property
    def num_labels(self) -> int:
        return len(self.labels.get("label_map", ())) or 2


def encode(settings: dict) -> Rows:
    """Read, label and encode the texts as the recipe does (kind.encode)."""
    from bert_jax.config import settings as settings_lib
    from bert_jax.data import row_layout
    from bert_jax.recipes import common as recipe_common
    from bert_jax.recipes.finetune import kinds
    config = finetune_config(settings)
    run = settings_lib.read(config, "finetune")
    kind = kinds.get(settings["task"])
    tokenizer = recipe_common.finetuning_tokenizer(run)
    examples = make_examples(settings["task"], read_texts(settings))
    labels = kind.describe_labels(examples, run)
    features = kind.encode(tokenizer, examples, run, labels, "texts")
    keys = kinds.MODEL_INPUTS + kind.target_keys
    return Rows(config, run, kind, labels, examples, {k: features[k] for k in keys},
                row_layout.row_lengths(features["attention_mask"]), tokenizer)


def batch_rows(settings: dict, rows: Rows) -> Iterator[np.ndarray]:
    """The row numbers of each batch: the order ours draws (same seed and grouping)."""
    from bert_jax.data import batches
    numbered = {"row": np.arange(len(rows.lengths)),
                "attention_mask": rows.features["attention_mask"]}
    iterator = batches.train_batches(numbered, settings["batch_size"], rows.run.seed,
                                     group_by_length=settings["group_by_length"])
    return (batch["row"] for batch in iterator)


# ----- timing ----------------------------------------------------------------------------------

def timed_steps(run_step: Callable[[], tuple[int, int]], finish: Callable[[], None],
                settings: dict) -> dict:
    """Warm-up steps, then timed ones; run_step() -> (real tokens, computed positions) of its
    batch and may leave work in flight; finish() waits for it. Every implementation's run_step
    draws the same batches in the same order (batch_rows), from the first one."""
    for _ in range(settings["warmup"]):
        run_step()
    finish()
    real = computed = 0
    start = time.perf_counter()
    for _ in range(settings["steps"]):
        r, c = run_step()
        real, computed = real + r, computed + c
    finish()
    return {"seconds": time.perf_counter() - start, "real_tokens": real,
            "computed_positions": computed}
