"""The held-out rows every implementation is scored on: one .npz, read by every worker.

The file holds 128-token rows of the corpus's held-out split made by bert_jax's pre-training
pipeline (documents packed as [CLS] piece [SEP] ..., segment ids, positions restarting per piece)
and masked once, with a fixed seed, at 15% (80% [MASK], 10% a random token, 10% kept):

    input_ids, token_type_ids, segment_ids, position_ids   [N, L] int32 (segment 0 = padding)
    masked_positions, masked_ids                           [N, P] int32
    masked_weights                                         [N, P] float32 (0: an unused slot)
    example_weights                                        [N] float32 (0: a padding row)

N is a multiple of EVAL_BATCH_ROWS: padding rows carry no masked token, so every batch has one
shape and padding counts in no sum. Each implementation reads a row as it reads its training
rows: ours with the segments (attention within a piece, positions restarting), the Hugging Face
peers as one block of tokens (attention over the whole row but padding), as their run_mlm recipe
trains on concatenated text. The tokens, the masked positions and their targets are the same.

numpy only, so that the torch worker never imports JAX.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Iterator

import numpy as np

EVAL_BATCH_ROWS = 64
IGNORED_LABEL = -100  # Hugging Face's label of a position that is not predicted
ROW_KEYS = ("input_ids", "token_type_ids", "segment_ids", "position_ids", "masked_positions",
            "masked_ids", "masked_weights", "example_weights")


def sha256(path: str) -> str:
    """Hex digest of a file: the workers check that they all read the same held-out rows."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


@dataclasses.dataclass(frozen=True)
class Heldout:
    """The arrays of the file (module docstring) and the number of real rows."""

    arrays: dict[str, np.ndarray]
    num_rows: int

    @property
    def num_masked(self) -> int:
        """Masked tokens scored: the number of predictions every accuracy is over."""
        return int(self.arrays["masked_weights"].sum())

    def batches(self, rows: int = EVAL_BATCH_ROWS) -> Iterator[dict[str, np.ndarray]]:
        """Batches of `rows` rows, in order (the file's row count is a multiple of it)."""
        total = len(self.arrays["input_ids"])
        for start in range(0, total, rows):
            yield {k: v[start:start + rows] for k, v in self.arrays.items()}


def save(path: str, arrays: dict[str, np.ndarray], num_rows: int) -> None:
    np.savez(path, num_rows=np.int64(num_rows), **{k: arrays[k] for k in ROW_KEYS})


def load(path: str, expected_sha256: str | None = None) -> Heldout:
    """The rows of `path`; ValueError if its digest is not `expected_sha256` (when given)."""
    if expected_sha256 is not None and sha256(path) != expected_sha256:
        raise ValueError(f"{path} is not the held-out file the comparison wrote (its digest "
                         "changed): every implementation must be scored on the same rows")
    with np.load(path) as data:
        return Heldout({k: data[k] for k in ROW_KEYS}, int(data["num_rows"]))


def hf_inputs(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A batch as a Hugging Face masked-LM model takes it: input_ids, attention_mask (padding
    0), token_type_ids [B, L] and labels [B, L] (the target at each masked position,
    IGNORED_LABEL elsewhere)."""
    input_ids = batch["input_ids"]
    labels = np.full(input_ids.shape, IGNORED_LABEL, np.int32)
    rows, slots = np.nonzero(batch["masked_weights"] > 0)
    labels[rows, batch["masked_positions"][rows, slots]] = batch["masked_ids"][rows, slots]
    return {"input_ids": input_ids, "attention_mask": (batch["segment_ids"] > 0).astype(np.int32),
            "token_type_ids": batch["token_type_ids"], "labels": labels}
