"""BERT's normaliser done by Python's string machinery: `CharacterNormalizer`.

BERT's normaliser (`tokenizers.normalizers.BertNormalizer`: control characters removed, whitespace
made a space, CJK ideographs spaced out, accents stripped, lowercase) works character by
character: a text's normal form is its characters' normal forms, joined. (Lowercasing is per
character, without the context rule of a final sigma; NFD's reordering of combining marks cannot
show once they are stripped.) So a table of each character's normal form, each made by the
normaliser itself, normalises any text of those characters exactly, and at C speed: the ASCII
characters by `bytes.translate` over the UTF-8 bytes (bytes 0x80-0xFF, the rest of the encoding,
pass unchanged), the other characters that change by a regular expression where they are few
and by `str.translate` where they are many. `tokenizers` keeps an alignment for every byte it
normalises; this keeps none, and takes about half of what the WordPiece trainer spends on a
text off it (docs/results.md, "Vocabulary training").

`distinct_characters(texts)` is the pass that finds the characters a table needs.
"""

from __future__ import annotations

import re
from typing import Iterable

import numpy as np
from tokenizers import normalizers

# A text is "dense" in changing characters when its UTF-8 form is this much longer than its
# characters: then one str.translate costs less than a regular expression's match per change.
_DENSE = 1 / 16


def distinct_characters(texts: Iterable[str]) -> set[str]:
    """Every character of `texts`, in one pass at C speed: an ASCII text adds what
    `bytes.translate` leaves after deleting the characters already seen, any other marks its code
    points in a table."""
    found: set[str] = set()
    seen_ascii = b""  # the ASCII characters in `found`: what bytes.translate deletes
    seen = np.zeros(0x110000, bool)  # the code points of the other texts
    for text in texts:
        if text.isascii():
            new = text.encode("ascii").translate(None, seen_ascii)
            if new:
                found.update(new.decode("ascii"))
                seen_ascii = "".join(sorted(c for c in found if c.isascii())).encode("ascii")
        else:
            seen[np.frombuffer(text.encode("utf-32-le", "surrogatepass"), "<u4")] = True
    found.update(map(chr, np.flatnonzero(seen)))
    return found


class CharacterNormalizer:
    """`normalizer`'s result on texts made of `characters`, by table (module docstring).

    normalizer: a character-wise normaliser (BERT's); an ASCII character it makes anything but
      one ASCII character or nothing is a ValueError (it is not BERT's).
    characters: a superset of the characters of the texts it will see (`distinct_characters`):
      a character outside it passes unchanged, which is wrong if the normaliser would change it.
    """

    def __init__(self, normalizer: normalizers.Normalizer, characters: Iterable[str]):
        self.normalizer = normalizer
        ascii_table, deleted = bytearray(range(256)), bytearray()
        for code in range(128):
            form = normalizer.normalize_str(chr(code))
            if not form:
                deleted.append(code)
            elif len(form) == 1 and form.isascii():
                ascii_table[code] = ord(form)
            else:
                raise ValueError(f"normaliser {normalizer!r} makes {chr(code)!r} {form!r}: not "
                                 "a character-wise normaliser of ASCII")
        self._ascii_table, self._deleted = bytes(ascii_table), bytes(deleted)
        forms = {c: normalizer.normalize_str(c) for c in characters if not c.isascii()}
        self.forms = {c: form for c, form in forms.items() if form != c}
        """The normal form of each non-ASCII character that changes."""
        self._by_code = {ord(c): form for c, form in self.forms.items()}
        self._changing = re.compile(
            "[" + "".join(map(re.escape, sorted(self.forms))) + "]") if self.forms else None

    def __call__(self, text: str) -> str:
        """The normal form of `text`."""
        if text.isascii():
            return text.encode("ascii").translate(self._ascii_table, self._deleted).decode(
                "ascii")
        encoded = text.encode("utf-8")
        dense = len(encoded) - len(text) > _DENSE * len(text)
        text = encoded.translate(self._ascii_table, self._deleted).decode("utf-8")
        if self._changing is None:
            return text
        return text.translate(self._by_code) if dense else self._changing.sub(self._form, text)

    def _form(self, match: re.Match) -> str:
        return self.forms[match.group()]
