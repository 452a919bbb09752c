"""UnitEncoder: the ids of tokenizers' encode_batch_fast, exactly, on the shortcut (a BERT
WordPiece tokenizer's chunk cache) and off it."""

import os

import numpy as np
import pytest
import tokenizers

from bert_jax.data.corpora.demo import LEE_CORPUS, gensim_test_data
from bert_jax.data.corpora.text_files import documents_in
from bert_jax.data.corpora.unit_encoding import CACHED_CHARS, UnitEncoder
from bert_jax.data.tokenizers import training as tokenizer_training
from bert_jax.data.tokenizers.load import load_tokenizer

TRICKY = ["[CLS] Hello [SEP]", "hello[MASK]World", "[cls] is not [Cls]", "a\tb\nc\rd  e",
          "vertical\x0btab", "form\x0cfeed", "nul\x00here", "del\x7fhere", "unit\x1fsep",
          "file\x1cseparator", "Ünïcödé and café", "中文 text 日本", "\ufffdreplacement", "",
          "   ", "x" * 250 + " short", "MiXeD CaSe, punctuation!? (yes) -- 'quotes' \"too\"",
          "numbers 3.14159 and 1,000,000", "e-mail@example.com http://a.b/c?d=e&f",
          "don't won't can't", "\u00a0non-breaking\u2003em space", "tab\tat the end\t",
          "ΟΔΟΣ ΟΔΟΣ. ΣΟΦΟΣ's", "a \u0301b e\u0301 \u0301", "x\x0by\x1cz \x00\ufffd",
          "日本語の文章です。漢字", "Straße İstanbul ǅemal ﬁne", "emoji 🙂🙂 and \u200bzero width",
          "naïve  coöperate\r\n\r\nrésumé", "[SEP]x", "a[MASK]", "«guillemets» “curly”"]


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
    assert encoder.chunked
    texts = stories() + TRICKY + [t.upper() for t in TRICKY]
    expected = reference(tokenizer, texts)
    assert encoder(texts) == expected
    assert encoder(texts) == expected  # again, from the chunk cache
    for dtype in ("<u2", "<u4"):
        records = encoder.records(texts, dtype)
        assert [np.frombuffer(r, dtype).tolist() for r in records] == expected


def test_a_full_chunk_cache_is_emptied_and_the_ids_stay_the_same():
    from bert_jax.convert import hf
    tokenizer = load_tokenizer(os.path.join(hf.packaged_minilm_dir(), "vocab.txt")).tokenizer
    encoder = UnitEncoder(tokenizer, cache_entries=200)
    texts = stories()
    expected = reference(tokenizer, texts)
    got = []
    for i in range(0, len(texts), 16):
        batch = texts[i:i + 16]
        got += encoder(batch)
        # at most cache_entries chunks, or one batch's when it alone holds more
        assert len(encoder._chunks) <= max(200, len({c for t in batch for c in t.split()}))
    assert got == expected
    long_chunk = "y" * (CACHED_CHARS + 1)
    assert encoder([long_chunk + " z"]) == reference(tokenizer, [long_chunk + " z"])
    assert long_chunk not in encoder._chunks


def test_normalised_added_tokens_keep_non_ascii_text_on_the_ordinary_path():
    from bert_jax.convert import hf
    tokenizer = load_tokenizer(os.path.join(hf.packaged_minilm_dir(), "vocab.txt")).tokenizer
    tokenizer.add_tokens([tokenizers.AddedToken("cafe", normalized=True)])
    encoder = UnitEncoder(tokenizer)
    texts = ["un café noir", "the cafe opens", "CAFÉ", "caféine"]
    assert encoder(texts) == reference(tokenizer, texts)


def test_trained_tokenizers_same_ids(tmp_path):
    texts = stories()
    for kind in ("wordpiece", "bpe", "unigram"):
        tokenizer_training.train_tokenizer(texts, kind, 800, str(tmp_path / kind))
        tokenizer = load_tokenizer(str(tmp_path / kind)).tokenizer
        encoder = UnitEncoder(tokenizer)
        assert encoder.chunked == (kind == "wordpiece")
        assert encoder(texts + TRICKY) == reference(tokenizer, texts + TRICKY)
