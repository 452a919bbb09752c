"""Evaluation metrics of the fine-tuning tasks, on host numpy arrays and Python lists.

All results are fractions in [0, 1] (SQuAD's official script prints percentages: x 100).

    classification   accuracy, F1 (binary: of the positive class; more classes: macro), MCC
    regression       Pearson and Spearman correlation (Spearman with average ranks for ties)
    NER              entity-level precision / recall / F1 over (type, start, end) chunks, with
                     chunks read from BIO/IOB2 tags as seqeval's default (conlleval) mode does
    span QA          exact match and token F1 after SQuAD's answer normalization (lower case,
                     no punctuation, no articles a/an/the, single spaces), best over the gold
                     answers; an unanswerable question's gold answer is the empty string
"""

from __future__ import annotations

import collections
import re
import string
from typing import Mapping, Optional, Sequence

import numpy as np

# ----- classification ---------------------------------------------------------------------------

def accuracy(predictions: Sequence[int], labels: Sequence[int]) -> float:
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    return float(np.mean(predictions == labels)) if len(labels) else 0.0


def _f1(true_positive: float, false_positive: float, false_negative: float) -> float:
    denominator = 2 * true_positive + false_positive + false_negative
    return float(2 * true_positive / denominator) if denominator else 0.0


def f1_score(predictions: Sequence[int], labels: Sequence[int], num_classes: int = 2,
             positive_class: int = 1) -> float:
    """F1 of `positive_class` for two classes; the macro average over classes otherwise."""
    predictions, labels = np.asarray(predictions), np.asarray(labels)

    def of(c: int) -> float:
        return _f1(np.sum((predictions == c) & (labels == c)),
                   np.sum((predictions == c) & (labels != c)),
                   np.sum((predictions != c) & (labels == c)))

    if num_classes == 2:
        return of(positive_class)
    return float(np.mean([of(c) for c in range(num_classes)]))


def matthews_corrcoef(predictions: Sequence[int], labels: Sequence[int],
                      num_classes: Optional[int] = None) -> float:
    """Matthews correlation (the multi-class R_K form; equals the binary formula for two
    classes); 0 when it is undefined (a constant prediction or label)."""
    predictions, labels = np.asarray(predictions, np.int64), np.asarray(labels, np.int64)
    k = num_classes or int(max(predictions.max(initial=0), labels.max(initial=0)) + 1)
    confusion = np.zeros((k, k), np.float64)
    np.add.at(confusion, (labels, predictions), 1.0)
    total, correct = confusion.sum(), np.trace(confusion)
    predicted_per_class, true_per_class = confusion.sum(axis=0), confusion.sum(axis=1)
    numerator = correct * total - predicted_per_class @ true_per_class
    denominator = np.sqrt((total ** 2 - predicted_per_class @ predicted_per_class)
                          * (total ** 2 - true_per_class @ true_per_class))
    return float(numerator / denominator) if denominator > 0 else 0.0


# ----- regression -------------------------------------------------------------------------------

def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    x, y = x - x.mean(), y - y.mean()
    denominator = np.sqrt((x @ x) * (y @ y))
    return float((x @ y) / denominator) if denominator > 0 else 0.0


def average_ranks(values: Sequence[float]) -> np.ndarray:
    """Ranks 1..n; tied values share the mean of the ranks they span."""
    values = np.asarray(values, np.float64)
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    ranks = np.empty(len(values), np.float64)
    start = 0
    while start < len(values):
        stop = start
        while stop + 1 < len(values) and sorted_values[stop + 1] == sorted_values[start]:
            stop += 1
        ranks[order[start:stop + 1]] = (start + stop) / 2 + 1
        start = stop + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    return pearson(average_ranks(x), average_ranks(y))


# ----- entity-level F1 (NER) --------------------------------------------------------------------

def _split_tag(tag: str) -> tuple[str, str]:
    """'B-PER' -> ('B', 'PER'); 'O' -> ('O', ''); a bare 'PER' is read as ('I', 'PER')."""
    if tag == "O" or not tag:
        return "O", ""
    prefix, dash, kind = tag.partition("-")
    if dash and prefix in ("B", "I", "E", "S"):
        return prefix, kind
    return "I", tag


def _chunk_ends(previous: tuple[str, str], current: tuple[str, str]) -> bool:
    (p_prefix, p_kind), (c_prefix, c_kind) = previous, current
    if p_prefix in ("E", "S"):
        return True
    if p_prefix in ("B", "I") and c_prefix in ("B", "S", "O"):
        return True
    return p_prefix != "O" and p_kind != c_kind


def _chunk_starts(previous: tuple[str, str], current: tuple[str, str]) -> bool:
    (p_prefix, p_kind), (c_prefix, c_kind) = previous, current
    if c_prefix in ("B", "S"):
        return True
    if c_prefix in ("I", "E") and p_prefix in ("E", "S", "O"):
        return True
    return c_prefix != "O" and p_kind != c_kind


def entity_chunks(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """(type, first word, last word) of every chunk, by conlleval's rules: an I- tag after O or
    after another type opens a chunk, and a type change closes one."""
    chunks = []
    previous = ("O", "")
    opened: Optional[tuple[str, int]] = None
    for position, tag in enumerate(list(tags) + ["O"]):
        current = _split_tag(tag)
        if opened is not None and _chunk_ends(previous, current):
            chunks.append((opened[0], opened[1], position - 1))
            opened = None
        if _chunk_starts(previous, current):
            opened = (current[1], position)
        previous = current
    return chunks


def entity_scores(predicted: Sequence[Sequence[str]],
                  gold: Sequence[Sequence[str]]) -> dict[str, float]:
    """Micro precision, recall and F1 over the entity chunks of all sentences."""
    if len(predicted) != len(gold):
        raise ValueError(f"{len(predicted)} predicted sentences for {len(gold)} gold ones")
    true_positive = num_predicted = num_gold = 0
    for sentence, (p, g) in enumerate(zip(predicted, gold)):
        if len(p) != len(g):
            raise ValueError(f"sentence {sentence}: {len(p)} predicted tags for {len(g)} words")
        p_chunks, g_chunks = set(entity_chunks(p)), set(entity_chunks(g))
        true_positive += len(p_chunks & g_chunks)
        num_predicted += len(p_chunks)
        num_gold += len(g_chunks)
    precision = true_positive / num_predicted if num_predicted else 0.0
    recall = true_positive / num_gold if num_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"entity_precision": precision, "entity_recall": recall, "entity_f1": f1}


# ----- SQuAD ----------------------------------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD's normalization: lower case, drop punctuation, drop articles, collapse spaces."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def answer_exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def answer_f1(prediction: str, gold: str) -> float:
    """Token-overlap F1; if either side normalizes to nothing, 1 when both do, else 0."""
    predicted_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    if not predicted_tokens or not gold_tokens:
        return float(predicted_tokens == gold_tokens)
    overlap = collections.Counter(predicted_tokens) & collections.Counter(gold_tokens)
    common = sum(overlap.values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted_tokens), common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def squad_scores(predictions: Mapping[str, str],
                 gold_answers: Mapping[str, Sequence[str]]) -> dict[str, float]:
    """exact_match and f1 over the questions of `gold_answers` (each: its best gold answer).

    A question without gold answers (SQuAD 2.0 unanswerable) counts as gold "". When some
    questions are answerable and some not, has_answer_* and no_answer_* split the scores.
    A question with no prediction is an error naming it.
    """
    missing = [qid for qid in gold_answers if qid not in predictions]
    if missing:
        raise ValueError(f"no prediction for question(s) {missing[:5]}"
                         f"{' ...' if len(missing) > 5 else ''}")
    exact, f1, has_answer = [], [], []
    for qid, answers in gold_answers.items():
        answers = [a for a in answers if normalize_answer(a)] or [""]
        exact.append(max(answer_exact_match(predictions[qid], a) for a in answers))
        f1.append(max(answer_f1(predictions[qid], a) for a in answers))
        has_answer.append(answers != [""])
    exact, f1, has_answer = np.asarray(exact), np.asarray(f1), np.asarray(has_answer)
    out = {"exact_match": float(exact.mean()) if len(exact) else 0.0,
           "f1": float(f1.mean()) if len(f1) else 0.0}
    if has_answer.any() and not has_answer.all():
        out.update(has_answer_exact_match=float(exact[has_answer].mean()),
                   has_answer_f1=float(f1[has_answer].mean()),
                   no_answer_exact_match=float(exact[~has_answer].mean()),
                   no_answer_f1=float(f1[~has_answer].mean()))
    return out
