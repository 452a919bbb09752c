"""Dynamic masking of a whole batch at once, random numbers from a counter-based hash: a row's
masks are a pure function of (seed, global row index, position), whichever process masks it.

`mask_batch(input_ids [b, L], rows [b], spec, seed)`:
  maskable   every token but the special ones (spec.special_ids);
  count      per row: stochastic rounding of mask_rate * maskable (so its expectation is exact),
             at most spec.max_predictions;
  choice     the `count` maskable positions with the smallest hash keys; with whole-word masking
             one key per word (a first piece and its continuations, spec.is_continuation), and
             whole words taken in key order while they fit in the count (a word that does not fit
             is skipped, the next ones still tried: never part of a word);
  80/10/10   of the chosen: [MASK], a random ordinary token (spec.replacement_ids), unchanged.

The hash is the splitmix64 finaliser in numpy uint64 arithmetic (the idea of
bert_jax.train.dropout_bits, on the host). Keys: row key = mix(mix(seed ^ stream) + row * C1),
position key = mix(row key + (position + 1) * C2); the 80/10/10 draw and the replacement draw
mix the position key again with their own constants. Everything is vectorised over the batch;
whole-word masking loops over word ranks (at most L iterations of [b]-wide operations).
"""

from __future__ import annotations

import numpy as np

from bert_jax.data.pretraining.masking import MaskingSpec

_MASK_STREAM = np.uint64(0x6D61736B)     # "mask"
_ROUND_STREAM = np.uint64(0x726F756E)    # "roun": the count's stochastic rounding
_DECIDE = np.uint64(0x9E3779B97F4A7C15)  # the 80/10/10 draw
_REPLACE = np.uint64(0xC2B2AE3D27D4EB4F)  # the replacement id
_ROW = np.uint64(0xD1B54A32D192ED03)
_POSITION = np.uint64(0xA0761D6478BD642F)
_TOP = np.uint64(np.iinfo(np.uint64).max)


def mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, elementwise on uint64 (wrapping arithmetic)."""
    x = np.asarray(x, np.uint64)
    with np.errstate(over="ignore"):  # scalars warn where arrays wrap silently
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def uniform(bits: np.ndarray) -> np.ndarray:
    """float64 in [0, 1) from the top 53 bits of uint64 hashes."""
    return (bits >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def position_keys(rows: np.ndarray, length: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(row keys [b], position keys [b, length]) as uint64 hashes of (seed, row, position)."""
    base = mix(np.uint64(seed) ^ _MASK_STREAM)
    with np.errstate(over="ignore"):
        row_keys = mix(base + np.asarray(rows, np.uint64) * _ROW)
    positions = (np.arange(1, length + 1, dtype=np.uint64) * _POSITION)[None, :]
    return row_keys, mix(row_keys[:, None] + positions)


class BatchMasker:
    """Masks [b, L] batches of rows by their global row indices (module docstring)."""

    def __init__(self, spec: MaskingSpec, seed: int):
        self.spec, self.seed = spec, seed
        size = max(len(spec.is_continuation), int(np.max(spec.special_ids, initial=0)) + 1)
        self._special = np.zeros(size, bool)
        self._special[spec.special_ids] = True
        self._continuation = np.zeros(size, bool)
        self._continuation[:len(spec.is_continuation)] = spec.is_continuation

    def __call__(self, input_ids: np.ndarray, rows: np.ndarray) -> dict[str, np.ndarray]:
        """input_ids [b, L] int32, rows [b] (global row indices) -> input_ids (masked) [b, L]
        int32, masked_positions, masked_ids [b, P] int32 (pad slots 0), masked_weights [b, P]
        float32 (1 for a prediction, 0 for a pad slot); positions ascending within a row."""
        spec = self.spec
        length = input_ids.shape[1]
        p = spec.max_predictions
        row_keys, keys = position_keys(rows, length, self.seed)
        maskable = ~self._special[input_ids]
        available = maskable.sum(axis=1)
        expected = available * spec.mask_rate
        whole = np.floor(expected)
        rounding = uniform(mix(row_keys ^ _ROUND_STREAM))
        count = (whole + (rounding < expected - whole)).astype(np.int64)
        count = np.minimum(np.minimum(count, p), available)
        if spec.whole_word:
            chosen = self._whole_words(input_ids, maskable, keys, count)
        else:
            chosen = self._tokens(maskable, keys, count)
        # the chosen positions, ascending, then pad slots
        order = np.argsort(~chosen, axis=1, kind="stable")[:, :p]
        taken = chosen.sum(axis=1)
        weights = np.arange(p)[None, :] < taken[:, None]
        positions = np.where(weights, order, 0).astype(np.int32)
        original = np.take_along_axis(input_ids, positions, axis=1)
        masked_ids = np.where(weights, original, 0).astype(np.int32)
        decide = mix(np.take_along_axis(keys, positions, axis=1) ^ _DECIDE)
        draw = uniform(decide)
        replacement = spec.replacement_ids[np.minimum(
            (uniform(mix(decide ^ _REPLACE)) * len(spec.replacement_ids)).astype(np.int64),
            len(spec.replacement_ids) - 1)]
        new = np.where(draw < 0.8, spec.mask_id, np.where(draw < 0.9, replacement, original))
        corrupted = np.array(input_ids, np.int32, copy=True)
        r, c = np.nonzero(weights)
        corrupted[r, positions[r, c]] = new[r, c]
        return {"input_ids": corrupted, "masked_positions": positions, "masked_ids": masked_ids,
                "masked_weights": weights.astype(np.float32)}

    def _tokens(self, maskable, keys, count) -> np.ndarray:
        """[b, L] bool: the `count` maskable positions of each row with the smallest keys."""
        b, length = keys.shape
        keys = np.where(maskable, keys, _TOP)
        p = min(self.spec.max_predictions, length)
        smallest = (np.argpartition(keys, p - 1, axis=1)[:, :p] if p < length
                    else np.broadcast_to(np.arange(length), (b, length)))
        ranked = np.take_along_axis(
            smallest, np.argsort(np.take_along_axis(keys, smallest, axis=1), axis=1), axis=1)
        take = np.arange(ranked.shape[1])[None, :] < count[:, None]
        chosen = np.zeros((b, length), bool)
        r, c = np.nonzero(take)
        chosen[r, ranked[r, c]] = True
        return chosen

    def _whole_words(self, input_ids, maskable, keys, count) -> np.ndarray:
        """[b, L] bool: whole words in key order while they fit in `count` (module docstring)."""
        b, length = input_ids.shape
        previous = np.zeros_like(maskable)
        previous[:, 1:] = maskable[:, :-1]
        starts = maskable & (~self._continuation[input_ids] | ~previous)
        index = np.arange(length)[None, :]
        # each word's length, at its start: the next boundary (a start or an unmaskable token)
        boundary = np.where(starts | ~maskable, index, length)
        following = np.full((b, length + 1), length)
        following[:, :length] = np.minimum.accumulate(boundary[:, ::-1], axis=1)[:, ::-1]
        word_length = np.where(starts, following[:, 1:] - index, 0)
        order = np.argsort(np.where(starts, keys, _TOP), axis=1)
        ranked_length = np.take_along_axis(word_length, order, axis=1)
        total = np.zeros(b, np.int64)
        take = np.zeros((b, length), bool)
        for k in range(int(starts.sum(axis=1).max(initial=0))):
            size = ranked_length[:, k]
            fits = (size > 0) & (total + size <= count)
            take[:, k] = fits
            total += np.where(fits, size, 0)
            if (total >= count).all():
                break
        chosen_start = np.zeros((b, length), bool)
        r, c = np.nonzero(take)
        chosen_start[r, order[r, c]] = True
        # a position is chosen when its word's start is
        word_start = np.maximum.accumulate(np.where(starts, index, -1), axis=1)
        return maskable & (word_start >= 0) & np.take_along_axis(
            chosen_start, np.maximum(word_start, 0), axis=1)
