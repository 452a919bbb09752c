"""Held-out evaluation, during training and of saved checkpoints: two evaluators, one padding rule.

    LossEvaluator(loss_fn, make_iterator, mesh)            the held-out loss and metrics of a
                                                           steps.LossFn (pre-training)
    PredictEvaluator(predict_fn, features, score, ...)     the model's outputs for every row of
                                                           an eval set, scored by the task
                                                           (accuracy, F1, exact match, ...)

Both are `evaluate(params) -> dict[str, float]`, what `loop.train(evaluate=...)` calls every
`eval_every_steps` and at the end, and what a recipe's `evaluate(config, workdir)` calls on a
restored checkpoint, so a run's logged figures and a later re-evaluation come from the same code.
A last, partial batch is padded with zero rows weighted 0 (`bert_jax.data.batches.pad_rows`):
every batch has one shape (one compilation; with length buckets, one per bucket) and padding
counts in no sum. Each pass shows a progress bar of its batches (`bert_jax.runtime.progress`:
process 0, on a terminal or with BERT_JAX_PROGRESS=1), which changes no result.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Iterable, Mapping, Optional

import jax
import numpy as np
from jax.sharding import Mesh

from bert_jax.data import batches as batches_lib
from bert_jax.data import row_layout
from bert_jax.runtime import progress, sharding
from bert_jax.train import steps

Evaluator = Callable[[Any], dict[str, float]]
Outputs = dict[str, np.ndarray]


class LossEvaluator:
    """evaluate(params) -> {'loss', each loss term, each metric}: means over one pass.

    make_iterator() gives a fresh, finite iterator of host-local numpy batches each call;
    max_batches > 0 stops after that many batches.
    """

    def __init__(self, loss_fn: steps.LossFn,
                 make_iterator: Callable[[], Iterable[Mapping[str, np.ndarray]]], mesh: Mesh,
                 max_batches: int = 0):
        self.make_iterator, self.mesh, self.max_batches = make_iterator, mesh, max_batches
        self.eval_step = jax.jit(steps.make_eval_step(loss_fn))
        self.rows_multiple = max(1, sharding.data_parallel_size(mesh) // jax.process_count())

    def __call__(self, params) -> dict[str, float]:
        sums = None
        batches = progress.bar(itertools.islice(self.make_iterator(), self.max_batches or None),
                               total=self.max_batches or None, desc="evaluation", unit="batch")
        for batch in batches:
            rows = len(next(iter(batch.values())))
            batch = batches_lib.pad_rows(batch, row_layout.round_up(rows, self.rows_multiple))
            sums = steps.add_sums(sums, self.eval_step(
                params, sharding.device_put_batch(batch, self.mesh)))
        if sums is None:
            raise ValueError("the evaluation iterator yielded no batches")
        return steps.summarize(sums)


def predict_rows(predict_fn: Callable[[Any, Mapping[str, jax.Array]], Mapping[str, jax.Array]],
                 params, features: Mapping[str, np.ndarray], global_batch_size: int,
                 mesh: Mesh, buckets: Optional[batches_lib.Buckets] = None) -> Outputs:
    """Model outputs for every row of `features`, in order, as host numpy arrays.

    features: arrays with one row per model input row ([N, ...]), exactly the model's inputs.
    Batches have one fixed size (the last padded); predict_fn should be jitted with replicated
    out_shardings so that every process gets every row. buckets: each batch cut to the bucket
    of its longest row; predict_fn must then give outputs of one shape per row whatever the
    batch's length (finetune.recipe.make_predict_fn with seq_len does).
    """
    num_rows = len(next(iter(features.values())))
    collected: dict[str, list[np.ndarray]] = {}
    batches = progress.bar(
        batches_lib.eval_batches(features, global_batch_size, jax.process_index(),
                                 jax.process_count(), buckets),
        total=-(-num_rows // global_batch_size), desc="evaluation", unit="batch")
    for start, batch in zip(range(0, num_rows, global_batch_size), batches):
        outputs = jax.device_get(predict_fn(params, sharding.device_put_batch(batch, mesh)))
        real = min(global_batch_size, num_rows - start)
        for name, value in outputs.items():
            collected.setdefault(name, []).append(np.asarray(value)[:real])
    return {name: np.concatenate(parts) for name, parts in collected.items()}


class PredictEvaluator:
    """evaluate(params) -> the task's metrics of a whole eval set; keeps the last records.

    predict_fn(params, batch) -> {name: [B, ...] float32} (not jitted: jitted here, replicated
    outputs); score(outputs) -> (metrics, prediction records) for the rows of `features`;
    buckets: as in predict_rows.
    """

    def __init__(self, predict_fn: Callable, features: Mapping[str, np.ndarray],
                 score: Callable[[Outputs], tuple[dict[str, float], Any]],
                 global_batch_size: int, mesh: Mesh,
                 buckets: Optional[batches_lib.Buckets] = None):
        self.features, self.score, self.buckets = features, score, buckets
        self.global_batch_size, self.mesh = global_batch_size, mesh
        self.predict = jax.jit(predict_fn, out_shardings=sharding.replicated(mesh))
        self.last_records: Optional[Any] = None

    def __call__(self, params) -> dict[str, float]:
        outputs = predict_rows(self.predict, params, self.features, self.global_batch_size,
                               self.mesh, self.buckets)
        result, self.last_records = self.score(outputs)
        return result
