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
an answer whose `answer_start` does not point at its text.

Unlabelled input (prediction, `read_unlabelled_*`) comes in the same formats, a label being
optional and ignored, plus `lines` (every non-blank line one text, verbatim); the readers return
`Rows`: the good rows as examples, and each bad row (a missing column, a non-string text, a line
that is not a JSON object, ...) named by file and line instead of stopping the read. A file that
cannot be read as a whole (no such file, empty, undecodable, a header without the text column)
is still a DataError. Blank lines are not rows in any format.

TFDS catalog names are read by `bert_jax.data.tfds_tasks`; examples become model rows in
`bert_jax.data.encoding`.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import dataclasses
import json
import os
import re
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence

import numpy as np

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_FIELD_LIMIT = 2**31 - 1  # the largest the csv module takes everywhere (a C long)


class DataError(ValueError):
    """Fine-tuning input that cannot be read or does not fit the task; names the file at fault."""


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


# ----- local files -----------------------------------------------------------------------------

def _check_file(path: str) -> None:
    if not os.path.isfile(path):
        raise DataError(f"{path}: no such file")
    if os.path.getsize(path) == 0:
        raise DataError(f"{path}: the file is empty")


def _decoding(encoding: str) -> str:
    """The codec to read a file said to be in `encoding`: UTF-8 drops a leading byte-order mark."""
    return "utf-8-sig" if codecs.lookup(encoding).name == "utf-8" else encoding


def _lines(path: str, encoding: str, newline: Optional[str] = None) -> Iterator[tuple[int, str]]:
    """(line number, line) of a text file; undecodable bytes name the file, line and encoding.

    newline: as for `open` ("" keeps line ends as they are, which the csv module needs).
    """
    number = 0
    try:
        with open(path, encoding=_decoding(encoding), newline=newline) as f:
            for number, line in enumerate(f, 1):
                yield number, line
    except UnicodeDecodeError as e:
        raise DataError(f"{path}:{number + 1}: not valid {encoding} ({e.reason} at byte "
                        f"{e.start} of a block); set the file's encoding (data.encoding, e.g. "
                        "cp1252 or latin-1)") from None


def _label_value(raw: Any, regression: bool, where: str) -> Any:
    """A class name (str), a number (regression), or a tuple of names (a JSON list of labels,
    for multi-label classification; it may be empty)."""
    if isinstance(raw, (list, tuple)) and not regression:
        return tuple(str(name).strip() for name in raw)
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        raise DataError(f"{where}: the label is empty")
    if regression:
        try:
            return float(raw)
        except (TypeError, ValueError):
            raise DataError(f"{where}: label {raw!r} is not a number (regression task)") from None
    return str(raw).strip()


def _from_records(records: Iterator[tuple[str, Mapping[str, Any]]], path: str, text_column: str,
                  label_column: str, text_pair_column: Optional[str], regression: bool,
                  ) -> list[TextExample]:
    """(location, record) pairs -> TextExamples; a missing column names the columns that exist."""
    examples = []
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
                                                             where)))
    if not examples:
        raise DataError(f"{path}: holds no examples")
    return examples


@contextlib.contextmanager
def _fields_of_any_length():
    """Lifts the csv module's 128 KiB field limit (a process-wide setting) for a block."""
    previous = csv.field_size_limit(_FIELD_LIMIT)
    try:
        yield
    finally:
        csv.field_size_limit(previous)


def _table_records(path: str, delimiter: str, quoting: bool, encoding: str
                   ) -> Iterator[tuple[int, list[str]]]:
    """(first line number, fields) of each non-blank record of a CSV/TSV file, header included.

    Every line must be accounted for: a record takes one line, plus one for each line break
    inside its quoted fields; blank lines are skipped. Lines a record takes otherwise, and, in
    a TSV file, a quoted field holding both line breaks and tabs (rows swallowed by a quote that
    closes lines later) are a DataError naming the lines and the rows they made.
    """
    lines = (line for _, line in _lines(path, encoding, newline=""))
    reader = csv.reader(lines, delimiter=delimiter, strict=quoting,
                        quoting=csv.QUOTE_MINIMAL if quoting else csv.QUOTE_NONE)
    consumed = 0
    while True:
        start = consumed + 1
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            hint = ("read TSV files without quote processing (tsv_quoting=False)"
                    if delimiter == "\t" else "a quoted field ends with a quote, and a quote "
                    "inside it is written twice")
            raise DataError(f"{path}:{start}: malformed quote: {e}; {hint}") from None
        taken, consumed = reader.line_num - consumed, reader.line_num
        if not fields:
            continue
        breaks = sum(len(_LINE_BREAK.findall(field)) for field in fields)
        swallowed = delimiter == "\t" and any(
            "\t" in field and _LINE_BREAK.search(field) for field in fields)
        if taken != 1 + breaks or swallowed:
            why = (f"a quoted field holds line breaks and tabs: rows swallowed by the quote "
                   f"opened on line {start}; read the TSV without quote processing "
                   "(tsv_quoting=False)" if swallowed else
                   f"only {1 + breaks} of them are explained by line breaks in quoted fields")
            raise DataError(f"{path}: 1 row from {taken} lines ({start}-{consumed}): {why}")
        yield start, fields


def read_table(path: str, text_column: str, label_column: str,
               text_pair_column: Optional[str] = None, regression: bool = False,
               delimiter: Optional[str] = None, encoding: str = "utf-8",
               tsv_quoting: bool = False) -> list[TextExample]:
    """CSV or TSV with a header row; the delimiter defaults to a tab for .tsv, else a comma.

    Tab-separated files are read without quote processing, as GLUE's TSV files are meant to be
    read: a field may start with a double quote (as tweets do) and keeps it. tsv_quoting=True
    reads them with CSV quoting instead. Other delimiters use the standard CSV dialect (a quoted
    field may hold delimiters, line breaks and doubled quotes), strictly: a malformed quote is an
    error naming its line. A UTF-8 byte-order mark is dropped; fields may be of any length. Every
    line of the file makes a row, is blank or lies inside a quoted field (`_table_records`).
    """
    _check_file(path)
    delimiter = delimiter or ("\t" if path.endswith(".tsv") else ",")
    quoting = tsv_quoting or delimiter != "\t"
    with _fields_of_any_length():
        records = _table_records(path, delimiter, quoting, encoding)
        header = next(records, (0, []))[1]
        if not header:
            raise DataError(f"{path}: no header row")
        missing = [c for c in (text_column, text_pair_column, label_column)
                   if c is not None and c not in header]
        if missing:
            raise DataError(f"{path}: no column(s) {missing} in the header; the columns are "
                            f"{header}")
        rows = []
        for line, fields in records:
            if len(fields) != len(header):
                raise DataError(f"{path}:{line}: the row has {len(fields)} columns, not the "
                                f"{len(header)} columns of the header")
            rows.append((f"{path}:{line}", dict(zip(header, fields))))
    return _from_records(iter(rows), path, text_column, label_column, text_pair_column,
                         regression)


def read_jsonl(path: str, text_column: str, label_column: str,
               text_pair_column: Optional[str] = None, regression: bool = False,
               encoding: str = "utf-8") -> list[TextExample]:
    """One JSON object per line, with the named keys."""
    _check_file(path)

    def records():
        for number, line in _lines(path, encoding):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{number}: not valid JSON ({e.msg})") from None
            if not isinstance(record, dict):
                raise DataError(f"{path}:{number}: expected a JSON object per line")
            yield f"{path}:{number}", record

    return _from_records(records(), path, text_column, label_column, text_pair_column,
                         regression)


FASTTEXT_PREFIX = "__label__"


def read_fasttext(path: str, encoding: str = "utf-8") -> list[TextExample]:
    """Lines `__label__<name> text` (the format of gensim's pang_lee_polarity.cor, in cp1252)."""
    _check_file(path)
    examples = []
    for number, line in _lines(path, encoding):
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


def _format_of(path: str, file_format: str, choices: str = "csv, tsv, jsonl or fasttext") -> str:
    """`file_format`, or for "auto" the format its extension says (.txt and .cor: fasttext)."""
    if file_format != "auto":
        return file_format
    extension = os.path.splitext(path)[1].lower()
    file_format = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl",
                   ".cor": "fasttext", ".txt": "fasttext"}.get(extension, "")
    if not file_format:
        raise DataError(f"{path}: cannot tell the format from the extension {extension!r}; "
                        f"set the format to {choices}")
    return file_format


def read_text_examples(path: str, file_format: str = "auto", text_column: str = "text",
                       label_column: str = "label", text_pair_column: Optional[str] = None,
                       regression: bool = False, encoding: str = "utf-8",
                       tsv_quoting: bool = False) -> list[TextExample]:
    """Dispatch on `file_format` (csv | tsv | jsonl | fasttext), or on the extension for auto.

    tsv_quoting: read TSV files with CSV quoting (see `read_table`)."""
    file_format = _format_of(path, file_format)
    if file_format in ("csv", "tsv"):
        return read_table(path, text_column, label_column, text_pair_column, regression,
                          delimiter="\t" if file_format == "tsv" else ",", encoding=encoding,
                          tsv_quoting=tsv_quoting)
    if file_format == "jsonl":
        return read_jsonl(path, text_column, label_column, text_pair_column, regression,
                          encoding)
    if file_format == "fasttext":
        if regression:
            raise DataError(f"{path}: fastText label lines name classes, not regression targets")
        return read_fasttext(path, encoding)
    raise DataError(f"unknown text file format {file_format!r}: use csv, tsv, jsonl or fasttext")


def read_conll(path: str, tag_column: int = -1, encoding: str = "utf-8") -> list[TaggedSentence]:
    """CoNLL: `token [other columns] tag` per line, a blank line between sentences.

    Lines starting with -DOCSTART- are skipped. A line with fewer than two columns, or fewer
    columns than the sentence's first line, is an error naming its line number.
    """
    _check_file(path)
    sentences: list[TaggedSentence] = []
    words: list[str] = []
    tags: list[str] = []
    width = 0

    def close_sentence():
        nonlocal words, tags, width
        if words:
            sentences.append(TaggedSentence(tuple(words), tuple(tags)))
        words, tags, width = [], [], 0

    for number, line in _lines(path, encoding):
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


def read_squad_json(path: str) -> list[QAExample]:
    """SQuAD 1.1 / 2.0 JSON: data[].paragraphs[].{context, qas[].{id, question, answers,
    is_impossible}}. Every answer's answer_start must point at its text in the context."""
    document = _load_json(path)
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        raise DataError(f"{path}: expected a SQuAD object with a 'data' list")
    examples = []
    for a, article in enumerate(document["data"]):
        for p, paragraph in enumerate(article.get("paragraphs", [])):
            where = f"{path}: data[{a}].paragraphs[{p}]"
            try:
                context = paragraph["context"]
                for qa in paragraph["qas"]:
                    answers = [(ans["text"], int(ans["answer_start"])) for ans in qa["answers"]]
                    examples.append(qa_example(str(qa["id"]), qa["question"], context, answers,
                                               qa.get("is_impossible", False), where))
            except KeyError as e:
                raise DataError(f"{where}: missing key {e}") from None
    if not examples:
        raise DataError(f"{path}: holds no questions")
    return examples


# ----- unlabelled input (prediction) ------------------------------------------------------------

@dataclasses.dataclass
class Rows:
    """The rows of an unlabelled input file, in file order.

    examples: the good rows' examples; indices: the position of each among all rows of the file
    (bad rows included, from 0); bad: "<file>:<line>: <what is wrong>" for each bad row.
    """

    examples: list
    indices: list[int]
    bad: list[str]

    @property
    def total(self) -> int:
        return len(self.examples) + len(self.bad)


def _rows(items: Iterable[tuple[Any, Optional[str]]]) -> Rows:
    """Rows from (example, None) for a good row and (None, message) for a bad one."""
    rows = Rows([], [], [])
    for index, (example, error) in enumerate(items):
        if error is not None:
            rows.bad.append(error)
        else:
            rows.examples.append(example)
            rows.indices.append(index)
    return rows


def _unlabelled_text(where: str, record: Mapping[str, Any], text_column: str,
                     text_pair_column: Optional[str]) -> tuple[Any, Optional[str]]:
    """(TextExample, None) of one record, or (None, the fault named at `where`)."""
    for column in (text_column, text_pair_column):
        if column is not None and column not in record:
            return None, f"{where}: no column {column!r}; the columns are {sorted(record)}"
    text = record[text_column]
    pair = record[text_pair_column] if text_pair_column else None
    if not isinstance(text, str) or (text_pair_column and not isinstance(pair, str)):
        return None, f"{where}: the text columns must hold strings"
    return TextExample(text, pair), None


def _unlabelled_table(path: str, delimiter: str, quoting: bool, encoding: str,
                      columns: Sequence[str]) -> Iterator[tuple[str, Any]]:
    """(location, record dict or a fault) per row of a CSV/TSV file; the header must hold
    `columns` (else a DataError: no row could be read)."""
    with _fields_of_any_length():
        records = _table_records(path, delimiter, quoting, encoding)
        header = next(records, (0, []))[1]
        if not header:
            raise DataError(f"{path}: no header row")
        missing = [c for c in columns if c not in header]
        if missing:
            raise DataError(f"{path}: no column(s) {missing} in the header; the columns are "
                            f"{header}")
        for line, fields in records:
            if len(fields) != len(header):
                yield f"{path}:{line}", (f"the row has {len(fields)} columns, not the "
                                         f"{len(header)} columns of the header")
            else:
                yield f"{path}:{line}", dict(zip(header, fields))


def _unlabelled_jsonl(path: str, encoding: str) -> Iterator[tuple[str, Any]]:
    """(location, record dict or a fault) per non-blank line of a JSONL file."""
    for number, line in _lines(path, encoding):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            yield f"{path}:{number}", f"not valid JSON ({e.msg})"
            continue
        yield f"{path}:{number}", (record if isinstance(record, dict) else
                                   "expected a JSON object per line")


def _unlabelled_lines(path: str, encoding: str, labelled: bool
                      ) -> Iterator[tuple[Any, Optional[str]]]:
    """One text per non-blank line, stripped; `labelled` (fastText) drops leading
    `__label__<name>` words first, so lines with and without labels both read."""
    for number, line in _lines(path, encoding):
        text = line.strip()
        if not text:
            continue
        while labelled and text.startswith(FASTTEXT_PREFIX):
            text = text.partition(" ")[2].strip()
        if not text:
            yield None, f"{path}:{number}: the text after the label is empty"
        else:
            yield TextExample(text), None


UNLABELLED_TEXT_FORMATS = ("csv", "tsv", "jsonl", "fasttext", "lines")


def read_unlabelled_text(path: str, file_format: str = "auto", text_column: str = "text",
                         text_pair_column: Optional[str] = None, encoding: str = "utf-8",
                         tsv_quoting: bool = False) -> Rows:
    """Rows of TextExamples (label None) from csv | tsv | jsonl | fasttext | lines, or by the
    extension for auto (.txt and .cor: fasttext, whose label words are optional here).

    A label column may be present or not (it is ignored). Bad rows: a row with another number
    of columns than the header, a line that is not a JSON object, a record without the text (or
    pair) key, a text that is not a string, a fastText line with only labels.
    """
    _check_file(path)
    choices = ", ".join(UNLABELLED_TEXT_FORMATS[:-1]) + " or lines"
    file_format = _format_of(path, file_format, choices)
    if file_format in ("fasttext", "lines") and text_pair_column:
        raise DataError(f"{path}: the {file_format} format holds one text per line, but the "
                        f"task takes pairs ({text_column!r}, {text_pair_column!r}): use csv, "
                        "tsv or jsonl")
    if file_format in ("fasttext", "lines"):
        return _rows(_unlabelled_lines(path, encoding, labelled=file_format == "fasttext"))
    if file_format in ("csv", "tsv"):
        delimiter = "\t" if file_format == "tsv" else ","
        columns = [c for c in (text_column, text_pair_column) if c]
        records = _unlabelled_table(path, delimiter, tsv_quoting or delimiter != "\t",
                                    encoding, columns)
    elif file_format == "jsonl":
        records = _unlabelled_jsonl(path, encoding)
    else:
        raise DataError(f"unknown text file format {file_format!r}: use {choices}")
    return _rows((None, f"{where}: {record}") if isinstance(record, str) else
                 _unlabelled_text(where, record, text_column, text_pair_column)
                 for where, record in records)


def read_unlabelled_conll(path: str, encoding: str = "utf-8") -> Rows:
    """Rows of TaggedSentences with no tags: one token per line (its first column; any other
    columns, such as tags, are ignored), a blank line between sentences, -DOCSTART- skipped."""
    _check_file(path)
    sentences: list[tuple[str, ...]] = []
    words: list[str] = []
    for _, line in _lines(path, encoding):
        columns = line.split()
        if not columns or columns[0] == "-DOCSTART-":
            if words:
                sentences.append(tuple(words))
            words = []
            continue
        words.append(columns[0])
    if words:
        sentences.append(tuple(words))
    return _rows((TaggedSentence(sentence, ()), None) for sentence in sentences)


def _load_json(path: str) -> Any:
    """The JSON document of a file; DataError naming the file when it is not valid JSON."""
    _check_file(path)
    try:
        with open(path, encoding=_decoding("utf-8")) as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: not valid JSON ({e})") from None
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not valid UTF-8 ({e.reason} at byte {e.start})") from None


def _unlabelled_questions(path: str, document: Any) -> Iterator[tuple[Any, Optional[str]]]:
    """(QAExample with no answers, None) or (None, fault) per question of a SQuAD document."""
    for a, article in enumerate(document["data"]):
        paragraphs = article.get("paragraphs", []) if isinstance(article, dict) else []
        for p, paragraph in enumerate(paragraphs):
            context = paragraph.get("context") if isinstance(paragraph, dict) else None
            questions = paragraph.get("qas", []) if isinstance(paragraph, dict) else []
            for q, qa in enumerate(questions):
                where = f"{path}: data[{a}].paragraphs[{p}].qas[{q}]"
                if not isinstance(context, str):
                    yield None, f"{where}: the paragraph has no 'context' string"
                elif not isinstance(qa, dict) or not isinstance(qa.get("question"), str):
                    yield None, f"{where}: no 'question' string"
                else:
                    qid = str(qa["id"]) if qa.get("id") is not None else None
                    yield QAExample(qid, qa["question"], context, ()), None


def read_unlabelled_squad(path: str) -> Rows:
    """Rows of QAExamples (no answers; id None where the question has none) from SQuAD-style
    JSON: data[].paragraphs[].{context, qas[].{id, question}}; answers, if any, are ignored.
    Bad rows are named by their place in the document (data[a].paragraphs[p].qas[q])."""
    document = _load_json(path)
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        raise DataError(f"{path}: expected a SQuAD object with a 'data' list")
    return _rows(_unlabelled_questions(path, document))


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

