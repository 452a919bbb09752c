"""Corpora as TFDS array_record datasets: local text files, the demo corpus parser, bad input."""

import bz2
import logging

import pytest

from bert_jax.data.corpora import catalog as corpora
from bert_jax.data.corpora import demo as demo_corpus
from bert_jax.data.corpora import text_files as text_corpus

from repo_root import ROOT


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
    names = {text_corpus.text_files_config(f"{tmp_path}/*.txt").name,
             text_corpus.text_files_config(f"{tmp_path}/*.txt", validation_fraction=0.1).name,
             text_corpus.text_files_config(f"{tmp_path}/x.txt").name}
    assert len(names) == 3
    # The delimiter is not in the name: it is recorded with the one prepared copy and checked.
    assert (text_corpus.text_files_config(f"{tmp_path}/*.txt", document_delimiter="line").name
            == text_corpus.text_files_config(f"{tmp_path}/*.txt").name)


def test_document_delimiter_is_recorded_and_a_different_one_refused(tmp_path):
    write(tmp_path / "lines.txt", "".join(f"paragraph number {i}\n" for i in range(30)))
    glob, data_dir = f"text:{tmp_path}/*.txt", str(tmp_path / "data")
    by_line = corpora.prepare(glob, data_dir, document_delimiter="line")
    assert by_line.info.metadata["document_delimiter"] == "line"
    assert sum(split.num_examples for split in by_line.info.splits.values()) == 30
    for asked in ("blank_line", "file"):
        with pytest.raises(ValueError) as caught:
            corpora.load_source(glob, "train", data_dir, document_delimiter=asked)
        message = str(caught.value)
        assert "\n" not in message
        assert f"document_delimiter='line', but '{asked}' is asked for" in message
        assert "data.document_delimiter='line'" in message
    again = corpora.load_source(glob, "train", data_dir, document_delimiter="line")
    assert len(again) == by_line.info.splits["train"].num_examples
    assert len(list((tmp_path / "data" / "text_files").iterdir())) == 1  # never a second copy


def test_file_of_lines_without_blank_line_warns(tmp_path, caplog):
    write(tmp_path / "lines.txt", "".join(f"paragraph number {i}.\n" for i in range(150)))
    write(tmp_path / "short.txt", "one line\nand another")
    with caplog.at_level(logging.WARNING):
        documents = text_corpus.read_text_documents(f"{tmp_path}/*.txt")
    assert len(documents) == 2
    assert "lines.txt holds no blank line" in caplog.text and "150 lines are ONE" in caplog.text
    assert "document_delimiter='line'" in caplog.text and "short.txt" not in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert len(text_corpus.read_text_documents(f"{tmp_path}/*.txt", "line")) == 152
    assert "blank line" not in caplog.text


def test_run_config_key_reaches_the_pipeline(tmp_path):
    from bert_jax.config import run as run_config
    from bert_jax.config import settings
    from bert_jax.recipes import inputs

    config = run_config.pretrain_config()
    assert config.data.document_delimiter == "blank_line"  # the behaviour before the key
    config.data.document_delimiter = "line"
    run = settings.typed(config)
    assert inputs.pretraining_data_config(run, str(tmp_path)).document_delimiter == "line"
    with pytest.raises(ValueError, match=r"data\.document_delimiter='page': choose one of "
                                         "blank_line, file, line"):
        inputs.schema_data_config(document_delimiter="page")


def test_a_text_corpus_without_a_vocabulary_trains_one_in_the_workdir(tmp_path):
    """config.tokenizer.path empty with a text: corpus: the run trains a WordPiece vocabulary of
    tokenizer.vocab_size on the corpus's train split (documents as data.document_delimiter says)
    into <workdir>/data, once, the same bytes in every workdir, and pre-trains with it."""
    import json
    import os

    from bert_jax.config import settings
    from bert_jax.recipes import pretrain

    from pretrain_runs import tiny_pretrain_config

    folder = tmp_path / "txt"
    folder.mkdir()
    words = "river stone bridge lantern harbour meadow orchard violin".split()
    lines = [" ".join(words[(i + j) % len(words)] for j in range(12)) for i in range(60)]
    write(folder / "lines.txt", "\n".join(lines) + "\n")
    config = tiny_pretrain_config(**{"data.corpus": f"text:{folder}/*.txt",
                                     "data.document_delimiter": "line",
                                     "tokenizer.vocab_size": 120, "eval_batches": 1})
    run = settings.read(config, "pretrain")
    assert pretrain.checked_vocab_size(run) == 120  # no error: it will be trained

    vocabularies = []
    for name in ("a", "b"):
        workdir = str(tmp_path / name)
        tokenizer = pretrain.pretraining_tokenizer(run, workdir)
        (vocab_dir,) = [d for d in os.listdir(os.path.join(workdir, "data")) if "_vocab_120_" in d]
        path = os.path.join(workdir, "data", vocab_dir, "vocab.txt")
        vocabularies.append(open(path, "rb").read())
        pieces = vocabularies[-1].decode("utf-8").split("\n")
        assert tokenizer.vocab_size == len(pieces) - 1 <= 120 and set(words) <= set(pieces)
        modified = os.stat(path).st_mtime_ns
        assert pretrain.pretraining_tokenizer(run, workdir).vocab_size == tokenizer.vocab_size
        assert os.stat(path).st_mtime_ns == modified  # trained once, then read
    assert vocabularies[0] == vocabularies[1]

    pretrain.train_and_evaluate(config, str(tmp_path / "a"))
    with open(tmp_path / "a" / "metrics.jsonl", encoding="utf-8") as f:
        assert [json.loads(line)["step"] for line in f][-1] == 2


def test_prepare_data_refuses_another_delimiter_in_one_line(tmp_path):
    import os
    import subprocess
    import sys

    write(tmp_path / "lines.txt", "".join(f"paragraph number {i} here\n" for i in range(40)))
    glob, data_dir = f"text:{tmp_path}/*.txt", str(tmp_path / "data")
    corpora.prepare(glob, data_dir, document_delimiter="line")
    repo = ROOT
    result = subprocess.run(
        [sys.executable, os.path.join(repo, "experiments", "prepare_data.py"), f"--corpus={glob}",
         f"--data_dir={data_dir}", "--vocab_size=100"], capture_output=True, text=True,
        cwd=repo, env=dict(os.environ, PYTHONPATH=repo), timeout=300)
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("prepare_data.py: error: corpus ") and "Traceback" not in result.stderr
    assert "document_delimiter='line', but 'blank_line' is asked for" in last


def test_glob_matching_nothing(tmp_path):
    with pytest.raises(ValueError, match=r"glob '.*nothing_here\*\.txt' matches no file"):
        corpora.load_source(f"text:{tmp_path}/nothing_here*.txt", "train", str(tmp_path / "d"))


def test_empty_file_is_skipped_with_warning(tmp_path, caplog):
    write(tmp_path / "empty.txt", "")
    write(tmp_path / "full.txt", "alpha beta\n\ngamma delta\n\nepsilon")
    with caplog.at_level(logging.WARNING):
        documents = text_corpus.read_text_documents(f"{tmp_path}/*.txt")
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
        documents = text_corpus.read_text_documents(f"{tmp_path}/*.txt", invalid_utf8="skip")
    assert documents == ["fine text", "more fine text", "even more"]
    assert "bad.txt" in caplog.text


def test_unknown_split_and_bad_options(tmp_path):
    write(tmp_path / "a.txt", "one\n\ntwo\n\nthree")
    with pytest.raises(ValueError, match="has no split 'test'"):
        corpora.load_source(f"text:{tmp_path}/*.txt", "test", str(tmp_path / "d"))
    with pytest.raises(ValueError, match="document_delimiter='page'"):
        text_corpus.read_text_documents(f"{tmp_path}/*.txt", document_delimiter="page")


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
    articles = list(demo_corpus.wiki_articles(str(path)))
    assert articles == ["Thing is a word used for objects.\nHistory\nThings were named in 1999."]


def test_demo_corpus_files_are_found():
    folder = demo_corpus.gensim_test_data()
    assert folder.endswith("test_data")


def test_prepare_data_puts_a_text_vocabulary_where_a_run_finds_it(tmp_path):
    """prepare_data.py on a text: corpus without --vocab_dir trains the vocabulary a run with the
    same data dir, size and casing would train itself: the run reads that file, trains none."""
    import os
    import subprocess
    import sys

    from bert_jax.config import settings
    from bert_jax.recipes import pretrain

    from pretrain_runs import tiny_pretrain_config

    write(tmp_path / "lines.txt", "".join(f"paragraph number {i} about rivers and stones\n"
                                          for i in range(40)))
    glob, data_dir = f"text:{tmp_path}/*.txt", str(tmp_path / "data")
    repo = ROOT
    result = subprocess.run(
        [sys.executable, os.path.join(repo, "experiments", "prepare_data.py"), f"--corpus={glob}",
         f"--data_dir={data_dir}", "--vocab_size=100", "--document_delimiter=line"],
        capture_output=True, text=True, cwd=repo, env=dict(os.environ, PYTHONPATH=repo),
        timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    printed = result.stdout.strip().splitlines()[-1]
    assert printed.startswith("vocabulary: ")
    vocab_path = printed.split(" tokens in ")[1]
    modified = os.stat(vocab_path).st_mtime_ns
    assert sorted(d for d in os.listdir(data_dir) if "_vocab_" in d) == [
        os.path.basename(os.path.dirname(vocab_path))]

    config = tiny_pretrain_config(**{"data.corpus": glob, "data.document_delimiter": "line",
                                     "data.data_dir": data_dir, "tokenizer.vocab_size": 100})
    tokenizer = pretrain.pretraining_tokenizer(settings.read(config, "pretrain"),
                                               str(tmp_path / "run"))
    with open(vocab_path, encoding="utf-8") as f:
        assert tokenizer.vocab_size == len(f.read().split("\n")) - 1
    assert os.stat(vocab_path).st_mtime_ns == modified  # read, not trained again
    assert sorted(d for d in os.listdir(data_dir) if "_vocab_" in d) == [
        os.path.basename(os.path.dirname(vocab_path))]
