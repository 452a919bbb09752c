"""Loading a tokenizer from files: `load_tokenizer`, which tells the formats apart.

`load_tokenizer` reads a `vocab.txt` (one token per line; the line number is the id), a
`tokenizer.json` (Hugging Face format, e.g. the one shipped with MiniLM) or a folder holding
either (tokenizer.json preferred; a folder's vocab.txt with the casing of its
tokenizer_config.json). A WordPiece vocabulary gives a `WordPieceTokenizer`, whose vocabulary must
hold the five special tokens [PAD] [UNK] [CLS] [SEP] [MASK] (a missing one is an error naming the
file); a tokenizer.json with a BPE model (RoBERTa: byte-level BPE) or a Unigram model (XLM-R:
SentencePiece) a `SubwordTokenizer` whose special tokens are found in the file. Every path may be
local or on object storage (`gs://bucket/vocab.txt`): files are read through etils.epath.

The rest of the tokenizer lives in modules of one job each: `bert_jax.data.tokenizers.wordpiece`
(BERT's special tokens, pipeline and vocab.txt), `bert_jax.data.tokenizers.tokenizer_json` (what a
tokenizer.json says: special tokens by role, continuation pieces),
`bert_jax.data.tokenizers.subword` (the tokenizer classes the pipelines hold),
`bert_jax.data.tokenizers.wordpiece_training` (`train_wordpiece`) and
`bert_jax.data.tokenizers.hf_folder` (`save_hf`: the Hugging Face folder layout).
`SubwordTokenizer`, `WordPieceTokenizer` (what `load_tokenizer` returns) and `train_wordpiece` are
re-exported here, where callers have always found them.
"""

from __future__ import annotations

import json
import os
from typing import Any

import tokenizers
from etils import epath
from tokenizers import models

from bert_jax.data.tokenizers.subword import SubwordTokenizer, WordPieceTokenizer
from bert_jax.data.tokenizers.wordpiece import SPECIAL_TOKENS, bert_wordpiece, read_vocab_txt
from bert_jax.data.tokenizers.wordpiece_training import train_wordpiece

__all__ = ["SubwordTokenizer", "WordPieceTokenizer", "load_tokenizer", "train_wordpiece"]


def load_tokenizer(path: str, lowercase: bool = True,
                   strip_accents: bool | None = None) -> SubwordTokenizer:
    """Loads `vocab.txt`, `tokenizer.json`, or a folder holding either (tokenizer.json preferred).

    A WordPiece vocabulary gives a WordPieceTokenizer; a tokenizer.json of a BPE or Unigram model
    (RoBERTa, XLM-R) a SubwordTokenizer with the special tokens the file names.
    For vocab.txt, `lowercase`/`strip_accents` configure the normalizer; a tokenizer.json carries
    its own normalizer and they are ignored. A folder read through its vocab.txt is a Hugging
    Face folder: the do_lower_case / strip_accents of its tokenizer_config.json, where it has
    them, take the place of the arguments, since they describe how that vocabulary was made
    (`_folder_casing`).
    """
    path = os.path.expanduser(os.fspath(path))  # a local path or gs:// (etils.epath)
    if epath.Path(path).is_dir():
        if (epath.Path(path) / "tokenizer.json").is_file():
            return load_tokenizer(os.path.join(path, "tokenizer.json"))
        if (epath.Path(path) / "vocab.txt").is_file():
            casing = _folder_casing(path)
            return load_tokenizer(os.path.join(path, "vocab.txt"),
                                  casing.get("do_lower_case", lowercase),
                                  casing.get("strip_accents", strip_accents))
        raise FileNotFoundError(f"{path} holds neither tokenizer.json nor vocab.txt")
    if not epath.Path(path).is_file():
        raise FileNotFoundError(f"vocabulary file {path} does not exist")
    if path.endswith(".json"):
        try:
            tokenizer = tokenizers.Tokenizer.from_str(epath.Path(path).read_text())
        except Exception as e:
            raise ValueError(f"{path} is not a readable tokenizers JSON file: {e}") from e
        if isinstance(tokenizer.model, models.WordPiece):
            return WordPieceTokenizer(tokenizer, source=path)
        return SubwordTokenizer(tokenizer, source=path)
    vocab = read_vocab_txt(path)
    missing = [token for token in SPECIAL_TOKENS if token not in vocab]
    if missing:
        raise ValueError(f"vocabulary {path} lacks the special token(s) {missing}; a BERT "
                         f"vocabulary needs all of {list(SPECIAL_TOKENS)}")
    return WordPieceTokenizer(bert_wordpiece(vocab, lowercase, strip_accents), source=path)


def _folder_casing(directory: str) -> dict[str, Any]:
    """do_lower_case and strip_accents of <directory>/tokenizer_config.json, those it holds
    ({} without the file); ValueError naming the file when it is not a JSON object."""
    path = epath.Path(directory) / "tokenizer_config.json"
    if not path.is_file():
        return {}
    try:
        options = json.loads(path.read_bytes().decode("utf-8"))
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(options, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(options).__name__}")
    return {k: options[k] for k in ("do_lower_case", "strip_accents") if k in options}
