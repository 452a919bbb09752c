"""Sequence (or pair) regression: pooled output -> dense -> one score [B], squared error.

STS-B. Metrics: Pearson and Spearman correlation, mean squared error.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from bert_jax.data.finetuning import encoding
from bert_jax.recipes.finetune import metrics
from bert_jax.recipes.finetune.kinds import register
from bert_jax.recipes.finetune.text import TextTask


@register
class Regression(TextTask):
    name = "regression"
    regression = True

    def encode(self, tokenizer, examples, config, labels, source):
        return encoding.encode_text_examples(tokenizer, examples, config.max_seq_len, None,
                                             source)

    def loss(self, outputs, batch, example_weights):
        error = outputs[..., 0].astype(jnp.float32) - batch["labels"]  # [B] (packed: [R, K])
        total = jnp.sum(example_weights)
        return {"squared_error": (jnp.sum(error ** 2 * example_weights), total)}, {}

    def score(self, data, outputs, config):
        predicted = self.example_logits(outputs, data.eval_features,
                                        len(data.eval_examples))[:, 0]
        gold = data.eval_features["labels"]
        result = {"pearson": metrics.pearson(predicted, gold),
                  "spearman": metrics.spearman(predicted, gold),
                  "mse": float(np.mean((predicted - gold) ** 2))}
        records = [self.record(i, e, prediction=float(p))
                   for i, (e, p) in enumerate(zip(data.eval_examples, predicted))]
        return result, records

    def prediction_records(self, examples, features, outputs, labels, config):
        """{"text", ("text_pair"), "prediction": the score} per example; logits [N, 1]
        (windows: [F, 1], averaged per example)."""
        scores = self.example_logits(outputs, features, len(examples))[:, 0]
        return [{**self.input_fields(e), "prediction": float(p)}
                for e, p in zip(examples, scores)]
