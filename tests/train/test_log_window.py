"""Training curves averaged over each logging window: the logged loss (and the task's metrics,
grad_norm) is the mean over the steps since the previous log, the last batch's loss kept as
loss_last_batch; learning_rate and the non-finite counters stay the last step's."""

import json
import os

import numpy as np
import pytest

from bert_jax.recipes.finetune import recipe
from bert_jax.train import loop

from finetune_runs import text_rows, tiny_config, write_vocab


def test_window_mean_by_hand():
    last = {"loss": 3.0, "accuracy": 0.5, "learning_rate": 1e-4, "nonfinite_steps": 0.0}
    sums = {"loss": 12.0, "accuracy": 1.0}
    assert loop.window_mean(last, sums, 4) == {
        "loss": 3.0, "accuracy": 0.25, "learning_rate": 1e-4, "nonfinite_steps": 0.0,
        "loss_last_batch": 3.0}


def _metrics(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return {r["step"]: r for r in map(json.loads, f)}


def test_logged_loss_is_the_mean_of_the_window(tmp_path):
    """The same 6 steps logged every step and every 3 steps: each 3-step log is the mean of
    the three per-step losses, and its loss_last_batch the third's."""
    rng = np.random.default_rng(7)
    (tmp_path / "train.tsv").write_text(
        "text\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in text_rows(rng, 64)))
    vocab = write_vocab(tmp_path / "vocab.txt")
    logs = {}
    for every in (1, 3):
        config = tiny_config(vocab, "classification", max_seq_len=16, total_steps=6,
                             log_every_steps=every, batch_size=8,
                             **{"data.train_path": str(tmp_path / "train.tsv"),
                                "data.eval_path": str(tmp_path / "train.tsv")})
        workdir = str(tmp_path / f"every_{every}")
        recipe.train_and_evaluate(config, workdir)
        logs[every] = _metrics(workdir)
    single, windowed = logs[1], logs[3]
    assert sorted(windowed) == [3, 6]
    for step in (3, 6):
        losses = [single[s]["loss"] for s in range(step - 2, step + 1)]
        assert len(set(losses)) > 1  # the window holds different batches
        assert windowed[step]["loss"] == pytest.approx(np.mean(losses), rel=1e-5)
        assert windowed[step]["loss_last_batch"] == pytest.approx(losses[-1], rel=1e-6)
        assert windowed[step]["learning_rate"] == pytest.approx(single[step]["learning_rate"])
        assert single[step]["loss_last_batch"] == single[step]["loss"]
