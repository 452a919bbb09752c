"""export_serving.py (issue 39): the artefact runs in a process that imports only jax, numpy and
tokenizers (no bert_jax, no flax) and gives embed.py's vectors and predict.py's logits
(<= 1e-5): MiniLM as an embedder, a tiny classifier and a tiny tagger."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from bert_jax.config import settings
from bert_jax.convert import hf
from bert_jax.embeddings import encode
from bert_jax.tools import saved_runs, serving

from finetune_runs import ner_sentence, text_rows, tiny_config, write_vocab

TOLERANCE = 1e-5
TEXTS = ["A man is playing a guitar.", "john visited paris today", "ok",
         "Stock markets fell sharply after the announcement of new tariffs on steel imports."]

CLIENT = """
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import serve
predict = serve.load(sys.argv[1])
texts = json.loads(sys.argv[2])
outputs = predict(texts)
assert "bert_jax" not in sys.modules and "flax" not in sys.modules, "imported more than jax"
np.savez(sys.argv[3], **outputs)
"""


def run_client(folder, texts, out):
    done = subprocess.run([sys.executable, "-c", CLIENT, str(folder), json.dumps(texts),
                           str(out)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert done.returncode == 0, done.stderr[-3000:]
    with np.load(out) as arrays:
        return dict(arrays)


def test_minilm_embedder_runs_without_bert_jax(tmp_path):
    try:
        minilm = hf.packaged_minilm_dir()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    manifest = serving.write_artefact(str(tmp_path / "serve"), hf_dir=minilm)
    assert manifest["kind"] == "embeddings" and manifest["max_length"] == 256
    assert manifest["pooling"] == "mean" and manifest["normalize"] is True
    theirs = run_client(tmp_path / "serve", TEXTS, tmp_path / "out.npz")["embeddings"]
    ours = encode.embed(saved_runs.load_encoder(hf_dir=minilm), TEXTS, "mean", True,
                        max_seq_len=256)
    assert np.abs(theirs - ours).max() <= TOLERANCE


@pytest.mark.parametrize("task", ["classification", "token_classification"])
def test_a_classifier_and_a_tagger_give_predict_py_logits(tmp_path, task):
    from bert_jax.recipes.finetune import predict, recipe
    rng = np.random.default_rng(0)
    if task == "classification":
        rows = text_rows(rng, 40)
        (tmp_path / "train.tsv").write_text(
            "text\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in rows), encoding="utf-8")
        data = {"data.train_path": str(tmp_path / "train.tsv"),
                "data.eval_path": str(tmp_path / "train.tsv")}
    else:
        sentences = [ner_sentence(rng) for _ in range(40)]
        (tmp_path / "train.conll").write_text("".join(
            "".join(f"{w} {t}\n" for w, t in zip(words, tags)) + "\n"
            for words, tags in sentences), encoding="utf-8")
        data = {"data.train_path": str(tmp_path / "train.conll"), "data.format": "conll",
                "data.eval_path": str(tmp_path / "train.conll")}
    config = tiny_config(write_vocab(tmp_path / "vocab.txt"), task, max_seq_len=16,
                         total_steps=4, eval_every_steps=0, **data)
    workdir = str(tmp_path / "run")
    recipe.train_and_evaluate(config, workdir)
    manifest = serving.write_artefact(str(tmp_path / "serve"), workdir=workdir)
    assert manifest["kind"] == task and manifest["labels"]
    texts = ["john visited paris", "the old red car is at acme today and mary met john"]
    theirs = run_client(tmp_path / "serve", texts, tmp_path / "out.npz")["logits"]
    config, kind, labels = predict.load_run(workdir)
    options = predict.PredictOptions("", "", batch_size=2, progress=False)
    predictor = predict.load_predictor(workdir, settings.typed(config), kind, labels, options)
    tokenizer = predictor.tokenizer
    ids = np.zeros(theirs.shape[:1] + (theirs.shape[1] if theirs.ndim == 3 else 16,), np.int32)
    for i, text in enumerate(texts):
        row = [tokenizer.cls_id, *tokenizer.encode_batch([text])[0][:14], tokenizer.sep_id]
        ids[i, :len(row)] = row
    length = int((ids != 0).sum(1).max())
    ids = ids[:, :length]
    batch = {"input_ids": ids, "token_type_ids": np.zeros_like(ids),
             "attention_mask": (ids != 0).astype(np.int32)}
    ours = np.asarray(predictor.predict(predictor.params, batch)["logits"])
    if theirs.ndim == 3:  # per token: compare the real tokens
        mask = batch["attention_mask"].astype(bool)
        ours = ours[:, :length]
        assert np.abs(theirs[:, :length][mask] - ours[mask]).max() <= TOLERANCE
    else:
        assert np.abs(theirs - ours).max() <= TOLERANCE
