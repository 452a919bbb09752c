"""convert.py --format=sentence_transformers (issue 39, item 1): the folder SentenceTransformer
loads as it is, with the run's pooling, normalisation, max length and similarity, and whose
encode() gives embed.py's vectors (max abs difference <= 1e-5, fp32): MiniLM's real weights
([CLS] and mean pooling), a contrastive run, a RoBERTa and a ModernBERT folder."""

import json
import os
import shutil

import numpy as np
import pytest

from bert_jax import cli
from bert_jax.convert import hf
from bert_jax.convert import sentence_transformers_folder as sentence_folder
from bert_jax.embeddings import encode
from bert_jax.tools import convert_runs as runs
from bert_jax.tools import saved_runs

sentence_transformers = pytest.importorskip(
    "sentence_transformers", reason="sentence-transformers is a test dependency (setup.py test "
    "extra): pip install -e '.[test]'")
transformers = pytest.importorskip("transformers")

import hf_peer  # noqa: E402
from export_runs import contrastive_run  # noqa: E402
from repo_root import ROOT  # noqa: E402

TOLERANCE = 1e-5
TEXTS = ["A man is playing a guitar.", "The weather is lovely today!",
         "Stock markets fell sharply after the announcement of new tariffs on steel imports, "
         "which analysts said would hurt manufacturers across the region for years to come.",
         "ok", "Où est la gare ? Elle est au nord de la vieille cathédrale."]


def st_vectors(folder, texts):
    model = sentence_transformers.SentenceTransformer(str(folder), device="cpu")
    return model, model.encode(list(texts), batch_size=4, convert_to_numpy=True)


def our_vectors(settings, texts, **where):
    encoder = saved_runs.load_encoder(**where)
    return encode.embed(encoder, list(texts), settings["pooling"], settings["normalize"],
                        max_seq_len=settings["max_seq_len"])


@pytest.fixture(scope="module")
def minilm():
    try:
        return hf.packaged_minilm_dir()
    except FileNotFoundError as e:
        pytest.skip(str(e))


@pytest.mark.parametrize("pooling,normalize,similarity", [("cls", True, "dot"),
                                                          ("mean", False, "cosine")])
def test_minilm_folder_encodes_as_embed_py(minilm, tmp_path, pooling, normalize, similarity):
    out = tmp_path / "st"
    cli.run_or_exit("convert.py", lambda: runs.hf_to_sentence_transformers(
        minilm, str(out), {"pooling": pooling, "normalize": normalize, "similarity": similarity}))
    settings = sentence_folder.read_settings(out)
    # the package's folder is a sentence-transformers folder itself: its max_seq_length (256) stays
    assert settings == {"pooling": pooling, "normalize": normalize, "max_seq_len": 256,
                        "similarity": similarity}
    model, theirs = st_vectors(out, TEXTS)
    assert model.max_seq_length == 256 and model.similarity_fn_name == similarity
    assert len(model) == (3 if normalize else 2)
    ours = our_vectors(settings, TEXTS, hf_dir=minilm)
    assert np.abs(theirs - ours).max() <= TOLERANCE
    marker = json.loads((out / runs.EXPORT_MARKER).read_text())
    assert marker["format"] == runs.SENTENCE_TRANSFORMERS and marker["model"] == minilm


def test_a_sentence_transformers_folder_keeps_its_own_settings(minilm, tmp_path):
    runs.hf_to_sentence_transformers(minilm, str(tmp_path / "st"))
    assert sentence_folder.read_settings(tmp_path / "st") == sentence_folder.read_settings(
        minilm) == {"pooling": "mean", "normalize": True, "max_seq_len": 256,
                    "similarity": "cosine"}


def test_a_contrastive_run_exports_its_pooling_normalisation_and_length(tmp_path):
    workdir, _vocab, _ = contrastive_run(tmp_path, max_seq_len=8)
    (workdir / "task.json").write_text(json.dumps(
        {"task": "contrastive", "pooling": "cls", "scale": 20.0, "symmetric": False}))
    out = tmp_path / "st"
    cli.run_or_exit("convert.py", lambda: runs.ours_to_hf(
        str(workdir / "checkpoints"), str(out), None, False,
        folder_format=runs.SENTENCE_TRANSFORMERS))
    settings = sentence_folder.read_settings(out)
    assert settings == {"pooling": "cls", "normalize": True, "max_seq_len": 8,
                        "similarity": "cosine"}
    texts = [" ".join(f"w{i}" for i in range(k, k + 3 * k + 1)) for k in range(6)]  # 1..16 words
    model, theirs = st_vectors(out, texts)
    assert model.max_seq_length == 8 and model.similarity_fn_name == "cosine"
    ours = our_vectors(settings, texts, workdir=str(workdir))
    assert np.abs(theirs - ours).max() <= TOLERANCE
    np.testing.assert_allclose(np.linalg.norm(theirs, axis=1), 1.0, atol=1e-5)


def test_flags_override_the_runs_settings_and_a_bad_length_is_refused(tmp_path):
    workdir, _, _ = contrastive_run(tmp_path, max_seq_len=8)
    out = tmp_path / "st"
    runs.ours_to_hf(str(workdir / "checkpoints"), str(out), None, False,
                    folder_format=runs.SENTENCE_TRANSFORMERS,
                    embedding={"pooling": "mean", "normalize": False, "similarity": None})
    assert sentence_folder.read_settings(out)["pooling"] == "mean"
    assert not (out / sentence_folder.NORMALIZE_DIR).exists()  # the earlier export's went too
    with pytest.raises(ValueError, match="max_seq_len=999 must be in 3..64"):
        runs.ours_to_hf(str(workdir / "checkpoints"), str(tmp_path / "b"), None, False,
                        folder_format=runs.SENTENCE_TRANSFORMERS,
                        embedding={"max_seq_len": 999})
    assert not (tmp_path / "b").exists()


def roberta_folder(root):
    """A random RoBERTa (transformers' own init) with a byte-level BPE tokenizer.json."""
    import torch

    from roberta_peer import SMALL, byte_level_bpe
    torch.manual_seed(0)
    config = transformers.RobertaConfig(**{**SMALL, "vocab_size": 320,
                                           "max_position_embeddings": 40})
    folder = root / "roberta"
    transformers.RobertaModel(config).eval().save_pretrained(folder)
    byte_level_bpe(folder / "tokenizer.json")
    return folder


def modernbert_folder(root):
    """A random ModernBERT (transformers' own init) with a WordPiece vocabulary."""
    import torch

    from export_runs import VOCAB
    torch.manual_seed(0)
    config = transformers.ModernBertConfig(
        vocab_size=len(VOCAB), hidden_size=32, intermediate_size=48, num_hidden_layers=3,
        num_attention_heads=4, max_position_embeddings=64, global_attn_every_n_layers=2,
        local_attention=8, pad_token_id=0, cls_token_id=2, sep_token_id=3, bos_token_id=2,
        eos_token_id=3, **hf_peer.EAGER_MODERNBERT)
    folder = root / "modernbert"
    transformers.ModernBertModel(config).eval().save_pretrained(folder)
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    return folder


@pytest.mark.parametrize("make,texts", [
    (roberta_folder, ["The quick brown fox jumps.", "the lazy dog sleeps in the sun", "Zürich"]),
    (modernbert_folder, ["w1 w2 w3", " ".join(f"w{i}" for i in range(30)), "w7"])])
def test_roberta_and_modernbert_folders_encode_as_embed_py(tmp_path, make, texts):
    source = make(tmp_path)
    out = tmp_path / "st"
    runs.hf_to_sentence_transformers(str(source), str(out), {"max_seq_len": 16})
    settings = sentence_folder.read_settings(out)
    assert settings["pooling"] == "mean" and settings["max_seq_len"] == 16
    _, theirs = st_vectors(out, texts)
    ours = our_vectors(settings, texts, hf_dir=str(source))
    assert np.abs(theirs - ours).max() <= TOLERANCE


def test_the_command_line(minilm, tmp_path):
    import subprocess
    import sys
    out = tmp_path / "st"
    script = os.path.join(ROOT, "experiments", "convert.py")
    done = subprocess.run([sys.executable, script, "--direction=ours_to_hf",
                           "--format=sentence_transformers", f"--model={minilm}",
                           f"--hf_dir={out}", "--pooling=cls", "--normalize"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert sentence_folder.read_settings(out)["pooling"] == "cls"
    done = subprocess.run([sys.executable, script, "--direction=ours_to_hf", f"--model={minilm}",
                           f"--hf_dir={tmp_path / 'x'}"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode != 0 and "--format=sentence_transformers" in done.stderr
    shutil.rmtree(out)
