"""MTEB (issue 39, item 2): our encoder under mteb 2.x's encoder protocol scores a local task as
sentence-transformers does on the same model (MiniLM's real weights): same embeddings (<= 1e-5),
same scores in MTEB's result files (<= 1e-6); evaluate_embeddings.py --mteb_tasks writes MTEB's
result files for a local retrieval task (BEIR layout) and a local STS file."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

if sys.version_info < (3, 12):
    pytest.skip("mteb 2.x needs Python >= 3.12 (its datasets needs huggingface-hub >= 1, which "
                "the Python 3.11 stack's transformers 4.57 refuses): run with .venv312",
                allow_module_level=True)
mteb = pytest.importorskip("mteb", reason="mteb is a test dependency on Python >= 3.12 "
                           "(setup.py test extra): pip install 'mteb>=2.26,<3'")
sentence_transformers = pytest.importorskip(
    "sentence_transformers", reason="sentence-transformers is a test dependency (setup.py test "
    "extra): pip install -e '.[test]'")

from bert_jax.convert import hf  # noqa: E402
from bert_jax.data.corpora import demo  # noqa: E402
from bert_jax.embeddings import mteb_encoder  # noqa: E402
from bert_jax.tools import saved_runs  # noqa: E402

from repo_root import ROOT  # noqa: E402

DOCUMENTS = 40  # of gensim's Lee background corpus: news articles


def write_lee_retrieval(folder, documents=DOCUMENTS) -> str:
    """A BEIR folder of real text: each of the first `documents` articles of gensim's Lee
    background corpus split into its first sentence (the query) and the rest (the document
    judged relevant to it)."""
    path = os.path.join(demo.gensim_test_data(), "lee_background.cor")
    with open(path, encoding="utf-8") as f:
        articles = [line.strip() for line in f if line.strip()][:documents]
    os.makedirs(os.path.join(folder, "qrels"), exist_ok=True)
    corpus, queries, qrels = [], [], ["query-id\tcorpus-id\tscore\n"]
    for i, article in enumerate(articles):
        first, rest = re.split(r"(?<=[.!?])\s+", article, maxsplit=1)
        corpus.append(json.dumps({"_id": f"d{i}", "title": "", "text": rest}) + "\n")
        queries.append(json.dumps({"_id": f"q{i}", "text": first}) + "\n")
        qrels.append(f"q{i}\td{i}\t1\n")
    for name, lines in (("corpus.jsonl", corpus), ("queries.jsonl", queries),
                        ("qrels/test.tsv", qrels)):
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            f.writelines(lines)
    return str(folder)


@pytest.fixture(scope="module")
def lee(tmp_path_factory):
    return write_lee_retrieval(tmp_path_factory.mktemp("mteb") / "lee")


def scores_of(result_file) -> dict:
    with open(result_file, encoding="utf-8") as f:
        split = json.load(f)["scores"]["test"][0]
    return {k: v for k, v in split.items() if isinstance(v, float)}


def test_our_encoder_scores_as_sentence_transformers_does(lee, tmp_path):
    folder = hf.packaged_minilm_dir()
    encoder = saved_runs.load_encoder(hf_dir=folder)
    ours = mteb_encoder.wrap(encoder, name="bert_jax/all-MiniLM-L6-v2", pooling="mean",
                             normalize=True, similarity="cosine", max_seq_len=256)
    meta = ours.mteb_model_meta
    assert (meta.embed_dim, meta.max_tokens, meta.framework, meta.revision) == (
        384, 256, ["JAX"], None)
    assert meta.similarity_fn_name == "cosine" and meta.n_parameters == 22_565_376
    peer_model = sentence_transformers.SentenceTransformer(folder, device="cpu")
    peer = mteb.models.SentenceTransformerEncoderWrapper(peer_model)
    # The embeddings: MTEB's batches of {"text": [...]} in, one vector per text out.
    task = mteb_encoder.local_retrieval_task(lee)
    task.load_data()
    texts = list(task.dataset["default"]["test"]["corpus"]["text"])[:12]
    batches = [{"text": texts[i:i + 5]} for i in range(0, len(texts), 5)]
    got = ours.encode(batches, task_metadata=task.metadata, hf_split="test",
                      hf_subset="default")
    want = peer_model.encode(texts, convert_to_numpy=True)
    assert got.shape == (12, 384) and np.max(np.abs(got - want)) <= 1e-5
    # The scores, through mteb.evaluate, in MTEB's own result files.
    files = {}
    for name, model in (("ours", ours), ("peer", peer)):
        cache = mteb.ResultCache(tmp_path / name)
        mteb.evaluate(model, [mteb_encoder.local_retrieval_task(lee)], cache=cache,
                      overwrite_strategy="always", show_progress_bar=False)
        files[name] = cache.get_task_result_path("lee", model.mteb_model_meta)
        assert files[name].is_file()
    ours_scores, peer_scores = scores_of(files["ours"]), scores_of(files["peer"])
    assert set(ours_scores) == set(peer_scores) and "ndcg_at_10" in ours_scores
    for key, value in ours_scores.items():  # (nauc_* of a query set too small are NaN in both)
        assert np.isclose(value, peer_scores[key], rtol=0, atol=1e-6, equal_nan=True), (
            key, value, peer_scores[key])
    assert ours_scores["main_score"] > 0.8  # the first sentence finds its article
    assert files["ours"].parent.name == "no_revision_available"
    assert files["ours"].parent.parent.name == "bert_jax__all-MiniLM-L6-v2"


def run_script(*flags):
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, "experiments", "evaluate_embeddings.py"), *flags],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
        env={**os.environ, "JAX_PLATFORMS": "cpu"})


def test_script_writes_mteb_result_files_for_local_tasks(lee, tmp_path):
    pairs = [("A man is playing a guitar.", "Someone is playing an acoustic guitar.", 4.6),
             ("The new movie is awesome.", "The new film is so great!", 4.2),
             ("A woman is slicing an onion.", "The cat sleeps on the windowsill.", 0.4),
             ("The stock market fell sharply.", "Heavy rain caused flooding.", 0.2),
             ("Shares dropped on Monday.", "The stock market fell sharply on Monday.", 3.8)]
    sts_file = tmp_path / "pairs.tsv"
    sts_file.write_text("sentence1\tsentence2\tscore\n"
                        + "".join(f"{a}\t{b}\t{s}\n" for a, b, s in pairs), encoding="utf-8")
    out = tmp_path / "results"
    done = run_script(f"--hf_dir={hf.packaged_minilm_dir()}", f"--mteb_tasks={lee},{sts_file}",
                      f"--output_dir={out}", "--model_name=sentence-transformers/all-MiniLM-L6-v2")
    assert done.returncode == 0, done.stderr[-3000:]
    model_dir = (out / "results" / "sentence-transformers__all-MiniLM-L6-v2"
                 / "no_revision_available")
    lines = done.stdout.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == ["lee", "pairs"]
    for line, task in zip(lines, ("lee", "pairs")):
        assert line.endswith(f"-> {model_dir / (task + '.json')}")
        assert f"{scores_of(model_dir / (task + '.json'))['main_score']:.6f}" in line
    assert "ndcg_at_10" in lines[0] and "cosine_spearman" in lines[1]
    with open(model_dir / "model_meta.json", encoding="utf-8") as f:
        meta = json.load(f)
    assert meta["framework"] == ["JAX"] and meta["max_tokens"] == 256  # sentence_bert_config
    assert scores_of(model_dir / "pairs.json")["main_score"] > 0.5
    # --mteb_tasks goes with --output_dir, not --output; an unknown task name is one line.
    bad = run_script(f"--hf_dir={hf.packaged_minilm_dir()}", f"--mteb_tasks={lee}",
                     f"--output={tmp_path / 'x.json'}")
    assert bad.returncode != 0 and "--mteb_tasks writes to --output_dir" in bad.stderr
    unknown = run_script(f"--hf_dir={hf.packaged_minilm_dir()}", "--mteb_tasks=NoSuchTask",
                         f"--output_dir={tmp_path / 'none'}")
    assert unknown.returncode == 1, unknown.stderr[-2000:]
    assert unknown.stderr.strip().splitlines()[-1].startswith(
        "evaluate_embeddings.py: error: --mteb_tasks:")


def test_the_library_imports_without_mteb():
    code = ("import sys; import bert_jax.embeddings.mteb_encoder; "
            "assert 'mteb' not in sys.modules, 'mteb imported'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert done.returncode == 0, done.stderr[-2000:]
