"""How predict.py reads an NER run's input (issue 40, class 5): raw text is one row per input
line, always (a blank line before the last text is a named bad row, which stops the run; blank
lines that end the file are ignored); CoNLL only when asked (--format=conll, a .conll file) or
when the file cannot be raw text (a -DOCSTART- line; tagged token lines in blank-line-separated
sentences). Each row is a record or a named bad row: the count of records is the count of
inputs, and row i is line i + 1 (bert_jax/recipes/finetune/token_classification.py,
bert_jax/data/finetuning/unlabelled.py)."""

import pytest

from bert_jax.data.textfiles import DataError
from bert_jax.recipes.finetune import kinds, predict

from finetune_runs import finetune_settings

CONFIG = finetune_settings("token_classification")  # the run's settings predict.py reads
NER = kinds.get("token_classification")


def read(tmp_path, name, text, file_format="auto"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return NER.read_unlabelled(str(path), CONFIG, file_format)


def words(rows):
    return [list(example.words) for example in rows.examples]


def blank_fault(path, number):
    return (f"{path}:{number}: the line is blank, but raw text is one text a line (only the "
            "file's last lines may be blank): remove the line or give it a text")


# ----- the cases of the issue ------------------------------------------------------------------

def test_one_word_lines_are_one_record_each(tmp_path):
    rows = read(tmp_path, "cities.txt", "Paris\nLondon\nBerlin\n")
    assert words(rows) == [["Paris"], ["London"], ["Berlin"]]
    assert rows.indices == [0, 1, 2] and rows.lines == [1, 2, 3] and not rows.bad


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
    # raw text, so the blank lines between are rows: named bad rows, the records keep their
    # lines' places (a prediction stops on them unless bad rows are skipped)
    path = tmp_path / "travel.txt"
    assert rows.indices == [0, 2, 4] and rows.lines == [1, 3, 5]
    assert rows.bad == [blank_fault(path, 2), blank_fault(path, 4)]


def test_a_single_tagged_sentence_without_blank_lines_is_raw_text(tmp_path):
    """Nothing says it is CoNLL: one record per line, as raw text always is."""
    rows = read(tmp_path, "one.txt", "Paris B-LOC\nis O\n")
    assert len(rows.examples) == 2


def test_an_inner_blank_line_of_raw_text_stops_the_prediction(tmp_path):
    """A blank line between sentences was skipped and the records renumbered, so record i no
    longer answered line i + 1 (exit 0). Now it stops the run in one line naming it."""
    path = tmp_path / "people.txt"
    path.write_text("John met Mary\n\nParis is big\n", encoding="utf-8")
    with pytest.raises(DataError) as error:
        predict.read_input(NER, CONFIG, predict.PredictOptions(str(path), str(tmp_path / "o")))
    assert str(error.value) == (f"{blank_fault(path, 2)}; nothing written (--skip_bad_rows "
                                "predicts the other rows)")
    rows = predict.read_input(NER, CONFIG, predict.PredictOptions(
        str(path), str(tmp_path / "o"), skip_bad_rows=True))
    assert words(rows) == [["John", "met", "Mary"], ["Paris", "is", "big"]]
    assert rows.indices == [0, 2] and rows.total == 3


def test_blank_lines_that_end_the_file_are_ignored(tmp_path):
    """An editor's trailing newlines (and white space, CRLF, a lone CR, a BOM) are no rows:
    nothing follows them, so nothing is misnumbered."""
    path = tmp_path / "end.txt"
    path.write_bytes("\ufeffJohn met Mary\r\nParis\rBerlin\n\r\n  \n\n".encode("utf-8"))
    rows = predict.read_input(NER, CONFIG, predict.PredictOptions(str(path), str(tmp_path / "o")))
    assert words(rows) == [["John", "met", "Mary"], ["Paris"], ["Berlin"]]
    assert rows.indices == [0, 1, 2] and rows.lines == [1, 2, 3] and not rows.bad
    with pytest.raises(DataError, match=r"only\.txt: holds no rows"):
        read_only = tmp_path / "only.txt"
        read_only.write_text("\n  \n\n", encoding="utf-8")
        predict.read_input(NER, CONFIG, predict.PredictOptions(str(read_only), "o"))
