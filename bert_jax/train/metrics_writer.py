"""What a run logs: metrics.jsonl, eval_metrics.jsonl and TensorBoard events, from process 0.

One JSON object per line, `{"step": N, name: value, ...}`. A resumed run first drops the lines
past the step it resumes from, so each file reads as one uninterrupted run. A run killed in the
middle of writing a line leaves that last line torn: the resume drops it (with a warning), and so
does `read_metrics`; a line that is not a JSON record anywhere else in a file is an error.
"""

from __future__ import annotations

import json
import os
from typing import Mapping

import jax
from absl import logging

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


def read_metrics(path: str) -> list[dict]:
    """The records of a metrics file, in file order. A torn last line (a run killed while writing
    it) is dropped with a warning; a bad line elsewhere raises ValueError naming file and line."""
    return [record for _, record in _read_records(path)[0]]


def drop_lines_after(path: str, step: int) -> None:
    """Rewrite a metrics file without the records of steps after `step` (and without a torn last
    line, which the next append would otherwise run into)."""
    if not os.path.exists(path):
        return
    records, clean = _read_records(path)
    kept = [line for line, record in records if record["step"] <= step]
    if clean and len(kept) == len(records):
        return
    temporary = path + ".tmp"  # replaced in one step: a kill now leaves the old file whole
    with open(temporary, "w", encoding="utf-8") as f:
        f.writelines(kept)
    os.replace(temporary, path)


def _read_records(path: str) -> tuple[list[tuple[str, dict]], bool]:
    """([(line, record)] for each non-blank line of a metrics file, whether the file needs no
    repair: every line whole and newline-terminated). See read_metrics."""
    with open(path, "rb") as f:
        text = f.read().decode("utf-8", errors="replace")
    lines = [(number, line) for number, line in enumerate(text.splitlines(keepends=True), start=1)
             if line.strip()]
    records, clean = [], True
    for index, (number, line) in enumerate(lines):
        try:
            record = json.loads(line)
            step = record.get("step") if isinstance(record, dict) else None
            problem = None if isinstance(step, int) and not isinstance(step, bool) else \
                "a JSON value but not a record with an integer 'step'"
        except ValueError as e:  # JSONDecodeError, or a NUL byte left by a crash
            problem = f"not valid JSON ({e})"
        if problem is None:
            if not line.endswith("\n"):
                line, clean = line + "\n", False
            records.append((line, record))
        elif index == len(lines) - 1:
            logging.warning("%s: dropping the torn last line %d (%s): the run that wrote it was "
                            "stopped in the middle of writing it", path, number, problem)
            clean = False
        else:
            raise ValueError(f"{path}: line {number} is {problem}; only the last line of a metrics "
                             "file may be torn (by a run stopped while writing it)")
    return records, clean


def format_log_line(step: int, total: int, metrics: Mapping[str, float]) -> str:
    """'step 50/100: loss 2.3456, mlm_accuracy 0.1234, lr 0.001, 5000 tokens/s, MFU 1.23%'.

    The non-finite step counters show only once they are not 0 (metrics.jsonl has them always).
    """
    shown = [f"{k} {metrics[k]:.4f}" for k in sorted(metrics) if k not in _RATE_KEYS
             and not (k.startswith("nonfinite_") and metrics[k] == 0)]
    return (f"step {step}/{total}: " + ", ".join(shown)
            + f", lr {metrics.get('learning_rate', 0.0):.3g}"
            + f", {metrics.get('tokens_per_second', 0.0):.0f} tokens/s"
            + f", MFU {100 * metrics.get('mfu', 0.0):.2f}%")
