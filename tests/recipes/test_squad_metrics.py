"""SQuAD 1.1 / 2.0 figures, hand-worked from the official evaluation scripts' definitions, and
the span-QA kind reporting them."""

import types

import numpy as np
import pytest

from bert_jax.data.finetuning.readers import Answer, QAExample
from bert_jax.recipes.finetune import metrics, span_qa

from finetune_runs import finetune_settings


def test_normalization_lowercases_drops_punctuation_then_articles_and_collapses_spaces():
    assert metrics.normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert metrics.normalize_answer("an apple, a pear") == "apple pear"
    # articles only as whole words: "theatre" and "anthem" stay
    assert metrics.normalize_answer("  Theatre\tand THE\nanthem ") == "theatre and anthem"
    # punctuation goes first: "a.k.a." becomes the word "aka", "the-end" the word "theend"
    assert metrics.normalize_answer("a.k.a. the-end") == "aka theend"
    assert metrics.normalize_answer("A") == "" and metrics.normalize_answer(" , ") == ""
    assert metrics.answer_exact_match("the Denver Broncos.", "Denver  broncos") == 1.0
    assert metrics.answer_exact_match("Denver", "Denver Broncos") == 0.0


def test_token_f1_counts_repeated_tokens_by_multiset_overlap():
    # pred "cat cat cat sat", gold "cat sat on mat": overlap cat x1 + sat = 2 (a set overlap
    # would give P 1); P = 2/4, R = 2/4
    assert metrics.answer_f1("the cat cat cat sat", "cat sat on the mat") == pytest.approx(0.5)
    # pred "cat cat", gold "cat cat dog": overlap 2, P = 1, R = 2/3 -> 2 * (2/3) / (5/3) = 0.8
    assert metrics.answer_f1("cat cat", "cat cat dog") == pytest.approx(0.8)
    assert metrics.answer_f1_v1("cat cat", "cat cat dog") == pytest.approx(0.8)
    # pred "denver broncos team", gold "denver broncos": P = 2/3, R = 1 -> 0.8
    assert metrics.answer_f1("Denver Broncos team", "Denver Broncos") == pytest.approx(0.8)
    assert metrics.answer_f1("Carolina", "Panthers") == 0.0


def test_empty_sides_follow_each_version():
    # an empty prediction against a non-empty gold: 0 in both versions
    for f1 in (metrics.answer_f1, metrics.answer_f1_v1):
        assert f1("", "Denver Broncos") == 0.0 and f1("Denver", "") == 0.0
    assert metrics.answer_exact_match("", "Denver Broncos") == 0.0
    # both empty after normalization: 2.0 says 1 (a correct "no answer"), 1.1 has no special case
    assert metrics.answer_f1("", "") == 1.0 and metrics.answer_f1("The", "") == 1.0
    assert metrics.answer_f1_v1("", "") == 0.0
    assert metrics.answer_exact_match("the .", "") == 1.0


def test_v1_best_over_golds_averaged_over_questions():
    predictions = {"a": "Denver Broncos", "b": "Carolina Panthers team", "c": "Paris"}
    golds = {"a": ["Broncos", "Denver Broncos team", "the Denver Broncos"],
             # b: EM 0 for both; F1 "panthers" P 1/3 R 1 -> 0.5, "carolina panthers team
             # colors" P 1 R 3/4 -> 6/7: the max over golds, from another gold than a's
             "b": ["Panthers", "Carolina Panthers team colors"],
             "c": ["London"]}
    scores = metrics.squad_v1_scores(predictions, golds)
    assert scores == {"exact_match": pytest.approx(1 / 3),
                      "f1": pytest.approx((1 + 6 / 7 + 0) / 3)}
    assert metrics.squad_scores(predictions, golds) == scores
    # golds that normalize to nothing are kept in 1.1 (F1 0 against them, EM 1 for an empty
    # prediction); a question without golds is scored against ""
    assert metrics.squad_v1_scores({"x": ""}, {"x": ["the"]}) == {"exact_match": 1.0, "f1": 0.0}
    assert metrics.squad_v1_scores({"x": "Paris"}, {"x": []}) == {"exact_match": 0.0, "f1": 0.0}
    with pytest.raises(ValueError, match=r"no prediction for question\(s\) \['b'\]"):
        metrics.squad_v1_scores({"a": "x"}, {"a": ["x"], "b": ["y"]})
    with pytest.raises(ValueError, match="version_2"):
        metrics.squad_scores(predictions, golds, no_answer_scores={"a": 0.0})


# Five questions for the 2.0 breakdown and the threshold search, listed out of no-answer order:
#   qid  gold                 prediction        no-answer score  EM  F1
#   q4   ["blue whale"]       "red fox"         0.7              0   0
#   q1   ["Denver Broncos"]   "Denver Broncos"  0.1              1   1
#   q5   []  (unanswerable)   ""                0.9              1   1
#   q3   []  (unanswerable)   "Paris"           0.5              0   0
#   q2   ["Carolina Panthers"] "Carolina"       0.3              0   2/3 (P 1, R 1/2)
V2_GOLD = {"q4": ["blue whale"], "q1": ["Denver Broncos"], "q5": [], "q3": [],
           "q2": ["Carolina Panthers"]}
V2_PREDICTIONS = {"q4": "red fox", "q1": "Denver Broncos", "q5": "", "q3": "Paris",
                  "q2": "Carolina"}
V2_NO_ANSWER = {"q4": 0.7, "q1": 0.1, "q5": 0.9, "q3": 0.5, "q2": 0.3}


def test_v2_breakdown_over_answerable_and_unanswerable_questions():
    scores = metrics.squad_v2_scores(V2_PREDICTIONS, V2_GOLD)
    assert scores == {
        "exact": pytest.approx(2 / 5), "f1": pytest.approx((1 + 1 + 2 / 3) / 5), "total": 5,
        "HasAns_exact": pytest.approx(1 / 3), "HasAns_f1": pytest.approx((1 + 2 / 3) / 3),
        "HasAns_total": 3,
        "NoAns_exact": pytest.approx(1 / 2), "NoAns_f1": pytest.approx(1 / 2), "NoAns_total": 2}
    # the split appears only for the kinds of question present
    only_answerable = metrics.squad_v2_scores({"q1": "Denver"}, {"q1": ["Denver Broncos"]})
    assert set(only_answerable) == {"exact", "f1", "total",
                                    "HasAns_exact", "HasAns_f1", "HasAns_total"}
    assert metrics.squad_scores(V2_PREDICTIONS, V2_GOLD, version_2=True) == scores


def test_v2_golds_that_normalize_to_nothing_become_the_empty_answer():
    # the gold list ["the", ","] scores as [""]: an empty prediction gets 1, and the question
    # still counts as answerable (its gold list is not empty), as in the official script
    scores = metrics.squad_v2_scores({"x": ""}, {"x": ["the", ","]})
    assert scores["exact"] == 1.0 and scores["f1"] == 1.0 and scores["HasAns_total"] == 1
    # an answer that normalizes to nothing is right for an unanswerable question
    assert metrics.squad_v2_scores({"x": "The."}, {"x": []})["NoAns_exact"] == 1.0


def test_best_threshold_walks_questions_by_no_answer_score():
    scores = metrics.squad_v2_scores(V2_PREDICTIONS, V2_GOLD, V2_NO_ANSWER)
    # Start: every question answered empty, so the two unanswerable ones score 1: total 2.
    # Then by no-answer score, each question keeps its prediction:
    #   F1: q1 (0.1) +1 -> 3 (best, t 0.1); q2 (0.3) +2/3 -> 11/3 (best, t 0.3);
    #       q3 (0.5) unanswerable with text -1 -> 8/3; q4 (0.7) +0; q5 (0.9) empty +0 -> 8/3
    #       (the overall F1 sum, as it should be with every prediction kept)
    #   EM: q1 +1 -> 3 (best, t 0.1); q2 +0 -> 3 (a tie keeps t 0.1); q3 -1 -> 2; then 2
    assert scores["best_f1"] == pytest.approx((11 / 3) / 5)
    assert scores["best_f1_thresh"] == 0.3
    assert scores["best_exact"] == pytest.approx(3 / 5)
    assert scores["best_exact_thresh"] == 0.1
    # the ordinary figures do not depend on the no-answer scores
    plain = metrics.squad_v2_scores(V2_PREDICTIONS, V2_GOLD)
    assert {k: scores[k] for k in plain} == plain


def test_best_threshold_when_answering_nothing_is_best():
    # q_a answerable but wrong (0), q_b unanswerable with text: start 1 (q_b empty); q_a +0 is
    # no gain; q_b -1. Best 1/2, and the threshold is the official starting value 0.0 even
    # though every no-answer score is negative.
    best, threshold = metrics.best_no_answer_threshold(
        scores=[0.0, 0.0], has_answer=[True, False], answered=[True, True],
        no_answer_scores=[-2.0, -1.0])
    assert (best, threshold) == (0.5, 0.0)
    # "answered" reads the raw text: "the" normalizes to nothing and scores 1 against [""], but
    # the search counts it as an answer that loses the question's 1
    scores = metrics.squad_v2_scores({"x": "the"}, {"x": []}, {"x": 0.5})
    assert scores["exact"] == 1.0
    assert scores["best_exact"] == 1.0 and scores["best_exact_thresh"] == 0.0
    assert metrics.best_no_answer_threshold([1.0], [False], [True], [0.5]) == (1.0, 0.0)
    # equal no-answer scores are walked in the given order, one question at a time: a right
    # answer then a wrong no-answer reaches 2 halfway (best, t 0.2); the other way round goes
    # 1 -> 0 -> 1 and never beats the start
    assert metrics.best_no_answer_threshold(
        [1.0, 0.0], [True, False], [True, True], [0.2, 0.2]) == (1.0, 0.2)
    assert metrics.best_no_answer_threshold(
        [0.0, 1.0], [False, True], [True, True], [0.2, 0.2]) == (0.5, 0.0)


def test_v2_needs_a_no_answer_score_for_every_question():
    with pytest.raises(ValueError, match=r"\['q5'\]"):
        metrics.squad_v2_scores(V2_PREDICTIONS, V2_GOLD,
                                {k: v for k, v in V2_NO_ANSWER.items() if k != "q5"})


# ----- the span-QA kind ------------------------------------------------------------------------

def two_questions():
    """An answerable question ("Paris") and an unanswerable one, one window of 5 positions
    each ([CLS], 3 context tokens, [SEP]), and logits that answer both right when no answer is
    allowed: "Paris" scores 5 + 5 = 10 against a null of 0 (odds -10); the unanswerable one's
    null 3 + 3 = 6 beats its best span "no" (1 + 1 = 2) by 4."""
    examples = [QAExample("qa", "Where?", "Paris is big", (Answer("Paris", 0),)),
                QAExample("qn", "Who?", "no idea here", (), is_impossible=True)]
    offsets = np.full((2, 5, 2), -1, np.int32)
    offsets[0, 1:4] = [(0, 5), (6, 8), (9, 12)]
    offsets[1, 1:4] = [(0, 2), (3, 7), (8, 12)]
    max_context = offsets[..., 0] >= 0
    features = {"example_index": np.array([0, 1]), "offsets": offsets,
                "max_context": max_context}
    start = np.array([[0, 5, 0, 0, -1e9], [3, 1, 0, 0, -1e9]], np.float32)
    data = types.SimpleNamespace(eval_examples=examples, eval_features=features)
    return data, {"start_logits": start, "end_logits": start.copy()}


@pytest.mark.parametrize("version_2", [True, False])
def test_span_qa_kind_reports_the_version_s_figures(version_2):
    data, outputs = two_questions()
    run = finetune_settings("span_qa", **{"squad.version_2": version_2})
    result, answers = span_qa.SpanQA().score(data, outputs, run)
    if version_2:
        assert {k: answers[k].text for k in answers} == {"qa": "Paris", "qn": ""}
        # search: start 1 (qn empty); qa (odds -10) +1 -> 2, best, t -10; qn (4) empty +0
        assert result == {"exact": 1.0, "f1": 1.0, "total": 2,
                          "HasAns_exact": 1.0, "HasAns_f1": 1.0, "HasAns_total": 1,
                          "NoAns_exact": 1.0, "NoAns_f1": 1.0, "NoAns_total": 1,
                          "best_exact": 1.0, "best_exact_thresh": -10.0,
                          "best_f1": 1.0, "best_f1_thresh": -10.0}
    else:
        assert answers["qn"].text == "no"  # 1.1 decoding always answers
        assert result == {"exact_match": 0.5, "f1": 0.5}
