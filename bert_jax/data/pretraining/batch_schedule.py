"""Batch-size warm-up (ModernBERT's, Warner et al. 2024): the global batch size as a function of
the step, from a small batch to the full one over a budget of tokens. `BatchSchedule`.

    warm-up off (warmup_tokens == 0 or start == 0): every step has `full` rows
    n = min(ceil(full / start) - 1, MAX_STAGES) stages, stage k = 0 .. n-1 of
        size_k = start * floor(1 + k * (full / start - 1) / n) rows      (start = size_0 < full)
        steps_k = ceil(warmup_tokens / n / (size_k * tokens_per_row))    (at least 1)
        (stages of equal size, where full / start is not a whole number, are one stage)
    then `full` rows per step for ever.

Every size is a multiple of `start`, so a `start` that divides over the processes, the
data-parallel devices and the micro-batches makes every size do so (the recipe checks `start`
as it checks the batch size); nothing here depends on the process count or the mesh, so the
global row sequence (`rows_before`: the cumulative sum of the sizes) is the same on any layout,
and a resumed run finds its rows from the step alone. The sizes are few (at most MAX_STAGES + 1)
because the train step compiles once for each. Tokens are counted as row slots (rows x
tokens_per_row, padding included): the schedule is known before any row is read. The
learning-rate schedule stays by step.
"""

from __future__ import annotations

import bisect
import math

MAX_STAGES = 8  # at most this many sizes below the full one: each compiles the step once


class BatchSchedule:
    """Global rows per step (module docstring): `size(step)`, `rows_before(step)`, `sizes`."""

    def __init__(self, full: int, start: int = 0, warmup_tokens: int = 0,
                 tokens_per_row: int = 1):
        if full < 1 or start < 0 or warmup_tokens < 0 or tokens_per_row < 1:
            raise ValueError(f"batch schedule: full={full} must be >= 1, start={start} and "
                             f"warmup_tokens={warmup_tokens} >= 0, tokens_per_row="
                             f"{tokens_per_row} >= 1")
        self.full, self.start, self.warmup_tokens = full, start, warmup_tokens
        self.tokens_per_row = tokens_per_row
        # (first step, first global row, rows per step) of each stage, the last one endless
        self.stages: list[tuple[int, int, int]] = []
        step = row = 0
        if self.enabled:
            if start >= full:
                raise ValueError(f"data.batch_warmup_start={start} must be below the batch size "
                                 f"{full} (the warm-up rises from it to the batch size)")
            n = min(math.ceil(full / start) - 1, MAX_STAGES)
            budgets: dict[int, float] = {}  # size -> its tokens (equal sizes share a stage)
            for k in range(n):
                size = start * math.floor(1 + k * (full / start - 1) / n)
                budgets[size] = budgets.get(size, 0.0) + warmup_tokens / n
            for size, tokens in budgets.items():
                steps = max(1, math.ceil(tokens / (size * tokens_per_row)))
                self.stages.append((step, row, size))
                step, row = step + steps, row + steps * size
        self.stages.append((step, row, full))
        self._firsts = [first for first, _, _ in self.stages]

    @property
    def enabled(self) -> bool:
        return self.warmup_tokens > 0 and self.start > 0

    @property
    def warmup_steps(self) -> int:
        """The first step of `full` rows (0 without a warm-up)."""
        return self.stages[-1][0]

    @property
    def sizes(self) -> tuple[int, ...]:
        """Every size the schedule uses, in order."""
        return tuple(size for _, _, size in self.stages)

    def _stage(self, step: int) -> tuple[int, int, int]:
        if step < 0:
            raise ValueError(f"step {step} of a batch schedule must be >= 0")
        return self.stages[bisect.bisect_right(self._firsts, step) - 1]

    def size(self, step: int) -> int:
        """Global rows of `step`."""
        return self._stage(step)[2]

    def rows_before(self, step: int) -> int:
        """Global rows of steps 0 .. step - 1: the first global row of `step`."""
        first, row, size = self._stage(step)
        return row + (step - first) * size

    def sizes_before(self, step: int) -> tuple[int, ...]:
        """The distinct sizes of steps 0 .. step - 1 (of step 0 when step is 0)."""
        return tuple(size for first, _, size in self.stages if first < max(step, 1))

    def identity(self) -> list[int]:
        """What decides the schedule (for fingerprints): [] when off."""
        return [self.start, self.warmup_tokens] if self.enabled else []

    def describe(self) -> str:
        if not self.enabled:
            return f"{self.full} rows every step"
        stages = ", ".join(f"{size} from step {first}" for first, _, size in self.stages)
        return (f"batch-size warm-up over {self.warmup_tokens:,} tokens: {stages} (global rows "
                "per step)")
