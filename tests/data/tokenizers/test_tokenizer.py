"""WordPiece tokenizer: training a vocabulary, loading vocab.txt / tokenizer.json, bad vocabs."""

import os

import pytest

from bert_jax.convert import hf
from bert_jax.data.tokenizers import character_normalization, wordpiece, wordpiece_training
from bert_jax.data.tokenizers import load as tok

MINILM = hf.packaged_minilm_dir()
TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Ampère studied electricity; the ampere is named after him.",
    "Unbelievable things happen when foxes and dogs play together in the garden.",
    "A tokenizer splits words into pieces, and pieces into smaller pieces.",
] * 20


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("vocab")
    return wordpiece_training.train_wordpiece(TEXTS, vocab_size=200, out_dir=str(out))


def test_trained_vocab_has_special_tokens_first(trained):
    with open(trained, encoding="utf-8") as f:
        tokens = f.read().split("\n")[:-1]
    assert tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert 5 < len(tokens) <= 200
    assert len(set(tokens)) == len(tokens)
    assert any(t.startswith("##") for t in tokens)
    assert os.path.isfile(os.path.join(os.path.dirname(trained), "tokenizer.json"))


def test_training_is_deterministic_and_reads_a_generator_like_a_list(trained, tmp_path):
    wordpiece_training.train_wordpiece((text for text in TEXTS), vocab_size=200,
                                       out_dir=str(tmp_path))
    for name in ("vocab.txt", "tokenizer.json"):
        with open(os.path.join(os.path.dirname(trained), name), "rb") as f:
            first = f.read()
        with open(os.path.join(tmp_path, name), "rb") as f:
            assert f.read() == first, name
    json_tokenizer = tok.load_tokenizer(os.path.join(tmp_path, "tokenizer.json"))
    tokens = json_tokenizer.tokenizer.encode("##e [MASK]", add_special_tokens=False).tokens
    assert "##e" not in tokens and tokens[-1] == "[MASK]"  # "##e" is a piece, not a special token


def _pieces_setup(texts, lowercase=True):
    characters = character_normalization.distinct_characters(texts)
    normalize = character_normalization.CharacterNormalizer(
        wordpiece.bert_wordpiece(None, lowercase).normalizer, characters)
    return normalize, characters


def test_continuation_pieces_exact_for_a_small_vocabulary_a_superset_for_a_large_one():
    """The cheap pass finds every piece the trainer makes, and a few it would not (a character
    seen only alone or first: "£" here); a vocabulary it could cost more than 1% of gets the
    trainer's own pieces, exactly."""
    texts = TEXTS + ["It cost £5, and 5°C; naïve."] * 3
    normalize, characters = _pieces_setup(texts)
    exact = wordpiece_training._trained_pieces(texts, normalize)
    candidates = wordpiece_training._candidate_pieces(normalize, characters)
    assert set(exact) < set(candidates) and "##£" in candidates and "##£" not in exact
    assert "##°" in exact  # seen inside "5°c": a piece whichever way they are found
    assert wordpiece_training._continuation_pieces(texts, normalize, characters, 200) == exact
    large = 100 * len(candidates)
    assert wordpiece_training._continuation_pieces(texts, normalize, characters,
                                                   large) == candidates


@pytest.mark.parametrize("lowercase", [True, False])
def test_fed_normalised_text_the_trainer_learns_what_its_own_normaliser_gives(tmp_path,
                                                                             lowercase):
    """train_wordpiece normalises in Python and gives the trainer no normaliser; the trainer
    with BERT's normaliser, fed the raw texts (and the same pieces first), learns the same
    vocabulary, entry for entry."""
    texts = TEXTS + ["ΟΔΟΣ Σίσυφος İstanbul ŞEKER naïve café straße 中文字符 e\u0301 x\u00a0y"] * 5
    vocab_txt = wordpiece_training.train_wordpiece(texts, 300, str(tmp_path), lowercase)
    normalize, characters = _pieces_setup(texts, lowercase)
    pieces = wordpiece_training._continuation_pieces(texts, normalize, characters, 300)
    own = wordpiece.bert_wordpiece(None, lowercase)
    own.train_from_iterator(texts, wordpiece_training._trainer(
        300, 2, [*wordpiece.SPECIAL_TOKENS, *pieces]))
    assert wordpiece.read_vocab_txt(vocab_txt) == own.get_vocab()


def test_vocab_txt_and_tokenizer_json_agree(trained):
    from_txt = tok.load_tokenizer(trained)
    from_json = tok.load_tokenizer(os.path.join(os.path.dirname(trained), "tokenizer.json"))
    from_dir = tok.load_tokenizer(os.path.dirname(trained))
    for text in TEXTS[:4] + ["Completely unseen wordz, ÉCOLE!"]:
        assert from_txt.encode(text) == from_json.encode(text) == from_dir.encode(text)
    assert (from_txt.pad_id, from_txt.unk_id, from_txt.cls_id, from_txt.sep_id,
            from_txt.mask_id) == (0, 1, 2, 3, 4)
    pair = from_txt.encode_pair("the dog", "the fox")
    assert pair.ids[0] == from_txt.cls_id and pair.ids.count(from_txt.sep_id) == 2
    assert pair.type_ids == [0] * (pair.ids.index(from_txt.sep_id) + 1) + [1] * (
        len(pair.ids) - pair.ids.index(from_txt.sep_id) - 1)


def test_lowercase_and_accents(trained):
    uncased = tok.load_tokenizer(trained, lowercase=True)
    cased = tok.load_tokenizer(trained, lowercase=False)
    assert uncased.encode("AMPÈRE") == uncased.encode("ampere")
    assert cased.encode("AMPÈRE") != cased.encode("ampere")


def test_a_folders_tokenizer_config_gives_the_casing_of_its_vocab_txt(trained, tmp_path):
    """A Hugging Face folder with a vocab.txt and no tokenizer.json: its tokenizer_config.json
    says how the vocabulary was made, over the arguments; without the key the argument holds."""
    folder = tmp_path / "hf"
    folder.mkdir()
    with open(trained, encoding="utf-8") as f:
        (folder / "vocab.txt").write_text(f.read(), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text('{"do_lower_case": false}', encoding="utf-8")
    cased = tok.load_tokenizer(trained, lowercase=False)
    assert tok.load_tokenizer(str(folder), lowercase=True).encode("AMPÈRE") == \
        cased.encode("AMPÈRE")
    (folder / "tokenizer_config.json").write_text('{"model_max_length": 512}', encoding="utf-8")
    assert tok.load_tokenizer(str(folder), lowercase=False).encode("AMPÈRE") == \
        cased.encode("AMPÈRE")
    assert tok.load_tokenizer(str(folder)).encode("AMPÈRE") == tok.load_tokenizer(
        trained).encode("ampere")
    (folder / "tokenizer_config.json").write_text("{oops", encoding="utf-8")
    with pytest.raises(ValueError, match=r"tokenizer_config\.json: not valid JSON"):
        tok.load_tokenizer(str(folder))


def test_token_flags(trained):
    vocab = tok.load_tokenizer(trained)
    for index in range(vocab.vocab_size):
        token = vocab.id_to_token(index)
        assert vocab.is_continuation[index] == token.startswith("##")
        assert vocab.is_ordinary[index] == (token not in wordpiece.SPECIAL_TOKENS)
    assert set(vocab.special_ids) == {0, 1, 2, 3, 4}


def test_minilm_files_load_and_match_transformers():
    import transformers
    reference = transformers.BertTokenizerFast.from_pretrained(MINILM)
    from_json = tok.load_tokenizer(os.path.join(MINILM, "tokenizer.json"))
    from_txt = tok.load_tokenizer(os.path.join(MINILM, "vocab.txt"))
    assert from_json.vocab_size == from_txt.vocab_size == 30522
    assert (from_json.cls_id, from_json.sep_id, from_json.mask_id) == (
        reference.cls_token_id, reference.sep_token_id, reference.mask_token_id)
    text = "Héllo World! Tokenizers split unbelievably long words, " * 40  # longer than 128
    expected = reference(text, add_special_tokens=False)["input_ids"]
    assert len(expected) > 128  # the file's truncation setting is switched off
    assert from_json.encode(text) == from_txt.encode(text) == expected
    assert from_txt.encode_pair("a question", "an answer").ids == reference(
        "a question", "an answer")["input_ids"]


@pytest.mark.parametrize("missing", ["[MASK]", "[CLS]", "[SEP]", "[PAD]"])
def test_vocab_missing_special_token_names_file(tmp_path, missing):
    path = tmp_path / "vocab.txt"
    tokens = [t for t in wordpiece.SPECIAL_TOKENS if t != missing] + ["the", "dog", "##s"]
    path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"vocab\.txt.*\[" + missing[1:-1]):
        tok.load_tokenizer(str(path))


def test_missing_and_duplicate_vocab(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.txt"):
        tok.load_tokenizer(str(tmp_path / "nowhere.txt"))
    with pytest.raises(FileNotFoundError, match="neither tokenizer.json nor vocab.txt"):
        tok.load_tokenizer(str(tmp_path))
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(list(wordpiece.SPECIAL_TOKENS) + ["dog", "dog"]) + "\n",
                    encoding="utf-8")
    with pytest.raises(ValueError, match="vocab.txt:7: token 'dog' repeats line 6"):
        tok.load_tokenizer(str(path))
