"""Sliding windows over inputs longer than a row: where each window starts and stops, which
window a word is read from, and how the windows' outputs fold back into one per input.

Over tokens (`window_starts`; span QA's contexts and long texts): windows of `window` tokens,
`stride` tokens apart, until the last token is in one; a sequence that fits is one window.

Over words (`word_spans`; token classification): each window holds whole words, as many as fit
in `window` sub-word tokens (a word longer than the window counts as `window` tokens: the row
keeps its first pieces); the next window starts at the first word at least `stride` tokens
after this window's start, or at this window's end if that comes first, so no word is skipped.
Each word is read from one window (`nearest_windows`): of those holding it, the one whose
centre is nearest to the word's centre (the most context on both sides); a tie goes to the
earlier window.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def window_starts(num_tokens: int, window: int, stride: int) -> list[int]:
    """Starts of windows of `window` tokens, `stride` apart, until the last token is covered."""
    starts = [0]
    while starts[-1] + window < num_tokens:
        starts.append(starts[-1] + stride)
    return starts


def token_spans(num_tokens: int, window: int, stride: int) -> list[tuple[int, int]]:
    """(start, stop) of each window over `num_tokens` tokens (window_starts); [(0, num_tokens)]
    when they fit in one."""
    return [(start, min(start + window, num_tokens))
            for start in window_starts(num_tokens, window, stride)]


def word_spans(lengths: Sequence[int], window: int, stride: int) -> list[tuple[int, int]]:
    """(first word, stop word) of each window over words of `lengths` sub-word tokens (module
    docstring); [(0, len(lengths))] when all fit in one window, [(0, 0)] for no words."""
    if window < 1 or stride < 1:
        raise ValueError(f"window={window} and stride={stride} must be positive")
    offsets = np.concatenate([[0], np.cumsum(np.minimum(lengths, window))])
    spans, first = [], 0
    while True:
        stop = int(np.searchsorted(offsets, offsets[first] + window, side="right")) - 1
        spans.append((first, stop))
        if stop >= len(lengths):
            return spans
        after = int(np.searchsorted(offsets, offsets[first] + stride, side="left"))
        first = min(after, stop)


def nearest_windows(lengths: Sequence[int], window: int,
                    spans: Sequence[tuple[int, int]]) -> np.ndarray:
    """[W] int: for each word, the index in `spans` (word_spans) of the window it is read
    from: the window holding it whose centre, in tokens, is nearest to the word's centre."""
    offsets = np.concatenate([[0], np.cumsum(np.minimum(lengths, window))])
    word_centres = (offsets[:-1] + offsets[1:] - 1) / 2
    chosen = np.full(len(lengths), -1, np.int64)
    best = np.full(len(lengths), np.inf)
    for k, (first, stop) in enumerate(spans):
        centre = (offsets[first] + offsets[stop] - 1) / 2
        distance = np.abs(word_centres[first:stop] - centre)
        closer = distance < best[first:stop]  # strictly: a tie keeps the earlier window
        chosen[first:stop][closer] = k
        best[first:stop][closer] = distance[closer]
    return chosen


def mean_by_example(values: np.ndarray, example_index: np.ndarray,
                    num_examples: int) -> np.ndarray:
    """values [F, ...] of windows -> [num_examples, ...]: the mean over each example's windows
    (example_index [F]: the example of each window; every example has at least one)."""
    sums = np.zeros((num_examples,) + values.shape[1:], np.float64)
    np.add.at(sums, example_index, values)
    counts = np.bincount(example_index, minlength=num_examples)
    if np.any(counts == 0):
        raise ValueError(f"examples {np.nonzero(counts == 0)[0][:5].tolist()} have no window")
    return (sums / counts.reshape((-1,) + (1,) * (values.ndim - 1))).astype(values.dtype)
