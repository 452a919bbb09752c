"""Span question answering (SQuAD 1.1 / 2.0): every token -> (start, end) logits [B, L]; the loss
is the mean of the two cross-entropies. Long contexts become sliding windows (config.squad:
doc_stride, max_query_len); answers are decoded from the n best spans over all windows of a
question (n_best, max_answer_length; version_2 with no_answer_threshold). Metrics: exact match
and F1 with SQuAD's answer normalization. Writes predictions.json, null_odds.json, nbest.json.
"""

from __future__ import annotations

import json
import os

import jax.numpy as jnp
import numpy as np
import optax

from bert_jax.data import readers, squad
from bert_jax.model import BertForQuestionAnswering
from bert_jax.recipes.finetune import metrics
from bert_jax.recipes.finetune.kinds import TaskKind, register


def span_logits(start, end, attention_mask):
    """Padding positions can be neither start nor end: their logits -> a large negative."""
    invalid = attention_mask == 0
    return (jnp.where(invalid, -1e9, start.astype(jnp.float32)),
            jnp.where(invalid, -1e9, end.astype(jnp.float32)))


@register
class SpanQA(TaskKind):
    name = "span_qa"
    target_keys = ("start_positions", "end_positions")

    def read(self, path: str, config) -> list:
        return readers.read_squad_json(path)

    def encode(self, tokenizer, examples, config, labels, source):
        window = squad.WindowConfig(config.max_seq_len, config.squad.doc_stride,
                                    config.squad.max_query_len)
        return squad.encode_qa_examples(tokenizer, examples, window)

    def make_model(self, cfg, labels):
        return BertForQuestionAnswering(cfg)

    def loss(self, outputs, batch, rows):
        start, end = span_logits(*outputs, batch["attention_mask"])
        span_loss = 0.5 * (
            optax.softmax_cross_entropy_with_integer_labels(start, batch["start_positions"])
            + optax.softmax_cross_entropy_with_integer_labels(end, batch["end_positions"]))
        return {"span_loss": (jnp.sum(span_loss * rows), jnp.sum(rows))}, {}

    def predict(self, outputs, batch):
        start, end = span_logits(*outputs, batch["attention_mask"])
        return {"start_logits": start, "end_logits": end}

    def score(self, data, outputs, config):
        q = config.squad
        answers = squad.decode_answers(
            data.eval_examples, data.eval_features, outputs["start_logits"],
            outputs["end_logits"], n_best=q.n_best, max_answer_length=q.max_answer_length,
            allow_no_answer=q.version_2, no_answer_threshold=q.no_answer_threshold)
        result = metrics.squad_scores({qid: a.text for qid, a in answers.items()},
                                      {e.id: [a.text for a in e.answers]
                                       for e in data.eval_examples})
        return result, answers

    def write(self, records, directory: str) -> list[str]:
        os.makedirs(directory, exist_ok=True)
        contents = {
            "predictions.json": {qid: a.text for qid, a in records.items()},
            "null_odds.json": {qid: float(a.null_score - a.best_span_score)
                               if np.isfinite(a.best_span_score) else 1e9
                               for qid, a in records.items()},
            "nbest.json": {qid: [{"text": text, "score": float(s)} for text, s in a.nbest]
                           for qid, a in records.items()}}
        paths = []
        for name, content in contents.items():
            paths.append(os.path.join(directory, name))
            with open(paths[-1], "w", encoding="utf-8") as f:
                json.dump(content, f, indent=1, ensure_ascii=False)
        return paths

    def head_outputs(self, labels, seq_len: int) -> int:
        return 2 * seq_len
