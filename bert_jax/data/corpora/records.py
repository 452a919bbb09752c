"""One record of a corpus source, what is wrong with bad ones, and over-long documents cut up.

`Document(text, path, record, unit)`: a document's text and its stable position: the file and
the record in it, a byte offset into the (decompressed) file for text and JSONL files
(unit "byte"), a row index for Parquet and Arrow files (unit "row"). `Document.where` names it
("a.jsonl.zst, byte 1234").

`BadRecords` counts the records a reader could not use (invalid UTF-8, not valid JSON, a missing
field, a value that is not a string, an empty text) under a policy (BAD_RECORD_POLICIES): "skip"
counts each by reason and keeps the first few positions for a one-line warning summary
(`summary`); "fail" raises a `DataError` naming the file and record at once. It also counts the
documents cut into pieces by `cut_long_document`. Counters of several readers (worker processes)
add up with `merge` (a JSON-ready dict: `as_dict`).

`cut_long_document(data, max_bytes)` cuts UTF-8 bytes into pieces of at most `max_bytes`, each
cut at the last ASCII whitespace of its window (at a character boundary when the window holds
none), so that no tokenizer or trainer ever sees a 200 MB line whole.
"""

from __future__ import annotations

from typing import Iterator, NamedTuple

from bert_jax.data.textfiles import DataError

BAD_RECORD_POLICIES = ("skip", "fail")
# Documents longer than this (UTF-8 bytes) are cut into pieces by default.
MAX_DOCUMENT_BYTES = 8 << 20
_EXAMPLES = 5  # positions kept per counter for the warning summary
_WHITESPACE = (b" ", b"\n", b"\t", b"\r")


class Document(NamedTuple):
    """A document's text and where it starts: `record` counts bytes (unit "byte": text, JSONL;
    an offset into the decompressed file) or rows (unit "row": Parquet, Arrow)."""

    text: str
    path: str
    record: int
    unit: str = "byte"

    @property
    def where(self) -> str:
        return where(self.path, self.record, self.unit)


def where(path: str, record: int, unit: str) -> str:
    """'PATH, byte N' or 'PATH, row N': one record's position, as messages name it."""
    return f"{path}, {unit} {record}"


def check_policy(policy: str) -> None:
    if policy not in BAD_RECORD_POLICIES:
        raise ValueError(f"bad_records={policy!r}; choose one of {', '.join(BAD_RECORD_POLICIES)}")


class BadRecords:
    """Counts of bad records by reason and of documents cut up, with the first positions of each.

    policy "skip": `add` counts; "fail": `add` raises a DataError naming the file and record.
    """

    def __init__(self, policy: str = "skip"):
        check_policy(policy)
        self.policy = policy
        self.reasons: dict[str, int] = {}
        self.examples: list[str] = []
        self.cut_documents = 0
        self.cut_examples: list[str] = []

    @property
    def total(self) -> int:
        return sum(self.reasons.values())

    def add(self, reason: str, path: str, record: int, unit: str = "byte") -> None:
        """One bad record: counted under "skip"; a DataError, one line, under "fail"."""
        if self.policy == "fail":
            raise DataError(f"{where(path, record, unit)}: {reason} (bad_records='skip' skips "
                            "such records, counting them)")
        self.reasons[reason] = self.reasons.get(reason, 0) + 1
        if len(self.examples) < _EXAMPLES:
            self.examples.append(f"{where(path, record, unit)}: {reason}")

    def add_cut(self, path: str, record: int, unit: str, size: int, pieces: int) -> None:
        self.cut_documents += 1
        if len(self.cut_examples) < _EXAMPLES:
            self.cut_examples.append(f"{where(path, record, unit)}: {size:,} bytes -> "
                                     f"{pieces} pieces")

    def as_dict(self) -> dict:
        return {"total": self.total, "by_reason": dict(sorted(self.reasons.items())),
                "examples": list(self.examples), "cut_documents": self.cut_documents,
                "cut_examples": list(self.cut_examples)}

    def merge(self, counts: dict) -> None:
        """Adds the counts of another BadRecords (its `as_dict()`)."""
        for reason, count in counts["by_reason"].items():
            self.reasons[reason] = self.reasons.get(reason, 0) + count
        self.examples.extend(counts["examples"][:_EXAMPLES - len(self.examples)])
        self.cut_documents += counts["cut_documents"]
        self.cut_examples.extend(counts["cut_examples"][:_EXAMPLES - len(self.cut_examples)])

    def summary(self) -> list[str]:
        """Warning lines (none when nothing was bad or cut): the counts and the first positions."""
        lines = []
        if self.total:
            reasons = ", ".join(f"{count:,} {reason}" for reason, count in
                                sorted(self.reasons.items()))
            lines.append(f"skipped {self.total:,} bad record(s) ({reasons}); first: "
                         + "; ".join(self.examples))
        if self.cut_documents:
            lines.append(f"cut {self.cut_documents:,} over-long document(s) into pieces at "
                         "whitespace; first: " + "; ".join(self.cut_examples))
        return lines


def cut_long_document(data: bytes, max_bytes: int) -> list[bytes]:
    """`data` (UTF-8) in pieces of at most `max_bytes`, each cut after the last ASCII whitespace
    of its window, or, in a window without whitespace, before the last character that starts in
    it (never inside a character). Pieces keep every byte: b"".join(pieces) == data."""
    if len(data) <= max_bytes:
        return [data]
    pieces = []
    start = 0
    while len(data) - start > max_bytes:
        window = data[start:start + max_bytes]
        cut = max(window.rfind(space) for space in _WHITESPACE) + 1
        if cut <= 0:  # no whitespace: the last character boundary of the window
            cut = max_bytes
            while cut > 0 and (data[start + cut] & 0xC0) == 0x80:
                cut -= 1
            cut = cut or max_bytes
        pieces.append(data[start:start + cut])
        start += cut
    pieces.append(data[start:])
    return pieces


def text_pieces(text: str, path: str, record: int, unit: str, max_bytes: int,
                bad: BadRecords) -> Iterator[Document]:
    """The documents of one record's text: itself, or its pieces when longer than `max_bytes`
    (counted in `bad`); an empty (whitespace-only) text or one that cannot be UTF-8 (lone
    surrogates from a JSON escape) is a bad record."""
    if not text.strip():
        bad.add("empty text", path, record, unit)
        return
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        bad.add("text not encodable as UTF-8 (a lone surrogate)", path, record, unit)
        return
    if len(data) <= max_bytes:
        yield Document(text, path, record, unit)
    else:
        yield from byte_pieces(data, path, record, unit, max_bytes, bad)


def byte_pieces(data: bytes, path: str, record: int, unit: str, max_bytes: int,
                bad: BadRecords) -> Iterator[Document]:
    """Documents of valid UTF-8 bytes: one, or the pieces of `cut_long_document` (counted)."""
    pieces = cut_long_document(data, max_bytes)
    if len(pieces) > 1:
        bad.add_cut(path, record, unit, len(data), len(pieces))
    for piece in pieces:  # every piece is positioned at the record it comes from
        text = piece.decode("utf-8").strip()
        if text:
            yield Document(text, path, record, unit)
