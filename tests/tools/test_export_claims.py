"""An export that is the run it claims to be (issue 40, class 6): the exported tokenizer's
model_max_length is the run's max_seq_len (transformers' pipelines then truncate where the
run's predict.py does), and a contrastive run (an encoder under bert/, no heads, no pooler)
exports and checks its folder instead of failing the read-back comparison
(bert_jax/tools/convert_runs.py)."""

import json
import os

import jax
import numpy as np
import pytest

from bert_jax import BertModel, cli
from bert_jax.convert import hf
from bert_jax.tools import convert_runs as runs

from export_runs import CFG, VOCAB, contrastive_run


def test_a_contrastive_run_exports_and_checks_its_folder(tmp_path):
    workdir, vocab, params = contrastive_run(tmp_path)
    out = tmp_path / "export"
    cli.run_or_exit("convert.py", lambda: runs.ours_to_hf(
        str(workdir / "checkpoints"), str(out), None, False, tokenizer=str(vocab)))
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["BertModel"]
    _, back = hf.load(str(out))
    assert jax.tree.structure(back) == jax.tree.structure(params)
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(back)):
        np.testing.assert_array_equal(np.asarray(a, np.float32), b)


def test_the_exported_tokenizer_says_the_runs_max_seq_len(tmp_path):
    workdir, vocab, _ = contrastive_run(tmp_path, max_seq_len=24)
    out = tmp_path / "export"
    runs.ours_to_hf(str(workdir / "checkpoints"), str(out), None, False, tokenizer=str(vocab))
    tokenizer_config = json.loads((out / "tokenizer_config.json").read_text())
    assert tokenizer_config["model_max_length"] == 24  # not the model's 64 positions
    marker = json.loads((out / runs.EXPORT_MARKER).read_text())
    assert marker["model_max_length"] == 24 and marker["run"] == os.fspath(workdir)


def test_transformers_truncates_the_export_where_the_run_does(tmp_path):
    transformers = pytest.importorskip("transformers")
    workdir, vocab, _ = contrastive_run(tmp_path, max_seq_len=16)
    out = tmp_path / "export"
    runs.ours_to_hf(str(workdir / "checkpoints"), str(out), None, False, tokenizer=str(vocab))
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(out))
    ids = tokenizer(" ".join(f"w{i}" for i in range(40)), truncation=True)["input_ids"]
    assert len(ids) == 16


# ----- a new case, as an adversarial user would try ----------------------------------------------

def test_a_hf_save_asked_for_a_length_the_model_cannot_read_is_refused_before_writing(tmp_path):
    """model_max_length over the model's positions would promise what the model cannot read."""
    from bert_jax.data.tokenizers import load as tokenizer_lib
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n")
    params = BertModel(CFG).init(jax.random.key(0), np.ones((1, 4), np.int32))["params"]
    with pytest.raises(hf.CheckpointError, match="model_max_length=65 is outside 1..64"):
        hf.save(CFG, params, tmp_path / "out", tokenizer=tokenizer_lib.load_tokenizer(str(vocab)),
                model_max_length=65)
    assert not (tmp_path / "out").exists()
