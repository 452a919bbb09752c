"""Unlabelled input: the texts, sentences or questions to predict (bert_jax.recipes.finetune
.predict) or embed (bert_jax.embeddings.encode), read from local files.

The formats are those of fine-tuning (`bert_jax.data.finetuning.readers`), a label being optional
and ignored, plus `lines` (every line one text, stripped; `__label__` words are text there). The
readers return `Rows`: the good rows as examples (TextExample, TaggedSentence or QAExample,
without labels), each with its position among all rows and its line, and each bad row (a missing
column, a non-string text, a line that is not a JSON object, ...) named by file and line instead
of stopping the read; the caller decides whether a bad row stops it. A file that cannot be read
as a whole (no such file, empty, undecodable, a header without the text column) is still a
DataError.

What a row is:
- Raw text (`lines`, `fasttext`, and the raw sentences of token classification, through
  `text_lines`): a row is a line, always, so row i is line i + 1 and an output of one record
  (or vector) per row lines up with the input line for line. A blank line (nothing but white
  space) has no text to predict, so one with text after it is a bad row ("<file>:<n>: the line
  is blank ..."), which stops a prediction or embedding unless bad rows are skipped, and a
  skipped one keeps its place in the numbering: no output is ever shifted onto another line's
  row. Blank lines that end the file (an editor's trailing newlines) are no rows at all: no
  line with text comes after them, so nothing can be misnumbered by leaving them out. Lines
  end at a newline, a CRLF or a lone carriage return; a UTF-8 byte-order mark is dropped.
- CSV/TSV, JSONL, CoNLL and SQuAD: a row is a record (a CSV record, a JSON object, a sentence,
  a question), and blank lines are not records (as csv.DictReader and jq read them); each row
  keeps the line it starts on.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Iterator, Mapping, Optional

from bert_jax.data import textfiles
from bert_jax.data.finetuning.readers import FASTTEXT_PREFIX, QAExample, TaggedSentence, TextExample
from bert_jax.data.textfiles import DataError

TEXT_FORMATS = ("csv_no_header", "tsv_no_header", "csv", "tsv", "jsonl", "fasttext",
                "lines")

# One row as the readers below see it: (its line, or None where rows are not lines; its example,
# or None for a bad row; None, or what is wrong with the row, naming file and line).
Item = tuple[Optional[int], Any, Optional[str]]


@dataclasses.dataclass
class Rows:
    """The rows of an unlabelled input file, in file order.

    examples: the good rows' examples; indices: the position of each among all rows of the file
    (bad rows included, from 0); bad: "<file>:<line>: <what is wrong>" for each bad row; lines:
    the line of each good row (a CSV record's first line, a CoNLL sentence's first token; None
    for a SQuAD question).
    """

    examples: list
    indices: list[int]
    bad: list[str]
    lines: list[Optional[int]]

    @property
    def total(self) -> int:
        return len(self.examples) + len(self.bad)


def _rows(items: Iterable[Item]) -> Rows:
    """Rows from (line, example, None) for a good row and (line, None, fault) for a bad one."""
    rows = Rows([], [], [], [])
    for index, (line, example, fault) in enumerate(items):
        if fault is not None:
            rows.bad.append(fault)
        else:
            rows.examples.append(example)
            rows.indices.append(index)
            rows.lines.append(line)
    return rows


def _text_example(path: str, line: int, record: textfiles.Record, text_column: str,
                  text_pair_column: Optional[str]) -> Item:
    """The row of one CSV/TSV/JSONL record: its TextExample, or its fault (a record that is a
    fault already, a missing column, a text that is not a string)."""
    where = f"{path}:{line}"
    if isinstance(record, str):
        return line, None, f"{where}: {record}"
    for column in (text_column, text_pair_column):
        if column is not None and column not in record:
            return line, None, f"{where}: no column {column!r}; the columns are {sorted(record)}"
    text = record[text_column]
    pair = record[text_pair_column] if text_pair_column else None
    if not isinstance(text, str) or (text_pair_column and not isinstance(pair, str)):
        return line, None, f"{where}: the text columns must hold strings"
    return line, TextExample(text, pair), None


def blank_line_fault(path: str, number: int) -> str:
    """The bad row of a blank line of raw text that a line with text follows."""
    return (f"{path}:{number}: the line is blank, but raw text is one text a line (only the "
            "file's last lines may be blank): remove the line or give it a text")


def text_lines(path: str, encoding: str) -> Iterator[Item]:
    """(line number, the line as read, None) for each line of a raw-text file, in order, and
    (line number, None, fault) for a blank line (white space only) that a line with text
    follows; the blank lines that end the file are not yielded (module docstring)."""
    blank_from = None  # the first blank line since the last line with text
    for number, line in textfiles.lines(path, encoding):
        if not line.strip():
            blank_from = number if blank_from is None else blank_from
            continue
        for blank in range(blank_from or number, number):
            yield blank, None, blank_line_fault(path, blank)
        blank_from = None
        yield number, line, None


def _line_texts(path: str, encoding: str, labelled: bool) -> Iterator[Item]:
    """One text per line, stripped (`text_lines`: an inner blank line is a bad row);
    `labelled` (fastText) drops leading `__label__<name>` words first, so lines with and
    without labels both read."""
    for number, line, fault in text_lines(path, encoding):
        if fault is not None:
            yield number, None, fault
            continue
        text = line.strip()
        while labelled and text.startswith(FASTTEXT_PREFIX):
            text = text.partition(" ")[2].strip()
        if not text:
            yield number, None, f"{path}:{number}: the text after the label is empty"
        else:
            yield number, TextExample(text), None


def read_unlabelled_text(path: str, file_format: str = "auto", text_column: str = "text",
                         text_pair_column: Optional[str] = None, encoding: str = "utf-8",
                         tsv_quoting: bool = False) -> Rows:
    """Rows of TextExamples (label None) from csv | tsv | csv_no_header | tsv_no_header
    (columns named by position) | jsonl | fasttext | lines, or by the extension for auto (.txt
    and .cor: fasttext, whose label words are optional here).

    A label column may be present or not (it is ignored). Bad rows: a row with another number
    of columns than the header, a line that is not a JSON object, a record without the text (or
    pair) key, a text that is not a string, a fastText line with only labels, a blank line of
    raw text (fasttext, lines) with text after it.
    """
    textfiles.check_file(path)
    choices = ", ".join(TEXT_FORMATS[:-1]) + " or lines"
    file_format = textfiles.format_of(path, file_format, choices)
    if file_format in ("fasttext", "lines") and text_pair_column:
        raise DataError(f"{path}: the {file_format} format holds one text per line, but the "
                        f"task takes pairs ({text_column!r}, {text_pair_column!r}): use csv, "
                        "tsv or jsonl")
    if file_format in ("fasttext", "lines"):
        return _rows(_line_texts(path, encoding, labelled=file_format == "fasttext"))
    if file_format in textfiles.TABLE_FORMATS:
        delimiter, header = textfiles.TABLE_FORMATS[file_format]
        columns = [c for c in (text_column, text_pair_column) if c]
        records = textfiles.table_rows(path, delimiter, tsv_quoting or delimiter != "\t",
                                       encoding, columns, header)
    elif file_format == "jsonl":
        records = textfiles.jsonl_records(path, encoding)
    else:
        raise DataError(f"unknown text file format {file_format!r}: use {choices}")
    return _rows(_text_example(path, line, record, text_column, text_pair_column)
                 for line, record in records)


def read_unlabelled_conll(path: str, encoding: str = "utf-8") -> Rows:
    """Rows of TaggedSentences with no tags: one token per line (its first column; any other
    columns, such as tags, are ignored), a blank line between sentences, -DOCSTART- skipped."""
    textfiles.check_file(path)
    sentences: list[Item] = []
    words: list[str] = []
    first = 0
    for number, line in textfiles.lines(path, encoding):
        columns = line.split()
        if not columns or columns[0] == "-DOCSTART-":
            if words:
                sentences.append((first, TaggedSentence(tuple(words), ()), None))
            words = []
            continue
        first = number if not words else first
        words.append(columns[0])
    if words:
        sentences.append((first, TaggedSentence(tuple(words), ()), None))
    return _rows(sentences)


def _questions(path: str, document: Mapping[str, Any]) -> Iterator[Item]:
    """(None, QAExample with no answers, None) or (None, None, fault) per question of a SQuAD
    document."""
    for a, article in enumerate(document["data"]):
        paragraphs = article.get("paragraphs", []) if isinstance(article, dict) else []
        for p, paragraph in enumerate(paragraphs):
            context = paragraph.get("context") if isinstance(paragraph, dict) else None
            questions = paragraph.get("qas", []) if isinstance(paragraph, dict) else []
            for q, qa in enumerate(questions):
                where = f"{path}: data[{a}].paragraphs[{p}].qas[{q}]"
                if not isinstance(context, str):
                    yield None, None, f"{where}: the paragraph has no 'context' string"
                elif not isinstance(qa, dict) or not isinstance(qa.get("question"), str):
                    yield None, None, f"{where}: no 'question' string"
                else:
                    qid = str(qa["id"]) if qa.get("id") is not None else None
                    yield None, QAExample(qid, qa["question"], context, ()), None


def read_unlabelled_squad(path: str) -> Rows:
    """Rows of QAExamples (no answers; id None where the question has none) from SQuAD-style
    JSON: data[].paragraphs[].{context, qas[].{id, question}}; answers, if any, are ignored.
    Bad rows are named by their place in the document (data[a].paragraphs[p].qas[q])."""
    document = textfiles.load_json(path)
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        raise DataError(f"{path}: expected a SQuAD object with a 'data' list")
    return _rows(_questions(path, document))
