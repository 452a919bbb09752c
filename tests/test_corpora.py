"""Corpora as TFDS array_record datasets: local text files, the demo corpus parser, bad input."""

import bz2
import logging

import pytest

from bert_jax.data import corpora


def texts_of(source):
    return sorted(corpora.document_text(source[i]) for i in range(len(source)))


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_blank_line_documents_split_stably(tmp_path):
    folder = tmp_path / "txt"
    folder.mkdir()
    documents = [f"Document number {i}.\nIts second line {i * 7}." for i in range(40)]
    write(folder / "a.txt", "\n\n".join(documents[:25]) + "\n")
    write(folder / "b.txt", "\n\n\n".join(documents[25:]))
    data_dir = str(tmp_path / "data")
    options = dict(validation_fraction=0.2)
    train = corpora.load_source(f"text:{folder}/*.txt", "train", data_dir, **options)
    validation = corpora.load_source(f"text:{folder}/*.txt", "validation", data_dir, **options)
    assert sorted(texts_of(train) + texts_of(validation)) == sorted(documents)
    assert 0 < len(validation) < len(train)
    assert corpora.document_text(train[0]) in documents  # records are dicts with bytes "text"

    # A new file adds documents but moves none of the old ones between splits.
    write(folder / "c.txt", "A brand new document.\n\nAnd another one.")
    validation2 = corpora.load_source(f"text:{folder}/*.txt", "validation", data_dir, **options)
    train2 = corpora.load_source(f"text:{folder}/*.txt", "train", data_dir, **options)
    assert set(texts_of(validation)) <= set(texts_of(validation2))
    assert set(texts_of(train)) <= set(texts_of(train2))
    assert len(train2) + len(validation2) == 42


def test_different_globs_and_options_do_not_collide(tmp_path):
    write(tmp_path / "x.txt", "one\n\ntwo\n\nthree")
    write(tmp_path / "y.txt", "four\nfive\nsix")
    data_dir = str(tmp_path / "data")
    by_line = corpora.load_source(f"text:{tmp_path}/y.txt", "train", data_dir,
                                  document_delimiter="line")
    by_file = corpora.load_source(f"text:{tmp_path}/*.txt", "train", data_dir,
                                  document_delimiter="file")
    x_only = corpora.load_source(f"text:{tmp_path}/x.txt", "train", data_dir)
    by_line_all = texts_of(by_line) + texts_of(corpora.load_source(
        f"text:{tmp_path}/y.txt", "validation", data_dir, document_delimiter="line"))
    assert sorted(by_line_all) == ["five", "four", "six"]
    by_file_all = texts_of(by_file) + texts_of(corpora.load_source(
        f"text:{tmp_path}/*.txt", "validation", data_dir, document_delimiter="file"))
    assert sorted(by_file_all) == ["four\nfive\nsix", "one\n\ntwo\n\nthree"]
    assert set(texts_of(x_only)) <= {"one", "two", "three"}
    names = {corpora.text_files_config(f"{tmp_path}/*.txt").name,
             corpora.text_files_config(f"{tmp_path}/*.txt", document_delimiter="file").name,
             corpora.text_files_config(f"{tmp_path}/x.txt").name}
    assert len(names) == 3


def test_glob_matching_nothing(tmp_path):
    with pytest.raises(ValueError, match=r"glob '.*nothing_here\*\.txt' matches no file"):
        corpora.load_source(f"text:{tmp_path}/nothing_here*.txt", "train", str(tmp_path / "d"))


def test_empty_file_is_skipped_with_warning(tmp_path, caplog):
    write(tmp_path / "empty.txt", "")
    write(tmp_path / "full.txt", "alpha beta\n\ngamma delta\n\nepsilon")
    with caplog.at_level(logging.WARNING):
        documents = corpora.read_text_documents(f"{tmp_path}/*.txt")
    assert documents == ["alpha beta", "gamma delta", "epsilon"]
    assert "empty.txt" in caplog.text


def test_only_empty_files(tmp_path):
    write(tmp_path / "empty.txt", "\n\n  \n")
    with pytest.raises(ValueError, match="hold no text"):
        corpora.load_source(f"text:{tmp_path}/*.txt", "train", str(tmp_path / "d"))


def test_single_document_cannot_be_split(tmp_path):
    write(tmp_path / "one.txt", "just one document")
    with pytest.raises(ValueError, match="need at least 2"):
        corpora.load_source(f"text:{tmp_path}/*.txt", "train", str(tmp_path / "d"))


def test_invalid_utf8_fails_naming_the_file_or_is_skipped(tmp_path, caplog):
    write(tmp_path / "good.txt", "fine text\n\nmore fine text\n\neven more")
    (tmp_path / "bad.txt").write_bytes(b"valid start \xff\xfe broken")
    with pytest.raises(ValueError, match=r"bad\.txt is not valid UTF-8 \(byte 12"):
        corpora.load_source(f"text:{tmp_path}/*.txt", "train", str(tmp_path / "d"))
    with caplog.at_level(logging.WARNING):
        documents = corpora.read_text_documents(f"{tmp_path}/*.txt", invalid_utf8="skip")
    assert documents == ["fine text", "more fine text", "even more"]
    assert "bad.txt" in caplog.text


def test_unknown_split_and_bad_options(tmp_path):
    write(tmp_path / "a.txt", "one\n\ntwo\n\nthree")
    with pytest.raises(ValueError, match="has no split 'test'"):
        corpora.load_source(f"text:{tmp_path}/*.txt", "test", str(tmp_path / "d"))
    with pytest.raises(ValueError, match="document_delimiter='page'"):
        corpora.read_text_documents(f"{tmp_path}/*.txt", document_delimiter="page")


@pytest.mark.parametrize("name", ["wikipedia/20230601.en", "no_such_dataset_anywhere"])
def test_catalog_names_fail_clearly_offline(tmp_path, name):
    with pytest.raises((ValueError, RuntimeError), match=name.split("/")[0]):
        corpora.load_source(name, "train", str(tmp_path / "d"))


WIKITEXT = """{{Infobox thing|name=Thing}}
'''Thing''' is a [[word]] used for [[object (philosophy)|objects]].<ref>{{cite book|title=Ref}}</ref>
[[File:Thing.png|thumb|A picture of a thing]]
== History ==
Things were named in 1999.
{| class="wikitable"
| cell || cell
|}
[[Category:Words]]
"""  # noqa: E501 - wikitext as a dump holds it: one line per paragraph

DUMP = """<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/">
<page><title>Thing</title><ns>0</ns><revision><text>{article}</text></revision></page>
<page><title>Old thing</title><ns>0</ns><redirect title="Thing" />
  <revision><text>#REDIRECT [[Thing]]</text></revision></page>
<page><title>Talk:Thing</title><ns>1</ns><revision><text>Discussion.</text></revision></page>
</mediawiki>"""


def test_wiki_markup_is_stripped_and_redirects_skipped(tmp_path):
    from xml.sax.saxutils import escape
    path = tmp_path / "dump.xml.bz2"
    path.write_bytes(bz2.compress(DUMP.format(article=escape(WIKITEXT)).encode("utf-8")))
    articles = list(corpora.wiki_articles(str(path)))
    assert articles == ["Thing is a word used for objects.\nHistory\nThings were named in 1999."]


def test_demo_corpus_files_are_found():
    folder = corpora.gensim_test_data()
    assert folder.endswith("test_data")
