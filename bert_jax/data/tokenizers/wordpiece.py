"""BERT's WordPiece: its five special tokens, its `tokenizers` pipeline, its vocab.txt.

BERT's pipeline (Devlin et al., 2019): normalize (clean control characters, space out CJK
characters, optionally lower-case and strip accents), split on whitespace and punctuation, then
greedy longest-match-first WordPiece with "##" (CONTINUATION_PREFIX) marking a piece that
continues a word. Sequences get [CLS] A [SEP] (or [CLS] A [SEP] B [SEP]) when special tokens are
asked for (`bert_post_processor`).

`bert_wordpiece` builds that pipeline (untrained without a vocabulary); `read_vocab_txt` reads a
vocab.txt (one token per line; the line number is the id; a repeated token or an empty file is a
ValueError naming the file). Every WordPiece vocabulary must hold SPECIAL_TOKENS ([PAD] [UNK]
[CLS] [SEP] [MASK]); the modules that load or check one say so (`bert_jax.data.tokenizers.load`,
`bert_jax.data.tokenizers.subword`). Paths may be local or gs:// (etils.epath).
"""

from __future__ import annotations

import tokenizers
from etils import epath
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)
CONTINUATION_PREFIX = "##"


def bert_wordpiece(vocab: dict[str, int] | None = None, lowercase: bool = True,
                   strip_accents: bool | None = None) -> tokenizers.Tokenizer:
    """An (untrained when vocab is None) BERT WordPiece `tokenizers.Tokenizer`.

    strip_accents: None follows `lowercase`, as in the original BERT.
    """
    model = models.WordPiece(vocab or {}, unk_token=UNK, max_input_chars_per_word=100,
                             continuing_subword_prefix=CONTINUATION_PREFIX)
    tokenizer = tokenizers.Tokenizer(model)
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=strip_accents,
        lowercase=lowercase)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix=CONTINUATION_PREFIX)
    if vocab:
        tokenizer.post_processor = bert_post_processor(vocab)
    return tokenizer


def bert_post_processor(vocab: dict[str, int]) -> processors.TemplateProcessing:
    """[CLS] A [SEP] with type 0, then B [SEP] with type 1."""
    return processors.TemplateProcessing(
        single=f"{CLS}:0 $A:0 {SEP}:0", pair=f"{CLS}:0 $A:0 {SEP}:0 $B:1 {SEP}:1",
        special_tokens=[(CLS, vocab[CLS]), (SEP, vocab[SEP])])


def read_vocab_txt(path: str) -> dict[str, int]:
    """token -> id from a BERT vocab.txt (id = line number)."""
    vocab: dict[str, int] = {}
    with epath.Path(path).open("r") as f:  # a local file or gs://
        for index, line in enumerate(f):
            token = line.rstrip("\n").rstrip("\r")
            if token in vocab:
                raise ValueError(f"{path}:{index + 1}: token {token!r} repeats line "
                                 f"{vocab[token] + 1}")
            vocab[token] = index
    if not vocab:
        raise ValueError(f"vocabulary file {path} is empty")
    return vocab
