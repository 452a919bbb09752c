"""Documents streamed from one file, or from one range of it: the readers of every format.

Each reader yields `Document`s (`bert_jax.data.corpora.records`) of a file or of the part of it a
work unit owns, holding at most one record (and one block of the file) in memory, never the file:

  `text_documents(path, start, end, delimiter, ...)`   plain text (gz/bz2/zst by extension);
      documents end at a blank line ("blank_line"), a line end ("line") or the file's end
      ("file"); the same documents `bert_jax.data.corpora.text_files.documents_in` finds in the
      whole text, positioned by the byte offset where each starts. A byte range [start, end)
      (uncompressed files only; `text_cuts` finds cut points between documents) owns the
      documents that start in it.
  `jsonl_documents(path, start, end, text_key, ...)`   one JSON object a line, the text in
      `text_key`; a byte range owns the lines that start in it.
  `parquet_documents(path, start, end, column, ...)`   a string (or binary UTF-8) column, read
      one row group at a time, row groups [start, end).
  `arrow_documents(path, start, end, column, ...)`     Arrow IPC files (stream or file format,
      as `datasets.save_to_disk` and the Hub cache write them), record batches [start, end).

end = -1 reads to the end. Records a reader cannot use go to `BadRecords` (skipped and counted,
or a DataError naming the file and record); documents over `max_bytes` come out in pieces. A
column or field absent from a whole Parquet/Arrow file is a DataError naming the file and its
columns (no record of it could be read).
"""

from __future__ import annotations

import json
import os
from typing import BinaryIO, Iterator

from bert_jax.data.corpora.files import compression_of, open_bytes, open_raw
from bert_jax.data.corpora.records import BadRecords, Document, cut_long_document, text_pieces
from bert_jax.data.textfiles import DataError

_BOM = b"\xef\xbb\xbf"
_BATCH_ROWS = 1024


def _lines(stream: BinaryIO, start: int, end: int, limit: int) -> Iterator[tuple[int, bytes]]:
    """(offset, line) from byte `start`, the lines that start before `end` (-1: all); a line
    longer than `limit` comes in parts of at most `limit` bytes, each with its own offset."""
    offset = start
    while end < 0 or offset < end:
        line = stream.readline(limit)
        if not line:
            return
        yield offset, line
        offset += len(line)


def _open_at(path: str, start: int) -> BinaryIO:
    stream = open_bytes(path)
    if start:
        if compression_of(path):
            raise ValueError(f"{path}: a compressed file is read whole, not from byte {start}")
        stream.seek(start)
    return stream


def _blank(line: bytes) -> bool:
    """A line of whitespace only (Unicode whitespace too, as str.strip() sees it)."""
    stripped = line.strip()
    if not stripped:
        return True
    return len(stripped) <= 12 and not stripped.isascii() and not stripped.decode(
        "utf-8", "replace").strip()


def _without_line_end(line: bytes) -> bytes:
    if line.endswith(b"\r\n"):
        return line[:-2]
    return line[:-1] if line.endswith(b"\n") else line


def text_documents(path: str, start: int = 0, end: int = -1, delimiter: str = "blank_line",
                   max_bytes: int = 8 << 20, bad: BadRecords | None = None
                   ) -> Iterator[Document]:
    """Documents of a plain-text file (or of its bytes [start, end)), streamed line by line.

    A line or document over `max_bytes` is read `max_bytes` at a time and comes out in pieces as
    it goes (held: at most ~2 x max_bytes); every piece is positioned at the document's start."""
    bad = bad if bad is not None else BadRecords()
    reader = _TextDocument(path, max_bytes, bad)
    with _open_at(path, start) as stream:
        continuing = False  # the last chunk ended inside a line (a line over max_bytes)
        for offset, chunk in _lines(stream, start, end, max_bytes):
            if offset == 0 and chunk.startswith(_BOM):
                chunk = chunk[len(_BOM):]
            complete = chunk.endswith(b"\n")
            body = _without_line_end(chunk)
            if not continuing:
                if delimiter == "blank_line" and complete and _blank(body):
                    yield from reader.finish()
                    continue
                reader.new_line(offset)
            yield from reader.extend(body)
            continuing = not complete
            if delimiter == "line" and complete:
                yield from reader.finish()
        yield from reader.finish()


class _TextDocument:
    """The document being read from a text file: its lines joined by "\\n", cut into pieces
    when it grows past 2 x max_bytes, decoded and checked when it ends; a cut document is
    counted once, when it ends, with its whole size and number of pieces."""

    def __init__(self, path: str, max_bytes: int, bad: BadRecords):
        self.path, self.max_bytes, self.bad = path, max_bytes, bad
        self.data = bytearray()
        self.first = 0
        self.skipping = False
        self.cut_bytes = self.cut_pieces = 0  # what went out in pieces before the end

    def new_line(self, offset: int) -> None:
        if self.data:
            self.data += b"\n"
        elif not self.skipping:
            self.first = offset

    def extend(self, body: bytes) -> Iterator[Document]:
        if self.skipping:
            return
        self.data += body
        if len(self.data) > 2 * self.max_bytes:
            pieces = cut_long_document(bytes(self.data), self.max_bytes)
            self.cut_pieces += len(pieces) - 1
            self.cut_bytes += len(self.data) - len(pieces[-1])
            self.data[:] = pieces[-1]
            yield from self._documents(pieces[:-1])

    def _documents(self, pieces: list[bytes]) -> Iterator[Document]:
        texts = []
        for piece in pieces:
            try:
                texts.append(piece.decode("utf-8").strip())
            except UnicodeDecodeError as e:
                self.bad.add(f"invalid UTF-8 ({e.reason})", self.path, self.first)
                self.data.clear()
                self.skipping = True  # the rest of this document goes with it
                return
        for text in texts:
            if text:
                yield Document(text, self.path, self.first)

    def finish(self) -> Iterator[Document]:
        data = bytes(self.data).strip()
        self.data.clear()
        skipping, self.skipping = self.skipping, False
        pieces = cut_long_document(data, self.max_bytes) if data and not skipping else []
        cut_pieces, cut_bytes = self.cut_pieces + len(pieces), self.cut_bytes + len(data)
        if cut_pieces > 1:
            self.bad.add_cut(self.path, self.first, "byte", cut_bytes, cut_pieces)
        self.cut_bytes = self.cut_pieces = 0
        yield from self._documents(pieces)
        self.skipping = False


def text_cuts(path: str, unit_bytes: int, delimiter: str, size: int) -> list[int]:
    """Byte offsets that cut an uncompressed text or JSONL file into ranges of about
    `unit_bytes`, each between two documents (after a blank line for "blank_line"; after a line
    end for "line" and JSONL), so that each range holds whole documents: [0, c1, ..., size].
    Compressed files and delimiter "file" are not cut: [0, size]."""
    if delimiter == "file" or compression_of(path) or size <= unit_bytes:
        return [0, size]
    cuts = [0]
    with open_raw(path) as stream:
        target = unit_bytes
        while target < size:
            cut = _boundary_after(stream, target, delimiter, unit_bytes)
            if cut is not None and cuts[-1] < cut < size:
                cuts.append(cut)
                target = cut + unit_bytes
            else:
                target += unit_bytes
    cuts.append(size)
    return cuts


def _boundary_after(stream: BinaryIO, target: int, delimiter: str, window: int) -> int | None:
    """The first document boundary after byte `target` (within `window` bytes for
    "blank_line"), None when there is none."""
    stream.seek(target)
    offset = target
    while True:  # the rest of the line that `target` falls in
        line = stream.readline(window)
        offset += len(line)
        if not line:
            return None
        if line.endswith(b"\n"):
            break
    if delimiter != "blank_line":
        return offset
    continuing = False  # the last part read ended inside a line
    while offset < target + window:
        line = stream.readline(window)
        if not line:
            return None
        offset += len(line)
        complete = line.endswith(b"\n")
        if complete and not continuing and _blank(_without_line_end(line)):
            return offset
        continuing = not complete
    return None


def jsonl_documents(path: str, start: int = 0, end: int = -1, text_key: str = "text",
                    max_bytes: int = 8 << 20, bad: BadRecords | None = None
                    ) -> Iterator[Document]:
    """Documents of a JSONL file (or of its lines that start in [start, end)): `text_key` of
    each non-blank line's object."""
    bad = bad if bad is not None else BadRecords()
    with _open_at(path, start) as stream:
        for offset, line in _lines(stream, start, end, -1):
            if not line.strip():
                continue
            try:
                record = json.loads(line.decode("utf-8"))
            except UnicodeDecodeError as e:
                bad.add(f"invalid UTF-8 at byte {e.start} of the line ({e.reason})", path, offset)
                continue
            except json.JSONDecodeError as e:
                bad.add(f"not valid JSON ({e.msg})", path, offset)
                continue
            if not isinstance(record, dict):
                bad.add(f"a JSON {type(record).__name__}, not an object", path, offset)
                continue
            text = record.get(text_key)
            if text is None:
                reason = (f"no field {text_key!r}" if text_key not in record
                          else f"field {text_key!r} is null")
                bad.add(reason, path, offset)
                continue
            if not isinstance(text, str):
                bad.add(f"field {text_key!r} is a {type(text).__name__}, not a string", path,
                        offset)
                continue
            yield from text_pieces(text, path, offset, "byte", max_bytes, bad)


def _column_texts(values, path: str, first_row: int, max_bytes: int,
                  bad: BadRecords) -> Iterator[Document]:
    """Documents of one Arrow column chunk (string, large_string or binary) of rows from
    `first_row`."""
    import pyarrow as pa
    binary = pa.types.is_binary(values.type) or pa.types.is_large_binary(values.type)
    for index, value in enumerate(values.to_pylist()):
        row = first_row + index
        if value is None:
            bad.add("null text", path, row, "row")
            continue
        if binary:
            try:
                value = value.decode("utf-8")
            except UnicodeDecodeError as e:
                bad.add(f"invalid UTF-8 at byte {e.start} ({e.reason})", path, row, "row")
                continue
        yield from text_pieces(value, path, row, "row", max_bytes, bad)


def _check_column(schema, column: str, path: str) -> None:
    import pyarrow as pa
    if column not in schema.names:
        raise DataError(f"{path}: no column {column!r}; its columns are {schema.names} (set the "
                        "text key, e.g. parquet[text_key=content]:GLOB)")
    kind = schema.field(column).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)
            or pa.types.is_binary(kind) or pa.types.is_large_binary(kind)):
        raise DataError(f"{path}: column {column!r} holds {kind}, not text")


def parquet_row_groups(path: str) -> list[tuple[int, int]]:
    """(rows, uncompressed bytes) of each row group of a Parquet file (its footer only)."""
    import pyarrow.parquet as pq
    with open_raw(path) as f:
        metadata = pq.ParquetFile(f).metadata
        return [(metadata.row_group(i).num_rows, metadata.row_group(i).total_byte_size)
                for i in range(metadata.num_row_groups)]


def parquet_documents(path: str, start: int = 0, end: int = -1, column: str = "text",
                      max_bytes: int = 8 << 20, bad: BadRecords | None = None
                      ) -> Iterator[Document]:
    """Documents of `column` of a Parquet file's row groups [start, end), one row group (in
    batches of rows) at a time; positions are row indices within the file."""
    import pyarrow.parquet as pq
    bad = bad if bad is not None else BadRecords()
    with open_raw(path) as f:
        parquet = pq.ParquetFile(f)
        _check_column(parquet.schema_arrow, column, path)
        metadata = parquet.metadata
        end = metadata.num_row_groups if end < 0 else end
        row = sum(metadata.row_group(i).num_rows for i in range(start))
        for group in range(start, end):
            for batch in parquet.iter_batches(batch_size=_BATCH_ROWS, row_groups=[group],
                                              columns=[column], use_threads=False):
                yield from _column_texts(batch.column(0), path, row, max_bytes, bad)
                row += batch.num_rows


def _arrow_reader(stream):
    """(batch count or None, iterator of record batches) of an Arrow IPC file or stream."""
    import pyarrow as pa
    magic = stream.read(6)
    stream.seek(0)
    if magic == b"ARROW1":
        reader = pa.ipc.open_file(stream)
        count = reader.num_record_batches
        return reader.schema, count, (reader.get_batch(i) for i in range(count))
    reader = pa.ipc.open_stream(stream)
    return reader.schema, None, iter(reader)


def _open_arrow(path: str):
    import pyarrow as pa
    if os.path.exists(path):
        return pa.memory_map(path, "r")  # batches are read in place, page by page
    return open_raw(path)


def arrow_batches(path: str) -> list[tuple[int, int]]:
    """(rows, bytes) of each record batch of an Arrow IPC file or stream (read in place)."""
    with _open_arrow(path) as stream:
        _, _, batches = _arrow_reader(stream)
        return [(batch.num_rows, batch.nbytes) for batch in batches]


def arrow_documents(path: str, start: int = 0, end: int = -1, column: str = "text",
                    max_bytes: int = 8 << 20, bad: BadRecords | None = None
                    ) -> Iterator[Document]:
    """Documents of `column` of an Arrow IPC file's record batches [start, end); positions are
    row indices within the file."""
    bad = bad if bad is not None else BadRecords()
    with _open_arrow(path) as stream:
        schema, _, batches = _arrow_reader(stream)
        _check_column(schema, column, path)
        index = schema.get_field_index(column)
        row = 0
        for number, batch in enumerate(batches):
            if end >= 0 and number >= end:
                return
            if number >= start:
                for offset in range(0, batch.num_rows, _BATCH_ROWS):
                    values = batch.column(index).slice(offset, _BATCH_ROWS)
                    yield from _column_texts(values, path, row + offset, max_bytes, bad)
            row += batch.num_rows
