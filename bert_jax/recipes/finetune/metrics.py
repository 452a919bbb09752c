"""Evaluation metrics of the fine-tuning tasks, on host numpy arrays and Python lists.

All results are fractions in [0, 1] (SQuAD's official scripts print percentages: x 100), except
SQuAD 2.0's question counts (total, *_total) and no-answer thresholds (*_thresh).

    classification   accuracy, macro_f1 (the mean of the classes' F1), micro_f1 (= accuracy
                     for one label per example), MCC, and per class precision_of_<label>,
                     recall_of_<label>, f1_of_<label>: the same keys for 2 classes as for 3+;
                     the confusion matrix (gold rows, predicted columns) beside them
    NER (types)      entity_precision_of_<type>, entity_recall_of_<type>, entity_f1_of_<type>
    regression       Pearson and Spearman correlation (Spearman with average ranks for ties)
    NER              entity-level precision / recall / F1 over (type, start, end) chunks, with
                     chunks read from BIO/IOB2 tags as seqeval's default (conlleval) mode does
    span QA          the official SQuAD scripts' figures: exact match and token F1 after the
                     answer normalization (lower case, no punctuation, no articles a/an/the,
                     single spaces), best over the gold answers, mean over the questions;
                     v1.1 {exact_match, f1}; v2.0 {exact, f1, total} with the HasAns_* / NoAns_*
                     breakdown and the best no-answer threshold (best_exact, best_f1, *_thresh)
"""

from __future__ import annotations

import collections
import re
import string
from typing import Iterable, Mapping, Optional, Sequence

import numpy as np

# Re-exported (`x as x`): the regression kind and the suites score with metrics.pearson and
# metrics.spearman; the correlations live in bert_jax.embeddings.metrics (STS uses them too).
from bert_jax.embeddings.metrics import pearson as pearson
from bert_jax.embeddings.metrics import spearman as spearman

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


def confusion_matrix(predictions: Sequence[int], labels: Sequence[int],
                     num_classes: int) -> np.ndarray:
    """Counts [C, C]: row = the gold class, column = the predicted class."""
    counts = np.zeros((num_classes, num_classes), np.int64)
    np.add.at(counts, (np.asarray(labels, np.int64), np.asarray(predictions, np.int64)), 1)
    return counts


def _precision_recall_f1(true_positive, num_predicted, num_gold) -> tuple[float, float, float]:
    precision = float(true_positive / num_predicted) if num_predicted else 0.0
    recall = float(true_positive / num_gold) if num_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def per_class_scores(predictions: Sequence[int], labels: Sequence[int],
                     label_map: Sequence[str]) -> dict[str, dict[str, float]]:
    """{label: {"precision", "recall", "f1", "support" (gold examples)}} of each class of
    label_map (class i = label_map[i]); a class never predicted has precision 0."""
    counts = confusion_matrix(predictions, labels, len(label_map))
    table = {}
    for c, name in enumerate(label_map):
        precision, recall, f1 = _precision_recall_f1(counts[c, c], counts[:, c].sum(),
                                                     counts[c].sum())
        table[str(name)] = {"precision": precision, "recall": recall, "f1": f1,
                            "support": int(counts[c].sum())}
    return table


def classification_scores(predictions: Sequence[int], labels: Sequence[int],
                          label_map: Sequence[str]) -> dict[str, float]:
    """Flat scalar metrics of single-label classification (the same keys for any number of
    classes): accuracy, macro_f1, micro_f1, mcc, and precision_of_<label>, recall_of_<label>,
    f1_of_<label> for each label. Scalars only, so that they log as curves."""
    table = per_class_scores(predictions, labels, label_map)
    out = {"accuracy": accuracy(predictions, labels),
           "macro_f1": float(np.mean([row["f1"] for row in table.values()])),
           # one label per example: every miss is one FP and one FN, so micro F1 = accuracy
           "micro_f1": accuracy(predictions, labels),
           "mcc": matthews_corrcoef(predictions, labels, len(label_map))}
    for name, row in table.items():
        out.update({f"precision_of_{name}": row["precision"],
                    f"recall_of_{name}": row["recall"], f"f1_of_{name}": row["f1"]})
    return out


def classification_tables(records: Sequence[Mapping[str, object]],
                          label_map: Sequence[str]) -> dict[str, object]:
    """{"per_class": per_class_scores, "confusion_matrix": {"labels", "counts" [C, C] (rows:
    gold, columns: predicted)}} of prediction records with a gold "label" and a "prediction"
    (a run's predictions.jsonl); records whose labels are not in label_map are an error."""
    index = {str(name): i for i, name in enumerate(label_map)}
    unknown = sorted({str(r[k]) for r in records for k in ("label", "prediction")} - set(index))
    if unknown:
        raise ValueError(f"labels {unknown[:5]} are not among the run's {list(index)}")
    gold = [index[str(r["label"])] for r in records]
    predicted = [index[str(r["prediction"])] for r in records]
    return {"per_class": per_class_scores(predicted, gold, list(index)),
            "confusion_matrix": {"labels": list(index), "rows": "gold", "columns": "predicted",
                                 "counts": confusion_matrix(predicted, gold,
                                                            len(index)).tolist()}}


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
    """Micro precision, recall and F1 over the entity chunks of all sentences
    (entity_precision, entity_recall, entity_f1), and the same per entity type of the gold or
    predicted chunks (entity_precision_of_<type>, entity_recall_of_<type>,
    entity_f1_of_<type>)."""
    if len(predicted) != len(gold):
        raise ValueError(f"{len(predicted)} predicted sentences for {len(gold)} gold ones")
    # counts[type] = [true positives, predicted, gold]; "" sums every type
    counts: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0, 0])
    for sentence, (p, g) in enumerate(zip(predicted, gold)):
        if len(p) != len(g):
            raise ValueError(f"sentence {sentence}: {len(p)} predicted tags for {len(g)} words")
        p_chunks, g_chunks = set(entity_chunks(p)), set(entity_chunks(g))
        for position, chunks in ((0, p_chunks & g_chunks), (1, p_chunks), (2, g_chunks)):
            for chunk in chunks:
                counts[""][position] += 1
                counts[chunk[0]][position] += 1
    out = {}
    for kind in [""] + sorted(k for k in counts if k):
        suffix = f"_of_{kind}" if kind else ""
        precision, recall, f1 = _precision_recall_f1(*counts[kind])
        out.update({f"entity_precision{suffix}": precision, f"entity_recall{suffix}": recall,
                    f"entity_f1{suffix}": f1})
    return out


# ----- SQuAD ----------------------------------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD's normalization, in this order: lower case, drop ASCII punctuation, drop the whole
    words a/an/the, collapse runs of whitespace to one space (no leading or trailing space)."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def answer_exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def _token_overlap_f1(predicted_tokens: Sequence[str], gold_tokens: Sequence[str]) -> float:
    """F1 of the multiset overlap (a token repeated k times matches at most k times); 0 when
    nothing overlaps, including when both sides are empty."""
    overlap = collections.Counter(predicted_tokens) & collections.Counter(gold_tokens)
    common = sum(overlap.values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted_tokens), common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def answer_f1(prediction: str, gold: str) -> float:
    """SQuAD 2.0's token F1: if either side normalizes to nothing, 1 when both do, else 0 (so an
    empty prediction for an unanswerable question scores 1); the token overlap F1 otherwise."""
    predicted_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    if not predicted_tokens or not gold_tokens:
        return float(predicted_tokens == gold_tokens)
    return _token_overlap_f1(predicted_tokens, gold_tokens)


def answer_f1_v1(prediction: str, gold: str) -> float:
    """SQuAD 1.1's token F1: the token overlap F1 with no special case, so 0 whenever a side
    normalizes to nothing (1.1 has no unanswerable questions to score)."""
    return _token_overlap_f1(normalize_answer(prediction).split(),
                             normalize_answer(gold).split())


def _check_predicted(predictions: Mapping[str, str], questions: Iterable[str]) -> None:
    """Every question needs a prediction: a missing one would silently change the average."""
    missing = [qid for qid in questions if qid not in predictions]
    if missing:
        raise ValueError(f"no prediction for question(s) {missing[:5]}"
                         f"{' ...' if len(missing) > 5 else ''}")


def _mean(values: np.ndarray) -> float:
    return float(np.mean(values)) if len(values) else 0.0


def squad_v1_scores(predictions: Mapping[str, str],
                    gold_answers: Mapping[str, Sequence[str]]) -> dict[str, float]:
    """SQuAD 1.1's figures: {"exact_match", "f1"}, each question's best over its gold answers
    (answer_exact_match, answer_f1_v1), averaged over the questions of `gold_answers`.

    Fractions in [0, 1]: the official script prints these x 100. A question without gold answers
    (which 1.1 does not have) is scored against the gold "" by the same rules: its exact match is
    1 only for a prediction that normalizes to nothing, its F1 is 0. A question with no prediction
    is an error naming it.
    """
    _check_predicted(predictions, gold_answers)
    exact, f1 = [], []
    for qid, answers in gold_answers.items():
        answers = list(answers) or [""]
        exact.append(max(answer_exact_match(predictions[qid], a) for a in answers))
        f1.append(max(answer_f1_v1(predictions[qid], a) for a in answers))
    return {"exact_match": _mean(np.asarray(exact)), "f1": _mean(np.asarray(f1))}


def _v2_golds(answers: Sequence[str]) -> list[str]:
    """The gold answers SQuAD 2.0 scores against: those that normalize to something, or [""]
    when none does (an unanswerable question)."""
    return [a for a in answers if normalize_answer(a)] or [""]


def squad_v2_scores(predictions: Mapping[str, str], gold_answers: Mapping[str, Sequence[str]],
                    no_answer_scores: Optional[Mapping[str, float]] = None
                    ) -> dict[str, float]:
    """SQuAD 2.0's figures over the questions of `gold_answers` (gold: [] when unanswerable).

    Each question scores its best over `_v2_golds` (answer_exact_match, answer_f1), so an
    unanswerable one scores 1 exactly when the prediction normalizes to nothing. Reported:

        exact, f1, total                     over all questions (total: how many)
        HasAns_exact, HasAns_f1, HasAns_total    over those with gold answers (if any)
        NoAns_exact, NoAns_f1, NoAns_total       over those without (if any)
        best_exact, best_exact_thresh,       with `no_answer_scores` (question -> how strongly
        best_f1, best_f1_thresh              "no answer" is predicted): `best_no_answer_threshold`
                                             of the exact and F1 scores

    exact/f1 figures are fractions in [0, 1] (the official script prints them x 100); totals
    are counts; thresholds are in the units of `no_answer_scores`. A question "has an answer"
    when its gold list is non-empty, as in the official script. A question with no prediction is
    an error naming it.
    """
    _check_predicted(predictions, gold_answers)
    qids = list(gold_answers)
    exact = np.asarray([max(answer_exact_match(predictions[q], a)
                            for a in _v2_golds(gold_answers[q])) for q in qids])
    f1 = np.asarray([max(answer_f1(predictions[q], a) for a in _v2_golds(gold_answers[q]))
                     for q in qids])
    has_answer = np.asarray([bool(gold_answers[q]) for q in qids], bool)
    out: dict[str, float] = {"exact": _mean(exact), "f1": _mean(f1), "total": len(qids)}
    for name, part in (("HasAns", has_answer), ("NoAns", ~has_answer)):
        if part.any():
            out.update({f"{name}_exact": _mean(exact[part]), f"{name}_f1": _mean(f1[part]),
                        f"{name}_total": int(part.sum())})
    if no_answer_scores is not None:
        _check_predicted(no_answer_scores, qids)
        order = np.asarray([no_answer_scores[q] for q in qids], np.float64)
        answered = np.asarray([bool(predictions[q]) for q in qids], bool)
        for name, scores in (("exact", exact), ("f1", f1)):
            best, threshold = best_no_answer_threshold(scores, has_answer, answered, order)
            out[f"best_{name}"], out[f"best_{name}_thresh"] = best, threshold
    return out


def best_no_answer_threshold(scores: Sequence[float], has_answer: Sequence[bool],
                             answered: Sequence[bool], no_answer_scores: Sequence[float]
                             ) -> tuple[float, float]:
    """(best mean score, its threshold) over the thresholds t of "predict no answer when the
    question's no-answer score > t", per question: `scores` with the prediction kept,
    `has_answer` (gold answers exist), `answered` (the prediction is non-empty text).

    The walk starts with every question answered empty: each unanswerable question scores 1.
    Then, in the order of increasing no-answer score (ties in the given order), t rises to each
    question's score and that question keeps its prediction: an answerable one adds its score,
    an unanswerable one with a non-empty prediction loses its 1 (an empty one stays 1). The best
    running total wins, the earliest on ties, and t is the no-answer score of the question it
    was reached at. When no step beats answering nothing, t is 0.0, the official script's
    starting value, whatever the scale of the no-answer scores. The mean is over all questions.
    Like the official script, `answered` looks at the raw text: a prediction such as "the",
    which normalizes to nothing, counts as an answer here though it scores 1 against [""].
    """
    scores = np.asarray(scores, np.float64)
    has_answer, answered = np.asarray(has_answer, bool), np.asarray(answered, bool)
    running = best = float(np.sum(~has_answer))
    threshold = 0.0
    for i in np.argsort(np.asarray(no_answer_scores, np.float64), kind="stable"):
        running += scores[i] if has_answer[i] else -float(answered[i])
        if running > best:
            best, threshold = running, float(no_answer_scores[i])
    return (best / len(scores) if len(scores) else 0.0), threshold


def squad_scores(predictions: Mapping[str, str], gold_answers: Mapping[str, Sequence[str]],
                 version_2: bool = False,
                 no_answer_scores: Optional[Mapping[str, float]] = None) -> dict[str, float]:
    """squad_v2_scores when `version_2` (no_answer_scores: see there), else squad_v1_scores."""
    if version_2:
        return squad_v2_scores(predictions, gold_answers, no_answer_scores)
    if no_answer_scores is not None:
        raise ValueError("no_answer_scores are for SQuAD 2.0 (version_2=True) only")
    return squad_v1_scores(predictions, gold_answers)
