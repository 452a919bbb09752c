"""Sequence (or pair) classification: pooled output -> dense -> logits [B, C], cross-entropy.

SST-2, MRPC, MNLI, polarity. Metrics (metrics.classification_scores): accuracy, macro_f1,
micro_f1, Matthews correlation, precision/recall/F1 of each class (f1_of_<label>, ...), and the
majority-class baseline for reference.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from bert_jax.data.finetuning import encoding, readers
from bert_jax.recipes.finetune import metrics
from bert_jax.recipes.finetune.kinds import by_label, register, softmax
from bert_jax.recipes.finetune.losses import softmax_cross_entropy
from bert_jax.recipes.finetune.text import TextTask


@register
class Classification(TextTask):
    name = "classification"
    stratify_by_label = True

    def describe_labels(self, train_examples: Sequence[Any], config) -> dict[str, Any]:
        labels = [e.label for e in train_examples]
        label_map = list(encoding.build_label_map(labels))
        if len(label_map) < 2:
            raise readers.DataError(
                f"{config.data.train_path or config.data.tfds_name}: every training example has "
                f"the class {label_map[0] if label_map else None!r} (data.label_column="
                f"{config.data.label_column!r}): a classifier trained on one class predicts it "
                "whatever the input; check the column, or the split (data.heldout_fraction)")
        return {"label_map": label_map,
                "majority_label": encoding.majority_label(labels)}

    def encode(self, tokenizer, examples, config, labels: Mapping[str, Any], source: str):
        return encoding.encode_text_examples(tokenizer, examples, config.max_seq_len,
                                             labels["label_map"], source)

    def loss(self, outputs, batch, example_weights):
        # outputs [B, C]
        return softmax_cross_entropy(outputs, batch["labels"], example_weights, "accuracy")

    def score(self, data, outputs, config):
        label_map = data.labels["label_map"]
        logits = self.example_logits(outputs, data.eval_features, len(data.eval_examples))
        predicted = np.argmax(logits, -1)
        gold = data.eval_features["labels"]
        majority = data.labels.get("majority_label")
        result = {**metrics.classification_scores(predicted, gold, label_map),
                  "majority_baseline_accuracy": float(np.mean(
                      [e.label == majority for e in data.eval_examples]))}
        probabilities = softmax(logits)
        records = [self.record(i, e, prediction=label_map[p],
                               probabilities=by_label(label_map, probabilities[i], 6))
                   for i, (e, p) in enumerate(zip(data.eval_examples, predicted))]
        return result, records

    def prediction_records(self, examples, features, outputs, labels, config):
        """{"text", ("text_pair"), "prediction": the most probable class, "probabilities":
        {class: p}} per example (no "label": the input has no gold); logits [N, C] (windows:
        [F, C], averaged per example)."""
        label_map = labels["label_map"]
        logits = self.example_logits(outputs, features, len(examples))
        predicted = np.argmax(logits, -1)
        probabilities = softmax(logits)
        return [{**self.input_fields(e), "prediction": label_map[p],
                 "probabilities": by_label(label_map, row)}
                for e, p, row in zip(examples, predicted, probabilities)]
