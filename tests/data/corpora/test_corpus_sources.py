"""Corpus sources: every format and compression streamed to the same documents, bad records
skipped (named) or refused, over-long documents cut, mixtures, and the tokenizer's sample."""

import bz2
import gzip
import json
import logging
import os
import random
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from bert_jax.data.corpora import records as corpus_records
from bert_jax.data.corpora import sample as document_sample
from bert_jax.data.corpora import sources as corpus_sources
from bert_jax.data.corpora.demo import LEE_CORPUS, gensim_test_data
from bert_jax.data.corpora.records import BadRecords
from bert_jax.data.corpora.text_files import documents_in
from bert_jax.data.textfiles import DataError

COMPRESS = {"": lambda b: b, ".gz": gzip.compress, ".bz2": bz2.compress,
            ".zst": lambda b: zstandard.ZstdCompressor().compress(b)}


@pytest.fixture(scope="module")
def stories():
    """The 300 Lee news stories (real English text shipped by gensim), one per line."""
    with open(os.path.join(gensim_test_data(), LEE_CORPUS), encoding="utf-8") as f:
        return documents_in(f.read(), "line")


def texts(spec, unit_bytes=None, bad=None, max_bytes=corpus_records.MAX_DOCUMENT_BYTES, **kw):
    sources = corpus_sources.parse_corpus(spec, **kw)
    return [d.text for i, s in enumerate(sources) for u in s.units(i, unit_bytes)
            for d in u.documents(bad, max_bytes)]


def blank_line_text(stories):
    rng = random.Random(0)
    lines = []
    for story in stories:
        lines.append(story)
        if rng.random() < 0.4:
            lines.append(rng.choice(["", "  \t", "\u3000"]))
    return "\ufeff" + "\r\n".join(lines) + "\n"


@pytest.mark.parametrize("extension", list(COMPRESS))
@pytest.mark.parametrize("delimiter", ["blank_line", "line", "file"])
def test_text_files_give_text_corpus_documents(tmp_path, stories, extension, delimiter):
    text = blank_line_text(stories)
    path = tmp_path / f"a.txt{extension}"
    path.write_bytes(COMPRESS[extension](text.encode("utf-8")))
    expected = documents_in(text, delimiter)
    spec = f"text[document_delimiter={delimiter}]:{tmp_path}/*"
    assert texts(spec) == expected
    assert texts(spec, unit_bytes=7000) == expected  # byte ranges (plain files only) or whole
    units = corpus_sources.parse_corpus(spec)[0].units(0, 7000)
    assert (len(units) > 10) == (extension == "" and delimiter != "file")


@pytest.mark.parametrize("extension", ["", ".gz", ".zst"])
def test_jsonl_records_and_ranges(tmp_path, stories, extension):
    lines = [json.dumps({"id": i, "body": s}) for i, s in enumerate(stories)]
    (tmp_path / f"x.jsonl{extension}").write_bytes(
        COMPRESS[extension]("\n".join(lines).encode("utf-8")))
    spec = f"jsonl[text_key=body]:{tmp_path}/*.jsonl*"
    assert texts(spec) == stories
    assert texts(spec, unit_bytes=5000) == stories
    assert texts(f"jsonl:{tmp_path}/*", text_key="body") == stories


def test_parquet_by_row_groups(tmp_path, stories):
    table = pa.table({"content": stories, "n": list(range(len(stories)))})
    pq.write_table(table, tmp_path / "a.parquet", row_group_size=40)
    spec = f"parquet[text_key=content]:{tmp_path}/*.parquet"
    units = corpus_sources.parse_corpus(spec)[0].units(0, 50_000)
    assert len(units) > 3 and all(u.reader == "parquet" for u in units)
    assert texts(spec, unit_bytes=50_000) == stories
    documents = [d for u in units for d in u.documents()]
    assert documents[45].record == 45 and documents[45].where.endswith("a.parquet, row 45")
    with pytest.raises(DataError, match="no column 'text'; its columns are"):
        texts(f"parquet:{tmp_path}/*.parquet")


def write_saved_dataset(folder, columns, files=2):
    """A folder in datasets.save_to_disk's layout: Arrow stream files + state.json."""
    folder.mkdir(parents=True)
    table = pa.table(columns)
    rows = len(table)
    names = []
    for i in range(files):
        part = table.slice(i * rows // files, rows // files if i < files - 1 else None)
        name = f"data-{i:05d}-of-{files:05d}.arrow"
        with pa.ipc.new_stream(folder / name, part.schema) as writer:
            for batch in part.to_batches(max_chunksize=25):
                writer.write_batch(batch)
        names.append({"filename": name})
    (folder / "state.json").write_text(json.dumps({"_data_files": names}))
    (folder / "dataset_info.json").write_text("{}")


def test_hf_saved_dataset_dict_and_snapshot(tmp_path, stories):
    write_saved_dataset(tmp_path / "saved" / "train", {"text": stories})
    write_saved_dataset(tmp_path / "saved" / "validation", {"text": stories[:10]}, files=1)
    (tmp_path / "saved" / "dataset_dict.json").write_text(
        json.dumps({"splits": ["train", "validation"]}))
    assert texts(f"hf:{tmp_path}/saved/train") == stories
    assert texts(f"hf:{tmp_path}/saved/train", unit_bytes=4000) == stories
    assert texts(f"hf:{tmp_path}/saved") == stories  # a DatasetDict: its "train" split
    assert texts(f"hf[split=validation]:{tmp_path}/saved") == stories[:10]
    with pytest.raises(ValueError, match="has no split 'test'"):
        texts(f"hf[split=test]:{tmp_path}/saved")
    # A Hub snapshot: Parquet files under data/, those named after the split.
    (tmp_path / "hub" / "data").mkdir(parents=True)
    pq.write_table(pa.table({"text": stories[:100]}), tmp_path / "hub/data/train-00000.parquet")
    pq.write_table(pa.table({"text": stories[100:]}), tmp_path / "hub/data/train-00001.parquet")
    pq.write_table(pa.table({"text": ["held out"]}), tmp_path / "hub/data/test-00000.parquet")
    assert texts(f"hf:{tmp_path}/hub") == stories
    with pytest.raises(ValueError, match="no such folder"):
        texts(f"hf:{tmp_path}/missing")


@pytest.mark.skipif(sys.version_info < (3, 12), reason=(
    "the floor stack has no `datasets`: its last release for huggingface-hub < 1 (which "
    "transformers 4.57 needs) caps fsspec below gcsfs's floor; the newest stack tests this"))
def test_hf_saved_by_datasets(tmp_path, stories):
    import datasets
    datasets.Dataset.from_dict({"text": stories}).save_to_disk(str(tmp_path / "ds"),
                                                                 max_shard_size="60KB")
    assert len(corpus_sources.hf_files(str(tmp_path / "ds"))) > 1
    assert texts(f"hf:{tmp_path}/ds") == stories


def test_bad_records_skipped_with_names_or_refused(tmp_path, caplog):
    good = [json.dumps({"text": f"document {i}"}) for i in range(5)]
    lines = [good[0], '{"text": "bad \xff"}'.encode("latin-1").decode("latin-1"), good[1],
             "not json", good[2], '{"title": "no text"}', '{"text": 7}', '{"text": "  "}',
             "[1, 2]", good[3], '{"text": null}', good[4]]
    raw = b"\n".join(line.encode("latin-1") if "\xff" in line else line.encode("utf-8")
                     for line in lines)
    (tmp_path / "a.jsonl").write_bytes(raw)
    bad = BadRecords("skip")
    assert texts(f"jsonl:{tmp_path}/a.jsonl", bad=bad) == [f"document {i}" for i in range(5)]
    assert bad.total == 7
    counts = bad.as_dict()["by_reason"]
    assert counts["empty text"] == 1 and counts["no field 'text'"] == 1
    assert any("invalid UTF-8" in reason for reason in counts)
    summary = bad.summary()[0]
    second_line = len(lines[0]) + 1
    assert f"a.jsonl, byte {second_line}: invalid UTF-8" in summary
    with pytest.raises(DataError, match=rf"a.jsonl, byte {second_line}: invalid UTF-8.*skip"):
        texts(f"jsonl:{tmp_path}/a.jsonl", bad=BadRecords("fail"))
    # Text files: the document with the invalid byte goes, not the file.
    (tmp_path / "b.txt").write_bytes(b"first doc\n\nsecond \xff doc\nmore\n\nthird doc\n")
    bad = BadRecords("skip")
    assert texts(f"text:{tmp_path}/b.txt", bad=bad) == ["first doc", "third doc"]
    assert bad.examples == [f"{tmp_path}/b.txt, byte 11: invalid UTF-8 (invalid start byte)"]


def test_over_long_documents_cut_at_whitespace(tmp_path):
    rng = random.Random(1)
    words = ["alpha", "beta", "gamma", "délta", "ε"]
    line = " ".join(rng.choice(words) for _ in range(120_000))  # ~0.8 MB, one line
    (tmp_path / "long.txt").write_text("short one\n\n" + line + "\n\nafter\n", encoding="utf-8")
    bad = BadRecords()
    out = texts(f"text:{tmp_path}/long.txt", bad=bad, max_bytes=100_000)
    assert out[0] == "short one" and out[-1] == "after" and len(out) >= 9
    assert all(len(t.encode("utf-8")) <= 100_000 for t in out)
    assert " ".join(out[1:-1]).split() == line.split()  # every word kept, none cut in two
    size = len(line.encode("utf-8"))
    # counted once, with its whole size and every piece (not what was read at the first cut)
    assert bad.cut_documents == 1
    assert f"long.txt, byte 11: {size:,} bytes -> {len(out) - 2} pieces" in bad.summary()[0]
    # The same from a JSONL record, and without any whitespace: cut between characters.
    (tmp_path / "x.jsonl").write_text(json.dumps({"text": "é" * 30_000}))
    pieces = texts(f"jsonl:{tmp_path}/x.jsonl", max_bytes=7_001)
    assert "".join(pieces) == "é" * 30_000 and max(len(p.encode()) for p in pieces) <= 7_001


def test_mixture_spec_and_errors(tmp_path):
    (tmp_path / "a.txt").write_text("one\n\ntwo\n")
    (tmp_path / "b.jsonl").write_text('{"t": "three"}\n')
    sources = corpus_sources.parse_corpus(
        f"mix:0.7*text:{tmp_path}/a.txt, 0.3*jsonl[text_key=t]:{tmp_path}/b.jsonl")
    assert [(s.kind, s.weight, s.text_key) for s in sources] == [("text", 0.7, "text"),
                                                                 ("jsonl", 0.3, "t")]
    assert [u.source for u in corpus_sources.work_units(sources)] == [0, 1]
    for spec, match in [("mix:0.7*text:a", "at least two"), ("mix:x*text:a,1*text:b", "WEIGHT"),
                        ("csv:a", "KIND"), ("text[text_key=a]:x", "takes document_delimiter"),
                        ("text[document_delimiter=para]:x", "choose one of")]:
        with pytest.raises(ValueError, match=match):
            corpus_sources.parse_corpus(spec)
    with pytest.raises(ValueError, match="matches no file"):
        corpus_sources.parse_corpus(f"text:{tmp_path}/none*.txt")[0].units()


def test_sample_uniform_bounded_and_order_free(tmp_path, stories, caplog):
    half = len(stories) // 2
    (tmp_path / "one").mkdir()
    (tmp_path / "one/a.txt").write_text("\n".join(stories[:half]))
    (tmp_path / "one/b.txt").write_text("\n".join(stories[half:]))
    (tmp_path / "two").mkdir()  # the same documents, other files, other order
    (tmp_path / "two/a.txt").write_text("\n".join(reversed(stories[100:])))
    (tmp_path / "two/b.txt").write_text("\n".join(stories[:100]))
    spec = "text[document_delimiter=line]:{}/*.txt"
    first = document_sample.sample_documents(corpus_sources.parse_corpus(
        spec.format(tmp_path / "one")), 60_000, seed=3)
    again = document_sample.sample_documents(corpus_sources.parse_corpus(
        spec.format(tmp_path / "two")), 60_000, seed=3)
    other = document_sample.sample_documents(corpus_sources.parse_corpus(
        spec.format(tmp_path / "one")), 60_000, seed=4)
    assert first.texts == again.texts and set(first.texts) != set(other.texts)
    assert 50_000 < sum(len(t.encode()) for t in first.texts) <= 60_000
    assert first.read == [300] and set(first.texts) <= set(stories)
    # A mixture shares the budget by weight, and logs what it took from each source.
    caplog.set_level(logging.INFO)
    mixed = document_sample.sample_documents(corpus_sources.parse_corpus(
        f"mix:3*{spec.format(tmp_path / 'one')},1*{spec.format(tmp_path / 'two')}"), 80_000)
    assert 55_000 < mixed.kept_bytes[0] <= 60_000 and 15_000 < mixed.kept_bytes[1] <= 20_000
    assert "sample: source 1" in caplog.text
