"""Token ids of many documents at once, as a token-shard preparation needs them: `UnitEncoder`.

`UnitEncoder(tokenizer)(texts)` -> one list of ids per text, no special tokens: exactly
`tokenizer.encode_batch_fast(texts, add_special_tokens=False)`'s ids (the tests compare them).

One exact shortcut: a BERT tokenizer's normaliser (`BertNormalizer`) costs about 40% of the
encoding, and on a document of ASCII characters it does nothing the pre-tokeniser would see,
except lowercasing: its accent stripping and CJK spacing touch no ASCII character, and its text
cleaning maps \\t \\n \\r to a space (the pre-tokeniser splits at them all the same) and removes
the other ASCII control characters. So a document that is ASCII, holds no control character but
\\t \\n \\r, and holds no added token (e.g. "[CLS]", matched before normalisation) is lowercased
in Python (when the normaliser lowercases) and encoded by a copy of the tokenizer without
normaliser: the same ids, about 1.7x faster. Every other document, and every tokenizer with another
normaliser (byte-level BPE, Unigram, any Sequence), takes the ordinary path.
"""

from __future__ import annotations

import json
import re
from typing import Sequence

import tokenizers

# ASCII control characters BertNormalizer's clean_text removes (\t \n \r it maps to a space)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


class UnitEncoder:
    """Callable: texts -> their ids (module docstring). Attributes: tokenizer, fast (the
    copy without normaliser, or None when the shortcut does not apply), lowercase."""

    def __init__(self, tokenizer: tokenizers.Tokenizer):
        self.tokenizer = tokenizer
        self.fast, self.lowercase, self._added = None, False, ()
        described = json.loads(tokenizer.to_str())
        normalizer = described.get("normalizer") or {}
        if normalizer.get("type") != "BertNormalizer":
            return
        self.lowercase = bool(normalizer.get("lowercase"))
        described["normalizer"] = None
        self.fast = tokenizers.Tokenizer.from_str(json.dumps(described))
        self._added = tuple({token["content"].lower()
                             for token in described.get("added_tokens", [])})

    def _plain(self, text: str) -> str | None:
        """The text the fast copy encodes to the same ids, or None (the ordinary path)."""
        if not text.isascii() or _CONTROL.search(text):
            return None
        lowered = text.lower()
        if any(token in lowered for token in self._added):
            return None
        return lowered if self.lowercase else text

    def __call__(self, texts: Sequence[str]) -> list[list[int]]:
        if self.fast is None:
            return [e.ids for e in self.tokenizer.encode_batch_fast(
                list(texts), add_special_tokens=False)]
        plain, plain_at, other, other_at = [], [], [], []
        for index, text in enumerate(texts):
            ready = self._plain(text)
            if ready is None:
                other.append(text)
                other_at.append(index)
            else:
                plain.append(ready)
                plain_at.append(index)
        ids: list[list[int]] = [[] for _ in texts]
        for batch, where, tokenizer in ((plain, plain_at, self.fast),
                                        (other, other_at, self.tokenizer)):
            if batch:
                for index, encoding in zip(where, tokenizer.encode_batch_fast(
                        batch, add_special_tokens=False)):
                    ids[index] = encoding.ids
        return ids
