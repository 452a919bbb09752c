"""Random-token batches in the pre-training batch contract, for smoke tests and benchmarks.

The `synthetic` corpus of the pre-training recipe: no files, no tokenizer, the same keys and shapes
as `bert_jax.data.pretraining.pipeline` batches, so the whole training path runs without data.
"""

from __future__ import annotations

import time
from typing import Any, Optional

import numpy as np


class RandomTokenBatches:
    """Random-token MLM batches in the pre-training batch contract (smoke tests, benchmarks).

    Batch i of process p is a pure function of (seed, p, i); the state is the next index, so it
    checkpoints and resumes exactly like a grain iterator. `num_batches` makes it finite.
    """

    def __init__(self, rows: int, seq_len: int, max_predictions: int, vocab_size: int, seed: int,
                 process_index: int = 0, sentence_pairs: bool = False,
                 num_batches: Optional[int] = None, seconds_per_batch: float = 0.0):
        self.rows, self.seq_len, self.max_predictions = rows, seq_len, max_predictions
        self.vocab_size, self.seed, self.process_index = vocab_size, seed, process_index
        self.sentence_pairs, self.num_batches = sentence_pairs, num_batches
        self.seconds_per_batch = seconds_per_batch  # > 0 simulates a slow input pipeline
        self.index = 0

    def __iter__(self):
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        if self.num_batches is not None and self.index >= self.num_batches:
            raise StopIteration
        if self.seconds_per_batch:
            time.sleep(self.seconds_per_batch)
        rng = np.random.default_rng([self.seed, self.process_index, self.index])
        self.index += 1
        shape = (self.rows, self.seq_len)
        masked_positions = np.sort(np.stack([
            rng.choice(self.seq_len, self.max_predictions, replace=False)
            for _ in range(self.rows)]), axis=1).astype(np.int32)
        batch = {
            "input_ids": rng.integers(5, self.vocab_size, shape, dtype=np.int32),
            "token_type_ids": np.zeros(shape, np.int32),
            "segment_ids": np.ones(shape, np.int32),
            "position_ids": np.broadcast_to(np.arange(self.seq_len, dtype=np.int32), shape).copy(),
            "masked_positions": masked_positions,
            "masked_ids": rng.integers(5, self.vocab_size, masked_positions.shape, dtype=np.int32),
            "masked_weights": (rng.random(masked_positions.shape) < 0.9).astype(np.float32),
        }
        if self.sentence_pairs:
            batch["nsp_labels"] = rng.integers(0, 2, (self.rows,), dtype=np.int32)
        return batch

    def get_state(self) -> dict[str, Any]:
        return {"index": self.index}

    def set_state(self, state: dict[str, Any]) -> None:
        self.index = int(state["index"])
