"""The pieces of experiments/elsewhere_demo.py that need no model (issue 39): a BEIR folder
written from text pairs reads back as written, given vectors are scored as evaluate scores an
encoder's, and two MTEB result files are compared score by score."""

import json
import math

import numpy as np
import pytest

from bert_jax.embeddings import beir, evaluate
from bert_jax.tools import embedding_peers

PAIRS = [("Return the sum of two numbers.", "Both arguments are added; ints stay ints."),
         ("Open a file for reading.", "The path is resolved first; a missing file raises."),
         ("Sort a list in place.", "Équal items keep their order (the sort is stable).")]


def test_pairs_become_a_beir_folder_that_reads_back(tmp_path):
    assert beir.pairs_to_beir(str(tmp_path / "b"), PAIRS) == {"queries": 3, "documents": 3}
    data = beir.read_beir(str(tmp_path / "b"), "test")
    assert data.documents == ["d0", "d1", "d2"] and data.queries == ["q0", "q1", "q2"]
    assert data.document_texts == [p[1] for p in PAIRS]
    assert data.query_texts == [p[0] for p in PAIRS]
    assert data.qrels == {"q0": {"d0": 1}, "q1": {"d1": 1}, "q2": {"d2": 1}}
    with pytest.raises(ValueError, match="not given"):
        beir.write_beir(str(tmp_path / "c"), {"d0": "x"}, {"q0": "y"}, {"q0": {"d9": 1}})
    assert not (tmp_path / "c").exists()


def test_given_vectors_are_scored_as_the_metrics_say(tmp_path):
    beir.pairs_to_beir(str(tmp_path / "b"), PAIRS)
    data = beir.read_beir(str(tmp_path / "b"))
    documents = np.eye(3, 4, dtype=np.float32)
    # q0 finds d0 first; q1 and q2 find each other's document first and their own second
    queries = np.array([[1, 0, 0, 0], [0, 0.5, 1, 0], [0, 1, 0.5, 0]], np.float32)
    out = evaluate.beir_metrics(data, documents, queries, "cos")
    assert out["recall@1"] == pytest.approx(1 / 3)
    assert out["mrr@10"] == pytest.approx((1 + 0.5 + 0.5) / 3)
    assert (out["documents"], out["queries_judged"], out["judgments"]) == (3, 3, 3)
    with pytest.raises(ValueError, match="2 document and 3 query vectors"):
        evaluate.beir_metrics(data, documents[:2], queries)


def write_result(path, scores):
    path.write_text(json.dumps({"task_name": "t", "scores": {"test": [
        {"hf_subset": "default", "languages": ["eng-Latn"], **scores}]}}))
    return str(path)


def test_result_files_compare_score_by_score(tmp_path):
    a = embedding_peers.mteb_scores(write_result(
        tmp_path / "a.json", {"main_score": 0.5, "ndcg_at_10": 0.5, "nauc": float("nan")}))
    assert a["test"]["main_score"] == 0.5 and set(a["test"]) == {"main_score", "ndcg_at_10",
                                                                 "nauc"}
    b = embedding_peers.mteb_scores(write_result(
        tmp_path / "b.json", {"main_score": 0.5, "ndcg_at_10": 0.5 + 1e-7, "nauc": float("nan")}))
    assert embedding_peers.score_difference(a, b) == pytest.approx(1e-7)
    c = embedding_peers.mteb_scores(write_result(
        tmp_path / "c.json", {"main_score": 0.5, "ndcg_at_10": 0.5, "nauc": 0.1}))
    assert math.isinf(embedding_peers.score_difference(a, c))
    with pytest.raises(ValueError, match="same splits and scores"):
        embedding_peers.score_difference(a, {"test": {"main_score": 0.5}})
