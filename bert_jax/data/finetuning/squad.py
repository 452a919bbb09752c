"""Span QA (SQuAD 1.1 / 2.0): sliding windows over long contexts, and answer decoding.

Windows. A context longer than fits beside the question is cut into windows of context tokens,
each starting `doc_stride` tokens after the previous one, so every token appears in at least one
window, with some context on both sides in most. A window is the row

    [CLS] question [SEP] context tokens of the window [SEP]     (token types 0 ... 0 1 ... 1)

(RoBERTa: <s> question </s> </s> context </s>, the tokenizer's pair separator.)

and keeps, for every position, the character span of its token in the context (-1 outside the
context), and whether this window is the token's *max-context* window: the one where the token
has the most context on its smaller side (the rule of the BERT paper's SQuAD code), so that a
token seen in two windows is only used as an answer boundary from the better one.

Training targets. start_positions / end_positions are the first and last token of the (first)
answer when it lies inside the window; otherwise, and for unanswerable questions, both point at
[CLS] (position 0), which is how the model learns "no answer here".

Decoding (`decode_answers`). For each question, over all its windows: the n-best start and end
positions by logit, kept when both are context tokens in their max-context window, start <= end
and the span is at most `max_answer_length` tokens; the score of a span is start + end logit,
and the text is the context between the characters of its first and last token. With SQuAD 2.0
(`allow_no_answer`) the null score is the lowest [CLS] start + end logit over the windows, and
the answer is empty when null score - best span score > `no_answer_threshold`.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Optional, Sequence

import numpy as np

from bert_jax.data.finetuning.readers import DataError, QAExample
from bert_jax.data.finetuning.windows import window_starts
from bert_jax.data.tokenizers.subword import WordPieceTokenizer


@dataclasses.dataclass(frozen=True)
class WindowConfig:
    """How a question and a long context are cut into rows: a run's max_seq_len,
    squad.doc_stride and squad.max_query_len (bert_jax/config/run.py holds their defaults)."""

    max_seq_len: int
    doc_stride: int
    max_query_len: int

    def __post_init__(self):
        if self.doc_stride <= 0:
            raise DataError(f"doc_stride={self.doc_stride} must be positive")
        if self.max_seq_len - self.max_query_len - 3 < 1:
            raise DataError(f"max_seq_len={self.max_seq_len} leaves no room for context after a "
                            f"question of up to max_query_len={self.max_query_len} tokens")


def _answer_token_span(offsets: Sequence[tuple[int, int]], start_char: int,
                       end_char: int) -> Optional[tuple[int, int]]:
    """First and last context token overlapping the characters [start_char, end_char)."""
    tokens = [i for i, (s, e) in enumerate(offsets) if s < end_char and e > start_char]
    return (tokens[0], tokens[-1]) if tokens else None


def encode_qa_examples(tokenizer: WordPieceTokenizer, examples: Sequence[QAExample],
                       config: WindowConfig) -> dict[str, np.ndarray]:
    """Window rows of all examples, [F, L] unless noted:

    input_ids, token_type_ids, attention_mask int32; start_positions, end_positions [F] int32;
    example_index [F] int32 (the example a window belongs to); offsets [F, L, 2] int32 (character
    span of each context token, -1 elsewhere); max_context [F, L] bool.
    """
    L = config.max_seq_len
    questions = tokenizer.tokenizer.encode_batch([e.question for e in examples],
                                                 add_special_tokens=False)
    contexts = tokenizer.tokenizer.encode_batch([e.context for e in examples],
                                                add_special_tokens=False)
    rows: dict[str, list] = {k: [] for k in ("input_ids", "token_type_ids", "start_positions",
                                             "end_positions", "example_index", "offsets",
                                             "max_context")}
    middle = list(tokenizer.pair_separator_ids)  # [SEP] (BERT), </s> </s> (RoBERTa)
    if L - config.max_query_len - 2 - len(middle) < 1:
        raise DataError(f"max_seq_len={L} leaves no room for context beside a question of up to "
                        f"max_query_len={config.max_query_len} tokens and "
                        f"{2 + len(middle)} special tokens")
    for index, (example, question, context) in enumerate(zip(examples, questions, contexts)):
        question_ids = question.ids[:config.max_query_len]
        window = L - len(question_ids) - 2 - len(middle)
        offsets = context.offsets
        answer_span = None
        if example.answers and not example.is_impossible:
            answer = example.answers[0]
            answer_span = _answer_token_span(offsets, answer.start, answer.start + len(answer.text))
            if answer_span is None:
                raise DataError(f"question {example.id!r}: answer {answer.text!r} covers no token "
                                "of the context")
        starts = window_starts(len(context.ids), window, config.doc_stride)
        for start in starts:
            stop = min(start + window, len(context.ids))
            # position of the window's first token
            first_context = len(question_ids) + 1 + len(middle)
            ids = [tokenizer.cls_id, *question_ids, *middle, *context.ids[start:stop],
                   tokenizer.sep_id]
            types = [0] * first_context + [1] * (stop - start + 1)
            row_offsets = np.full((L, 2), -1, np.int32)
            row_max_context = np.zeros(L, bool)
            for token in range(start, stop):
                position = first_context + token - start
                row_offsets[position] = offsets[token]
                row_max_context[position] = _is_max_context(starts, window, len(context.ids),
                                                            start, token)
            start_position = end_position = 0
            if answer_span is not None and start <= answer_span[0] and answer_span[1] < stop:
                start_position = first_context + answer_span[0] - start
                end_position = first_context + answer_span[1] - start
            rows["input_ids"].append(ids)
            rows["token_type_ids"].append(types)
            rows["start_positions"].append(start_position)
            rows["end_positions"].append(end_position)
            rows["example_index"].append(index)
            rows["offsets"].append(row_offsets)
            rows["max_context"].append(row_max_context)
    lengths = [len(ids) for ids in rows["input_ids"]]
    input_ids = np.full((len(lengths), L), tokenizer.pad_id, np.int32)
    token_type_ids = np.zeros((len(lengths), L), np.int32)
    for i, (ids, types) in enumerate(zip(rows["input_ids"], rows["token_type_ids"])):
        input_ids[i, :len(ids)] = ids
        token_type_ids[i, :len(types)] = types
    return {
        "input_ids": input_ids,
        "token_type_ids": token_type_ids,
        "attention_mask": (np.arange(L)[None, :] < np.asarray(lengths)[:, None]).astype(np.int32),
        "start_positions": np.asarray(rows["start_positions"], np.int32),
        "end_positions": np.asarray(rows["end_positions"], np.int32),
        "example_index": np.asarray(rows["example_index"], np.int32),
        "offsets": np.stack(rows["offsets"]) if rows["offsets"] else np.zeros((0, L, 2), np.int32),
        "max_context": np.stack(rows["max_context"]) if rows["max_context"] else
        np.zeros((0, L), bool),
    }


def _is_max_context(starts: Sequence[int], window: int, num_tokens: int, this_start: int,
                    token: int) -> bool:
    """Is the window at `this_start` the one giving `token` the most context on its smaller side?

    Score = min(tokens left of it, tokens right of it) + 0.01 * window length; the first window
    with the best score wins (ties between equal windows go to the earlier one).
    """
    best_score, best_start = None, None
    for start in starts:
        stop = min(start + window, num_tokens)
        if not start <= token < stop:
            continue
        score = min(token - start, stop - 1 - token) + 0.01 * (stop - start)
        if best_score is None or score > best_score:
            best_score, best_start = score, start
    return best_start == this_start


@dataclasses.dataclass(frozen=True)
class Prediction:
    text: str  # "" for no answer
    score: float  # start + end logit of the chosen span (the null score for no answer)
    null_score: float  # lowest [CLS] start + end logit over the windows
    best_span_score: float  # best non-null span's score (-inf if none was valid)
    nbest: tuple[tuple[str, float], ...]  # (text, score), best first


def decode_answers(examples: Sequence[QAExample], features: Mapping[str, np.ndarray],
                   start_logits: np.ndarray, end_logits: np.ndarray, n_best: int = 20,
                   max_answer_length: int = 30, allow_no_answer: bool = False,
                   no_answer_threshold: float = 0.0) -> dict[str, Prediction]:
    """Question id -> Prediction from the windows' logits (see the module docstring).

    features: the output of `encode_qa_examples` (example_index, offsets, max_context);
    start_logits, end_logits: [F, L] for the same windows, in the same order.
    """
    windows_of: dict[int, list[int]] = {}
    for window, example in enumerate(features["example_index"]):
        windows_of.setdefault(int(example), []).append(window)
    predictions = {}
    for index, example in enumerate(examples):
        candidates: dict[tuple[int, int], float] = {}
        null_score = np.inf
        for window in windows_of.get(index, []):
            starts, ends = start_logits[window], end_logits[window]
            offsets, max_context = features["offsets"][window], features["max_context"][window]
            null_score = min(null_score, float(starts[0] + ends[0]))
            top_starts = np.argsort(-starts, kind="stable")[:n_best]
            top_ends = np.argsort(-ends, kind="stable")[:n_best]
            for s in top_starts:
                if offsets[s, 0] < 0 or not max_context[s]:
                    continue
                for e in top_ends:
                    if offsets[e, 0] < 0 or e < s or e - s + 1 > max_answer_length:
                        continue
                    span = (int(offsets[s, 0]), int(offsets[e, 1]))
                    score = float(starts[s] + ends[e])
                    if score > candidates.get(span, -np.inf):
                        candidates[span] = score
        ranked = sorted(candidates.items(), key=lambda item: -item[1])[:n_best]
        nbest = tuple((example.context[a:b], score) for (a, b), score in ranked)
        best_text, best_score = nbest[0] if nbest else ("", -np.inf)
        if allow_no_answer and (not nbest or null_score - best_score > no_answer_threshold):
            chosen_text, chosen_score = "", null_score
        else:
            chosen_text, chosen_score = best_text, best_score
        predictions[example.id] = Prediction(chosen_text, chosen_score, null_score, best_score,
                                             nbest)
    return predictions
