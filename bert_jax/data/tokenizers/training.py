"""Training a tokenizer for any language on a sample of texts: WordPiece, byte-level BPE, Unigram.

`train_tokenizer(texts, kind, vocab_size, out_dir, normalization)` trains with the `tokenizers`
library and writes out_dir/tokenizer.json (last, atomically: its presence means the folder is
complete), loadable by `bert_jax.data.tokenizers.load.load_tokenizer(out_dir)`:

  "wordpiece"  BERT's (`bert_jax.data.tokenizers.wordpiece_training.train_wordpiece`, also
               vocab.txt):
               [PAD] [UNK] [CLS] [SEP] [MASK]; BERT's normaliser (lowercase and accents as
               asked; CJK characters always split) and pre-tokeniser.
  "bpe"        byte-level BPE as RoBERTa and ModernBERT: <s> <pad> </s> <unk> <mask> (ids 0-4),
               no unknown piece (every byte is in the alphabet), "Ġ" marks a space.
  "unigram"    a SentencePiece-style Unigram model as XLM-R: the same five special tokens,
               Metaspace pre-tokeniser ("▁" marks a space), <unk> for unseen characters.

`Normalization` says what the text goes through first: a Unicode form (NFKC, NFC, NFKD, NFD or
none), lowercase, accents stripped, CJK ideographs split into tokens of their own (scripts
written without spaces: Chinese, Japanese kanji). None picks the kind's custom: WordPiece
lowercases (BERT uncased), BPE leaves the text as is (RoBERTa), Unigram applies NFKC (XLM-R).
A WordPiece tokenizer with a Unicode form gets it in front of BERT's normaliser in
tokenizer.json (vocab.txt alone cannot say it) and is trained on text put in that form.

WordPiece and BPE give the same files for the same texts; Unigram's trainer sums its scores in
parallel, so they differ in their last digits from run to run and pieces of equal score may
trade places.

The trainer holds the sample and its word counts in memory: train on a bounded sample
(`bert_jax.data.corpora.sample.sample_documents`), never on a whole corpus.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Sequence

import tokenizers
from etils import epath
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers

from bert_jax.data.tokenizers.character_normalization import distinct_characters
from bert_jax.data.tokenizers.wordpiece_training import text_batches, train_wordpiece
from bert_jax.runtime import paths

KINDS = ("wordpiece", "bpe", "unigram")
UNICODE_FORMS = ("NFKC", "NFC", "NFKD", "NFD", "none")
# RoBERTa's and XLM-R's special tokens, ids 0..4 in this order.
FAIRSEQ_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")
# CJK ideographs (BERT's _is_chinese_char blocks): first and last code point of each block.
CJK_BLOCKS = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
              (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))
# The same, in the regex syntax of `tokenizers`.
CJK = "[" + "".join(f"\\x{{{first:X}}}-\\x{{{last:X}}}" for first, last in CJK_BLOCKS) + "]"


@dataclasses.dataclass(frozen=True)
class Normalization:
    """What text goes through before it is split into words; None: the kind's custom."""

    unicode_form: str | None = None  # UNICODE_FORMS
    lowercase: bool | None = None
    strip_accents: bool | None = None
    split_cjk: bool = True

    def resolved(self, kind: str) -> Normalization:
        """Every None replaced by the custom of `kind`."""
        form = self.unicode_form or ("NFKC" if kind == "unigram" else "none")
        lowercase = self.lowercase if self.lowercase is not None else kind == "wordpiece"
        strip = self.strip_accents if self.strip_accents is not None else (
            lowercase if kind == "wordpiece" else False)
        if form not in UNICODE_FORMS:
            raise ValueError(f"unicode_form={form!r}; choose one of {', '.join(UNICODE_FORMS)}")
        return Normalization(form, lowercase, strip, self.split_cjk)


def _normalizer(norm: Normalization) -> normalizers.Normalizer | None:
    steps = []
    if norm.unicode_form != "none":
        steps.append(getattr(normalizers, norm.unicode_form)())
    if norm.strip_accents:
        steps += [normalizers.NFD(), normalizers.StripAccents()]
    if norm.lowercase:
        steps.append(normalizers.Lowercase())
    return normalizers.Sequence(steps) if steps else None


def _cjk_split(norm: Normalization) -> list[pre_tokenizers.PreTokenizer]:
    if not norm.split_cjk:
        return []
    return [pre_tokenizers.Split(tokenizers.Regex(CJK), behavior="isolated")]


def _is_cjk(character: str) -> bool:
    return any(first <= ord(character) <= last for first, last in CJK_BLOCKS)


def _template(tokenizer: tokenizers.Tokenizer) -> processors.TemplateProcessing:
    """<s> A </s> (</s> B </s>): the XLM-R template."""
    ids = {token: tokenizer.token_to_id(token) for token in ("<s>", "</s>")}
    return processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
                                         special_tokens=list(ids.items()))


def bpe_tokenizer(norm: Normalization) -> tokenizers.Tokenizer:
    """An untrained byte-level BPE tokenizer (RoBERTa's pipeline)."""
    tokenizer = tokenizers.Tokenizer(models.BPE())
    tokenizer.normalizer = _normalizer(norm)
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        _cjk_split(norm) + [pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def unigram_tokenizer(norm: Normalization) -> tokenizers.Tokenizer:
    """An untrained Unigram tokenizer (XLM-R's SentencePiece pipeline)."""
    tokenizer = tokenizers.Tokenizer(models.Unigram())
    tokenizer.normalizer = _normalizer(norm)
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(_cjk_split(norm) + [
        pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")])
    tokenizer.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    return tokenizer


def _fairseq_trainer(kind: str, vocab_size: int, min_frequency: int):
    specials = [tokenizers.AddedToken(token, special=True, lstrip=token == "<mask>")
                for token in FAIRSEQ_SPECIALS]
    if kind == "bpe":
        return trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                   special_tokens=specials, show_progress=False,
                                   initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    return trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=specials,
                                   unk_token="<unk>", show_progress=False)


def train_tokenizer(texts: Sequence[str], kind: str, vocab_size: int, out_dir: str,
                    normalization: Normalization = Normalization(),
                    min_frequency: int = 2) -> str:
    """Trains a `kind` (KINDS) tokenizer of at most `vocab_size` tokens on `texts` (held in
    memory: a sample); writes out_dir/tokenizer.json (and vocab.txt for WordPiece) and returns
    out_dir/tokenizer.json. Load it with `load_tokenizer(out_dir)`."""
    if kind not in KINDS:
        raise ValueError(f"tokenizer kind {kind!r}; choose one of {', '.join(KINDS)}")
    if vocab_size <= len(FAIRSEQ_SPECIALS):
        raise ValueError(f"vocab_size={vocab_size} leaves no room beside the special tokens")
    norm = normalization.resolved(kind)
    out = os.path.join(os.fspath(out_dir), "tokenizer.json")
    if kind == "wordpiece":
        return _train_wordpiece(texts, vocab_size, os.fspath(out_dir), norm, min_frequency)
    pipeline = bpe_tokenizer if kind == "bpe" else unigram_tokenizer
    # The CJK split finds nothing in a sample without CJK ideographs: training without it learns
    # the same model, without the split's regular expression over every text.
    trained_norm = norm
    if norm.split_cjk and not any(_is_cjk(c) for c in distinct_characters(texts)):
        trained_norm = dataclasses.replace(norm, split_cjk=False)
    tokenizer = pipeline(trained_norm)
    tokenizer.train_from_iterator(text_batches(texts),
                                  _fairseq_trainer(kind, vocab_size, min_frequency),
                                  length=len(texts))
    tokenizer.pre_tokenizer = pipeline(norm).pre_tokenizer
    tokenizer.post_processor = (
        processors.RobertaProcessing(("</s>", tokenizer.token_to_id("</s>")),
                                     ("<s>", tokenizer.token_to_id("<s>")),
                                     add_prefix_space=False) if kind == "bpe" else
        _template(tokenizer))
    epath.Path(out_dir).mkdir(parents=True, exist_ok=True)
    paths.write_text_atomically(out, tokenizer.to_str(pretty=True))
    return out


def _train_wordpiece(texts: Sequence[str], vocab_size: int, out_dir: str, norm: Normalization,
                     min_frequency: int) -> str:
    """BERT's WordPiece (train_wordpiece); a Unicode form goes in front of its normaliser."""
    form = None if norm.unicode_form == "none" else getattr(normalizers, norm.unicode_form)()
    if form is not None:
        texts = [form.normalize_str(text) for text in texts]
    train_wordpiece(texts, vocab_size, out_dir, norm.lowercase, norm.strip_accents,
                    min_frequency)
    out = os.path.join(out_dir, "tokenizer.json")
    if form is not None:
        state = json.loads(epath.Path(out).read_text())
        state["normalizer"] = {"type": "Sequence",
                               "normalizers": [{"type": norm.unicode_form}, state["normalizer"]]}
        paths.write_text_atomically(out, json.dumps(state, ensure_ascii=False, indent=2))
    return out
