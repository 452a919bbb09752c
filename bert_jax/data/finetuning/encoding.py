"""Fine-tuning examples -> fixed-shape numpy rows for the model, and predictions back to tags.

Rows are [CLS] A [SEP] (B [SEP]) with token types 0/1, padded to max_seq_len with
attention_mask 0:

    classification / regression: input_ids, token_type_ids, attention_mask [N, L] int32,
                                 labels [N] int32 (class index) or float32 (regression)
    token classification:        the same plus labels [N, L] int32 (the tag of a word on its
                                 first sub-word, IGNORE = -100 everywhere else) and
                                 word_index [N, L] int32 (the word a first sub-word starts, -1)

An input longer than a row is truncated, or, given a stride, read in sliding windows
(bert_jax.data.finetuning.windows): then a row is a window, F rows in all, and example_index [F]
int32 names the example of each (`encode_text_windows`, `encode_tagged_sentences` with a stride).

Class indices come from a label map: the sorted distinct training labels. Span-QA windows and
answer decoding are in `bert_jax.data.finetuning.squad`.
"""

from __future__ import annotations

from collections import Counter
from typing import Optional, Sequence

import numpy as np

from bert_jax.data.finetuning import windows
from bert_jax.data.finetuning.readers import DataError, TaggedSentence, TextExample
from bert_jax.data.tokenizers.subword import WordPieceTokenizer

IGNORE = -100  # label of sub-words that carry no tag (not the first of their word), and padding


# ----- labels ------------------------------------------------------------------------------------

def build_label_map(labels: Sequence[str]) -> tuple[str, ...]:
    """Sorted distinct label names; the position of a name is its class index."""
    return tuple(sorted(set(labels)))


def label_ids(labels: Sequence[str], label_map: Sequence[str], source: str) -> np.ndarray:
    """Class indices of `labels`; a label absent from the (training) label map is an error."""
    index = {name: i for i, name in enumerate(label_map)}
    unknown = sorted(set(labels) - set(index))
    if unknown:
        raise DataError(f"{source}: label(s) {unknown} never seen in training; the training "
                        f"labels are {list(label_map)}")
    return np.asarray([index[name] for name in labels], np.int32)


def majority_label(labels: Sequence[str]) -> str:
    """The most frequent label (ties: the first in sorted order)."""
    counts = Counter(labels)
    return min(counts, key=lambda name: (-counts[name], name))


# ----- features ---------------------------------------------------------------------------------

def _truncate_pair(a: list[int], b: list[int], budget: int) -> tuple[list[int], list[int]]:
    """Drop tokens from the end of the longer sequence until both fit in `budget` together."""
    a, b = list(a), list(b)
    while len(a) + len(b) > budget:
        (a if len(a) >= len(b) else b).pop()
    return a, b


def pack_pair(tokenizer: WordPieceTokenizer, ids_a: Sequence[int], ids_b: Optional[Sequence[int]],
              max_seq_len: int) -> tuple[list[int], list[int]]:
    """[CLS] A [SEP] (B [SEP]) truncated longest-first to max_seq_len: (ids, token types).
    Between A and B, the tokenizer's pair separator: [SEP] (BERT), </s> </s> (RoBERTa)."""
    if ids_b is None:
        a = list(ids_a)[:max_seq_len - 2]
        return [tokenizer.cls_id, *a, tokenizer.sep_id], [0] * (len(a) + 2)
    middle = list(tokenizer.pair_separator_ids)
    a, b = _truncate_pair(ids_a, ids_b, max_seq_len - 2 - len(middle))
    ids = [tokenizer.cls_id, *a, *middle, *b, tokenizer.sep_id]
    return ids, [0] * (len(a) + 1 + len(middle)) + [1] * (len(b) + 1)


def _pad_sequences(sequences: Sequence[Sequence[int]], length: int, value: int) -> np.ndarray:
    """[N, length] int32: each sequence at the start of its row, `value` after it."""
    out = np.full((len(sequences), length), value, np.int32)
    for i, sequence in enumerate(sequences):
        out[i, :len(sequence)] = sequence
    return out


def encode_text_examples(tokenizer: WordPieceTokenizer, examples: Sequence[TextExample],
                         max_seq_len: int, label_map: Optional[Sequence[str]],
                         source: str = "examples", with_labels: bool = True
                         ) -> dict[str, np.ndarray]:
    """Rows for sequence (or pair) classification, or regression when label_map is None.

    with_labels=False: the model inputs only (a kind that encodes its targets itself).
    """
    if max_seq_len < 4:
        raise DataError(f"max_seq_len={max_seq_len} is too short for [CLS] A [SEP] B [SEP]")
    ids_a = tokenizer.encode_batch([e.text for e in examples])
    has_pairs = [e.text_pair is not None for e in examples]
    if any(has_pairs) and not all(has_pairs):
        raise DataError(f"{source}: some examples have a second text and some do not")
    ids_b = (tokenizer.encode_batch([e.text_pair for e in examples]) if all(has_pairs) and examples
             else [None] * len(examples))
    packed = [pack_pair(tokenizer, a, b, max_seq_len) for a, b in zip(ids_a, ids_b)]
    features = {
        "input_ids": _pad_sequences([ids for ids, _ in packed], max_seq_len, tokenizer.pad_id),
        "token_type_ids": _pad_sequences([types for _, types in packed], max_seq_len, 0),
        "attention_mask": _pad_sequences([[1] * len(ids) for ids, _ in packed], max_seq_len, 0),
    }
    if not with_labels:
        return features
    labels = [e.label for e in examples]
    if label_map is None:
        features["labels"] = np.asarray(labels, np.float32)
    else:
        features["labels"] = label_ids(labels, label_map, source)
    return features


def encode_text_windows(tokenizer: WordPieceTokenizer, examples: Sequence[TextExample],
                        max_seq_len: int, stride: int) -> dict[str, np.ndarray]:
    """Rows [CLS] window [SEP] of single texts, windows of max_seq_len - 2 tokens `stride`
    apart (windows.token_spans): input_ids, token_type_ids, attention_mask [F, L] int32 and
    example_index [F] int32. A text that fits gives one row, encode_text_examples' own."""
    if any(e.text_pair is not None for e in examples):
        raise DataError("sliding windows read single texts, not pairs")
    rows, example_index = [], []
    for index, ids in enumerate(tokenizer.encode_batch([e.text for e in examples])):
        for start, stop in windows.token_spans(len(ids), max_seq_len - 2, stride):
            rows.append([tokenizer.cls_id, *ids[start:stop], tokenizer.sep_id])
            example_index.append(index)
    return {"input_ids": _pad_sequences(rows, max_seq_len, tokenizer.pad_id),
            "token_type_ids": _pad_sequences([[0] * len(row) for row in rows], max_seq_len, 0),
            "attention_mask": _pad_sequences([[1] * len(row) for row in rows], max_seq_len, 0),
            "example_index": np.asarray(example_index, np.int32)}


def _word_pieces(tokenizer: WordPieceTokenizer, sentences: Sequence[TaggedSentence]
                 ) -> list[list[list[int]]]:
    """The sub-word ids of each word of each sentence; a word the tokenizer turns into nothing
    (e.g. a lone control character) is [UNK]."""
    encodings = tokenizer.words_tokenizer.encode_batch(
        [list(s.words) for s in sentences], is_pretokenized=True, add_special_tokens=False)
    out = []
    for sentence, encoding in zip(sentences, encodings):
        pieces: list[list[int]] = [[] for _ in sentence.words]
        for token_id, word in zip(encoding.ids, encoding.word_ids):
            if word is not None:
                pieces[word].append(token_id)
        out.append([word_pieces or [tokenizer.unk_id] for word_pieces in pieces])
    return out


def _fitting_words(lengths: Sequence[int], budget: int) -> int:
    """How many words from the first fit in `budget` sub-word tokens."""
    return int(np.searchsorted(np.cumsum(lengths), budget, side="right"))


def encode_tagged_sentences(tokenizer: WordPieceTokenizer, sentences: Sequence[TaggedSentence],
                            max_seq_len: int, label_map: Sequence[str],
                            source: str = "sentences", stride: Optional[int] = None
                            ) -> dict[str, np.ndarray]:
    """Rows for token classification: each word's tag on its first sub-word, IGNORE elsewhere.

    A word the tokenizer turns into nothing (e.g. a lone control character) becomes [UNK], so
    every word has a position. Without a stride, words past max_seq_len - 2 sub-words are cut
    (and will be predicted as "O" when decoding; see `tags_from_token_predictions`). With one,
    a sentence is read in windows of whole words (windows.word_spans, `stride` tokens apart;
    a sentence that fits is one row, the same as without): the rows add example_index [F], a
    window's labels tag all its words, and its word_index names only the words read from it
    (windows.nearest_windows), so every word is named in exactly one row.
    """
    for number, sentence in enumerate(sentences):
        if len(sentence.words) != len(sentence.tags):
            raise DataError(f"{source}: sentence {number} has {len(sentence.words)} words but "
                            f"{len(sentence.tags)} tags")
    all_tags = [tag for s in sentences for tag in s.tags]
    label_ids(all_tags, label_map, source)  # fails on a tag never seen in training
    tag_index = {name: i for i, name in enumerate(label_map)}
    budget = max_seq_len - 2
    rows: dict[str, list] = {"input_ids": [], "labels": [], "word_index": [],
                             "example_index": []}
    for index, (sentence, pieces) in enumerate(zip(sentences, _word_pieces(tokenizer,
                                                                             sentences))):
        lengths = [len(p) for p in pieces]
        if stride is None:
            spans = [(0, _fitting_words(lengths, budget))]
            chosen = np.zeros(len(pieces), np.int64)
        else:
            spans = windows.word_spans(lengths, budget, stride)
            chosen = windows.nearest_windows(lengths, budget, spans)
        for k, (first, stop) in enumerate(spans):
            ids, tags, words = [tokenizer.cls_id], [IGNORE], [-1]
            for word in range(first, stop):
                word_pieces = pieces[word][:budget]
                ids += word_pieces
                tags += [tag_index[sentence.tags[word]]] + [IGNORE] * (len(word_pieces) - 1)
                words += [word if chosen[word] == k else -1] + [-1] * (len(word_pieces) - 1)
            rows["input_ids"].append(ids + [tokenizer.sep_id])
            rows["labels"].append(tags + [IGNORE])
            rows["word_index"].append(words + [-1])
            rows["example_index"].append(index)
    features = {
        "input_ids": _pad_sequences(rows["input_ids"], max_seq_len, tokenizer.pad_id),
        "token_type_ids": _pad_sequences([[0] * len(r) for r in rows["input_ids"]],
                                         max_seq_len, 0),
        "attention_mask": _pad_sequences([[1] * len(r) for r in rows["input_ids"]],
                                         max_seq_len, 0),
        "labels": _pad_sequences(rows["labels"], max_seq_len, IGNORE),
        "word_index": _pad_sequences(rows["word_index"], max_seq_len, -1),
    }
    if stride is not None:
        features["example_index"] = np.asarray(rows["example_index"], np.int32)
    return features


def word_values(values: np.ndarray, word_index: np.ndarray, num_words: Sequence[int],
                example_index: Optional[np.ndarray] = None) -> list[list]:
    """Per-word values from per-token ones, read at the position that names each word.

    values [F, L, ...], word_index [F, L] (-1: no word); example_index [F]: the sentence of
    each row (None: row i is sentence i). A word no row names (cut by truncation) gets None.
    """
    out: list[list] = [[None] * count for count in num_words]
    rows = range(len(num_words)) if example_index is None else range(len(word_index))
    for row in rows:
        sentence = row if example_index is None else int(example_index[row])
        for position in np.nonzero(word_index[row] >= 0)[0]:
            out[sentence][word_index[row, position]] = values[row, position]
    return out


def tags_from_token_predictions(predicted: np.ndarray, word_index: np.ndarray,
                                num_words: Sequence[int], label_map: Sequence[str],
                                outside: str = "O",
                                example_index: Optional[np.ndarray] = None) -> list[list[str]]:
    """Per-word tags from per-token class indices, read at each word's first sub-word (in
    sliding windows: in the row whose word_index names it; see `word_values`).

    predicted, word_index: [F, L]. Words cut by truncation get `outside`.
    """
    return [[outside if p is None else label_map[p] for p in sentence]
            for sentence in word_values(predicted, word_index, num_words, example_index)]
