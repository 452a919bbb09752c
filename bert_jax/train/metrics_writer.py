"""What a run logs: metrics.jsonl, eval_metrics.jsonl and TensorBoard events, from process 0.

One JSON object per line, `{"step": N, name: value, ...}`. A resumed run first drops the lines
past the step it resumes from, so each file reads as one uninterrupted run.
"""

from __future__ import annotations

import json
import os
from typing import Mapping

import jax

TRAIN_FILE = "metrics.jsonl"
EVAL_FILE = "eval_metrics.jsonl"

# Shown in a log line by their own formatting, not in the "name value" list.
_RATE_KEYS = ("learning_rate", "tokens_per_second", "mfu", "seconds_per_step")


class MetricsWriter:
    """metrics.jsonl / eval_metrics.jsonl + TensorBoard events, written by process 0 only."""

    def __init__(self, workdir: str, start_step: int):
        self.enabled = jax.process_index() == 0
        self.train_path = os.path.join(workdir, TRAIN_FILE)
        self.eval_path = os.path.join(workdir, EVAL_FILE)
        self.tensorboard = None
        if not self.enabled:
            return
        for path in (self.train_path, self.eval_path):
            drop_lines_after(path, start_step)
        from tensorboardX import SummaryWriter
        self.tensorboard = SummaryWriter(os.path.join(workdir, "tensorboard"),
                                         purge_step=start_step + 1 if start_step else None)

    def write(self, step: int, metrics: Mapping[str, float], evaluation: bool = False) -> None:
        if not self.enabled:
            return
        record = {"step": step, **{k: float(v) for k, v in metrics.items()}}
        with open(self.eval_path if evaluation else self.train_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        prefix = "eval/" if evaluation else "train/"
        for name, value in metrics.items():
            self.tensorboard.add_scalar(prefix + name, float(value), step)
        self.tensorboard.flush()

    def close(self) -> None:
        if self.tensorboard is not None:
            self.tensorboard.close()


def drop_lines_after(path: str, step: int) -> None:
    """Rewrite a metrics file without the records of steps after `step`."""
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        lines = [line for line in f if line.strip()]
    kept = [line for line in lines if json.loads(line)["step"] <= step]
    if len(kept) != len(lines):
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(kept)


def format_log_line(step: int, total: int, metrics: Mapping[str, float]) -> str:
    """'step 50/100: loss 2.3456, mlm_accuracy 0.1234, lr 0.001, 5000 tokens/s, MFU 1.23%'."""
    shown = [f"{k} {metrics[k]:.4f}" for k in sorted(metrics) if k not in _RATE_KEYS]
    return (f"step {step}/{total}: " + ", ".join(shown)
            + f", lr {metrics.get('learning_rate', 0.0):.3g}"
            + f", {metrics.get('tokens_per_second', 0.0):.0f} tokens/s"
            + f", MFU {100 * metrics.get('mfu', 0.0):.2f}%")
