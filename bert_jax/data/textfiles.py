"""Local text files read line by line, with errors that name the file and line at fault.

What the readers of labelled examples (`bert_jax.data.finetuning.readers`) and of unlabelled input
(`bert_jax.data.finetuning.unlabelled`) share: opening a file in a given encoding (a UTF-8
byte-order mark dropped), the records of CSV/TSV and JSONL files, the format a file's extension
says, and `DataError`, the one error they raise for input that cannot be read.

`table_rows` and `jsonl_records` yield a row's fault (a str) in place of its record, so that
each reader decides what a bad row means: the labelled readers stop at the first, the
unlabelled ones collect them all.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import itertools
import json
import os
import re
from typing import Any, Iterator, Optional, Sequence, Union

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_FIELD_LIMIT = 2**31 - 1  # the largest the csv module takes everywhere (a C long)

Record = Union[dict, str]  # a row's record, or what is wrong with the row


class DataError(ValueError):
    """Input that cannot be read or does not fit the task; names the file (and line) at fault."""


def check_file(path: str) -> None:
    """DataError unless `path` is a file with something in it."""
    if not os.path.isfile(path):
        raise DataError(f"{path}: no such file")
    if os.path.getsize(path) == 0:
        raise DataError(f"{path}: the file is empty")


def decoding(encoding: str) -> str:
    """The codec to read a file said to be in `encoding`: UTF-8 drops a leading byte-order mark."""
    return "utf-8-sig" if codecs.lookup(encoding).name == "utf-8" else encoding


def lines(path: str, encoding: str, newline: Optional[str] = None) -> Iterator[tuple[int, str]]:
    """(line number, line) of a text file; undecodable bytes are a DataError naming the file,
    the first line that does not decode and the encoding.

    newline: as for `open` ("" keeps line ends as they are, which the csv module needs).
    """
    try:
        with open(path, encoding=decoding(encoding), newline=newline) as f:
            yield from enumerate(f, 1)
    except UnicodeDecodeError:
        raise _undecodable(path, encoding) from None


def _undecodable(path: str, encoding: str) -> DataError:
    """The DataError of a file that is not in `encoding`, naming its first undecodable line.

    Text-mode reading decodes blocks of many lines at once, so its error cannot say which line
    is at fault; the file is decoded again here, line by line (lines end at b"\\n")."""
    decoder = codecs.getincrementaldecoder(decoding(encoding))()
    number, error = 0, None
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):  # noqa: B007 - `number` is read after the loop
            try:
                decoder.decode(raw)
            except UnicodeDecodeError as e:
                error = e
                break
        else:
            try:
                decoder.decode(b"", final=True)
            except UnicodeDecodeError as e:  # a multi-byte character cut off by the file's end
                error = e
    detail = f" ({error.reason} at byte {error.start} of the line)" if error else ""
    return DataError(f"{path}:{max(number, 1)}: not valid {encoding}{detail}; read the file "
                     "with its encoding (data.encoding, --encoding; e.g. cp1252 or latin-1)")


@contextlib.contextmanager
def fields_of_any_length():
    """Lifts the csv module's 128 KiB field limit (a process-wide setting) for a block."""
    previous = csv.field_size_limit(_FIELD_LIMIT)
    try:
        yield
    finally:
        csv.field_size_limit(previous)


def table_records(path: str, delimiter: str, quoting: bool, encoding: str
                  ) -> Iterator[tuple[int, list[str]]]:
    """(first line number, fields) of each non-blank record of a CSV/TSV file, header included.

    Every line must be accounted for: a record takes one line, plus one for each line break
    inside its quoted fields; blank lines are skipped. Lines a record takes otherwise, and, in
    a TSV file, a quoted field holding both line breaks and tabs (rows swallowed by a quote that
    closes lines later) are a DataError naming the lines and the rows they made. Call it inside
    `fields_of_any_length` for fields over 128 KiB.
    """
    reader = csv.reader((line for _, line in lines(path, encoding, newline="")),
                        delimiter=delimiter, strict=quoting,
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


# Table formats: name -> (delimiter, whether the first row is a header). Without a header, the
# columns are named by their 0-based position ("0", "1", ...), as GLUE's CoLA files need.
TABLE_FORMATS = {"csv": (",", True), "tsv": ("\t", True),
                 "csv_no_header": (",", False), "tsv_no_header": ("\t", False)}


def table_rows(path: str, delimiter: str, quoting: bool, encoding: str,
               columns: Sequence[str], header: bool = True) -> Iterator[tuple[int, Record]]:
    """(first line number, {column: field}) of each row of a CSV/TSV file, fields of any length.

    header=True: the first row names the columns; header=False: every row is data and the
    columns are named "0", "1", ... by position, the first row fixing how many there are. A row
    with another number of fields gives its fault instead. A file without every one of
    `columns` is a DataError (no row can be read)."""
    with fields_of_any_length():
        records = table_records(path, delimiter, quoting, encoding)
        first_line, first = next(records, (0, []))
        if not first:
            raise DataError(f"{path}: no header row" if header else f"{path}: holds no rows")
        names = first if header else [str(i) for i in range(len(first))]
        missing = [c for c in columns if c not in names]
        if missing and header:
            raise DataError(f"{path}: no column(s) {missing} in the header; the columns are "
                            f"{names}")
        if missing:
            raise DataError(f"{path}: no column(s) {missing}: the rows have {len(names)} "
                            f"columns, named by position 0..{len(names) - 1} (no header)")
        if not header:
            records = itertools.chain([(first_line, first)], records)
        width = "the header" if header else "the first row"
        for line, fields in records:
            if len(fields) != len(names):
                yield line, (f"the row has {len(fields)} columns, not the {len(names)} columns "
                             f"of {width}")
            else:
                yield line, dict(zip(names, fields))


def jsonl_records(path: str, encoding: str) -> Iterator[tuple[int, Record]]:
    """(line number, object) of each non-blank line of a JSONL file; a line that is not valid
    JSON, or not a JSON object, gives its fault instead."""
    for number, line in lines(path, encoding):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            yield number, f"not valid JSON ({e.msg})"
            continue
        yield number, record if isinstance(record, dict) else "expected a JSON object per line"


def format_of(path: str, file_format: str, choices: str = "csv, tsv, jsonl or fasttext") -> str:
    """`file_format`, or for "auto" the format its extension says (.txt and .cor: fasttext;
    .json: jsonl); `choices` names the formats in the error for an unknown extension."""
    if file_format != "auto":
        return file_format
    extension = os.path.splitext(path)[1].lower()
    file_format = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl",
                   ".cor": "fasttext", ".txt": "fasttext"}.get(extension, "")
    if not file_format:
        raise DataError(f"{path}: cannot tell the format from the extension {extension!r}; "
                        f"set the format to {choices}")
    return file_format


def load_json(path: str) -> Any:
    """The JSON document of a UTF-8 file; DataError naming the file when it is not valid JSON."""
    check_file(path)
    try:
        with open(path, encoding=decoding("utf-8")) as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: not valid JSON ({e})") from None
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not valid UTF-8 ({e.reason} at byte {e.start})") from None
