"""A document's token ids, tokenized one window of its text at a time, as they are asked for.

A document can be far longer than a row: a book, or a whole file read as one document (a file
without blank lines under `document_delimiter="blank_line"`). Tokenizing it whole before its first
row would make the first batch wait for the whole document; here its text is tokenized in windows
of at most `WINDOW_CHARS` characters, each as it is needed, so the time and memory to reach any
row are those of a window, whatever the length of the document.

A window ends after a whitespace character: the last line break of its second half, else the last
space or tab there. BERT's normalizer works character by character and its pre-tokenizer splits
words at whitespace, so the ids of the windows, one after the other, are those of the whole text.
Only a stretch of WINDOW_CHARS // 2 characters without a line break, space or tab is cut where the
window ends, inside a "word" that long (its pieces may then differ from the whole word's).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

WINDOW_CHARS = 16_384  # ~3,500 WordPiece ids of English: a few 128-token rows per window


def window_end(text: str, start: int, window_chars: int = WINDOW_CHARS) -> int:
    """The end (exclusive) of the window of `text` that starts at `start` (module docstring)."""
    stop = start + window_chars
    if stop >= len(text):
        return len(text)
    lowest = start + window_chars // 2
    cut = text.rfind("\n", lowest, stop)
    if cut < 0:
        cut = max(text.rfind(" ", lowest, stop), text.rfind("\t", lowest, stop))
    return cut + 1 if cut >= 0 else stop


class DocumentTokens:
    """The ids of one document, tokenized a window at a time as `ids` asks for them.

    ids(start, stop) -> [<= stop - start] int32: ids [start, stop) of the document, fewer at its
      end (none past it). A consumer reads forwards: `start` never goes back before an earlier
      call's `start` (the ids before it are let go). has(offset): whether id `offset` exists.
    resume_point(offset) -> (char, id): a window boundary at or before id `offset`: tokenizing
      text[char:] gives the ids from `id` on. `seek(char, id)` restarts there, so that a saved
      position inside a long document resumes without tokenizing what comes before it.
    """

    def __init__(self, text: str, encode: Callable[[str], Sequence[int]],
                 window_chars: int = WINDOW_CHARS):
        if window_chars < 2:
            raise ValueError(f"window_chars={window_chars} must be at least 2")
        self._text, self._encode, self._window_chars = text, encode, window_chars
        self.seek(0, 0)

    def seek(self, char: int, first_id: int) -> None:
        """Continues from text[char:], whose first id is the document's id `first_id`."""
        if not 0 <= char <= len(self._text) or first_id < 0:
            raise ValueError(f"position (char {char}, id {first_id}) is outside the document "
                             f"({len(self._text)} characters)")
        self._chars = char  # text[:char] is tokenized
        self._first = first_id  # the id of self._held[0]
        self._held = np.zeros([0], np.int32)
        self._marks = [(char, first_id)]  # (char, id) at the window boundaries held, ascending

    @property
    def text_length(self) -> int:
        return len(self._text)

    @property
    def chars_tokenized(self) -> int:
        """Characters of the text tokenized so far (from the last `seek`)."""
        return self._chars

    def ids(self, start: int, stop: int) -> np.ndarray:
        if start < self._first:
            raise ValueError(f"id {start} was asked for after id {self._first}: a document's ids "
                             "are read forwards")
        while self._first + len(self._held) < stop and self._tokenize_next_window():
            pass
        self._let_go_before(start)
        return self._held[start - self._first:max(start, stop) - self._first]

    def has(self, offset: int) -> bool:
        """Whether the document has an id at `offset` (a forward read, as `ids`)."""
        return len(self.ids(offset, offset + 1)) > 0

    def resume_point(self, offset: int) -> tuple[int, int]:
        if offset < self._marks[0][1]:
            raise ValueError(f"id {offset} lies before the ids still held")
        return max(mark for mark in self._marks if mark[1] <= offset)

    def _tokenize_next_window(self) -> bool:
        """Tokenizes the window after the last; False at the end of the text."""
        if self._chars >= len(self._text):
            return False
        end = window_end(self._text, self._chars, self._window_chars)
        new = np.asarray(self._encode(self._text[self._chars:end]), np.int32)
        self._held = np.concatenate([self._held, new]) if len(self._held) else new
        self._chars = end
        self._marks.append((end, self._first + len(self._held)))
        return True

    def _let_go_before(self, start: int) -> None:
        """Drops the ids before `start`, keeping the last window boundary at or before it."""
        drop = min(start - self._first, len(self._held))
        if drop > 0:
            self._held = self._held[drop:]
            self._first += drop
        keep = max(i for i, mark in enumerate(self._marks) if mark[1] <= max(start, self._first))
        del self._marks[:keep]
