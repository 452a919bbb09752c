"""The tokenizer the pipelines hold: a `tokenizers.Tokenizer` with the facts they ask of it.

`SubwordTokenizer` wraps a WordPiece, BPE or Unigram `tokenizers.Tokenizer` (MODEL_KINDS) and
answers every pipeline's questions the same way, whatever the vocabulary: pad_id, cls_id, sep_id,
mask_id, unk_id, special_ids, pair_separator_ids, is_continuation, is_ordinary, words_tokenizer,
and encode / encode_batch / encode_pair / decode. A RoBERTa vocabulary answers with <pad>, <s>,
</s>, <mask> (found in its tokenizer.json: `bert_jax.data.tokenizers.tokenizer_json`), a BERT
vocabulary with [PAD] [CLS] [SEP] [MASK]. `WordPieceTokenizer` is BERT's: its vocabulary must hold
the five special tokens of `bert_jax.data.tokenizers.wordpiece`; a missing one is a ValueError
naming the source.

Construction turns the wrapped tokenizer's truncation and padding off. Loading one from files is
`bert_jax.data.tokenizers.load.load_tokenizer`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import tokenizers

from bert_jax.data.tokenizers.tokenizer_json import (
    ROLES,
    continuation_pieces,
    find_special_tokens,
    pair_separator,
    words_tokenizer,
)
from bert_jax.data.tokenizers.wordpiece import SPECIAL_TOKENS

BERT_SPECIALS = dict(zip(ROLES, SPECIAL_TOKENS))
# The models a SubwordTokenizer takes.
MODEL_KINDS = ("WordPiece", "BPE", "Unigram")


class SubwordTokenizer:
    """A `tokenizers.Tokenizer` with the special ids and per-token facts the pipelines need.

    specials: role (ROLES) -> token; None finds them in the tokenizer (`find_special_tokens`).
    Attributes: kind (MODEL_KINDS), specials, vocab_size, pad_id, unk_id, cls_id, sep_id,
    mask_id, special_ids (sorted tuple of the five), pair_separator_ids (what separates A from B
    in a pair: (sep_id,) for BERT's [SEP], (sep_id, sep_id) for RoBERTa's </s> </s>; from the
    post-processor, `pair_separator`), words_tokenizer (the tokenizers.Tokenizer for text already
    split into words: `words_tokenizer`), is_continuation [vocab] bool (a piece that
    continues a word: `continuation_pieces`), is_ordinary [vocab] bool (random replacements in
    masking are drawn from these: not a special token, and for WordPiece not a bracketed token
    such as [unused3]).
    """

    def __init__(self, tokenizer: tokenizers.Tokenizer, source: str = "<memory>",
                 specials: dict[str, str] | None = None):
        self.kind = type(tokenizer.model).__name__
        if self.kind not in MODEL_KINDS:
            raise ValueError(f"{source} holds a {self.kind} model; a subword tokenizer is one of "
                             f"{list(MODEL_KINDS)}")
        self.specials = dict(specials) if specials is not None else find_special_tokens(
            tokenizer, source)  # before padding is turned off: it may name the pad token
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self.tokenizer = tokenizer
        self.words_tokenizer = words_tokenizer(tokenizer)
        self.source = source
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        missing = [token for token in self.specials.values() if token not in vocab]
        if missing:
            raise ValueError(f"vocabulary {source} lacks the special token(s) {missing}")
        self.vocab_size = max(vocab.values()) + 1
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
            vocab[self.specials[role]] for role in ROLES)
        self.special_ids = tuple(sorted(vocab[self.specials[role]] for role in ROLES))
        self.pair_separator_ids = tuple(
            vocab[token] for token in pair_separator(tokenizer, self.specials["sep"]))
        added = {token.content for token in tokenizer.get_added_tokens_decoder().values()
                 if token.special}
        bracketed = self.kind == "WordPiece"  # BERT's vocabularies: [PAD], [unused3], ...
        self.is_continuation = continuation_pieces(tokenizer, vocab, exclude=added)
        self.is_ordinary = np.zeros(self.vocab_size, bool)
        for token, index in vocab.items():
            self.is_ordinary[index] = token not in added and not (
                bracketed and len(token) > 2 and token[0] == "[" and token[-1] == "]")

    def encode(self, text: str) -> list[int]:
        """Ids of `text` without special tokens."""
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Ids of each text without special tokens (tokenized in parallel threads)."""
        return [e.ids for e in self.tokenizer.encode_batch(list(texts), add_special_tokens=False)]

    def encode_pair(self, text_a: str, text_b: str | None = None) -> tokenizers.Encoding:
        """A (and B) with the tokenizer's own special tokens and type ids: [CLS] A [SEP] (B [SEP])
        for BERT, <s> A </s> (</s> B </s>) for RoBERTa."""
        return self.tokenizer.encode(text_a, text_b, add_special_tokens=True)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def id_to_token(self, index: int) -> str | None:
        return self.tokenizer.id_to_token(index)

    def token_to_id(self, token: str) -> int | None:
        return self.tokenizer.token_to_id(token)


class WordPieceTokenizer(SubwordTokenizer):
    """BERT's: a WordPiece `tokenizers.Tokenizer` whose vocabulary holds [PAD] [UNK] [CLS] [SEP]
    [MASK] ("##" marks a continuation)."""

    def __init__(self, tokenizer: tokenizers.Tokenizer, source: str = "<memory>"):
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        missing = [token for token in SPECIAL_TOKENS if token not in vocab]
        if missing:
            raise ValueError(f"vocabulary {source} lacks the special token(s) {missing}; a BERT "
                             f"vocabulary needs all of {list(SPECIAL_TOKENS)}")
        super().__init__(tokenizer, source, BERT_SPECIALS)
