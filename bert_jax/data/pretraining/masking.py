"""Dynamic masking of one row (Devlin et al. 2019): pure functions of (row, generator).

A fraction `mask_rate` of the maskable tokens of a row (all but [PAD] [UNK] [CLS] [SEP] [MASK])
is chosen, rounded stochastically so the expected fraction is exactly the rate, at most
max_predictions; of the chosen, 80% become [MASK], 10% a random ordinary token (no bracketed
token such as [unused1]), 10% stay. Whole-word masking chooses whole words (a first piece and its
"##" continuations) until the count is reached, never part of a word.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from bert_jax.data.tokenizers.subword import WordPieceTokenizer


@dataclasses.dataclass(frozen=True)
class MaskingSpec:
    """What masking needs to know about the vocabulary, and how much to mask."""

    mask_id: int
    special_ids: np.ndarray        # [n] ids never masked
    replacement_ids: np.ndarray    # [m] ids a token may be replaced with (10% case)
    is_continuation: np.ndarray    # [vocab] bool: "##" pieces
    mask_rate: float               # a run's data.mask_rate (eval: data.eval_mask_rate)
    max_predictions: int           # data.max_predictions
    whole_word: bool               # data.whole_word_masking

    @classmethod
    def from_tokenizer(cls, vocab: WordPieceTokenizer, mask_rate: float, max_predictions: int,
                       whole_word: bool) -> MaskingSpec:
        special = np.asarray(vocab.special_ids, np.int32)
        replacement = np.flatnonzero(vocab.is_ordinary).astype(np.int32)
        replacement = replacement[~np.isin(replacement, special)]
        return cls(vocab.mask_id, special, replacement, vocab.is_continuation, mask_rate,
                   max_predictions, whole_word)


def word_starts(input_ids: np.ndarray, maskable: np.ndarray, is_continuation: np.ndarray):
    """[seq] bool: maskable tokens that begin a word (not "##", or first after a special token)."""
    previous_maskable = np.concatenate([[False], maskable[:-1]])
    return maskable & (~is_continuation[input_ids] | ~previous_maskable)


def choose_masked_positions(input_ids: np.ndarray, spec: MaskingSpec,
                            rng: np.random.Generator) -> np.ndarray:
    """Sorted positions to predict in one row [seq]; at most spec.max_predictions."""
    maskable = ~np.isin(input_ids, spec.special_ids)
    candidates = np.flatnonzero(maskable)
    expected = len(candidates) * spec.mask_rate
    count = int(expected) + int(rng.random() < expected - int(expected))
    count = min(count, spec.max_predictions, len(candidates))
    if count == 0:
        return np.zeros([0], np.int64)
    if not spec.whole_word:
        return np.sort(rng.choice(candidates, size=count, replace=False))
    starts = word_starts(input_ids, maskable, spec.is_continuation)[candidates]
    words = np.split(candidates, np.flatnonzero(starts)[1:])
    chosen: list[np.ndarray] = []
    total = 0
    for index in rng.permutation(len(words)):
        if total + len(words[index]) <= count:
            chosen.append(words[index])
            total += len(words[index])
            if total == count:
                break
    return np.sort(np.concatenate(chosen)) if chosen else np.zeros([0], np.int64)


def mask_row(input_ids: np.ndarray, spec: MaskingSpec, rng: np.random.Generator):
    """Dynamic masking of one row.

    input_ids: [seq] -> (masked input_ids [seq], masked_positions [P], masked_ids [P],
    masked_weights [P]) with P = spec.max_predictions, pad slots (position 0, id 0) weighted 0.
    """
    positions = choose_masked_positions(input_ids, spec, rng)
    n = len(positions)
    original = input_ids[positions]
    corrupted = input_ids.copy()
    decision = rng.random(n)
    to_mask = decision < 0.8
    to_random = (decision >= 0.8) & (decision < 0.9)
    corrupted[positions[to_mask]] = spec.mask_id
    corrupted[positions[to_random]] = rng.choice(spec.replacement_ids, size=int(to_random.sum()))
    p = spec.max_predictions
    masked_positions = np.zeros([p], np.int32)
    masked_ids = np.zeros([p], np.int32)
    masked_weights = np.zeros([p], np.float32)
    masked_positions[:n] = positions
    masked_ids[:n] = original
    masked_weights[:n] = 1.0
    return corrupted, masked_positions, masked_ids, masked_weights
