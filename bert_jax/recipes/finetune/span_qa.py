"""Span question answering (SQuAD 1.1 / 2.0): every token -> (start, end) logits [B, L]; the loss
is the mean of the two cross-entropies. Long contexts become sliding windows (config.squad:
doc_stride, max_query_len); answers are decoded from the n best spans over all windows of a
question (n_best, max_answer_length; version_2 with no_answer_threshold). Writes
predictions.json, null_odds.json (null score - best span score per question: > the threshold
means no answer) and nbest.json.

Metrics: the official SQuAD evaluation scripts' figures (metrics.squad_v1_scores /
squad_v2_scores), as fractions in [0, 1] where the scripts print percentages (x 100).

    SQuAD 1.1 (version_2 false)   exact_match, f1
    SQuAD 2.0 (version_2 true)    exact, f1, total: all questions;
                                  HasAns_exact, HasAns_f1, HasAns_total: those with answers;
                                  NoAns_exact, NoAns_f1, NoAns_total: the unanswerable ones;
                                  best_exact, best_exact_thresh, best_f1, best_f1_thresh: the
                                  best figures over no-answer thresholds on the null odds, and
                                  the threshold (in null-odds units, usable as
                                  squad.no_answer_threshold) that reaches each

The 2.0 figures are those of the official script on predictions.json with --na-prob-file
null_odds.json --na-prob-thresh <no_answer_threshold>. Its threshold search starts from these
predictions, so a question already answered empty stays empty above its null odds: to search
thresholds above squad.no_answer_threshold, evaluate with a larger one.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Optional

import jax.numpy as jnp
import numpy as np
import optax

from bert_jax.data import textfiles
from bert_jax.data.finetuning import readers, squad, unlabelled
from bert_jax.model import families
from bert_jax.recipes.finetune import metrics
from bert_jax.recipes.finetune.kinds import TaskKind, register
from bert_jax.runtime import paths


def span_logits(start, end, attention_mask):
    """Padding positions can be neither start nor end: their logits -> a large negative."""
    invalid = attention_mask == 0
    return (jnp.where(invalid, -1e9, start.astype(jnp.float32)),
            jnp.where(invalid, -1e9, end.astype(jnp.float32)))


@register
class SpanQA(TaskKind):
    name = "span_qa"
    target_keys = ("start_positions", "end_positions")
    token_outputs = ("start_logits", "end_logits")
    slides_long_inputs = True  # always: squad.doc_stride

    def read(self, path: str, config) -> list:
        return readers.read_squad_json(path)

    def encode(self, tokenizer, examples, config, labels, source):
        window = squad.WindowConfig(config.max_seq_len, config.squad.doc_stride,
                                    config.squad.max_query_len)
        return squad.encode_qa_examples(tokenizer, examples, window)

    def make_model(self, cfg, labels):
        return families.of(cfg).question_answerer(cfg)

    def loss(self, outputs, batch, example_weights):
        start, end = span_logits(*outputs, batch["attention_mask"])
        span_loss = 0.5 * (
            optax.softmax_cross_entropy_with_integer_labels(start, batch["start_positions"])
            + optax.softmax_cross_entropy_with_integer_labels(end, batch["end_positions"]))
        total = jnp.sum(example_weights)
        return {"span_loss": (jnp.sum(span_loss * example_weights), total)}, {}

    def predict(self, outputs, batch):
        start, end = span_logits(*outputs, batch["attention_mask"])
        return {"start_logits": start, "end_logits": end}

    def score(self, data, outputs, config):
        q = config.squad
        answers = squad.decode_answers(
            data.eval_examples, data.eval_features, outputs["start_logits"],
            outputs["end_logits"], n_best=q.n_best, max_answer_length=q.max_answer_length,
            allow_no_answer=q.version_2, no_answer_threshold=q.no_answer_threshold)
        predictions = {qid: a.text for qid, a in answers.items()}
        gold = {e.id: [a.text for a in e.answers] for e in data.eval_examples}
        if q.version_2:
            null_odds = {qid: no_answer_odds(a) for qid, a in answers.items()}
            return metrics.squad_v2_scores(predictions, gold, null_odds), answers
        return metrics.squad_v1_scores(predictions, gold), answers

    def write(self, records, directory: str) -> list[str]:
        contents = {
            "predictions.json": {qid: a.text for qid, a in records.items()},
            "null_odds.json": {qid: no_answer_odds(a) for qid, a in records.items()},
            "nbest.json": {qid: [{"text": text, "score": float(s)} for text, s in a.nbest]
                           for qid, a in records.items()}}
        written = []
        for name, content in contents.items():
            written.append(os.path.join(directory, name))  # directory: local or gs://
            paths.write_text_atomically(
                written[-1], json.dumps(content, indent=1, ensure_ascii=False))
        return written

    def head_outputs(self, labels, seq_len: int) -> int:
        return 2 * seq_len

    # ----- prediction on unlabelled input ---------------------------------------------------

    def read_unlabelled(self, path: str, config, file_format: str) -> unlabelled.Rows:
        """Questions with their contexts from SQuAD-style JSON (answers optional, ignored), or
        from JSONL of {"question", "context"(, "id")} objects, one per line (format jsonl, or
        auto for a .jsonl file)."""
        if file_format == "jsonl" or (file_format == "auto" and path.endswith(".jsonl")):
            return read_question_lines(path, config.data.encoding)
        if file_format not in ("auto", "json", "squad"):
            raise readers.DataError(f"{path}: span QA reads SQuAD-style JSON (format auto, "
                                    "json or squad) or JSONL of {\"question\", \"context\"} "
                                    f"(format jsonl), not {file_format!r}")
        return unlabelled.read_unlabelled_squad(path)

    def encode_unlabelled(self, tokenizer, examples, config, labels, source):
        """Window rows (squad.encode_qa_examples, targets dropped), and how many questions
        were cut to squad.max_query_len tokens (contexts are never cut: sliding windows)."""
        features = self.encode(tokenizer, examples, config, labels, source)
        del features["start_positions"], features["end_positions"]
        limit = config.squad.max_query_len
        cut = sum(len(ids) > limit for ids in tokenizer.encode_batch(
            [e.question for e in examples]))
        return features, {f"questions truncated to squad.max_query_len={limit} tokens": cut}

    def prediction_records(self, examples, features, outputs, labels, config):
        """{"id", "question", "prediction": the answer text, "start", "end" (character offsets
        in the context, end exclusive; null for no answer), "score"} per question, decoded as
        in evaluation."""
        q = config.squad
        numbered = [dataclasses.replace(e, id=str(i)) for i, e in enumerate(examples)]
        answers = squad.decode_answers(
            numbered, features, outputs["start_logits"], outputs["end_logits"],
            n_best=q.n_best, max_answer_length=q.max_answer_length,
            allow_no_answer=q.version_2, no_answer_threshold=q.no_answer_threshold)
        records = []
        for i, example in enumerate(examples):
            answer = answers[str(i)]
            start, end = answer_span(example.context, answer, i, features, outputs)
            records.append({"id": example.id, "question": example.question,
                            "prediction": answer.text, "start": start, "end": end,
                            "score": float(answer.score) if np.isfinite(answer.score) else None})
        return records


def read_question_lines(path: str, encoding: str) -> unlabelled.Rows:
    """One QAExample (no answers) per JSONL line {"question", "context"} (an "id" is kept when
    given); a line without both strings is a bad row naming file and line."""
    textfiles.check_file(path)
    rows = unlabelled.Rows([], [], [], [])
    for index, (number, record) in enumerate(textfiles.jsonl_records(path, encoding)):
        where = f"{path}:{number}"
        if isinstance(record, str):
            rows.bad.append(f"{where}: {record}")
        elif not all(isinstance(record.get(k), str) for k in ("question", "context")):
            rows.bad.append(f"{where}: expected {{\"question\": str, \"context\": str}}, got "
                            f"the keys {sorted(record)}")
        else:
            qid = str(record["id"]) if record.get("id") is not None else None
            rows.examples.append(readers.QAExample(qid, record["question"], record["context"],
                                                   ()))
            rows.indices.append(index)
            rows.lines.append(number)
    return rows


def no_answer_odds(answer: squad.Prediction) -> float:
    """How much the null score beats the best span's (decode_answers answers empty when this
    is > no_answer_threshold); 1e9 when no span was valid (JSON has no infinity)."""
    if not np.isfinite(answer.best_span_score):
        return 1e9
    return float(answer.null_score - answer.best_span_score)


def answer_span(context: str, answer: squad.Prediction, example: int, features,
                outputs) -> tuple[Optional[int], Optional[int]]:
    """(start, end) characters, end exclusive, of the span decode_answers chose for example
    number `example`, or (None, None) for no answer: among the spans of its windows that hold
    the answer's text (the start token in its max-context window), the one whose start + end
    logit is the answer's score. features/outputs: those of the windows, [F, L, ...]."""
    best, best_gap, length = (None, None), np.inf, len(answer.text)
    if not length:
        return best
    for window in np.nonzero(features["example_index"] == example)[0]:
        offsets, max_context = features["offsets"][window], features["max_context"][window]
        starts, ends = outputs["start_logits"][window], outputs["end_logits"][window]
        for s in np.nonzero((offsets[:, 0] >= 0) & max_context)[0]:
            a = int(offsets[s, 0])
            if context[a:a + length] != answer.text:
                continue
            for e in np.nonzero((offsets[:, 1] == a + length) & (offsets[:, 0] >= 0))[0]:
                gap = abs(float(starts[s] + ends[e]) - answer.score)
                if e >= s and gap < best_gap:
                    best, best_gap = (a, a + length), gap
    return best
