"""Fine-tuning metrics: against scipy where it has the metric, hand-worked cases elsewhere
(SQuAD's: tests/recipes/test_squad_metrics.py)."""

import numpy as np
import pytest
import scipy.stats

from bert_jax.embeddings import metrics as embedding_metrics
from bert_jax.recipes.finetune import metrics


def test_accuracy_f1_mcc_binary_by_hand():
    labels = [1, 1, 1, 0, 0, 0, 0, 1]
    predictions = [1, 1, 0, 0, 0, 1, 0, 1]
    # TP=3, FN=1, FP=1, TN=3
    assert metrics.accuracy(predictions, labels) == 6 / 8
    assert metrics.f1_score(predictions, labels) == pytest.approx(2 * 3 / (2 * 3 + 1 + 1))
    expected_mcc = (3 * 3 - 1 * 1) / np.sqrt(4 * 4 * 4 * 4)
    assert metrics.matthews_corrcoef(predictions, labels) == pytest.approx(expected_mcc)


def test_mcc_multiclass_and_degenerate():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, 200)
    assert metrics.matthews_corrcoef(labels, labels) == pytest.approx(1.0)
    assert metrics.matthews_corrcoef(np.zeros(10, int), labels[:10]) == 0.0  # constant prediction
    noisy = np.where(rng.random(200) < 0.3, rng.integers(0, 3, 200), labels)
    assert 0.3 < metrics.matthews_corrcoef(noisy, labels) < 1.0


def test_macro_f1_three_classes():
    labels = [0, 1, 2, 2]
    predictions = [0, 2, 2, 2]
    per_class = [1.0, 0.0, 2 * 2 / (2 * 2 + 1 + 0)]
    assert metrics.f1_score(predictions, labels, num_classes=3) == pytest.approx(np.mean(per_class))


def test_pearson_spearman_match_scipy_with_ties():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 6, 50).astype(float)  # many ties
    y = x + rng.normal(0, 2, 50)
    assert embedding_metrics.pearson(x, y) == pytest.approx(scipy.stats.pearsonr(x, y)[0],
                                                            abs=1e-12)
    assert embedding_metrics.spearman(x, y) == pytest.approx(scipy.stats.spearmanr(x, y)[0],
                                                             abs=1e-12)
    np.testing.assert_allclose(embedding_metrics.average_ranks(x), scipy.stats.rankdata(x))


def test_entity_chunks_follow_conlleval_rules():
    tags = ["B-PER", "I-PER", "O", "I-LOC", "I-LOC", "B-LOC", "B-ORG", "I-PER", "O"]
    assert metrics.entity_chunks(tags) == [
        ("PER", 0, 1),   # B I
        ("LOC", 3, 4),   # an I- after O opens a chunk (IOB1-style lenience, as seqeval)
        ("LOC", 5, 5),   # B- after I- of the same type closes the previous chunk
        ("ORG", 6, 6),
        ("PER", 7, 7),   # a type change opens a new chunk
    ]
    assert metrics.entity_chunks(["O", "O"]) == []
    assert metrics.entity_chunks(["B-MISC"]) == [("MISC", 0, 0)]  # closed at the sentence end


def test_entity_scores_micro_over_sentences():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    predicted = [["B-PER", "O", "O", "B-LOC"], ["B-ORG", "B-MISC"]]
    # gold chunks: PER(0,1) LOC(3,3) ORG(0,0) = 3; predicted: PER(0,0) LOC ORG MISC = 4; TP = 2
    scores = metrics.entity_scores(predicted, gold)
    assert scores["entity_precision"] == pytest.approx(2 / 4)
    assert scores["entity_recall"] == pytest.approx(2 / 3)
    assert scores["entity_f1"] == pytest.approx(2 * 0.5 * (2 / 3) / (0.5 + 2 / 3))
    with pytest.raises(ValueError, match="sentence 1"):
        metrics.entity_scores([["O"], ["O"]], [["O"], ["O", "O"]])


def test_classification_keys_mean_the_same_for_two_and_three_classes():
    """macro_f1 is the mean of the classes' F1 and f1_of_<label> one class's, whatever the
    class count: the binary case has no key of its own."""
    binary = metrics.classification_scores([1, 1, 0, 0, 0, 1, 0, 1], [1, 1, 1, 0, 0, 0, 0, 1],
                                           ["neg", "pos"])
    # pos: TP=3 FP=1 FN=1; neg: TP=3 FP=1 FN=1
    assert binary["f1_of_pos"] == pytest.approx(6 / 8)
    assert binary["f1_of_neg"] == pytest.approx(6 / 8)
    assert binary["macro_f1"] == pytest.approx(6 / 8)
    three = metrics.classification_scores([0, 2, 2, 2], [0, 1, 2, 2], ["a", "b", "c"])
    assert three["f1_of_a"] == 1.0 and three["f1_of_b"] == 0.0
    assert three["f1_of_c"] == pytest.approx(4 / 5)
    assert three["precision_of_c"] == pytest.approx(2 / 3) and three["recall_of_c"] == 1.0
    assert three["macro_f1"] == pytest.approx(np.mean([1.0, 0.0, 4 / 5]))
    assert three["micro_f1"] == three["accuracy"] == 3 / 4
    assert "f1" not in binary and "f1" not in three  # no key whose meaning moves
    assert {k.split("_of_")[0] for k in binary} == {k.split("_of_")[0] for k in three}


def test_confusion_matrix_and_per_class_table_from_records():
    records = [{"label": g, "prediction": p} for g, p in
               [("a", "a"), ("b", "c"), ("c", "c"), ("c", "c"), ("b", "b"), ("a", "c")]]
    tables = metrics.classification_tables(records, ["a", "b", "c"])
    assert tables["confusion_matrix"]["counts"] == [[1, 0, 1], [0, 1, 1], [0, 0, 2]]
    assert tables["per_class"]["c"] == {"precision": 0.5, "recall": 1.0,
                                        "f1": pytest.approx(2 / 3), "support": 2}
    assert tables["per_class"]["a"]["recall"] == 0.5
    with pytest.raises(ValueError, match="'d'"):
        metrics.classification_tables([{"label": "d", "prediction": "a"}], ["a", "b"])


def test_entity_scores_per_type():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    predicted = [["B-PER", "O", "O", "B-LOC"], ["B-ORG", "B-MISC"]]
    scores = metrics.entity_scores(predicted, gold)
    assert scores["entity_f1_of_LOC"] == scores["entity_f1_of_ORG"] == 1.0
    assert scores["entity_precision_of_PER"] == scores["entity_recall_of_PER"] == 0.0
    assert scores["entity_precision_of_MISC"] == 0.0  # predicted only
    assert scores["entity_recall_of_MISC"] == 0.0
