"""Multi-label classification: pooled output -> dense -> one logit per label [B, C], each a
sigmoid with binary cross-entropy (the labels of an example are independent yes/no decisions).

Labels of an example: a list (JSONL `"label": ["sports", "politics"]`) or one string joined by
config.data.label_separator (CSV/TSV `sports|politics`). A label is predicted when its
probability exceeds 0.5. Metrics: micro F1 (over all label decisions), macro F1 (the mean of the
labels' F1), exact match (every label of the example right) and per-decision accuracy.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import jax.numpy as jnp
import numpy as np
import optax

from bert_jax.data.finetuning import encoding, readers
from bert_jax.recipes.finetune.kinds import by_label, register
from bert_jax.recipes.finetune.text import TextTask


def label_set(label: Any, separator: str) -> tuple[str, ...]:
    """The labels of one example: a list as given, or a string split at `separator`."""
    names = label if isinstance(label, (list, tuple)) else str(label).split(separator)
    return tuple(sorted({str(name).strip() for name in names if str(name).strip()}))


def _f1(true_positive, false_positive, false_negative) -> np.ndarray:
    denominator = 2 * true_positive + false_positive + false_negative
    return np.where(denominator > 0, 2 * true_positive / np.maximum(denominator, 1), 1.0)


def multi_label_scores(predicted: np.ndarray, gold: np.ndarray) -> dict[str, float]:
    """Scores of 0/1 decisions predicted and gold, both [N, C]."""
    predicted, gold = predicted.astype(bool), gold.astype(bool)
    tp = np.sum(predicted & gold, axis=0).astype(np.float64)
    fp = np.sum(predicted & ~gold, axis=0).astype(np.float64)
    fn = np.sum(~predicted & gold, axis=0).astype(np.float64)
    return {"micro_f1": float(_f1(tp.sum(), fp.sum(), fn.sum())),
            "macro_f1": float(np.mean(_f1(tp, fp, fn))),
            "exact_match": float(np.mean(np.all(predicted == gold, axis=1))),
            "label_accuracy": float(np.mean(predicted == gold))}


@register
class MultiLabel(TextTask):
    name = "multi_label"
    list_labels = True  # a JSON list of class names is one example's labels

    def _sets(self, examples: Sequence[readers.TextExample], config) -> list[tuple[str, ...]]:
        return [label_set(e.label, config.data.label_separator) for e in examples]

    def describe_labels(self, train_examples, config) -> dict[str, Any]:
        names = [name for labels in self._sets(train_examples, config) for name in labels]
        label_map = list(encoding.build_label_map(names))
        if len(label_map) < 2:
            raise readers.DataError(
                f"{config.data.train_path or config.data.tfds_name}: the training examples name "
                f"{len(label_map)} label ({label_map}) under data.label_column="
                f"{config.data.label_column!r}: a multi-label classifier learns nothing from "
                "one label (check the column and data.label_separator)")
        return {"label_map": label_map}

    def encode(self, tokenizer, examples, config, labels: Mapping[str, Any], source: str):
        features = self.encode_inputs(tokenizer, examples, config, source)
        index = {name: i for i, name in enumerate(labels["label_map"])}
        targets = np.zeros((len(examples), len(index)), np.float32)
        for row, names in enumerate(self._sets(examples, config)):
            unknown = [n for n in names if n not in index]
            if unknown:
                raise readers.DataError(f"{source}: example {row} has labels {unknown} that "
                                        f"the training data never had ({sorted(index)})")
            targets[row, [index[n] for n in names]] = 1.0
        features["labels"] = targets
        return features

    def loss(self, outputs, batch, example_weights):
        logits = outputs.astype(jnp.float32)  # [B, C]
        labels = batch["labels"]  # [B, C] 0/1
        per_row = jnp.sum(optax.sigmoid_binary_cross_entropy(logits, labels), axis=-1)
        correct = jnp.mean(((logits > 0) == (labels > 0.5)).astype(jnp.float32), axis=-1)
        count = jnp.sum(example_weights)
        return ({"binary_cross_entropy": (jnp.sum(per_row * example_weights), count)},
                {"label_accuracy": (jnp.sum(correct * example_weights), count)})

    def score(self, data, outputs, config):
        label_map = data.labels["label_map"]
        logits = self.example_logits(outputs, data.eval_features, len(data.eval_examples))
        probabilities = 1.0 / (1.0 + np.exp(-logits))
        predicted = probabilities > 0.5
        result = multi_label_scores(predicted, data.eval_features["labels"])
        records = [self.record(i, e, label=list(self._sets([e], config)[0]),
                               prediction=[label_map[j] for j in np.nonzero(predicted[i])[0]],
                               probabilities=by_label(label_map, probabilities[i], 6))
                   for i, e in enumerate(data.eval_examples)]
        return result, records

    def prediction_records(self, examples, features, outputs, labels, config):
        """{"text", ("text_pair"), "prediction": the labels with p > 0.5, "probabilities":
        {label: p}} per example (no "label": the input has no gold); logits [N, C] (windows:
        [F, C], averaged per example)."""
        label_map = labels["label_map"]
        probabilities = 1.0 / (1.0 + np.exp(-self.example_logits(outputs, features,
                                                                 len(examples))))
        return [{**self.input_fields(e),
                 "prediction": [label_map[j] for j in np.nonzero(row > 0.5)[0]],
                 "probabilities": by_label(label_map, row)}
                for e, row in zip(examples, probabilities)]
