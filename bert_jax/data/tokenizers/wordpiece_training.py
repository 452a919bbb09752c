"""Training a BERT WordPiece vocabulary on texts: `train_wordpiece`.

It learns a vocabulary of at most `vocab_size` tokens with ids 0..4 = [PAD] [UNK] [CLS] [SEP]
[MASK], and writes vocab.txt (last and atomically: its presence means the folder is complete) and
tokenizer.json into a local or gs:// folder. The same texts give the same files, byte for byte,
whatever the number of threads (`_continuation_pieces`). Load the result with
`bert_jax.data.tokenizers.load.load_tokenizer`.
"""

from __future__ import annotations

import os
from typing import Callable, Iterable, Sequence

import tokenizers
from etils import epath
from tokenizers import trainers

from bert_jax.data.tokenizers.character_normalization import (
    CharacterNormalizer,
    distinct_characters,
)
from bert_jax.data.tokenizers.wordpiece import CONTINUATION_PREFIX, SPECIAL_TOKENS, bert_wordpiece
from bert_jax.runtime import paths, progress


def _trainer(vocab_size: int, min_frequency: int, special_tokens: Sequence[str]):
    return trainers.WordPieceTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=list(special_tokens),
        continuing_subword_prefix=CONTINUATION_PREFIX, show_progress=False)


def _continuation_pieces(texts: Sequence[str], normalize: CharacterNormalizer,
                         characters: set[str], vocab_size: int) -> list[str]:
    """The "##c" piece of every character c that may continue a word of `texts`, sorted.

    tokenizers' WordPiece trainer creates these pieces while it walks a hash map of the words,
    whose order changes from process to process, so their ids change too; it then breaks ties
    between equally frequent merges by ids, so two runs on the same texts learn different
    vocabularies (huggingface/tokenizers#1794). Given to the trainer beforehand as special tokens,
    in sorted order, the pieces have fixed ids and training is deterministic.

    Two ways to find the characters (`_candidate_pieces`, `_trained_pieces`): the cheap one is a
    superset; where it could take more than 1% of the vocabulary (small vocabularies: the demo's
    1,024 pieces lost 52 entries to it, and 4 points of held-out MLM accuracy), the exact one.
    """
    candidates = _candidate_pieces(normalize, characters)
    if len(candidates) <= vocab_size // 100:
        return candidates
    return _trained_pieces(texts, normalize)


def _trained_pieces(texts: Sequence[str], normalize: CharacterNormalizer) -> list[str]:
    """Exactly the pieces the trainer would create: a training run without merges
    (vocab_size=1) lists them, splitting words as training does; it costs a pass over the
    texts like the training's own."""
    tokenizer = _word_splitter()
    tokenizer.train_from_iterator(text_batches(texts, normalize),
                                  _trainer(1, 1, SPECIAL_TOKENS))
    return sorted(token for token in tokenizer.get_vocab()
                  if token.startswith(CONTINUATION_PREFIX))


def _candidate_pieces(normalize: CharacterNormalizer, characters: set[str]) -> list[str]:
    """A superset of the pieces, cheaply: each distinct character of the texts, normalised
    alone (BERT's normaliser works character by character), kept when it stays inside a word
    after "a" (neither whitespace, punctuation nor a CJK character). A character seen only at
    the start of words or alone (a "£", a "→") gets a piece the trainer would not have made: an
    unused vocabulary entry."""
    splitter = _word_splitter()
    normalized = set().union(*(normalize(c) for c in characters))
    continuing = {c for c in normalized
                  if [word for word, _ in splitter.pre_tokenizer.pre_tokenize_str(
                      normalize.normalizer.normalize_str("a" + c))] == ["a" + c]}
    return sorted(CONTINUATION_PREFIX + c for c in continuing)


def _word_splitter() -> tokenizers.Tokenizer:
    """An untrained BERT WordPiece tokenizer without a normaliser: it is fed normalised text
    (`CharacterNormalizer`: the trainer's own normaliser costs half its time)."""
    tokenizer = bert_wordpiece(None)
    tokenizer.normalizer = None
    return tokenizer


def text_batches(texts: Sequence[str], prepare: Callable[[str], str] | None = None,
                 size: int = 10_000) -> Iterable[list[str]]:
    """Lists of `size` texts (each through `prepare`, if given) for a trainer: it works through
    a list in parallel, with one crossing from Python."""
    for start in range(0, len(texts), size):
        batch = texts[start:start + size]
        yield [prepare(text) for text in batch] if prepare else list(batch)


def train_wordpiece(texts: Iterable[str], vocab_size: int, out_dir: str, lowercase: bool = True,
                    strip_accents: bool | None = None, min_frequency: int = 2) -> str:
    """Learns a WordPiece vocabulary of at most `vocab_size` tokens; returns the vocab.txt path.

    Ids 0..4 are [PAD] [UNK] [CLS] [SEP] [MASK]. Also writes tokenizer.json next to vocab.txt.
    The same texts give the same files, byte for byte, whatever the number of threads
    (`_continuation_pieces`). `texts` is read twice (three times for a small vocabulary):
    anything but a sequence (a list, a tuple) is first read into memory. The training pass shows
    a progress bar (`bert_jax.runtime.progress`); it changes nothing in the result.
    """
    if vocab_size <= len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size={vocab_size} leaves no room beside the special tokens")
    if not isinstance(texts, Sequence):
        texts = list(texts)
    characters = distinct_characters(texts)
    normalize = CharacterNormalizer(bert_wordpiece(None, lowercase, strip_accents).normalizer,
                                    characters)
    pieces = _continuation_pieces(texts, normalize, characters, vocab_size)
    trained = _word_splitter()
    trained.train_from_iterator(
        progress.bar(text_batches(texts, normalize), desc="vocabulary: words",
                     unit="batch", total=-(-len(texts) // 10_000)),
        _trainer(vocab_size, min_frequency, [*SPECIAL_TOKENS, *pieces]), length=len(texts))
    vocab = trained.get_vocab()
    tokenizer = bert_wordpiece(vocab, lowercase, strip_accents)  # the pieces are plain tokens
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    epath.Path(out_dir).mkdir(parents=True, exist_ok=True)  # a local folder or gs://
    vocab_path = os.path.join(out_dir, "vocab.txt")
    (epath.Path(out_dir) / "tokenizer.json").write_text(tokenizer.to_str(pretty=True))
    # vocab.txt last, written whole: its presence means the folder is complete.
    paths.write_text_atomically(vocab_path, "".join(
        token + "\n" for token, _ in sorted(vocab.items(), key=lambda item: item[1])))
    return vocab_path
