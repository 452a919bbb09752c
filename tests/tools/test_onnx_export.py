"""ONNX through the exported Hugging Face folder (issue 39): torch's exporter (torch.onnx.export,
dynamo, with onnxscript) writes the encoder of our sentence-transformers export with symbolic
batch and length, as README "Use the model elsewhere" shows; onnxruntime runs it, the folder's
pooling (mean over the attention mask, L2) is applied in numpy, and the vectors are embed.py's
(<= 1e-5) on texts of other batch sizes and lengths than the one exported with."""

import numpy as np
import pytest

from bert_jax.convert import hf
from bert_jax.convert import sentence_transformers_folder as sentence_folder
from bert_jax.embeddings import encode
from bert_jax.tools import convert_runs, saved_runs

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("onnxscript", reason="torch's ONNX exporter needs onnxscript (setup.py test "
                    "extra): pip install onnxscript onnxruntime")
onnxruntime = pytest.importorskip("onnxruntime", reason="onnxruntime runs the exported model "
                                  "(setup.py test extra): pip install onnxruntime")

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
TEXTS = ["A man is playing a guitar.", "ok",
         "Stock markets fell sharply after the announcement of new tariffs on steel imports, "
         "which analysts said would hurt manufacturers across the region for years to come.",
         "Où est la gare ? Elle est au nord de la vieille cathédrale.", "word " * 300]


def export_onnx(folder, path):
    """README's command: the folder's encoder to ONNX, batch and length symbolic. The example
    batch must hold padding: traced on an attention mask of ones only, transformers leaves the
    mask out of the graph, and padded rows then attend to their padding."""
    model = transformers.AutoModel.from_pretrained(folder).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    example = tokenizer(["a padded example batch", "of two texts"], padding=True,
                        return_tensors="pt")
    batch, length = torch.export.Dim("batch"), torch.export.Dim("length", max=512)
    torch.onnx.export(model, (), path, kwargs={name: example[name] for name in INPUTS},
                      input_names=list(INPUTS), output_names=["last_hidden_state"],
                      dynamic_shapes={name: {0: batch, 1: length} for name in INPUTS},
                      dynamo=True)


def test_onnx_of_the_exported_folder_gives_embed_py_vectors(tmp_path):
    try:
        minilm = hf.packaged_minilm_dir()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    folder = tmp_path / "st"
    convert_runs.hf_to_sentence_transformers(minilm, str(folder))
    settings = sentence_folder.read_settings(folder)
    assert settings["pooling"] == "mean" and settings["normalize"]
    export_onnx(str(folder), str(tmp_path / "model.onnx"))

    session = onnxruntime.InferenceSession(str(tmp_path / "model.onnx"),
                                           providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == list(INPUTS)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    batch = tokenizer(TEXTS, padding=True, truncation=True,
                      max_length=settings["max_seq_len"], return_tensors="np")
    assert batch["input_ids"].shape == (len(TEXTS), settings["max_seq_len"])  # the long text
    hidden = session.run(None, {k: batch[k].astype(np.int64) for k in INPUTS})[0]
    mask = batch["attention_mask"][..., None].astype(np.float32)
    theirs = (hidden * mask).sum(1) / mask.sum(1)
    theirs /= np.linalg.norm(theirs, axis=1, keepdims=True)

    ours = encode.embed(saved_runs.load_encoder(hf_dir=minilm), TEXTS, "mean", True,
                        max_seq_len=settings["max_seq_len"])
    assert np.abs(theirs - ours).max() <= 1e-5
