"""CharacterNormalizer: BERT's normaliser by table, exactly the normaliser's own result."""

import pytest
from tokenizers import normalizers

from bert_jax.data.tokenizers import character_normalization, wordpiece

TEXTS = [
    "Plain ASCII, with punctuation; tabs\tand\nnew lines\r\n and UPPER case.",
    "\x00nul \x0b vertical tab \x0c form feed \x1f unit sep \x7f del",
    "ΟΔΟΣ Σίσυφος ΆΈΉ: a final sigma lowercases alone (σ, not ς)",
    "İstanbul ŞEKER naïve café Ærø straße ẞ Ǆemal ǅ ﬁ ＡＢＣ Ⅻ",
    "combining: e\u0301 a\u0323\u0301 o\u0308\u0304 and a lone \u0301 mark",
    "emoji 😀👍🏽 zero width\u200bspace bom\ufeff nbsp x\u00a0y line\u2028sep",
    "ideographic\u3000space",
    "中文字符测试，日本語のテキスト、한국어 텍스트 豈 更 (compatibility ideographs)",
    "private use \ue000 unassigned \U000e0100 \U0010fffd replacement \ufffd",
    "mostly ASCII text with one accent here: é, and nothing else for a long while " * 20,
    "密集的中文文本" * 40,
]


@pytest.mark.parametrize("lowercase,strip_accents", [(True, None), (False, None), (True, False),
                                                     (False, True)])
def test_equals_the_normalisers_own_result(lowercase, strip_accents):
    normalizer = wordpiece.bert_wordpiece(None, lowercase, strip_accents).normalizer
    normalize = character_normalization.CharacterNormalizer(
        normalizer, character_normalization.distinct_characters(TEXTS))
    for text in TEXTS:
        assert normalize(text) == normalizer.normalize_str(text), text
    # Both routes of a non-ASCII text were taken: few changing characters (a regular
    # expression) and many (str.translate).
    sparse, dense_text = TEXTS[-2:]
    extra = [len(text.encode()) - len(text) for text in (sparse, dense_text)]
    dense = character_normalization._DENSE
    assert extra[0] <= dense * len(sparse) and extra[1] > dense * len(dense_text)


def test_distinct_characters_finds_every_character():
    assert character_normalization.distinct_characters(TEXTS) == set("".join(TEXTS))
    assert character_normalization.distinct_characters([]) == set()


def test_a_normaliser_that_is_not_character_wise_on_ascii_is_refused():
    with pytest.raises(ValueError, match="not a character-wise normaliser"):
        character_normalization.CharacterNormalizer(normalizers.Replace("a", "bb"), "a")
