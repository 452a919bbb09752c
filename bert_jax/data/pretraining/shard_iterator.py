"""Masked pre-training batches from prepared token shards (`shards:DIR`): `ShardBatches`, the
same global batch sequence whatever the number of processes and devices, with a trivial exact
state.

    global batch b = global rows [r_b, r_b + B_b)       (B_b = global_batch_size, or the batch
                     size warm-up's size of step b; r_b = B_0 + ... + B_(b-1))
    process p of P = its rows [r_b + p * B_b/P, r_b + (p + 1) * B_b/P)
    row g          = `ShardRows.rows(g, g + 1)` (seed, epoch g // R, row g % R)
    masks of row g = `BatchMasker` keyed by (seed, g, position)

so 1 process, 2 processes x 4 devices and 8 devices see the same global batches, bit for bit.
With data.batch_warmup_tokens and data.batch_warmup_start the sizes B_b rise from the start to
global_batch_size (`batch_schedule.BatchSchedule`, independent of the process layout; training
passes only): the train step compiles once per size (`shape_examples` lists them).
No tokenizer runs here: the tokenizer is read only for its special ids, vocabulary size, "##"
pieces and ordinary tokens (masking).

State: {"version", "kind", "batch" (the next global batch), "rows" (its first global row),
"fingerprint"}; `set_state` resumes exactly, and so does `set_state_of_other_layout` (a state
saved by another number of processes: the global sequence does not depend on it). The
fingerprint hashes the split's shards (files, document and token counts, sizes), seq_len, seed,
masking, the global batch size and the warm-up, not the process layout.

Evaluation (num_epochs=k): a finite pass over k epochs of the split's rows, in the order and with
the masks of a fixed seed (EVAL_SEED, whatever the run's seed, so every run of a corpus is scored
on the same rows and masks); each host takes its share of each global batch; the last batch is
filled with all-padding rows of weight 0. Every batch of a finite pass carries example_weights
[b] float32 (1: a row, 0: padding), so all hosts and batches have the same keys.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any, Optional

import numpy as np

from bert_jax.data.pretraining import shard_source
from bert_jax.data.pretraining.batch_masking import BatchMasker
from bert_jax.data.pretraining.batch_schedule import BatchSchedule
from bert_jax.data.pretraining.data_config import PretrainingDataConfig
from bert_jax.data.pretraining.masking import MaskingSpec
from bert_jax.data.pretraining.shard_rows import ShardRows

STATE_VERSION = 1
KIND = "token_shards"
EVAL_SEED = 0


class ShardBatches:
    """Host-local batches of global_batch_size // process_count rows (module docstring).

    next(it) -> input_ids, token_type_ids, segment_ids, position_ids [b, L] int32;
    masked_positions, masked_ids [b, P] int32; masked_weights [b, P] float32; and, in a finite
    pass, example_weights [b] float32.
    num_rows: None (endless) or the rows of a finite pass (then StopIteration after the batch
    that holds the last of them).
    schedule: the global rows of each batch (BatchSchedule; default global_batch_size every
    batch); only for an endless pass.
    """

    def __init__(self, rows: ShardRows, masker: BatchMasker, global_batch_size: int,
                 process_index: int, process_count: int, fingerprint: str,
                 num_rows: Optional[int] = None, schedule: Optional[BatchSchedule] = None):
        schedule = schedule or BatchSchedule(global_batch_size)
        if schedule.full != global_batch_size or (num_rows is not None and schedule.enabled):
            raise ValueError("a batch schedule must end at global_batch_size and is for "
                             "training (endless) passes only")
        for size in schedule.sizes:
            if size % process_count:
                what = "global_batch_size" if size == global_batch_size else (
                    "the warm-up's batch size")
                raise ValueError(f"{what}={size} is not divisible by "
                                 f"process_count={process_count}")
        if not 0 <= process_index < process_count:
            raise ValueError(f"process_index={process_index} not in [0, {process_count})")
        self.rows, self.masker, self.schedule = rows, masker, schedule
        self.global_batch_size = global_batch_size
        self.process_index, self.process_count = process_index, process_count
        self.share = global_batch_size // process_count  # rows of a full batch here
        self.fingerprint, self.num_rows = fingerprint, num_rows
        self.batch = 0

    @property
    def num_batches(self) -> Optional[int]:
        if self.num_rows is None:
            return None
        return -(-self.num_rows // self.global_batch_size)

    def __iter__(self) -> ShardBatches:
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        if self.num_batches is not None and self.batch >= self.num_batches:
            raise StopIteration
        share = self.schedule.size(self.batch) // self.process_count
        start = self.schedule.rows_before(self.batch) + self.process_index * share
        batch = self.batch_of_rows(start, start + share)
        self.batch += 1
        return batch

    def batch_of_rows(self, start: int, stop: int) -> dict[str, np.ndarray]:
        """Global rows [start, stop), masked (rows past a finite pass: padding of weight 0)."""
        real_stop = stop if self.num_rows is None else max(start, min(stop, self.num_rows))
        rows = self.rows.rows(start, real_stop)
        if real_stop < stop:
            rows = {key: _padded(value, stop - start, self.rows.pad_id if key == "input_ids"
                                 else 0) for key, value in rows.items()}
        # (padding rows hold special tokens only: no position of theirs is masked)
        masked = self.masker(rows["input_ids"], np.arange(start, stop, dtype=np.int64))
        batch = {**rows, **masked}
        if self.num_rows is not None:
            batch["example_weights"] = (np.arange(start, stop) < real_stop).astype(np.float32)
        return batch

    def shape_examples(self, num_batches: int) -> list[dict[str, np.ndarray]]:
        """One batch of each shape that batches 0 .. num_batches - 1 have (all padding, nothing
        read): what a run compiles before its first step (bert_jax.train.program). One shape,
        or one per size of a batch-size warm-up."""
        return [self._padding_batch(size // self.process_count)
                for size in self.schedule.sizes_before(num_batches)]

    def _padding_batch(self, share: int) -> dict[str, np.ndarray]:
        length, p = self.rows.seq_len, self.masker.spec.max_predictions
        batch = {"input_ids": np.full((share, length), self.rows.pad_id, np.int32),
                 **{key: np.zeros((share, length), np.int32)
                    for key in ("token_type_ids", "segment_ids", "position_ids")},
                 "masked_positions": np.zeros((share, p), np.int32),
                 "masked_ids": np.zeros((share, p), np.int32),
                 "masked_weights": np.zeros((share, p), np.float32)}
        if self.num_rows is not None:
            batch["example_weights"] = np.zeros((share,), np.float32)
        return batch

    def get_state(self) -> dict[str, Any]:
        return {"version": STATE_VERSION, "kind": KIND, "batch": self.batch,
                "rows": self.schedule.rows_before(self.batch), "fingerprint": self.fingerprint}

    def set_state(self, state: dict[str, Any] | str | bytes) -> None:
        """Resumes exactly at `get_state()` of an iterator of the same data, seed, masking and
        global batch size, saved by any number of processes."""
        if isinstance(state, (str, bytes)):
            state = json.loads(state)
        if state.get("kind") != KIND or state.get("version") != STATE_VERSION:
            raise ValueError(f"pipeline state {state.get('kind', 'of the text pipeline')!r} "
                             f"version {state.get('version')!r} is not a token-shard state "
                             f"({KIND!r} version {STATE_VERSION}): it cannot resume this one")
        if state["fingerprint"] != self.fingerprint:
            raise ValueError("pipeline state was saved by a pipeline with other shards, seed, "
                             "sequence length, masking, global batch size or batch-size "
                             "warm-up; it cannot resume this one")
        self.batch = int(state["batch"])

    def set_state_of_other_layout(self, state: dict[str, Any] | str | bytes) -> None:
        """A state saved by another number of processes: the same exact resume (the global
        batch sequence does not depend on the process count)."""
        self.set_state(state)
        logging.info("data iterator: the checkpoint's data position was saved by another number "
                     "of processes; token shards resume it exactly (global batch %d)", self.batch)

    def close(self) -> None:
        pass


def _padded(value: np.ndarray, rows: int, fill: int) -> np.ndarray:
    out = np.full((rows,) + value.shape[1:], fill, value.dtype)
    out[:len(value)] = value
    return out


def shard_vocab_path(cfg: PretrainingDataConfig, manifest: dict, directory: str) -> str:
    """The tokenizer of a `shards:DIR` run: cfg.vocab_path, else the path the manifest names,
    else DIR/tokenizer.json or DIR/vocab.txt; ValueError when none is there."""
    import os
    if cfg.vocab_path:
        return os.path.expanduser(cfg.vocab_path)
    named = manifest.get("tokenizer", {}).get("path")
    candidates = ([os.path.join(directory, named)] if named else []) + [
        os.path.join(directory, "tokenizer.json"), os.path.join(directory, "vocab.txt")]
    for path in candidates:
        if os.path.isfile(path):
            return path
    raise ValueError(f"corpus shards:{directory} names no tokenizer file that exists: set "
                     "config.tokenizer.path to the tokenizer the shards were prepared with")


def load_shard_tokenizer(cfg: PretrainingDataConfig):
    """(tokenizer, manifest, directory) of a `shards:DIR` config; ValueError when the
    tokenizer's vocabulary size is not the one the shards were prepared with."""
    from bert_jax.data.tokenizers import load as tok
    directory = shard_source.shards_directory(cfg.corpus)
    manifest = shard_source.read_manifest(directory)
    path = shard_vocab_path(cfg, manifest, directory)
    vocab = tok.load_tokenizer(path, lowercase=cfg.lowercase)
    prepared = int(manifest["tokenizer"]["vocab_size"])
    if vocab.vocab_size != prepared:
        raise ValueError(f"tokenizer {path} has {vocab.vocab_size} ids and the shards in "
                         f"{directory} were prepared with a tokenizer of {prepared}: name the "
                         "tokenizer they were prepared with (config.tokenizer.path)")
    return vocab, manifest, directory


def make_shard_iterator(cfg: PretrainingDataConfig, split: str = "train",
                        global_batch_size: int = 32, process_index: int = 0,
                        process_count: int = 1, num_epochs: Optional[int] = None,
                        tokenizer=None) -> ShardBatches:
    """This host's batches of a `shards:DIR` corpus (module docstring). num_epochs None:
    endless training rows (seed cfg.seed); k: a finite pass over k epochs (seed EVAL_SEED)."""
    if cfg.sentence_pairs:
        raise ValueError(f"data.sentence_pairs is not available for token shards "
                         f"({cfg.corpus}): they hold documents, not sentences")
    if num_epochs is not None and num_epochs < 1:
        raise ValueError(f"num_epochs={num_epochs} must be None (endless) or positive")
    if tokenizer is None:
        tokenizer, _, directory = load_shard_tokenizer(cfg)
    else:
        directory = shard_source.shards_directory(cfg.corpus)
    documents = shard_source.ShardDocuments(directory, split)
    seed = cfg.seed if num_epochs is None else EVAL_SEED
    rows = ShardRows(documents, cfg.seq_len, tokenizer.cls_id, tokenizer.sep_id,
                     tokenizer.pad_id, seed)
    spec = MaskingSpec.from_tokenizer(tokenizer, cfg.mask_rate, cfg.max_predictions,
                                      cfg.whole_word_masking)
    num_rows = None if num_epochs is None else num_epochs * rows.rows_per_epoch
    schedule = BatchSchedule(global_batch_size, *(
        (cfg.batch_warmup_start, cfg.batch_warmup_tokens, cfg.seq_len) if num_epochs is None
        else ()))
    # (the schedule's identity is appended only when on: fingerprints without it stay as saved)
    fingerprint = _digest([KIND, documents.identity(), split, cfg.seq_len, seed, cfg.mask_rate,
                           cfg.max_predictions, cfg.whole_word_masking, global_batch_size,
                           num_epochs] + schedule.identity())
    if schedule.enabled and process_index == 0:
        logging.info("data: %s", schedule.describe())
    return ShardBatches(rows, BatchMasker(spec, seed), global_batch_size, process_index,
                        process_count, fingerprint, num_rows, schedule)


def _digest(values: list[Any]) -> str:
    return hashlib.sha1(json.dumps(values).encode()).hexdigest()[:16]
