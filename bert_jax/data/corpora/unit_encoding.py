"""Token ids of many documents at once, as a token-shard preparation needs them: `UnitEncoder`.

`UnitEncoder(tokenizer).records(texts, dtype)` -> each text's ids (no special tokens) as the
bytes of a little-endian `dtype` array; `UnitEncoder(tokenizer)(texts)` -> the same ids as lists.
Both are exactly `tokenizer.encode_batch_fast(texts, add_special_tokens=False)`'s ids (the tests
compare them on English, accented, CJK and control-character text).

One exact shortcut, for a BERT WordPiece tokenizer (normaliser BertNormalizer or none,
pre-tokeniser BertPreTokenizer, model WordPiece): its pipeline is local between ASCII
separators (space, \\t, \\n, \\r) and ASCII punctuation marks. The normaliser works character
by character (text cleaning, CJK spacing, lowercasing one character at a time, NFD with accent
stripping: a combining mark never reaches back past an ASCII character), the separators become
spaces; the pre-tokeniser splits at every whitespace and isolates every punctuation mark; WordPiece
encodes each pre-token alone. So a document's ids are the ids of its chunks (the runs between
separators and ASCII punctuation, and each ASCII punctuation mark), each encoded alone, one after
another. Chunks repeat (Zipf's law): each is encoded once by the tokenizer itself and its ids'
bytes kept in a dictionary of at most `cache_entries` chunks of at most `CACHED_CHARS` characters
(emptied when full: bounded memory, about 20 MB at the default, whatever the corpus size); an
ASCII document is lowercased in Python first when the normaliser lowercases (the same on ASCII:
fewer distinct chunks). A document's record is then one join of cached bytes. Measured on one
core (benchmarks/prepare_corpus.py --unit_encoding): about 2x `encode_batch` on unique text with a
cold cache, about 3.5x on text that repeats; the tokenizer is the preparation's bound.

Added tokens (e.g. "[CLS]") are matched on the whole text before normalisation, possibly across
separators: a document that holds one (compared case-blind) takes the ordinary path. A tokenizer
with a normalised added token (matched after normalisation), and every other tokenizer
(byte-level BPE, Unigram, any other pipeline), takes the ordinary path: the tokenizer's speed.
"""

from __future__ import annotations

import json
import re
from typing import Sequence

import numpy as np
import tokenizers

# A chunk: a run between ASCII separators and ASCII punctuation, or one ASCII punctuation mark
_CHUNK = re.compile(r"[^ \t\n\r!-/:-@\[-`{-~]+|[!-/:-@\[-`{-~]")
CACHED_CHARS = 64  # longer chunks are encoded every time they occur (bounded cache memory)
CACHE_ENTRIES = 1 << 17


class UnitEncoder:
    """Callable: texts -> their ids (module docstring). Attributes: tokenizer, chunked (whether
    the shortcut applies to this tokenizer), cache_entries."""

    def __init__(self, tokenizer: tokenizers.Tokenizer, cache_entries: int = CACHE_ENTRIES):
        self.tokenizer = tokenizer
        self.cache_entries = cache_entries
        described = json.loads(tokenizer.to_str())
        added = described.get("added_tokens") or []
        normalizer = described.get("normalizer") or {}
        self._lowercase = bool(normalizer.get("lowercase"))
        normalizer = normalizer.get("type")
        self.chunked = ((described.get("pre_tokenizer") or {}).get("type") == "BertPreTokenizer"
                        and (described.get("model") or {}).get("type") == "WordPiece"
                        and normalizer in (None, "BertNormalizer")
                        and not any(token.get("normalized") for token in added))
        self._added = tuple({token["content"].lower() for token in added})
        self._chunks: dict[str, bytes] = {}
        self._dtype: np.dtype | None = None

    def _chunked(self, text: str) -> list[str] | None:
        """The text's chunks, or None when it takes the ordinary path."""
        ascii = text.isascii()
        lowered = text.lower() if self._added or (ascii and self._lowercase) else text
        if any(token in lowered for token in self._added):
            return None
        # an ASCII text lowercases in Python as in the normaliser: fewer distinct chunks
        return _CHUNK.findall(lowered if ascii and self._lowercase else text)

    def _encoded(self, texts: list[str], dtype: np.dtype) -> list[bytes]:
        encodings = self.tokenizer.encode_batch_fast(texts, add_special_tokens=False)
        return [np.asarray(e.ids, dtype).tobytes() for e in encodings]

    def records(self, texts: Sequence[str], dtype: np.dtype | str) -> list[bytes]:
        """Each text's ids as little-endian `dtype` bytes (what a token shard's record holds)."""
        dtype = np.dtype(dtype).newbyteorder("<")
        if not self.chunked:
            return self._encoded(list(texts), dtype)
        if dtype != self._dtype:
            self._chunks.clear()
            self._dtype = dtype
        chunked = [self._chunked(text) for text in texts]
        wanted = set().union(*(chunks for chunks in chunked if chunks is not None))
        missing = wanted.difference(self._chunks)
        if len(self._chunks) + len(missing) > self.cache_entries:
            self._chunks.clear()
            missing = wanted
        missing = list(missing)
        once = {}  # long chunks: encoded for this batch only
        for chunk, ids in zip(missing, self._encoded(missing, dtype)):
            (self._chunks if len(chunk) <= CACHED_CHARS else once)[chunk] = ids
        self._chunks.update(once)
        try:
            lookup = self._chunks.__getitem__
            records = [None if chunks is None else b"".join(map(lookup, chunks))
                       for chunks in chunked]
        finally:
            for chunk in once:
                del self._chunks[chunk]
        ordinary = [i for i, chunks in enumerate(chunked) if chunks is None]
        for i, record in zip(ordinary, self._encoded([texts[i] for i in ordinary], dtype)):
            records[i] = record
        return records

    def __call__(self, texts: Sequence[str]) -> list[list[int]]:
        dtype = np.dtype("<u4")
        return [np.frombuffer(record, dtype).tolist() for record in self.records(texts, dtype)]
