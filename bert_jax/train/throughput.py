"""Training throughput between two log points: seconds per step, tokens/s, computed positions/s,
MFU, and the XLA compilations that fell between them.

peak_flops_per_device 0 looks the peak up by device kind (bert_jax.train.flops).
"""

from __future__ import annotations

import time
from typing import Any, Mapping

import jax
import numpy as np

from bert_jax.train import flops

_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_compilations = [0]  # XLA compilations in this process since the listener was registered
_listening = [False]


def _count_compilation(event: str, duration: float, **kwargs) -> None:
    del duration, kwargs
    if event == _COMPILE_EVENT:
        _compilations[0] += 1


def compilations() -> int:
    """XLA compilations in this process so far (counted from the first call on; programs loaded
    from the persistent compilation cache are not compilations)."""
    if not _listening[0]:
        jax.monitoring.register_event_duration_secs_listener(_count_compilation)
        _listening[0] = True
    return _compilations[0]


class Throughput:
    """seconds_per_step, tokens_per_second, computed_positions_per_second, MFU and compilations
    between two log points (evaluation excluded).

    Tokens are counted from the batches as they go by: the real tokens (attention_mask, or
    segment_ids of packed rows, non-zero) and the positions computed (the batch's shape), this
    process's share times the process count. tokens_per_second counts real tokens only, so
    padding, length buckets and packed rows do not inflate it; computed_positions_per_second
    counts every position of every row, padding included (what the device computed); MFU scales
    the task's flops_per_step (stated for tokens_per_step positions) by the positions computed.
    A batch with neither key counts tokens_per_step for both. `compilations` is the number of XLA
    compilations in the interval: 0 in a steady state (the train program compiles its batch
    shapes before the first step, bert_jax.train.program).
    """

    def __init__(self, flops_per_step: float, tokens_per_step: int, peak_flops_per_device: float,
                 start_step: int):
        self.flops_per_step, self.tokens_per_step = flops_per_step, tokens_per_step
        self.step, self.time = start_step, time.perf_counter()
        self.compiled = compilations()
        self.peak = peak_flops_per_device or flops.peak_flops_per_device()
        # Forced host devices share the same cores: the CPU peak is per process, not per device.
        self.num_peak_devices = (jax.process_count() if jax.devices()[0].platform == "cpu"
                                 else jax.device_count())
        self.real = self.computed = 0

    def restart(self) -> None:
        self.time = time.perf_counter()
        self.compiled = compilations()

    def count(self, host_batch: Mapping[str, Any]) -> None:
        """Adds one step's batch (this process's rows) to the counts."""
        tokens = host_batch.get("attention_mask", host_batch.get("segment_ids"))
        if tokens is None:
            self.real += self.tokens_per_step
            self.computed += self.tokens_per_step
            return
        self.real += int(np.count_nonzero(tokens)) * jax.process_count()
        self.computed += int(np.size(tokens)) * jax.process_count()

    def measure(self, step: int) -> dict[str, float]:
        now = time.perf_counter()
        steps_done = max(step - self.step, 1)
        seconds = now - self.time
        seconds_per_step = seconds / steps_done
        computed_share = (self.computed / (steps_done * self.tokens_per_step)
                          if self.tokens_per_step else 1.0)
        compiled = compilations()
        result = {"seconds_per_step": seconds_per_step,
                  "tokens_per_second": self.real / seconds,
                  "computed_positions_per_second": self.computed / seconds,
                  "mfu": flops.mfu(self.flops_per_step * computed_share, seconds_per_step,
                                   self.num_peak_devices, self.peak),
                  "compilations": float(compiled - self.compiled)}
        self.step, self.time, self.real, self.computed = step, now, 0, 0
        self.compiled = compiled
        return result
