"""experiments/elsewhere_demo.py at tiny size (issue 39): MiniLM tuned 2 steps on the standard
library's docstring pairs, exported as a sentence-transformers folder; SentenceTransformer's
vectors are embed.py's (<= 1e-5), the retrieval figures through evaluate_embeddings.py and
through sentence-transformers are equal, and so are the MTEB result files' scores."""

import json
import os
import subprocess
import sys

import pytest

if sys.version_info < (3, 12):
    pytest.skip("mteb 2.x needs Python >= 3.12 (its datasets needs huggingface-hub >= 1, which "
                "the Python 3.11 stack's transformers 4.57 refuses): run with .venv312",
                allow_module_level=True)
pytest.importorskip("mteb", reason="mteb is a test dependency on Python >= 3.12 (setup.py test "
                    "extra): pip install 'mteb>=2.26,<3'")
pytest.importorskip("sentence_transformers", reason="sentence-transformers is a test dependency "
                    "(setup.py test extra): pip install -e '.[test]'")

from repo_root import ROOT


def test_demo_at_tiny_size(tmp_path):
    from bert_jax.convert import hf
    hf.packaged_minilm_dir()  # FileNotFoundError naming the package when it is missing
    out = tmp_path / "demo"
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "experiments", "elsewhere_demo.py"),
         f"--output_dir={out}", "--test_pairs=40", "--finetune_flag=--config.total_steps=2",
         "--finetune_flag=--config.max_seq_len=32", "--finetune_flag=--config.batch_size=8"],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
        env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["settings"] == {"pooling": "mean", "normalize": True, "max_seq_len": 32,
                                   "similarity": "cosine"}
    assert summary["beir"]["queries"] == summary["beir"]["documents"] == 40
    assert summary["embedding_max_abs_difference"] <= 1e-5
    retrieval = summary["retrieval"]
    for key in ("recall@1", "recall@10", "recall@100", "mrr@10", "ndcg@10"):
        assert abs(retrieval["ours"][key] - retrieval["sentence_transformers"][key]) <= 1e-6
    assert retrieval["ours"]["queries"] == 40 and retrieval["ours"]["ndcg@10"] > 0.5
    # evaluate_embeddings.py read the run's settings itself (no --pooling / --max_seq_len given)
    report = json.loads((out / "retrieval_ours.json").read_text())
    assert (report["pooling"], report["max_seq_len"], report["similarity"]) == ("mean", 32, "cos")
    ours, theirs = (summary["mteb"][k]["scores"]["test"] for k in ("ours",
                                                                   "sentence_transformers"))
    assert set(ours) == set(theirs) and summary["mteb_max_abs_difference"] <= 1e-6
    # MTEB's nDCG@10 (pytrec_eval) is our metrics' nDCG@10 on the same ranking
    assert abs(ours["ndcg_at_10"] - retrieval["ours"]["ndcg@10"]) <= 1e-4
    assert summary["mteb"]["ours"]["file"].endswith(os.path.join("step-2", "docstrings.json"))
    assert "MTEB docstrings: main score (nDCG@10) ours" in done.stdout
