"""The Bulgarian pre-training demo (experiments/non_english_demo.py) end to end at tiny size:
the gensim wheel's Bulgarian Wikipedia pages -> gzip JSONL passages -> a WordPiece tokenizer
that keeps "й" -> token shards on 2 workers -> a few pre-training steps evaluated on the held-out
passages -> the summary with chance and the unigram baseline."""

import gzip
import json
import os
import subprocess
import sys

import pytest

from repo_root import ROOT

SCRIPT = os.path.join(ROOT, "experiments", "non_english_demo.py")

pytest.importorskip("mwparserfromhell")


def test_passages_cut_at_paragraphs_and_keep_every_paragraph():
    from experiments import non_english_demo
    pages = ["a" * 5 + "\n" + "b" * 5 + "\n" + "c" * 20, "d"]
    cut = non_english_demo.passages(pages, 12)
    assert cut == ["aaaaa\nbbbbb", "c" * 20, "d"]


def test_the_bulgarian_pages_are_parsed_with_the_demo_corpus_parser():
    from experiments import non_english_demo
    pages = non_english_demo.bulgarian_pages()
    assert len(pages) == 3  # one article and two project pages (namespace 4)
    assert pages[0].startswith("Григорианският календар")
    assert "[[" not in pages[0] and "{{" not in pages[0]  # the article's markup is gone
    # (the village pump's archive quotes markup in its discussions: text, kept)
    letters = [c for c in "".join(pages) if c.isalpha()]
    assert sum("\u0400" <= c <= "\u04ff" for c in letters) > 0.9 * len(letters)


def test_bulgarian_corpus_to_tokenizer_shards_and_pre_training(tmp_path):
    output = tmp_path / "bg"
    done = subprocess.run(
        [sys.executable, SCRIPT, f"--output_dir={output}", "--vocab_size=512",
         *(f"--pretrain_flag=--config.{key}" for key in (
             "total_steps=2", "eval_every_steps=1", "batch_size=4", "eval_batch_size=8",
             "eval_batches=1", "max_seq_len=32", "model.max_position_embeddings=32",
             "model.hidden_size=32", "model.num_attention_heads=2",
             "model.intermediate_size=64", "model.num_hidden_layers=1",
             "checkpoint_every_steps=2", "async_checkpoints=False"))],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env=dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT))
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((output / "summary.json").read_text())
    assert summary["corpus"]["pages"] == 3 and summary["corpus"]["passages"] > 100
    assert [point["step"] for point in summary["held_out_curve"]] == [1, 2]
    assert summary["tokens"]["validation"] > 0 and summary["tokens"]["train"] > 30_000
    assert summary["tokenizer"]["vocab_size"] == 512
    assert 0 < summary["unigram"]["accuracy"] < 0.2
    # the corpus as published corpora come: gzip JSONL, several files (the workers' units)
    files = sorted(os.listdir(output / "corpus"))
    assert len(files) == 4 and all(f.endswith(".jsonl.gz") for f in files)
    with gzip.open(output / "corpus" / files[0], "rt", encoding="utf-8") as f:
        assert json.loads(f.readline())["text"].startswith("Григорианският")
    # accents kept: "й" stays a letter of its own (BERT's accent stripping makes it "и")
    from bert_jax.data.tokenizers.load import load_tokenizer
    tokenizer = load_tokenizer(str(output / "tokenizer"))
    pieces = tokenizer.tokenizer.encode("който", add_special_tokens=False).tokens
    assert "й" in "".join(pieces)
