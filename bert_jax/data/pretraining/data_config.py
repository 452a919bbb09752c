"""What decides the pre-training batches: `PretrainingDataConfig`.

A frozen dataclass of the corpus, vocabulary, row and masking settings; the same config and seed
give the same batches (`bert_jax.data.pretraining.pipeline.make_iterator`). Construction checks the
values (ValueError naming the field and its bounds) and warns when max_predictions is below what
mask_rate asks of a full row. The fields that are a run's settings have no defaults here (the run
config's schema, bert_jax/config/run.py, holds them; data/ does not import config/): a run's
comes from bert_jax.recipes.inputs.pretraining_data_config, one of the schema's defaults with
some fields changed from bert_jax.recipes.inputs.schema_data_config.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
from typing import Any

from bert_jax.data.corpora import text_files as text_corpus


@dataclasses.dataclass(frozen=True, kw_only=True)
class PretrainingDataConfig:
    """Everything that decides the batches; the same config and seed give the same batches.

    corpus: "demo", "text:GLOB", a TFDS catalog name (see bert_jax.data.corpora.catalog), or
      "shards:DIR", prepared token shards (bert_jax.data.pretraining.shard_iterator: no
      tokenizer at run time, the same batches for any process count; sentence_pairs refused).
    vocab_path: vocab.txt / tokenizer.json; empty with corpus "demo" or "text:GLOB" means a
      vocabulary of demo_vocab_size trained on the corpus on first use (`prepare_demo`,
      `prepare_text_vocabulary`).
    min_segment_tokens: a new piece starts in a row only if this many tokens (or the whole rest of
      its document) fit.
    short_seq_prob: sentence-pair mode: probability of a shorter target length (as in BERT).
    num_workers: grain worker processes making rows (0: threads of this process only; see
      benchmarks/data_throughput.py for when they pay off). num_workers > 0 needs parsed absl
      flags (module docstring).
    batch_warmup_tokens, batch_warmup_start: a batch-size warm-up of the training batches, from
      batch_warmup_start global rows to the full batch over batch_warmup_tokens tokens
      (bert_jax.data.pretraining.batch_schedule); 0: off; "shards:DIR" corpora only.
    document_delimiter, invalid_utf8, validation_fraction: options of "text:GLOB" corpora
      (bert_jax.data.corpora.catalog); document_delimiter is the run config's
      data.document_delimiter.
    """

    # A run's settings, each a key of the run config (bert_jax/config/run.py, the one place of
    # their defaults): no defaults here. bert_jax.recipes.inputs.pretraining_data_config sets
    # them from a run's settings; schema_data_config, the schema's defaults with overrides.
    corpus: str  # data.corpus
    data_dir: str  # data.data_dir (a run's default: <workdir>/data)
    vocab_path: str  # tokenizer.path
    lowercase: bool  # tokenizer.lowercase
    seq_len: int  # max_seq_len
    max_predictions: int  # data.max_predictions
    mask_rate: float  # data.mask_rate (data.eval_mask_rate for held-out rows)
    whole_word_masking: bool  # data.whole_word_masking
    sentence_pairs: bool  # data.sentence_pairs
    seed: int  # seed
    num_workers: int  # data.num_workers
    demo_vocab_size: int  # tokenizer.vocab_size
    document_delimiter: str  # data.document_delimiter
    batch_warmup_tokens: int  # data.batch_warmup_tokens
    batch_warmup_start: int  # data.batch_warmup_start
    # Options of the pipeline that no run config sets: their defaults live here alone.
    text_key: str = "text"
    short_seq_prob: float = 0.1
    min_segment_tokens: int = 8
    invalid_utf8: str = "fail"
    validation_fraction: float = 0.02

    def __post_init__(self):
        if self.seq_len < 8 or self.seq_len < 2 + self.min_segment_tokens:
            raise ValueError(f"PretrainingDataConfig.seq_len={self.seq_len} is too short (at least "
                             f"8 and 2 + min_segment_tokens={self.min_segment_tokens})")
        if self.min_segment_tokens < 1:
            raise ValueError("PretrainingDataConfig.min_segment_tokens must be at least 1")
        if not 0.0 < self.mask_rate < 1.0:
            raise ValueError(f"PretrainingDataConfig.mask_rate={self.mask_rate} must be in (0, 1)")
        if not 1 <= self.max_predictions <= self.seq_len:
            raise ValueError(f"PretrainingDataConfig.max_predictions={self.max_predictions} must "
                             f"be in [1, seq_len={self.seq_len}]")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise ValueError("PretrainingDataConfig.short_seq_prob must be in [0, 1]")
        if not 0 <= self.seed < 2**32:
            raise ValueError(f"PretrainingDataConfig.seed={self.seed} must be in [0, 2**32)")
        if self.batch_warmup_tokens < 0 or self.batch_warmup_start < 0:
            raise ValueError(f"data.batch_warmup_tokens={self.batch_warmup_tokens} and "
                             f"data.batch_warmup_start={self.batch_warmup_start} must be >= 0")
        if self.num_workers < 0:
            raise ValueError("PretrainingDataConfig.num_workers must be >= 0")
        if self.document_delimiter not in text_corpus.DOCUMENT_DELIMITERS:
            raise ValueError(f"data.document_delimiter={self.document_delimiter!r}: choose one "
                             f"of {', '.join(text_corpus.DOCUMENT_DELIMITERS)}")
        expected = math.ceil((self.seq_len - 2) * self.mask_rate)
        if self.max_predictions < expected:
            _warn_few_masks(self.max_predictions, expected)

    def text_options(self) -> dict[str, Any]:
        return dict(document_delimiter=self.document_delimiter, invalid_utf8=self.invalid_utf8,
                    validation_fraction=self.validation_fraction)


@functools.cache
def _warn_few_masks(max_predictions: int, expected: int) -> None:
    """One warning a process for each setting (a run builds its data config more than once)."""
    logging.warning("max_predictions=%d < ceil((seq_len - 2) * mask_rate)=%d: rows of seq_len "
                    "tokens get fewer masks than the rate asks", max_predictions, expected)
