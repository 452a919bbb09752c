"""experiments/predict.py: a fine-tuned run on new, unlabelled inputs.

The check of agreement: a run's held-out examples, written WITHOUT labels, go through
predict.py in a new process, which must reproduce row for row the predictions the run wrote at
the end of training (same class and probabilities within 1e-6, same NER tags, same answers).
Runs are tiny and short (the point is agreement, not accuracy). Then bad rows (stop before
writing, or skip and count), over-long inputs (counted, never dropped), the unlabelled readers,
and the real polarity config.
"""

import itertools
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from bert_jax.data.finetuning import readers, unlabelled
from bert_jax.recipes.finetune import recipe

from finetune_runs import WORDS, ner_sentence, text_rows, tiny_config, write_vocab
from repo_root import ROOT as REPO

PLACES = WORDS[2:4]
FILLER = ["visited", "met", "works", "at", "in", "the", "today", "and", "is", "old", "red"]


def run_predict(workdir, input_path, output_path, *flags):
    """predict.py in a new process: (returncode, stdout, stderr)."""
    completed = subprocess.run(
        [sys.executable, os.path.join(REPO, "experiments", "predict.py"), f"--workdir={workdir}",
         f"--input={input_path}", f"--output={output_path}", *flags],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    return completed.returncode, completed.stdout, completed.stderr


def predict_in_process(workdir, input_path, output_path, **options):
    """What predict.py does (cli.run_or_exit around predict_file), in this process, for a run
    that must fail: the one line it exits with (status 1)."""
    from bert_jax import cli
    from bert_jax.recipes.finetune import predict

    with pytest.raises(SystemExit) as exit_:
        cli.run_or_exit("predict.py", lambda: predict.predict_file(str(workdir), (
            predict.PredictOptions(str(input_path), str(output_path), progress=False,
                                   **options))))
    message = str(exit_.value.code)  # sys.exit(message): printed to stderr, status 1
    assert "\n" not in message
    return message


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def run_outputs(workdir, name):
    """The prediction file `name` the run wrote at the end of training."""
    (step_dir,) = os.listdir(os.path.join(workdir, "predictions"))
    return os.path.join(workdir, "predictions", step_dir, name)


# ----- classification ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def classification_run(tmp_path_factory):
    """A tiny classification run whose eval set holds one text longer than max_seq_len."""
    root = tmp_path_factory.mktemp("classification")
    rng = np.random.default_rng(0)
    train, dev = text_rows(rng, 200), text_rows(rng, 40)
    dev[7] = (" ".join(["the"] * 30 + ["paris"]), "place")  # 31 words > max_seq_len 16
    for name, rows in (("train.tsv", train), ("dev.tsv", dev)):
        (root / name).write_text("text\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in rows),
                                 encoding="utf-8")
    config = tiny_config(write_vocab(root / "vocab.txt"), "classification", max_seq_len=16,
                         total_steps=120,
                         **{"data.train_path": str(root / "train.tsv"),
                            "data.eval_path": str(root / "dev.tsv")})
    workdir = str(root / "run")
    recipe.train_and_evaluate(config, workdir)
    return root, workdir, dev


def test_classification_predictions_equal_the_runs_own(classification_run):
    root, workdir, dev = classification_run
    new_input = root / "new.jsonl"  # another format than training's TSV, and no labels
    new_input.write_text("".join(json.dumps({"text": t}) + "\n" for t, _ in dev),
                         encoding="utf-8")
    code, stdout, stderr = run_predict(workdir, new_input, root / "out.jsonl")
    assert code == 0, stderr[-3000:]
    mine, theirs = read_jsonl(root / "out.jsonl"), read_jsonl(run_outputs(workdir,
                                                                          "predictions.jsonl"))
    assert len(mine) == len(theirs) == 40 and len({r["prediction"] for r in mine}) > 1
    label_map = json.load(open(os.path.join(workdir, "task.json")))["label_map"]
    for index, (a, b) in enumerate(zip(mine, theirs)):
        assert a["index"] == index and a["text"] == b["text"] and "text_pair" not in a
        assert "label" not in a and a["prediction"] == b["prediction"]  # one schema
        assert b["label"] in label_map  # the run's own records keep the gold label
        assert list(a["probabilities"]) == list(b["probabilities"]) == label_map
        np.testing.assert_allclose(list(a["probabilities"].values()),
                                   list(b["probabilities"].values()), atol=1e-6)
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["rows"] == summary["records"] == 40 and summary["bad_rows_skipped"] == 0
    assert summary["cut"] == {"inputs truncated to max_seq_len=16 tokens": 1}
    assert "1 inputs truncated to max_seq_len=16 tokens" in stderr


def test_bad_rows_stop_before_writing_or_are_skipped_and_counted(classification_run):
    root, workdir, _ = classification_run
    bad = root / "bad.jsonl"
    bad.write_text('{"text": "john visited paris"}\n'
                   'not json\n'
                   '\n'  # a blank line is not a row
                   '{"sentence": "mary met john"}\n'
                   '{"text": 42}\n'
                   '{"text": "the old car", "label": "org"}\n', encoding="utf-8")
    output = root / "bad_out.jsonl"
    # The error line of predict.py, in-process through the script's own run_or_exit
    assert predict_in_process(workdir, bad, output) == (
        f"predict.py: error: {bad}:2: not valid JSON (Expecting value) (and 2 more bad rows); "
        "nothing written (--skip_bad_rows predicts the other rows)")
    assert not output.exists() and not [p for p in os.listdir(root) if "bad_out" in p]

    code, stdout, stderr = run_predict(workdir, bad, output, "--skip_bad_rows")
    assert code == 0, stderr[-3000:]
    records = read_jsonl(output)
    assert [(r["index"], r["text"]) for r in records] == [(0, "john visited paris"),
                                                          (4, "the old car")]
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert (summary["rows"], summary["records"], summary["bad_rows_skipped"]) == (5, 2, 3)
    assert summary["bad_rows"] == [f"{bad}:2: not valid JSON (Expecting value)",
                                   f"{bad}:4: no column 'text'; the columns are ['sentence']",
                                   f"{bad}:5: the text columns must hold strings"]
    assert f"skipped bad row {bad}:5: the text columns must hold strings" in stderr
    assert "3 bad rows skipped" in stderr


def test_raw_text_is_one_record_a_line_and_an_inner_blank_line_stops(classification_run):
    """A blank line in the middle of raw text was skipped and the records renumbered, so record
    i no longer answered line i + 1 (exit 0). A blank line before the last text is now a bad
    row: the run stops naming it, or --skip_bad_rows skips it and every record keeps index =
    its line - 1. Blank lines that end the file (an editor's) are ignored; CRLF, a lone CR
    and a BOM still read as line ends and nothing."""
    from bert_jax.recipes.finetune import predict

    root, workdir, _ = classification_run
    texts = ["john visited paris", "mary met john", "the old car"]
    gap = root / "gap.txt"  # .txt: fasttext, the run's format auto; --format=lines below
    gap.write_text(f"{texts[0]}\n{texts[1]}\n\n{texts[2]}\n", encoding="utf-8")
    output = root / "gap_out.jsonl"
    blank = (f"{gap}:3: the line is blank, but raw text is one text a line (only the file's "
             "last lines may be blank): remove the line or give it a text")
    for file_format in (None, "lines"):
        assert predict_in_process(workdir, gap, output, file_format=file_format) == (
            f"predict.py: error: {blank}; nothing written (--skip_bad_rows predicts the other "
            "rows)")
    assert not output.exists()

    def predict_all(path, **options):
        summary = predict.predict_file(workdir, predict.PredictOptions(
            str(path), str(output), progress=False, **options))
        return summary, [(r["index"], r["text"]) for r in read_jsonl(output)]

    summary, records = predict_all(gap, skip_bad_rows=True)
    assert records == [(0, texts[0]), (1, texts[1]), (3, texts[2])]
    assert (summary.rows, summary.records, summary.bad_rows) == (4, 3, [blank])

    trailing = root / "trailing.txt"
    trailing.write_bytes(("\ufeff" + texts[0] + "\r\n" + texts[1] + "\r" + texts[2]
                          + "\r\n\r\n \n\n").encode("utf-8"))
    for file_format in (None, "lines"):
        summary, records = predict_all(trailing, file_format=file_format)
        assert records == list(enumerate(texts))
        assert summary.rows == summary.records == 3 and not summary.bad_rows


def test_user_mistakes_are_one_line_errors(classification_run, tmp_path):
    root, workdir, _ = classification_run
    pretraining = tmp_path / "pretrain"
    pretraining.mkdir()
    (pretraining / "config.json").write_text(json.dumps({"recipe": "pretrain"}))
    cases = [(pretraining, root / "dev.tsv", "holds a 'pretrain' run; predictions need the "
              "workdir of a fine-tuning run"),
             (workdir, tmp_path / "missing.txt", f"{tmp_path / 'missing.txt'}: no such file"),
             (workdir, root / "dev.tsv", "batch_size=0 must be positive")]
    for run, input_path, message in cases:  # in-process, through predict.py's run_or_exit
        batch_size = 0 if "batch_size" in message else 64
        last = predict_in_process(run, input_path, tmp_path / "out.jsonl", batch_size=batch_size)
        assert last.startswith("predict.py: error: ") and message in last, last
    assert not (tmp_path / "out.jsonl").exists()


# ----- token classification and span QA ------------------------------------------------------

def test_ner_tags_equal_the_runs_own_and_words_past_the_row_get_o(tmp_path):
    rng = np.random.default_rng(1)
    dev = [ner_sentence(rng) for _ in range(30)]
    dev[3] = (["john", "blackburn"] * 8 + ["paris"], ["B-PER", "O"] * 8 + ["B-LOC"])
    for name, sentences in (("train.conll", [ner_sentence(rng) for _ in range(150)]),
                            ("dev.conll", dev)):
        (tmp_path / name).write_text("".join(
            "".join(f"{w} {t}\n" for w, t in zip(*s)) + "\n" for s in sentences))
    config = tiny_config(write_vocab(tmp_path / "vocab.txt"), "token_classification",
                         max_seq_len=16, **{"data.train_path": str(tmp_path / "train.conll"),
                                            "data.eval_path": str(tmp_path / "dev.conll")})
    workdir = str(tmp_path / "run")
    recipe.train_and_evaluate(config, workdir)
    (tmp_path / "new.conll").write_text("-DOCSTART-\n\n" + "".join(
        "".join(f"{w}\n" for w in words) + "\n" for words, _ in dev))  # tokens, no tags
    code, stdout, stderr = run_predict(workdir, tmp_path / "new.conll", tmp_path / "out.jsonl")
    assert code == 0, stderr[-3000:]
    with open(run_outputs(workdir, "predictions.conll")) as f:
        theirs = [[line.split()[2] for line in block.splitlines()]
                  for block in f.read().strip().split("\n\n")]
    mine = read_jsonl(tmp_path / "out.jsonl")
    assert [r["words"] for r in mine] == [words for words, _ in dev]
    assert [r["prediction"] for r in mine] == theirs
    assert len({tag for tags in theirs for tag in tags}) > 2  # entities found, not all "O"
    assert mine[3]["prediction"][-1] == "O"  # "paris" lies past the 16-token row
    cut = json.loads(stdout.strip().splitlines()[-1])["cut"]
    assert cut == {"sentences truncated to max_seq_len=16 tokens (their last words tagged O)": 1}

    # Raw sentences, one per line: split into words as CoNLL sets them, tagged like the tokens.
    from bert_jax.data.textfiles import DataError
    from bert_jax.recipes.finetune import predict
    raw = tmp_path / "tweets.txt"
    raw.write_text("".join(" ".join(words[:-1]) + f" {words[-1]}!\n" for words, _ in dev))
    for file_format in (None, "lines"):  # auto-detected, and --format=lines
        predict.predict_file(workdir, predict.PredictOptions(
            str(raw), str(tmp_path / "raw.jsonl"), file_format=file_format, progress=False))
        tagged = read_jsonl(tmp_path / "raw.jsonl")
        assert [r["words"] for r in tagged] == [words + ["!"] for words, _ in dev]
        assert [r["prediction"][:-1] for r in tagged] == theirs  # "!" is a word of its own
        assert tagged[0]["text"] == raw.read_text().splitlines()[0]
    with pytest.raises(DataError, match=r"tweets.txt:1: .*not CoNLL.*--format=lines"):
        predict.predict_file(workdir, predict.PredictOptions(
            str(raw), str(tmp_path / "never.jsonl"), file_format="conll", progress=False))
    assert not (tmp_path / "never.jsonl").exists()
    # A CoNLL file with its tag column is still CoNLL: one record per sentence, not per line.
    predict.predict_file(workdir, predict.PredictOptions(
        str(tmp_path / "dev.conll"), str(tmp_path / "tagged.jsonl"), progress=False))
    assert [r["prediction"] for r in read_jsonl(tmp_path / "tagged.jsonl")] == theirs


def qa_paragraph(rng, qid):
    """'the X is in P .' among filler; 'where is the X ?' (and an unanswerable-looking id)."""
    thing, place = ["book", "car"][rng.integers(2)], PLACES[rng.integers(2)]
    before = " ".join(rng.choice(FILLER, rng.integers(2, 10)))
    after = " ".join(rng.choice(FILLER, rng.integers(2, 10)))
    context = f"{before} . the {thing} is in {place} . {after} ."
    start = context.index(f"the {thing} is in ") + len(f"the {thing} is in ")
    return {"context": context, "qas": [{"id": qid, "question": f"where is the {thing} ?",
                                         "answers": [{"text": place, "answer_start": start}]}]}


def test_qa_answers_equal_the_runs_own_across_windows(tmp_path):
    rng = np.random.default_rng(2)
    for name, count in (("train.json", 150), ("dev.json", 24)):
        paragraphs = [qa_paragraph(rng, f"{name[0]}{i}") for i in range(count)]
        (tmp_path / name).write_text(json.dumps({"data": [{"paragraphs": paragraphs}]}))
    config = tiny_config(write_vocab(tmp_path / "vocab.txt"), "span_qa", max_seq_len=24,
                         **{"data.train_path": str(tmp_path / "train.json"),
                            "data.eval_path": str(tmp_path / "dev.json"),
                            "squad.doc_stride": 6, "squad.max_query_len": 8})
    workdir = str(tmp_path / "run")
    recipe.train_and_evaluate(config, workdir)
    document = json.loads((tmp_path / "dev.json").read_text())
    for paragraph in document["data"][0]["paragraphs"]:
        for qa in paragraph["qas"]:
            del qa["answers"]
    (tmp_path / "new.json").write_text(json.dumps(document))
    code, _, stderr = run_predict(workdir, tmp_path / "new.json", tmp_path / "out.jsonl")
    assert code == 0, stderr[-3000:]
    with open(run_outputs(workdir, "predictions.json")) as f:
        theirs = json.load(f)
    mine = read_jsonl(tmp_path / "out.jsonl")
    paragraphs = document["data"][0]["paragraphs"]
    assert [r["id"] for r in mine] == [p["qas"][0]["id"] for p in paragraphs]
    for record, paragraph in zip(mine, paragraphs):
        assert record["prediction"] == theirs[record["id"]] != ""
        assert paragraph["context"][record["start"]:record["end"]] == record["prediction"]
    assert len({r["prediction"] for r in mine}) > 1  # not one answer for all
    assert max(len(p["context"].split()) for p in paragraphs) > 24 - 5 - 3  # 2+ windows

    # The same questions as JSONL of {question, context}: no SQuAD document needed.
    from bert_jax.recipes.finetune import predict
    (tmp_path / "questions.jsonl").write_text("".join(
        json.dumps({"question": p["qas"][0]["question"], "context": p["context"]}) + "\n"
        for p in paragraphs))
    predict.predict_file(workdir, predict.PredictOptions(
        str(tmp_path / "questions.jsonl"), str(tmp_path / "lines.jsonl"), progress=False))
    lines = read_jsonl(tmp_path / "lines.jsonl")
    assert [r["prediction"] for r in lines] == [r["prediction"] for r in mine]
    assert [r["id"] for r in lines] == [None] * len(mine)


@pytest.mark.parametrize("task", ["regression", "multi_label"])
def test_pair_regression_and_multi_label_records_equal_the_runs_own(task, tmp_path):
    """The other text kinds, in-process (predict_file): a pair-regression run and a
    multi-label run; the score / the label set and probabilities are the run's."""
    from bert_jax.recipes.finetune import predict

    rng = np.random.default_rng(3)
    rows = text_rows(rng, 80)
    if task == "regression":  # a score for a pair of texts
        lines = [f"{a}\t{b}\t{len(a) / len(b):.3f}" for (a, _), (b, _) in itertools.pairwise(rows)]
        header, columns = "a\tb\tlabel", {"data.text_column": "a", "data.text_pair_column": "b"}
    else:  # two labels where the text holds two entity kinds
        lines = [f"{a} {b}\t{x}|{y}" for (a, x), (b, y) in itertools.pairwise(rows)]
        header, columns = "text\tlabel", {}
    for name, part in (("train.tsv", lines[:60]), ("dev.tsv", lines[60:])):
        (tmp_path / name).write_text("\n".join([header] + part) + "\n", encoding="utf-8")
    config = tiny_config(write_vocab(tmp_path / "vocab.txt"), task, max_seq_len=32,
                         total_steps=5, **columns,
                         **{"data.train_path": str(tmp_path / "train.tsv"),
                            "data.eval_path": str(tmp_path / "dev.tsv")})
    workdir = str(tmp_path / "run")
    recipe.train_and_evaluate(config, workdir)
    summary = predict.predict_file(workdir, predict.PredictOptions(
        str(tmp_path / "dev.tsv"), str(tmp_path / "out.jsonl"), batch_size=8, progress=False))
    assert summary.rows == summary.records == len(lines) - 60
    mine, theirs = read_jsonl(tmp_path / "out.jsonl"), read_jsonl(run_outputs(
        workdir, "predictions.jsonl"))
    for a, b in zip(mine, theirs):
        assert (a["text"], a.get("text_pair")) == (b["text"], b.get("text_pair"))
        assert set(a) == set(b) - {"label"}, (a, b)  # one schema, less the gold label
        if task == "regression":
            assert a["prediction"] == pytest.approx(b["prediction"], abs=1e-5)
        else:
            assert a["prediction"] == b["prediction"] and "label" not in a
            assert list(a["probabilities"]) == list(b["probabilities"])
            np.testing.assert_allclose(list(a["probabilities"].values()),
                                       list(b["probabilities"].values()), atol=1e-6)


# ----- the readers of unlabelled input ----------------------------------------------------------

def test_unlabelled_text_formats(tmp_path):
    def read(name, text, **kwargs):
        (tmp_path / name).write_text(text, encoding="utf-8")
        return unlabelled.read_unlabelled_text(str(tmp_path / name), **kwargs)

    rows = read("a.csv", 'id,text\n1,"Hi, there"\n2,a,b\n\n3,Bye\n')
    assert [e.text for e in rows.examples] == ["Hi, there", "Bye"] and rows.indices == [0, 2]
    assert rows.lines == [2, 5]
    assert rows.bad == [f"{tmp_path / 'a.csv'}:3: the row has 3 columns, not the 2 columns of "
                        "the header"]
    rows = read("b.tsv", "s1\ts2\tlabel\nA cat\tA dog\t1\n", text_column="s1",
                text_pair_column="s2")
    assert rows.examples == [readers.TextExample("A cat", "A dog")]
    rows = read("c.txt", "__label__pos good film\nplain text\n\n__label__a __label__b two\n"
                "__label__neg\n")
    assert [e.text for e in rows.examples] == ["good film", "plain text", "two"]
    # raw text is a row a line: the inner blank line is a bad row, the texts keep their lines
    assert rows.indices == [0, 1, 3] and rows.lines == [1, 2, 4]
    assert rows.bad == [f"{tmp_path / 'c.txt'}:3: the line is blank, but raw text is one text a "
                        "line (only the file's last lines may be blank): remove the line or give "
                        "it a text", f"{tmp_path / 'c.txt'}:5: the text after the label is empty"]
    rows = read("d.txt", "__label__pos is kept\n", file_format="lines")
    assert [e.text for e in rows.examples] == ["__label__pos is kept"]
    with pytest.raises(readers.DataError, match=r"d\.txt: the lines format holds one text per "
                       r"line, but the task takes pairs"):
        unlabelled.read_unlabelled_text(str(tmp_path / "d.txt"), "lines", text_pair_column="b")
    with pytest.raises(readers.DataError, match=r"e\.csv: no column\(s\) \['text'\]"):
        read("e.csv", "sentence\nhi\n")
    with pytest.raises(readers.DataError, match=r"f\.xml.*csv, tsv, jsonl, fasttext or lines"):
        read("f.xml", "<a/>")


def test_unlabelled_conll_and_squad(tmp_path):
    (tmp_path / "a.conll").write_text("-DOCSTART- O\n\nJohn B-PER\nruns O\n\n\nParis\n")
    rows = unlabelled.read_unlabelled_conll(str(tmp_path / "a.conll"))
    assert [s.words for s in rows.examples] == [("John", "runs"), ("Paris",)]
    assert rows.lines == [3, 7]
    document = {"data": [{"paragraphs": [
        {"context": "the car is in paris .",
         "qas": [{"id": "q1", "question": "where is the car ?"}, {"id": "q2"},
                 {"question": "what is in paris ?"}]},
        {"qas": [{"id": "q4", "question": "?"}]}]}]}
    (tmp_path / "a.json").write_text(json.dumps(document))
    rows = unlabelled.read_unlabelled_squad(str(tmp_path / "a.json"))
    assert [(e.id, e.question, e.answers) for e in rows.examples] == [
        ("q1", "where is the car ?", ()), (None, "what is in paris ?", ())]
    assert rows.indices == [0, 2] and rows.bad == [
        f"{tmp_path / 'a.json'}: data[0].paragraphs[0].qas[1]: no 'question' string",
        f"{tmp_path / 'a.json'}: data[0].paragraphs[1].qas[0]: the paragraph has no 'context' "
        "string"]


# ----- the real polarity config ------------------------------------------------------------------

def test_polarity_run_predictions_equal_the_runs_own(tmp_path):
    """finetune_polarity.py (MiniLM, gensim's polarity sentences), 1 step (a MiniLM step costs
    ~3 s of CPU with the tests' fast-compile flags; agreement needs no learning): predict.py on
    the 50 held-out sentences, as plain lines, gives the run's own classes and probabilities."""
    from experiments.configs import finetune_polarity

    config = finetune_polarity.get_config()
    config.total_steps, config.async_checkpoints = 1, False
    # One batch length (bucketed agreement is test_bucketing's): one training program and one
    # prediction program to compile, not one per bucket; predict.py predicts in batches of the
    # run's eval batch size, the shapes the run's own predictions were computed at.
    config.data.bucket_lengths = "none"
    workdir = str(tmp_path / "polarity")
    recipe.train_and_evaluate(config, workdir)
    theirs = read_jsonl(run_outputs(workdir, "predictions.jsonl"))
    (tmp_path / "held_out.txt").write_text("".join(r["text"] + "\n" for r in theirs),
                                           encoding="utf-8")
    code, _, stderr = run_predict(workdir, tmp_path / "held_out.txt", tmp_path / "out.jsonl",
                                  "--format=lines", f"--batch_size={config.eval_batch_size}")
    assert code == 0, stderr[-3000:]
    mine = read_jsonl(tmp_path / "out.jsonl")
    assert len(mine) == len(theirs) == 50
    for a, b in zip(mine, theirs):
        assert a["text"] == b["text"] and a["prediction"] == b["prediction"]
        np.testing.assert_allclose(list(a["probabilities"].values()),
                                   list(b["probabilities"].values()), atol=1e-6)
