"""Tokenizers for any language trained on a sample: WordPiece, byte-level BPE and Unigram, each
loaded back by load_tokenizer with its special tokens and round-tripping text."""

import json
import os

import pytest

from bert_jax.data.corpora.demo import LEE_CORPUS, gensim_test_data
from bert_jax.data.corpora.text_files import documents_in
from bert_jax.data.tokenizers import training as tokenizer_training
from bert_jax.data.tokenizers.load import load_tokenizer

CJK_TEXT = "北京是中国的首都。東京は日本の首都です。"


@pytest.fixture(scope="module")
def sample():
    with open(os.path.join(gensim_test_data(), LEE_CORPUS), encoding="utf-8") as f:
        stories = documents_in(f.read(), "line")
    return stories + [CJK_TEXT] * 5 + ["Ünïcödé café ﬁnal résumé"] * 5


@pytest.mark.parametrize("kind,specials", [
    ("wordpiece", ("[CLS]", "[SEP]", "[PAD]", "[MASK]")),
    ("bpe", ("<s>", "</s>", "<pad>", "<mask>")),
    ("unigram", ("<s>", "</s>", "<pad>", "<mask>"))])
def test_each_kind_trains_and_loads(tmp_path, sample, kind, specials):
    path = tokenizer_training.train_tokenizer(sample, kind, 1500, str(tmp_path / kind))
    assert path == str(tmp_path / kind / "tokenizer.json")
    tokenizer = load_tokenizer(str(tmp_path / kind))
    assert tokenizer.kind == {"wordpiece": "WordPiece", "bpe": "BPE", "unigram": "Unigram"}[kind]
    assert 1000 < tokenizer.vocab_size <= 1500
    assert (tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id, tokenizer.mask_id) == tuple(
        tokenizer.token_to_id(token) for token in specials)
    text = "The Prime Minister said the talks would resume."
    decoded = tokenizer.decode(tokenizer.encode(text))
    assert decoded.strip() == (text.lower() if kind == "wordpiece" else text)
    # CJK ideographs are tokens of their own: no piece holds two of them.
    pieces = [tokenizer.id_to_token(i) for i in tokenizer.encode("北京是中国")]
    assert all(sum("\u4e00" <= c <= "\u9fff" for c in p) <= 1 for p in pieces), pieces
    assert tokenizer.encode_pair("a", "b").ids[0] == tokenizer.cls_id


def test_normalization_options(tmp_path, sample):
    norm = tokenizer_training.Normalization(unicode_form="NFKC", lowercase=True,
                                            strip_accents=True)
    tokenizer_training.train_tokenizer(sample, "wordpiece", 800, str(tmp_path / "wp"), norm)
    state = json.loads((tmp_path / "wp" / "tokenizer.json").read_text())
    assert state["normalizer"]["normalizers"][0] == {"type": "NFKC"}
    wordpiece = load_tokenizer(str(tmp_path / "wp"))
    assert wordpiece.decode(wordpiece.encode("ﬁnal Café")) == "final cafe"
    tokenizer_training.train_tokenizer(sample, "bpe", 800, str(tmp_path / "bpe"), norm)
    bpe = load_tokenizer(str(tmp_path / "bpe"))
    assert bpe.decode(bpe.encode("ﬁnal Café")) == "final cafe"
    plain = tokenizer_training.Normalization(unicode_form="none", split_cjk=False)
    tokenizer_training.train_tokenizer(sample, "unigram", 800, str(tmp_path / "uni"), plain)
    unigram = load_tokenizer(str(tmp_path / "uni"))
    assert unigram.decode(unigram.encode("Café")).strip() == "Café"
    with pytest.raises(ValueError, match="choose one of wordpiece, bpe, unigram"):
        tokenizer_training.train_tokenizer(sample, "sentencepiece", 800, str(tmp_path / "x"))


def test_bpe_trained_without_the_cjk_split_on_a_sample_without_cjk_is_the_same(tmp_path,
                                                                              sample):
    """A sample without CJK ideographs is trained without the CJK split (it would find
    nothing); the model is the one the whole pipeline learns, and the saved pipeline keeps the
    split for the texts it will meet."""
    texts = [text for text in sample if text != CJK_TEXT]
    path = tokenizer_training.train_tokenizer(texts, "bpe", 800, str(tmp_path / "bpe"))
    norm = tokenizer_training.Normalization().resolved("bpe")
    whole = tokenizer_training.bpe_tokenizer(norm)
    whole.train_from_iterator(texts, tokenizer_training._fairseq_trainer("bpe", 800, 2))
    saved = json.loads((tmp_path / "bpe" / "tokenizer.json").read_text())
    assert saved["model"] == json.loads(whole.to_str())["model"]
    assert saved["pre_tokenizer"] == json.loads(whole.to_str())["pre_tokenizer"]
    assert saved["pre_tokenizer"]["pretokenizers"][0]["type"] == "Split"
    assert path == str(tmp_path / "bpe" / "tokenizer.json")
