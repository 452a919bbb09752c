"""UnitEncoder: the ids of tokenizers' encode_batch_fast, exactly, on the shortcut (ASCII text
under a BERT normaliser) and off it."""

import os

import pytest

from bert_jax.data.corpora.demo import LEE_CORPUS, gensim_test_data
from bert_jax.data.corpora.text_files import documents_in
from bert_jax.data.corpora.unit_encoding import UnitEncoder
from bert_jax.data.tokenizers import training as tokenizer_training
from bert_jax.data.tokenizers.load import load_tokenizer

TRICKY = ["[CLS] Hello [SEP]", "hello[MASK]World", "[cls] is not [Cls]", "a\tb\nc\rd  e",
          "vertical\x0btab", "form\x0cfeed", "nul\x00here", "del\x7fhere", "unit\x1fsep",
          "file\x1cseparator", "Ünïcödé and café", "中文 text 日本", "\ufffdreplacement", "",
          "   ", "x" * 250 + " short", "MiXeD CaSe, punctuation!? (yes) -- 'quotes' \"too\"",
          "numbers 3.14159 and 1,000,000", "e-mail@example.com http://a.b/c?d=e&f",
          "don't won't can't", "\u00a0non-breaking\u2003em space", "tab\tat the end\t"]


def stories():
    with open(os.path.join(gensim_test_data(), LEE_CORPUS), encoding="utf-8") as f:
        return documents_in(f.read(), "line")


def reference(tokenizer, texts):
    return [e.ids for e in tokenizer.encode_batch_fast(texts, add_special_tokens=False)]


@pytest.mark.parametrize("lowercase", [True, False])
def test_bert_wordpiece_takes_the_shortcut_with_the_same_ids(lowercase):
    from bert_jax.convert import hf
    tokenizer = load_tokenizer(os.path.join(hf.packaged_minilm_dir(), "vocab.txt"),
                               lowercase=lowercase).tokenizer
    encoder = UnitEncoder(tokenizer)
    assert encoder.fast is not None and encoder.lowercase == lowercase
    texts = stories() + TRICKY + [t.upper() for t in TRICKY]
    assert sum(encoder._plain(t) is not None for t in texts) > len(texts) // 2
    assert encoder(texts) == reference(tokenizer, texts)


def test_trained_tokenizers_same_ids(tmp_path):
    texts = stories()
    for kind in ("wordpiece", "bpe", "unigram"):
        tokenizer_training.train_tokenizer(texts, kind, 800, str(tmp_path / kind))
        tokenizer = load_tokenizer(str(tmp_path / kind)).tokenizer
        encoder = UnitEncoder(tokenizer)
        assert (encoder.fast is not None) == (kind == "wordpiece")
        assert encoder(texts + TRICKY) == reference(tokenizer, texts + TRICKY)
