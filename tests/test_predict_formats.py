"""How predict.py reads an NER run's input (issue 40, class 5): raw text is one record per
non-blank input line, always; CoNLL only when asked (--format=conll, a .conll file) or when the
file cannot be raw text (a -DOCSTART- line; tagged token lines in blank-line-separated
sentences). Each row is a record or a named bad row: the count of records is the count of
inputs (bert_jax/recipes/finetune/token_classification.py)."""

import pytest

from bert_jax.config import run as run_config
from bert_jax.data.textfiles import DataError
from bert_jax.recipes.finetune import kinds

CONFIG = run_config.finetune_config("token_classification")
NER = kinds.get("token_classification")


def read(tmp_path, name, text, file_format="auto"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return NER.read_unlabelled(str(path), CONFIG, file_format)


def words(rows):
    return [list(example.words) for example in rows.examples]


def non_blank(text):
    return sum(1 for line in text.splitlines() if line.strip())


# ----- the cases of the issue ------------------------------------------------------------------

def test_one_word_lines_are_one_record_each(tmp_path):
    text = "Paris\nLondon\n\nBerlin\n"
    rows = read(tmp_path, "cities.txt", text)
    assert words(rows) == [["Paris"], ["London"], ["Berlin"]]
    assert len(rows.examples) == non_blank(text) and rows.indices == [0, 1, 2]


def test_lines_ending_in_a_tag_like_word_are_one_record_each(tmp_path):
    text = "We met O\nThey left O\n"  # every line two words, the last "O": still raw text
    rows = read(tmp_path, "notes.txt", text)
    assert words(rows) == [["We", "met", "O"], ["They", "left", "O"]]


def test_conll_is_read_when_asked_or_when_the_file_cannot_be_raw_text(tmp_path):
    tokens = "John\nlives\n\nParis\n"
    assert words(read(tmp_path, "a.txt", tokens, "conll")) == [["John", "lives"], ["Paris"]]
    assert words(read(tmp_path, "a.conll", tokens)) == [["John", "lives"], ["Paris"]]
    assert words(read(tmp_path, "b.txt", "-DOCSTART-\n\n" + tokens)) == [["John", "lives"],
                                                                         ["Paris"]]
    tagged = "John B-PER\nlives O\n\nParis B-LOC\n"
    assert words(read(tmp_path, "c.txt", tagged)) == [["John", "lives"], ["Paris"]]
    # --format=lines: raw text whatever the file looks like
    assert len(read(tmp_path, "c.txt", tagged, "lines").examples) == 3


def test_raw_text_named_conll_is_refused_not_merged(tmp_path):
    with pytest.raises(DataError, match=r"a.conll:1: 'John met Mary' is several words without a "
                                        "tag column"):
        read(tmp_path, "a.conll", "John met Mary\nParis\n")


# ----- new cases, as an adversarial user would try -----------------------------------------------

def test_sentences_ending_in_highway_names_are_not_read_as_tags(tmp_path):
    """'I-95' and 'B-52' look like tags (I-X, B-X): paragraphs of such sentences, blank lines
    between, once read as CoNLL and merged every word into a handful of records."""
    text = "We drove up I-95\n\nThe B-52 flew over B-52\n\nTake I-80\n"
    rows = read(tmp_path, "travel.txt", text)
    assert words(rows) == [["We", "drove", "up", "I", "-", "95"],
                           ["The", "B", "-", "52", "flew", "over", "B", "-", "52"],
                           ["Take", "I", "-", "80"]]
    assert len(rows.examples) == non_blank(text)


def test_a_single_tagged_sentence_without_blank_lines_is_raw_text(tmp_path):
    """Nothing says it is CoNLL: one record per line, as raw text always is."""
    rows = read(tmp_path, "one.txt", "Paris B-LOC\nis O\n")
    assert len(rows.examples) == 2
