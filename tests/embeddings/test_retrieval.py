"""Embedding evaluation (bert_jax/embeddings, experiments/evaluate_embeddings.py): ranking
metrics against hand arithmetic, the sharded exact search against a numpy brute force on 8 CPU
devices (in a subprocess: this file run as a script), the BEIR and STS readers on tiny fixtures
written here, and the script on a tiny BEIR folder with the packaged MiniLM."""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from bert_jax.convert import hf
from bert_jax.data.textfiles import DataError
from bert_jax.embeddings import beir, evaluate, metrics, search, sts
from bert_jax.runtime import sharding

import eight_devices
from repo_root import ROOT

# ----- ranking metrics ---------------------------------------------------------------------------

def test_ranking_metrics_by_hand():
    qrels = {
        "q1": {"d1": 2, "d2": 1, "d9": 0},  # relevant: d1 (gain 2), d2 (gain 1)
        "q2": {"d5": 1, "d6": 1},
        "q3": {"d7": 0},                     # no relevant document: not scored
        "q4": {"d4": 1},                     # judged but not ranked: an empty ranking, all 0
    }
    ranked = {
        "q1": ["d3", "d1", "d9", "d2"],
        "q2": ["d5", *[f"x{i}" for i in range(10)], "d6"],  # d6 at rank 12
        "q3": ["d7"],
        "q5": ["d1"],  # not judged: ignored
    }
    # q1: recall@1 = 0/2, recall@10 = recall@100 = 2/2, mrr@10 = 1/2 (d1 at rank 2);
    #     DCG = 0/log2(2) + 2/log2(3) + 0/log2(4) + 1/log2(5) = 1.26186 + 0.43068 = 1.69254,
    #     IDCG = 2/log2(2) + 1/log2(3) = 2 + 0.63093 = 2.63093, nDCG@10 = 0.64332
    # q2: recall@1 = recall@10 = 1/2 (d6 is at rank 12), recall@100 = 2/2, mrr@10 = 1/1;
    #     DCG = 1/log2(2) = 1, IDCG = 1 + 1/log2(3) = 1.63093, nDCG@10 = 0.61315
    # q4: all 0. Means over the 3 scored queries (q1, q2, q4):
    ndcg_q1 = (2 / math.log2(3) + 1 / math.log2(5)) / (2 + 1 / math.log2(3))
    ndcg_q2 = 1 / (1 + 1 / math.log2(3))
    expected = {"recall@1": (0 + 0.5 + 0) / 3, "recall@10": (1 + 0.5 + 0) / 3,
                "recall@100": (1 + 1 + 0) / 3, "mrr@10": (0.5 + 1 + 0) / 3,
                "ndcg@10": (ndcg_q1 + ndcg_q2 + 0) / 3, "queries": 3}
    got = metrics.ranking_metrics(ranked, qrels)
    assert set(got) == set(expected)
    for name, value in expected.items():
        assert got[name] == pytest.approx(value, abs=1e-12), name
    assert got["ndcg@10"] == pytest.approx((0.64332 + 0.61315) / 3, abs=1e-5)


def test_ranking_metrics_refuse_what_cannot_be_scored():
    with pytest.raises(ValueError, match="'q1'.*'d1' more than once"):
        metrics.ranking_metrics({"q1": ["d1", "d2", "d1"]}, {"q1": {"d1": 1}})
    with pytest.raises(ValueError, match="nothing to score"):
        metrics.ranking_metrics({"q1": ["d1"]}, {"q1": {"d1": 0}})


def test_a_query_is_not_ranked_against_itself():
    data = beir.BeirData("f", "test", ["a", "q1", "b"], ["A", "Q", "B"], ["q1"], ["Q"],
                         {"q1": {"b": 1}}, 1)
    assert evaluate.rankings(data, np.array([[1, 2, 0]])) == {"q1": ["b", "a"]}


# ----- exact search on 8 devices -----------------------------------------------------------------

def brute_force(queries, corpus, k, similarity):
    """numpy float64 scores, rows by descending score, ties to the lower row (stable sort)."""
    if similarity == "cos":
        queries, corpus = (x / np.linalg.norm(x, axis=1, keepdims=True) for x in (queries, corpus))
    scores = queries.astype(np.float64) @ corpus.astype(np.float64).T
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, order, axis=1), order


# (corpus rows, dim, queries, k, query_block, mesh (data, fsdp, tensor)): rows that 8 does not
# divide, fewer rows than devices, k over a device's rows, a partial last query block.
SEARCH_CASES = {
    "37rows_k10": (37, 16, 11, 10, 4, (8, 1, 1)),
    "5rows_k100": (5, 8, 3, 100, 256, (2, 2, 2)),
    "300rows_k25": (300, 32, 20, 25, 7, (2, 4, 1)),
}


def search_case(name: str) -> tuple[np.ndarray, np.ndarray]:
    """(corpus [rows, dim], queries [count, dim]) float32 of a case: random normal, with row 0
    copied to rows // 2 and rows - 1 (ties on other devices) and taken as query 0."""
    rows, dim, count, _, _, _ = SEARCH_CASES[name]
    rng = np.random.default_rng(list(SEARCH_CASES).index(name))
    corpus = rng.normal(size=(rows, dim)).astype(np.float32)
    queries = rng.normal(size=(count, dim)).astype(np.float32)
    corpus[rows // 2] = corpus[rows - 1] = corpus[0]
    queries[0] = corpus[0]
    return corpus, queries


def _search_worker(out_dir: str) -> None:
    """In the subprocess (8 CPU devices): every case searched, the answers written back."""
    import jax

    results = {"devices": jax.device_count()}
    for name, (_, _, _, k, block, shape) in SEARCH_CASES.items():
        corpus, queries = search_case(name)
        mesh = sharding.make_mesh(*shape)
        for similarity in search.SIMILARITIES:
            index = search.shard_corpus(corpus, mesh, similarity)
            scores, ids = search.search(index, queries, k, block)
            results[f"{name}/{similarity}"] = {
                "scores": scores.tolist(), "ids": ids.tolist(),
                "shard_rows": [int(s.data.shape[0]) for s in index.vectors.addressable_shards]}
    eight_devices.write(out_dir, results)


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    return eight_devices.run(__file__, str(tmp_path_factory.mktemp("search")), timeout=300)


@pytest.mark.parametrize("similarity", ["cos", "dot"])
@pytest.mark.parametrize("case", list(SEARCH_CASES))
def test_sharded_search_equals_brute_force(searched, case, similarity):
    assert searched["devices"] == 8
    rows, _, _, k, _, _ = SEARCH_CASES[case]
    corpus, queries = search_case(case)
    expected_scores, expected_ids = brute_force(queries, corpus, min(k, rows), similarity)
    got = searched[f"{case}/{similarity}"]
    assert got["shard_rows"] == [-(-rows // 8)] * 8  # every device holds an equal slice
    np.testing.assert_array_equal(np.array(got["ids"]), expected_ids)
    np.testing.assert_allclose(np.array(got["scores"]), expected_scores, rtol=1e-5, atol=1e-5)
    # query 0 is row 0, copied to two more rows on other devices: all three first, lowest first
    assert got["ids"][0][:3] == [0, rows // 2, rows - 1]


def test_search_on_one_device_and_bad_input():
    rng = np.random.default_rng(1)
    corpus, queries = rng.normal(size=(9, 4)), rng.normal(size=(2, 4))
    scores, ids = search.exact_search(queries, corpus, 3, similarity="dot")
    expected_scores, expected_ids = brute_force(queries, corpus, 3, "dot")
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_allclose(scores, expected_scores, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="dimensions"):
        search.exact_search(queries[:, :3], corpus, 3)
    with pytest.raises(ValueError, match="NaN"):
        search.exact_search(queries, np.full((2, 4), np.nan), 3)


# ----- the BEIR reader ---------------------------------------------------------------------------

CORPUS = [
    {"_id": "d1", "title": "Guitars", "text": "A man is playing a guitar on stage."},
    {"_id": "d2", "title": "", "text": "The stock market fell sharply on Monday."},
    {"_id": "d3", "title": "Weather", "text": "Heavy rain caused flooding in the city centre."},
    {"_id": "d4", "text": "The cat sleeps on the warm windowsill."},
    {"_id": 5, "title": "Cooking", "text": "A woman is slicing an onion in the kitchen."},
]
QUERIES = [
    {"_id": "q1", "text": "someone performs music with a guitar"},
    {"_id": "q2", "text": "shares dropped at the start of the week"},
    {"_id": "q3", "text": "a city flooded after a storm"},
    {"_id": "q4", "text": "a kitten napping by the window"},
    {"_id": "q9", "text": "a query of another split"},
]
QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\nq3\td3\t2\nq3\td4\t0\nq4\td4\t1\n"


def write_beir(folder, corpus=CORPUS, queries=QUERIES, qrels=QRELS):
    (folder / "qrels").mkdir(parents=True)
    for name, records in (("corpus.jsonl", corpus), ("queries.jsonl", queries)):
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in records),
                                   encoding="utf-8")
    (folder / "qrels" / "test.tsv").write_text(qrels, encoding="utf-8")
    return folder


def test_read_beir(tmp_path):
    data = beir.read_beir(str(write_beir(tmp_path / "tiny")), "test")
    assert data.documents == ["d1", "d2", "d3", "d4", "5"]
    assert data.document_texts[0] == "Guitars A man is playing a guitar on stage."
    assert data.document_texts[1] == CORPUS[1]["text"]  # an empty title adds nothing
    assert data.document_texts[3] == CORPUS[3]["text"]  # nor does none
    assert data.queries == ["q1", "q2", "q3", "q4"]  # q9 is not judged in this split
    assert data.query_texts[3] == QUERIES[3]["text"]
    assert data.qrels["q3"] == {"d3": 2, "d4": 0}
    assert data.counts == {"documents": 5, "queries_read": 5, "queries": 4, "judgments": 5,
                           "relevant_queries": 4}


@pytest.mark.parametrize("fault, where, message", [
    ("no_corpus", "corpus.jsonl", "no such file"),
    ("not_json", "corpus.jsonl:3", "not valid JSON"),
    ("duplicate", "queries.jsonl:3", "'q1' was already given on line 1"),
    ("unknown_doc", "test.tsv:3", "corpus-id 'd8' is not in corpus.jsonl"),
    ("unknown_query", "test.tsv:2", "query-id 'q7' is not in queries.jsonl"),
    ("bad_score", "test.tsv:2", "score 'high' is not an integer"),
    ("no_split", "dev.tsv", "no such file (the splits of"),
])
def test_bad_beir_input_names_the_file_and_line(tmp_path, fault, where, message):
    corpus, queries, qrels = list(CORPUS), list(QUERIES), QRELS
    if fault == "duplicate":
        queries[2] = {"_id": "q1", "text": "again"}
    elif fault == "unknown_doc":
        qrels = QRELS.replace("q2\td2", "q2\td8")
    elif fault == "unknown_query":
        qrels = QRELS.replace("q1\td1", "q7\td1")
    elif fault == "bad_score":
        qrels = QRELS.replace("q1\td1\t1", "q1\td1\thigh")
    folder = write_beir(tmp_path / "bad", corpus, queries, qrels)
    if fault == "no_corpus":
        (folder / "corpus.jsonl").unlink()
    elif fault == "not_json":
        lines = (folder / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
        lines[2] = '{"_id": "d3", "text": '
        (folder / "corpus.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(DataError) as caught:
        beir.read_beir(str(folder), "dev" if fault == "no_split" else "test")
    assert where in str(caught.value) and message in str(caught.value)


# ----- STS ---------------------------------------------------------------------------------------

def test_sts_pairs_and_spearman(tmp_path):
    rows = [("a b", "a c", 5.0), ("d", "e", 1.0), ('say "hi', "f", 3.0), ("g", "h", 2.0)]
    (tmp_path / "pairs.tsv").write_text(
        "sentence1\tsentence2\tscore\n" + "".join(f"{a}\t{b}\t{s}\n" for a, b, s in rows),
        encoding="utf-8")
    (tmp_path / "pairs.jsonl").write_text("".join(
        json.dumps({"s1": a, "s2": b, "gold": s}) + "\n" for a, b, s in rows), encoding="utf-8")
    tsv = sts.read_pairs(str(tmp_path / "pairs.tsv"))
    jsonl = sts.read_pairs(str(tmp_path / "pairs.jsonl"), columns=("s1", "s2", "gold"))
    for pairs in (tsv, jsonl):
        assert pairs.sentences1 == [r[0] for r in rows] and pairs.sentences2[2] == "f"
        np.testing.assert_array_equal(pairs.scores, [5.0, 1.0, 3.0, 2.0])
    # Unit vectors at angle t against (1, 0): cosines cos(t) = 1, 0, 0.6, -1.
    # Ranks of the cosines 4, 2, 3, 1; of the gold scores 4, 1, 3, 2; d = 0, 1, 0, -1:
    # Spearman = 1 - 6 * sum(d^2) / (n (n^2 - 1)) = 1 - 6 * 2 / 60 = 0.8.
    cosines = np.array([1.0, 0.0, 0.6, -1.0])
    first = np.tile([[2.0, 0.0]], (4, 1))  # length 2: the cosine ignores it
    second = np.stack([cosines, np.sqrt(1 - cosines ** 2)], axis=1)
    got = sts.sts_metrics(first, second, tsv.scores)
    assert got["spearman"] == pytest.approx(0.8) and got["pairs"] == 4
    assert got["pearson"] == pytest.approx(np.corrcoef(cosines, tsv.scores)[0, 1])

    (tmp_path / "bad.csv").write_text("sentence1,sentence2,score\nx,y,1\nx,,2\n",
                                      encoding="utf-8")
    with pytest.raises(DataError, match=r"bad\.csv:3: sentence2 is empty"):
        sts.read_pairs(str(tmp_path / "bad.csv"))
    (tmp_path / "bad.jsonl").write_text('{"sentence1": "x", "sentence2": "y", "score": 1}\n'
                                        '{"sentence1": "x", "sentence2": "y", "score": "n/a"}\n',
                                        encoding="utf-8")
    with pytest.raises(DataError, match=r"bad\.jsonl:2: score 'n/a' is not a finite number"):
        sts.read_pairs(str(tmp_path / "bad.jsonl"))


# ----- the script --------------------------------------------------------------------------------

def run_script(*flags):
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, "experiments", "evaluate_embeddings.py"), *flags],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
        env={**os.environ, "JAX_PLATFORMS": "cpu"})


def test_script_on_a_tiny_beir_folder_with_minilm(tmp_path):
    folder = write_beir(tmp_path / "tiny")
    out = tmp_path / "out" / "metrics.json"
    done = run_script(f"--hf_dir={hf.packaged_minilm_dir()}", f"--beir_dir={folder}",
                      "--split=test", f"--output={out}", "--batch_size=4")
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["model"] == hf.packaged_minilm_dir() and report["data"] == str(folder)
    assert (report["split"], report["pooling"], report["similarity"]) == ("test", "mean", "cos")
    got = report["metrics"]
    assert set(got) == {"recall@1", "recall@10", "recall@100", "mrr@10", "ndcg@10", "queries",
                        "documents", "queries_read", "queries_judged", "judgments"}
    assert (got["queries"], got["queries_judged"], got["queries_read"], got["documents"],
            got["judgments"]) == (4, 4, 5, 5, 5)
    # 5 documents: every relevant one is in the top 10; MiniLM finds each query's topic first
    assert got["recall@10"] == got["recall@100"] == 1.0
    assert got["recall@1"] == got["mrr@10"] == got["ndcg@10"] == 1.0
    summary = done.stdout.strip().splitlines()
    assert len(summary) == 1 and "ndcg@10 1.0000" in summary[0]
    assert "4 of 4 judged queries scored (5 read), 5 documents" in summary[0]

    # bad input: one line naming the file and line, exit status 1, nothing written
    (folder / "queries.jsonl").write_text('{"_id": "q1", "text": "x"}\nnot json\n',
                                          encoding="utf-8")
    done = run_script(f"--hf_dir={hf.packaged_minilm_dir()}", f"--beir_dir={folder}",
                      f"--output={tmp_path / 'bad.json'}")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("evaluate_embeddings.py: error: ")
    assert f"{folder / 'queries.jsonl'}:2: not valid JSON" in last
    assert not (tmp_path / "bad.json").exists()


def test_script_takes_a_contrastive_runs_own_pooling_and_length(tmp_path):
    """No --pooling / --max_seq_len: a [CLS]-pooled contrastive run is scored with [CLS] at its
    max_seq_len, as its sentence-transformers export and MTEB encoder embed it."""
    from bert_jax.tools import saved_runs

    from export_runs import contrastive_run
    workdir, _, _ = contrastive_run(tmp_path, max_seq_len=8)
    (workdir / "task.json").write_text(json.dumps({"task": "contrastive", "pooling": "cls"}))
    folder = write_beir(tmp_path / "tiny")
    out = tmp_path / "metrics.json"
    done = run_script(f"--workdir={workdir}", f"--beir_dir={folder}", f"--output={out}")
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text(encoding="utf-8"))
    assert (report["pooling"], report["max_seq_len"], report["similarity"]) == ("cls", 8, "cos")
    want = evaluate.evaluate(saved_runs.load_encoder(workdir=str(workdir)),
                             beir.read_beir(str(folder)), pooling="cls", max_seq_len=8)
    assert report["metrics"] == pytest.approx(want, abs=1e-9)


def test_script_on_an_sts_file_with_minilm(tmp_path):
    pairs = [("A man is playing a guitar.", "Someone is playing an acoustic guitar.", 4.6),
             ("The new movie is awesome.", "The new film is so great!", 4.2),
             ("A woman is slicing an onion.", "The cat sleeps on the windowsill.", 0.4),
             ("The stock market fell sharply.", "Heavy rain caused flooding.", 0.2),
             ("Shares dropped on Monday.", "The stock market fell sharply on Monday.", 3.8)]
    (tmp_path / "sts.csv").write_text(
        "first,second,gold\n" + "".join(f'"{a}","{b}",{s}\n' for a, b, s in pairs),
        encoding="utf-8")
    out = tmp_path / "sts.json"
    done = run_script(f"--hf_dir={hf.packaged_minilm_dir()}", f"--sts_file={tmp_path / 'sts.csv'}",
                      "--sts_columns=first,second,gold", f"--output={out}", "--pooling=cls")
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["pooling"] == "cls" and "split" not in report
    got = report["metrics"]
    assert set(got) == {"spearman", "pearson", "pairs"} and got["pairs"] == 5
    assert got["spearman"] > 0.5 and -1 <= got["pearson"] <= 1
    assert "(5 pairs)" in done.stdout and f"spearman {got['spearman']:.4f}" in done.stdout

if __name__ == "__main__":
    _search_worker(sys.argv[1])
