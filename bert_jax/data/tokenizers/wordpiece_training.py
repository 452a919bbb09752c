"""Training a BERT WordPiece vocabulary on texts: `train_wordpiece`.

It learns a vocabulary of at most `vocab_size` tokens with ids 0..4 = [PAD] [UNK] [CLS] [SEP]
[MASK], and writes vocab.txt (last and atomically: its presence means the folder is complete) and
tokenizer.json into a local or gs:// folder. The same texts give the same files, byte for byte,
whatever the number of threads (`_continuation_pieces`). Load the result with
`bert_jax.data.tokenizers.load.load_tokenizer`.
"""

from __future__ import annotations

import os
from typing import Iterable, Sequence

import numpy as np
from etils import epath
from tokenizers import trainers

from bert_jax.data.tokenizers.wordpiece import CONTINUATION_PREFIX, SPECIAL_TOKENS, bert_wordpiece
from bert_jax.runtime import paths, progress


def _trainer(vocab_size: int, min_frequency: int, special_tokens: Sequence[str]):
    return trainers.WordPieceTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=list(special_tokens),
        continuing_subword_prefix=CONTINUATION_PREFIX, show_progress=False)


def _continuation_pieces(texts: Sequence[str], vocab_size: int, lowercase: bool,
                         strip_accents: bool | None) -> list[str]:
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
    candidates = _candidate_pieces(texts, lowercase, strip_accents)
    if len(candidates) <= vocab_size // 100:
        return candidates
    return _trained_pieces(texts, lowercase, strip_accents)


def _trained_pieces(texts: Sequence[str], lowercase: bool,
                    strip_accents: bool | None) -> list[str]:
    """Exactly the pieces the trainer would create: a training run without merges
    (vocab_size=1) lists them, normalising and splitting words as training does; it costs a
    pass over the texts like the training's own."""
    tokenizer = bert_wordpiece(None, lowercase, strip_accents)
    tokenizer.train_from_iterator(_batches(texts), _trainer(1, 1, SPECIAL_TOKENS))
    return sorted(token for token in tokenizer.get_vocab()
                  if token.startswith(CONTINUATION_PREFIX))


def _candidate_pieces(texts: Iterable[str], lowercase: bool,
                      strip_accents: bool | None) -> list[str]:
    """A superset of the pieces, cheaply: each distinct character of the texts (one C-speed
    pass: an ASCII text adds what `bytes.translate` leaves after deleting the characters seen,
    any other marks its code points in a table), normalised alone (BERT's normaliser works
    character by character), kept when it stays inside a word after "a" (neither whitespace,
    punctuation nor a CJK character). A character seen only at the start of words or alone (a
    "£", a "→") gets a piece the trainer would not have made: an unused vocabulary entry."""
    tokenizer = bert_wordpiece(None, lowercase, strip_accents)
    raw: set[str] = set()
    seen_ascii = b""  # the ASCII characters in `raw`: what bytes.translate deletes, at memcpy speed
    seen = np.zeros(0x110000, bool)  # the code points of the other texts
    for text in texts:
        if text.isascii():
            new = text.encode("ascii").translate(None, seen_ascii)
            if new:
                raw.update(new.decode("ascii"))
                seen_ascii = "".join(sorted(c for c in raw if c.isascii())).encode("ascii")
        else:
            seen[np.frombuffer(text.encode("utf-32-le", "surrogatepass"), "<u4")] = True
    raw.update(map(chr, np.flatnonzero(seen)))
    normalized = set().union(*(tokenizer.normalizer.normalize_str(c) for c in raw))
    continuing = set()
    for c in normalized:
        words = tokenizer.pre_tokenizer.pre_tokenize_str(tokenizer.normalizer.normalize_str(
            "a" + c))
        if [word for word, _ in words] == ["a" + c]:
            continuing.add(c)
    return sorted(CONTINUATION_PREFIX + c for c in continuing)


def _batches(texts: Sequence[str], size: int = 10_000) -> Iterable[list[str]]:
    """Lists of texts: the trainer works through a batch in parallel, with one crossing from
    Python."""
    for start in range(0, len(texts), size):
        yield list(texts[start:start + size])


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
    pieces = _continuation_pieces(texts, vocab_size, lowercase, strip_accents)
    trained = bert_wordpiece(None, lowercase, strip_accents)
    trained.train_from_iterator(
        progress.bar(_batches(texts), desc="vocabulary: words", unit="batch",
                     total=-(-len(texts) // 10_000)),
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
