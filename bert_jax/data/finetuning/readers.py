"""Fine-tuning examples, and the readers that turn local files into them.

    TextExample(text, text_pair, label)     classification (label: a class name) or regression
                                            (label: a float); text_pair for pair tasks
    TaggedSentence(words, tags)             token classification (NER with BIO/IOB2 tags)
    QAExample(id, question, context, answers, is_impossible)    span QA (SQuAD 1.1 / 2.0)

Local formats: CSV/TSV with a header (named text, pair and label columns; TSV read without quote
processing unless asked, see `read_table`), JSONL (one object per line, the same names as keys),
fastText-style lines (`__label__pos some text`), CoNLL (a token and its tag per line, the tag in
the last column by default, a blank line between sentences, `-DOCSTART-` lines skipped) and SQuAD
JSON. A UTF-8 byte-order mark is dropped. Every reader fails with a DataError naming the file
(and line, key or question id) at fault: an empty file, a missing column, a malformed CoNLL line,
an answer whose `answer_start` does not point at its text. How files are opened and split into
records is `bert_jax.data.textfiles`, shared with the readers of unlabelled input
(`bert_jax.data.finetuning.unlabelled`, for prediction and embeddings).

TFDS catalog names are read by `bert_jax.data.finetuning.tfds_tasks`; examples become model rows in
`bert_jax.data.finetuning.encoding`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence

import numpy as np

from bert_jax.data import textfiles

# Defined beside the file plumbing that raises it too; `readers.DataError` is the name callers use.
from bert_jax.data.textfiles import DataError


@dataclasses.dataclass(frozen=True)
class TextExample:
    text: str
    text_pair: Optional[str] = None
    label: Any = None  # class name (str) for classification, float for regression


@dataclasses.dataclass(frozen=True)
class TaggedSentence:
    words: tuple[str, ...]
    tags: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Answer:
    text: str
    start: int  # character offset of `text` in the context


@dataclasses.dataclass(frozen=True)
class QAExample:
    id: str
    question: str
    context: str
    answers: tuple[Answer, ...]  # empty for an unanswerable (SQuAD 2.0) question
    is_impossible: bool = False


# ----- text files --------------------------------------------------------------------------------

def _shown(raw: Any) -> str:
    """A JSON value as the file spells it (a string quoted), cut at 60 characters."""
    text = repr(raw) if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _label_value(raw: Any, regression: bool, where: str, list_labels: bool = True) -> Any:
    """A class name (str), a finite number (regression), or a tuple of names (a JSON list of
    labels, for multi-label classification only (`list_labels`); it may be empty). A JSON object,
    a list where one class goes, nan/inf or a JSON true/false as a regression target are each a
    DataError naming `where` and the value: none of them is a label the task can learn."""
    if isinstance(raw, dict):
        raise DataError(f"{where}: label {_shown(raw)} is a JSON object; a label is a class name "
                        f"or a number{' (or a list of class names)' if list_labels else ''}")
    if isinstance(raw, (list, tuple)):
        if regression:
            raise DataError(f"{where}: label {_shown(raw)} is a list, not a number "
                            "(regression task)")
        if not list_labels:
            raise DataError(f"{where}: label {_shown(raw)} is a list; an example of this task "
                            "has one class (lists of labels are task multi_label)")
        bad = [name for name in raw if not isinstance(name, (str, int)) or isinstance(name, bool)]
        if bad:
            raise DataError(f"{where}: label list {_shown(raw)} holds {_shown(bad[0])}, not a "
                            "class name")
        return tuple(str(name).strip() for name in raw)
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        raise DataError(f"{where}: the label is empty")
    if regression:
        if isinstance(raw, bool):
            raise DataError(f"{where}: label {json.dumps(raw)} is a boolean, not a number "
                            "(regression task)")
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise DataError(f"{where}: label {raw!r} is not a number (regression task)") from None
        if not math.isfinite(value):
            raise DataError(f"{where}: label {raw!r} is not a finite number (regression task): "
                            "nan and inf are no targets a model can fit or be scored on")
        return value
    return str(raw).strip()


def _from_records(records: Iterator[tuple[str, Mapping[str, Any]]], path: str, text_column: str,
                  label_column: str, text_pair_column: Optional[str], regression: bool,
                  list_labels: bool = True) -> list[TextExample]:
    """(location, record) pairs -> TextExamples; a missing column names the columns that exist;
    class labels that spell one number two ways are a DataError (`_one_spelling_per_number`)."""
    examples, places = [], []
    for where, record in records:
        for column in (text_column, text_pair_column, label_column):
            if column is not None and column not in record:
                raise DataError(f"{where}: no column {column!r}; the columns are "
                                f"{sorted(record)}")
        text = record[text_column]
        pair = record[text_pair_column] if text_pair_column else None
        if not isinstance(text, str) or (pair is not None and not isinstance(pair, str)):
            raise DataError(f"{where}: the text columns must hold strings")
        examples.append(TextExample(text, pair, _label_value(record[label_column], regression,
                                                             where, list_labels)))
        places.append(where)
    if not examples:
        raise DataError(f"{path}: holds no examples")
    if not regression:
        _one_spelling_per_number(examples, places)
    return examples


def _one_spelling_per_number(examples: Sequence[TextExample], places: Sequence[str]) -> None:
    """A class is its label's text, so `1` and `1.0` (JSON, or a TSV written by a tool that
    turned a column of integers into floats), or "1" and "01", would be two classes of one
    number: a DataError naming both places and spellings."""
    seen: dict[float, tuple[str, str]] = {}
    for example, where in zip(examples, places):
        if not isinstance(example.label, str):
            continue
        try:
            number = float(example.label)
        except ValueError:
            continue
        first = seen.setdefault(number, (example.label, where))
        if first[0] != example.label:
            raise DataError(f"{where}: label {example.label!r} is the number of label "
                            f"{first[0]!r} ({first[1]}) spelled another way: the two would be "
                            "two classes; spell each class one way")


def read_table(path: str, text_column: str, label_column: str,
               text_pair_column: Optional[str] = None, regression: bool = False,
               delimiter: Optional[str] = None, encoding: str = "utf-8",
               tsv_quoting: bool = False, header: bool = True) -> list[TextExample]:
    """CSV or TSV with a header row; the delimiter defaults to a tab for .tsv, else a comma.
    header=False: no header row, the columns named by position ("0", "1", ...; GLUE's CoLA).

    Tab-separated files are read without quote processing, as GLUE's TSV files are meant to be
    read: a field may start with a double quote (as tweets do) and keeps it. tsv_quoting=True
    reads them with CSV quoting instead. Other delimiters use the standard CSV dialect (a quoted
    field may hold delimiters, line breaks and doubled quotes), strictly: a malformed quote is an
    error naming its line. A UTF-8 byte-order mark is dropped; fields may be of any length. Every
    line of the file makes a row, is blank or lies inside a quoted field
    (`textfiles.table_records`).
    """
    textfiles.check_file(path)
    delimiter = delimiter or ("\t" if path.endswith(".tsv") else ",")
    columns = [c for c in (text_column, text_pair_column, label_column) if c is not None]
    quoting = tsv_quoting or delimiter != "\t"
    rows = list(_strict(path, textfiles.table_rows(path, delimiter, quoting, encoding, columns,
                                                   header)))
    return _from_records(iter(rows), path, text_column, label_column, text_pair_column,
                         regression)


def read_jsonl(path: str, text_column: str, label_column: str,
               text_pair_column: Optional[str] = None, regression: bool = False,
               encoding: str = "utf-8", list_labels: bool = True) -> list[TextExample]:
    """One JSON object per line, with the named keys; a JSON list as a label only where
    `list_labels` (multi-label classification)."""
    textfiles.check_file(path)
    return _from_records(_strict(path, textfiles.jsonl_records(path, encoding)), path,
                         text_column, label_column, text_pair_column, regression, list_labels)


def _strict(path: str, records: Iterable[tuple[int, textfiles.Record]]
            ) -> Iterator[tuple[str, dict]]:
    """("<path>:<line>", record) of each row; the first bad row is a DataError naming it."""
    for line, record in records:
        if isinstance(record, str):
            raise DataError(f"{path}:{line}: {record}")
        yield f"{path}:{line}", record


FASTTEXT_PREFIX = "__label__"


def read_fasttext(path: str, encoding: str = "utf-8") -> list[TextExample]:
    """Lines `__label__<name> text` (the format of gensim's pang_lee_polarity.cor, in cp1252)."""
    textfiles.check_file(path)
    examples = []
    for number, line in textfiles.lines(path, encoding):
        line = line.strip()
        if not line:
            continue
        label, _, text = line.partition(" ")
        if not label.startswith(FASTTEXT_PREFIX) or len(label) == len(FASTTEXT_PREFIX):
            raise DataError(f"{path}:{number}: expected '{FASTTEXT_PREFIX}<label> <text>', got "
                            f"{line[:60]!r}")
        if not text.strip():
            raise DataError(f"{path}:{number}: the text after the label is empty")
        examples.append(TextExample(text.strip(), None, label[len(FASTTEXT_PREFIX):]))
    if not examples:
        raise DataError(f"{path}: holds no examples")
    return examples


def read_text_examples(path: str, file_format: str = "auto", text_column: str = "text",
                       label_column: str = "label", text_pair_column: Optional[str] = None,
                       regression: bool = False, encoding: str = "utf-8",
                       tsv_quoting: bool = False, list_labels: bool = True
                       ) -> list[TextExample]:
    """Dispatch on `file_format` (csv | tsv | csv_no_header | tsv_no_header | jsonl |
    fasttext), or on the extension for auto. The *_no_header tables name their columns by
    position: text_column="3", label_column="1" (textfiles.TABLE_FORMATS).

    tsv_quoting: read TSV files with CSV quoting (see `read_table`)."""
    file_format = textfiles.format_of(path, file_format)
    if file_format in textfiles.TABLE_FORMATS:
        delimiter, header = textfiles.TABLE_FORMATS[file_format]
        return read_table(path, text_column, label_column, text_pair_column, regression,
                          delimiter=delimiter, encoding=encoding, tsv_quoting=tsv_quoting,
                          header=header)
    if file_format == "jsonl":
        return read_jsonl(path, text_column, label_column, text_pair_column, regression,
                          encoding, list_labels)
    if file_format == "fasttext":
        if regression:
            raise DataError(f"{path}: fastText label lines name classes, not regression targets")
        return read_fasttext(path, encoding)
    raise DataError(f"unknown text file format {file_format!r}: use csv, tsv, csv_no_header, "
                    "tsv_no_header, jsonl or fasttext")


def read_conll(path: str, tag_column: int = -1, encoding: str = "utf-8") -> list[TaggedSentence]:
    """CoNLL: `token [other columns] tag` per line, a blank line between sentences.

    Lines starting with -DOCSTART- are skipped. A line with fewer than two columns, or fewer
    columns than the sentence's first line, is an error naming its line number.
    """
    textfiles.check_file(path)
    sentences: list[TaggedSentence] = []
    words: list[str] = []
    tags: list[str] = []
    width = 0

    def close_sentence():
        nonlocal words, tags, width
        if words:
            sentences.append(TaggedSentence(tuple(words), tuple(tags)))
        words, tags, width = [], [], 0

    for number, line in textfiles.lines(path, encoding):
        columns = line.split()
        if not columns:
            close_sentence()
            continue
        if columns[0] == "-DOCSTART-":
            close_sentence()
            continue
        if len(columns) < 2 or (width and len(columns) != width):
            expected = f"{width} columns like the sentence's first line" if width else \
                "a token and a tag separated by whitespace"
            raise DataError(f"{path}:{number}: malformed CoNLL line {line.rstrip()!r}: "
                            f"expected {expected}")
        width = width or len(columns)
        try:
            tag = columns[tag_column]
        except IndexError:
            raise DataError(f"{path}:{number}: no tag column {tag_column}") from None
        words.append(columns[0])
        tags.append(tag)
    close_sentence()
    if not sentences:
        raise DataError(f"{path}: holds no sentences")
    return sentences


def qa_example(qid: str, question: str, context: str, answers: Sequence[tuple[str, int]],
               is_impossible: bool, where: str) -> QAExample:
    """A QAExample whose every (text, start) answer is checked against the context at `start`;
    `where` locates the question in error messages."""
    checked = []
    for text, start in answers:
        if context[start:start + len(text)] != text:
            raise DataError(
                f"{where}: question {qid!r}: answer {text!r} with answer_start={start} does not "
                f"match the context there ({context[start:start + len(text)]!r})")
        checked.append(Answer(text, int(start)))
    if not checked and not is_impossible:
        raise DataError(f"{where}: question {qid!r} has no answer and is not marked is_impossible")
    return QAExample(qid, question, context, tuple(checked), bool(is_impossible))


def _answers(qa: Mapping[str, Any], where: str) -> list[tuple[str, int]]:
    """(text, answer_start) of each answer of a SQuAD question; a DataError naming the question
    id when `answers` is not a list of {"text": str, "answer_start": int} objects."""
    qid = qa.get("id")
    answers = qa["answers"]
    if not isinstance(answers, list):
        raise DataError(f"{where}: question {qid!r}: 'answers' is {_shown(answers)}, not a list "
                        "of {\"text\", \"answer_start\"} objects")
    pairs = []
    for answer in answers:
        if not isinstance(answer, dict) or not isinstance(answer.get("text"), str):
            raise DataError(f"{where}: question {qid!r}: answer {_shown(answer)} is not an "
                            "object with a 'text' string")
        start = answer.get("answer_start")
        if not isinstance(start, int) or isinstance(start, bool):
            raise DataError(f"{where}: question {qid!r}: answer_start {_shown(start)} is not an "
                            "integer (the character offset of the answer in the context)")
        pairs.append((answer["text"], start))
    return pairs


def read_squad_json(path: str) -> list[QAExample]:
    """SQuAD 1.1 / 2.0 JSON: data[].paragraphs[].{context, qas[].{id, question, answers,
    is_impossible}}. Every answer's answer_start must point at its text in the context."""
    document = textfiles.load_json(path)
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        raise DataError(f"{path}: expected a SQuAD object with a 'data' list")
    examples = []
    for a, article in enumerate(document["data"]):
        for p, paragraph in enumerate(article.get("paragraphs", [])):
            where = f"{path}: data[{a}].paragraphs[{p}]"
            try:
                context = paragraph["context"]
                for qa in paragraph["qas"]:
                    examples.append(qa_example(str(qa["id"]), qa["question"], context,
                                               _answers(qa, where), qa.get("is_impossible", False),
                                               where))
            except KeyError as e:
                raise DataError(f"{where}: missing key {e}") from None
            except TypeError:  # a paragraph, qas entry or answer that is not a JSON object
                raise DataError(f"{where}: expected {{'context': ..., 'qas': [{{'id', 'question', "
                                "'answers': [...]}, ...]} objects") from None
    if not examples:
        raise DataError(f"{path}: holds no questions")
    return examples


# ----- held-out split ------------------------------------------------------------------------

def holdout_split(examples: Sequence[Any], fraction: float, seed: int,
                  stratify_by_label: bool = True) -> tuple[list[Any], list[Any]]:
    """(train, held-out): a seeded random `fraction` held out, per label when asked."""
    if not 0 < fraction < 1:
        raise DataError(f"held-out fraction {fraction} must be in (0, 1)")
    rng = np.random.default_rng(seed)
    groups: dict[Any, list[int]] = {}
    for index, example in enumerate(examples):
        key = getattr(example, "label", None) if stratify_by_label else None
        groups.setdefault(key if isinstance(key, str) else None, []).append(index)
    held = set()
    for indices in groups.values():
        order = rng.permutation(indices)
        held.update(int(i) for i in order[:max(1, round(fraction * len(indices)))])
    train = [e for i, e in enumerate(examples) if i not in held]
    heldout = [e for i, e in enumerate(examples) if i in held]
    if not train:
        raise DataError(f"held-out fraction {fraction} leaves no training examples")
    return train, heldout

