"""Input faults: tables that lose rows silently, and preparations that differ between runs."""

import csv
import os
import subprocess
import sys

import pytest

from bert_jax.data.finetuning import readers


def write(path, text, encoding="utf-8"):
    path.write_text(text, encoding=encoding, newline="")
    return str(path)


# ----- tables lose rows silently -----------------------------------------------------------------

TWEETS = [
    ('"Best day ever!!! @friend', "pos"),
    ("just landed, so tired", "neg"),
    ('"quoted" is how I feel', "neg"),
    ("rain again", "neg"),
    ('I\'d give it 5" of snow', "pos"),
    ('"', "neg"),
    ("the end", "pos"),
]


def tweets_tsv(tmp_path):
    lines = ["text\tlabel"] + [f"{text}\t{label}" for text, label in TWEETS]
    return write(tmp_path / "tweets.tsv", "\n".join(lines) + "\n")


def test_tsv_fields_starting_with_a_quote_keep_every_row(tmp_path):
    path = tweets_tsv(tmp_path)
    examples = readers.read_text_examples(path)
    assert [(e.text, e.label) for e in examples] == TWEETS
    assert readers.read_table(path, "text", "label") == examples


def test_tsv_quoting_on_request_and_csv_quoting_by_default(tmp_path):
    quoted = write(tmp_path / "quoted.tsv",
                   'text\tlabel\n"a\ttab"\tpos\n"two\nlines"\tneg\n"say ""hi"""\tpos\n')
    examples = readers.read_text_examples(quoted, tsv_quoting=True)
    assert [e.text for e in examples] == ["a\ttab", "two\nlines", 'say "hi"']
    table = write(tmp_path / "quoted.csv",
                  'text,label\n"Hi, there",pos\n"two\r\nlines",neg\n\n"say ""hi""",pos\n')
    assert [e.text for e in readers.read_text_examples(table)] == [
        "Hi, there", "two\r\nlines", 'say "hi"']


def test_utf8_bom_is_not_part_of_the_first_column(tmp_path):
    for name, text in (("bom.tsv", "text\tlabel\nhello\tpos\n"),
                       ("bom.csv", "text,label\nhello,pos\n")):
        path = write(tmp_path / name, "\ufeff" + text)
        assert readers.read_text_examples(path) == [readers.TextExample("hello", None, "pos")]


def test_field_of_200_kib_reads_and_the_limit_is_restored(tmp_path):
    before = csv.field_size_limit()
    long_text = "word " * (200 * 1024 // 5)
    for name, sep in (("long.csv", ","), ("long.tsv", "\t")):
        path = write(tmp_path / name, f"text{sep}label\n{long_text}{sep}pos\nshort{sep}neg\n")
        examples = readers.read_text_examples(path)
        assert [len(e.text) for e in examples] == [len(long_text), 5]
    assert csv.field_size_limit() == before


def test_rows_swallowed_by_a_quote_are_an_error_naming_both_counts(tmp_path):
    # With CSV quoting, the quote that opens line 2 closes on line 5, right before a tab: the
    # tweets between would become part of one field. Lines and rows then differ unexplained.
    path = write(tmp_path / "swallow.tsv", "text\tlabel\n\"Best day ever!!! @friend\tpos\n"
                 "just landed, so tired\tneg\nrain again\tneg\nI'd give it 5\"\tpos\n"
                 "the end\tpos\n")
    assert len(readers.read_text_examples(path)) == 5
    with pytest.raises(readers.DataError, match=r"swallow\.tsv: 1 row from 4 lines \(2-5\): "
                                                r".*tsv_quoting=False"):
        readers.read_text_examples(path, tsv_quoting=True)
    broken = write(tmp_path / "broken.tsv", 'text\tlabel\n"quoted" is how I feel\tneg\n')
    with pytest.raises(readers.DataError, match=r"broken\.tsv:2: malformed quote.*tsv_quoting"):
        readers.read_text_examples(broken, tsv_quoting=True)


def test_malformed_csv_quote_names_the_line(tmp_path):
    path = write(tmp_path / "bad.csv", 'text,label\nfine,pos\n"broken" here,neg\nok,pos\n')
    with pytest.raises(readers.DataError, match=r"bad\.csv:3: .*quote"):
        readers.read_text_examples(path)


# ----- the same command gives two different runs -------------------------------------------------

PREPARE_DEMO = """
import sys
from bert_jax.data.pretraining import vocab as pretraining_vocab
print(pretraining_vocab.prepare_demo(sys.argv[1], vocab_size=512))
"""


def test_demo_corpus_and_vocabulary_are_the_same_in_every_preparation(tmp_path):
    """Two fresh preparations, in two processes with different thread counts, write the same
    bytes: the corpus's array_record files and the vocabulary (vocab.txt, tokenizer.json)."""
    runs = []
    for threads in (1, 3):
        env = {**os.environ, "RAYON_NUM_THREADS": str(threads), "JAX_PLATFORMS": "cpu"}
        runs.append(subprocess.Popen(
            [sys.executable, "-c", PREPARE_DEMO, str(tmp_path / f"data{threads}")], env=env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for run in runs:
        _, stderr = run.communicate(timeout=600)
        assert run.returncode == 0, stderr[-3000:]
    first, second = (tmp_path / "data1", tmp_path / "data3")
    files = sorted(str(p.relative_to(first)) for p in first.rglob("*")
                   if "array_record" in p.name or p.name in ("vocab.txt", "tokenizer.json"))
    assert sum("array_record" in f for f in files) == 2 and len(files) == 4, files
    for name in files:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
