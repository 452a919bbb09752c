"""Token classification (NER): every token -> dense -> logits [B, L, C], cross-entropy on the
first sub-word of each word only (the others carry encoding.IGNORE).

Training may pack several sentences into one row (data.pack_examples): each sentence's tags stay
under its own tokens (example_packing's token keys), so the loss, a sum over tagged tokens, is
the unpacked batch's. A sentence longer than a row is truncated (its last words tagged "O"),
or, in evaluation and prediction with data.long_inputs='slide', cut at word boundaries into
overlapping windows, each word tagged from the window whose centre is nearest to it
(bert_jax.data.finetuning.windows): every word gets a tag. CoNLL-2003. Metrics: entity-level
precision / recall / F1 (conlleval chunks) over each sentence once, overall and per entity type.
Predictions are written in CoNLL form: word, gold tag, predicted tag. Prediction on new input
reads CoNLL tokens or raw sentences (one per line, split_words).
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any, Mapping, Optional, Sequence

import jax.numpy as jnp
import numpy as np
from absl import logging

from bert_jax.data import example_packing, textfiles
from bert_jax.data.finetuning import encoding, readers, unlabelled
from bert_jax.model import families
from bert_jax.recipes.finetune import metrics
from bert_jax.recipes.finetune.kinds import TaskKind, register, window_stride
from bert_jax.recipes.finetune.losses import softmax_cross_entropy
from bert_jax.runtime import paths


@register
class TokenClassification(TaskKind):
    name = "token_classification"
    token_keys = ("labels",)
    token_outputs = ("logits",)
    packable = True  # logits per token: a packed row's tokens are scored where they sit
    packed_inputs = (example_packing.SEGMENT_IDS,)  # no pooling: no example_positions
    slides_long_inputs = True

    def read(self, path: str, config) -> list:
        return readers.read_conll(path, config.data.conll_tag_column, config.data.encoding)

    def describe_labels(self, train_examples: Sequence[Any], config) -> dict[str, Any]:
        return {"label_map": list(encoding.build_label_map(
            [tag for sentence in train_examples for tag in sentence.tags]))}

    def encode(self, tokenizer, examples, config, labels: Mapping[str, Any], source: str):
        return encoding.encode_tagged_sentences(tokenizer, examples, config.max_seq_len,
                                                labels["label_map"], source)

    def encode_eval(self, tokenizer, examples, config, labels, source):
        """encode's rows; with data.long_inputs='slide', windows (encode_tagged_sentences
        with a stride: example_index [F], word_index naming each word in one row only)."""
        return encoding.encode_tagged_sentences(tokenizer, examples, config.max_seq_len,
                                                labels["label_map"], source,
                                                stride=window_stride(config))

    def make_model(self, cfg, labels):
        return families.of(cfg).token_classifier(cfg, len(labels["label_map"]))

    def no_token_value(self, key: str) -> Any:
        return encoding.IGNORE  # labels: no tag

    def loss(self, outputs, batch, example_weights):
        """Cross-entropy summed over tagged tokens (outputs [B, L, C]), each weighted by its
        example's weight; a packed batch (outputs [R, L, C]) has labels [R, L] under their
        tokens and each token's example weight in token_weights [R, L]."""
        labels = batch["labels"]  # [B, L], IGNORE where a position carries no tag
        weights = (batch[example_packing.TOKEN_WEIGHTS] if example_packing.TOKEN_WEIGHTS in batch
                   else example_weights[:, None])
        tagged = (labels != encoding.IGNORE).astype(jnp.float32) * weights
        safe_labels = jnp.where(labels == encoding.IGNORE, 0, labels)
        return softmax_cross_entropy(outputs, safe_labels, tagged, "token_accuracy")

    def score(self, data, outputs, config):
        examples = data.eval_examples
        tags = encoding.tags_from_token_predictions(
            outputs["logits"].argmax(-1), data.eval_features["word_index"],
            [len(s.words) for s in examples], data.labels["label_map"],
            example_index=data.eval_features.get("example_index"))
        result = metrics.entity_scores(tags, [list(s.tags) for s in examples])
        return result, list(zip(examples, tags))

    def write(self, records, directory: str) -> list[str]:
        path = os.path.join(directory, "predictions.conll")  # directory: local or gs://
        paths.write_text_atomically(path, "".join(
            "".join(f"{word} {gold} {predicted}\n"
                    for word, gold, predicted in zip(sentence.words, sentence.tags, tags)) + "\n"
            for sentence, tags in records))
        return [path]

    def head_outputs(self, labels, seq_len: int) -> int:
        return len(labels["label_map"]) * seq_len

    # ----- prediction on unlabelled input ---------------------------------------------------

    def read_unlabelled(self, path: str, config, file_format: str) -> unlabelled.Rows:
        """Sentences of a CoNLL file of tokens (one per line, first column; blank line between
        sentences; tag columns, if any, ignored), or of raw text (one sentence per line,
        always: split into words by `split_words`, one record per line; a blank line before
        the file's last text is a bad row, `read_raw_sentences`). CoNLL only
        when asked: --format=conll, a .conll/.conllu file with format auto, or a file that
        cannot be raw text (`conll_only`); any other file is raw text, and the log says which
        was chosen. A file read as CoNLL that holds raw text is refused, never read as tokens."""
        if file_format not in ("auto", "conll", "lines"):
            raise readers.DataError(
                f"{path}: token classification reads CoNLL files (--format=conll: a token per "
                "line, blank lines between sentences) or raw text (--format=lines: a sentence "
                f"per line), not {file_format!r}")
        encoding = config.data.encoding
        if file_format == "auto":
            textfiles.check_file(path)
            by_name = os.path.splitext(path)[1].lower() in CONLL_EXTENSIONS
            why = "its extension" if by_name else conll_only(path, encoding)
            if why is None:
                logging.info("%s: read as raw text, one sentence per line (--format=conll reads "
                             "a token per line)", path)
                return read_raw_sentences(path, encoding)
            logging.info("%s: read as CoNLL, a token per line (%s; --format=lines reads a "
                         "sentence per line)", path, why)
            file_format = "conll"
        if file_format == "conll":
            textfiles.check_file(path)
            raw = raw_text_line(path, encoding)
            if raw is not None:
                raise readers.DataError(
                    f"{path}:{raw[0]}: {raw[1][:60]!r} is several words without a tag column, "
                    "so the file is not CoNLL (a token per line, blank lines between "
                    "sentences): pass --format=lines to tag one sentence per line")
            return unlabelled.read_unlabelled_conll(path, encoding)
        return read_raw_sentences(path, encoding)

    def encode_unlabelled(self, tokenizer, examples, config, labels, source):
        """Model inputs and word_index [N, L], and how many sentences lost words to
        max_seq_len (those words are tagged "O", as in evaluation); with
        data.long_inputs='slide', windows [F, L] as in encode_eval, and how many sentences
        took more than one."""
        placeholder = labels["label_map"][0]  # encoding wants tags; prediction ignores them
        tagged = [readers.TaggedSentence(s.words, (placeholder,) * len(s.words))
                  for s in examples]
        stride = window_stride(config)
        features = encoding.encode_tagged_sentences(tokenizer, tagged, config.max_seq_len,
                                                    labels["label_map"], source, stride=stride)
        del features["labels"]
        if stride is not None:
            windowed = int(np.sum(np.bincount(features["example_index"]) > 1))
            return features, {f"sentences longer than max_seq_len={config.max_seq_len} "
                              "tokens, tagged in sliding windows": windowed}
        placed = np.sum(features["word_index"] >= 0, axis=1)
        cut = int(np.sum(placed < np.asarray([len(s.words) for s in examples])))
        return features, {f"sentences truncated to max_seq_len={config.max_seq_len} tokens "
                          "(their last words tagged O)": cut}

    def prediction_records(self, examples, features, outputs, labels, config):
        """{("text": the raw line), "words", "prediction": a tag per word} per sentence;
        logits [N, L, C] (windows: [F, L, C]), read at first sub-words."""
        tags = encoding.tags_from_token_predictions(
            outputs["logits"].argmax(-1), features["word_index"],
            [len(s.words) for s in examples], labels["label_map"],
            example_index=features.get("example_index"))
        return [{**({"text": s.text} if isinstance(s, RawSentence) else {}),
                 "words": list(s.words), "prediction": t} for s, t in zip(examples, tags)]


# Words as CoNLL sets them: a run of letters and digits, or one punctuation mark or symbol
# (BERT's basic tokenizer splits the same way, so no word of a raw sentence would straddle
# two of the training data's tokens).
_WORD = re.compile(r"[^\W_]+|[^\s]", re.UNICODE)
# A tag column: O, or a chunk prefix and a type (B-PER, I-LOC, E-ORG, S-MISC, B_PER).
_TAG = re.compile(r"^(O|[BIESLU][-_]\S+)$")


def split_words(text: str) -> list[str]:
    """The words of a raw sentence: runs of letters/digits, and each other non-space character
    on its own ("Paris, France!" -> Paris , France !)."""
    return _WORD.findall(text)


def raw_text_line(path: str, encoding: str) -> Optional[tuple[int, str]]:
    """(line number, line) of the first line that cannot be a CoNLL token line, or None when
    every line can: a CoNLL line is one token, or a token followed by columns whose last is a
    tag (O, B-X, I-X, ...); a line of several words whose last is no tag is raw text."""
    for number, line in textfiles.lines(path, encoding):
        columns = line.split()
        if len(columns) > 1 and not _TAG.match(columns[-1]):
            return number, line.strip()
    return None


CONLL_EXTENSIONS = (".conll", ".conllu")


def conll_only(path: str, encoding: str) -> Optional[str]:
    """Why the file cannot be raw text (a reason), or None when it can: a -DOCSTART- line, or
    sentences apart by blank lines whose every line is a token and tag columns (as many on
    every line, the last a tag: O, B-X, ...). One-word lines, or lines that end in a tag-like
    word, are raw text: one sentence each."""
    widths, blank_between, seen = set(), False, False
    pending_blank = False
    for _number, line in textfiles.lines(path, encoding):
        columns = line.split()
        if not columns:
            pending_blank = seen
            continue
        if columns[0] == "-DOCSTART-":
            return "it has a -DOCSTART- line"
        if len(columns) < 2 or not _TAG.match(columns[-1]):
            return None
        widths.add(len(columns))
        blank_between = blank_between or pending_blank
        seen, pending_blank = True, False
    if len(widths) == 1 and blank_between:
        return "every line is a token and its tag, sentences apart by blank lines"
    return None


def read_raw_sentences(path: str, encoding: str) -> unlabelled.Rows:
    """One TaggedSentence (no tags) per line, its words by split_words; the line's text is
    kept for the prediction record. A line is a row, always (`unlabelled.text_lines`): a blank
    line with text after it, or a line without a word (only invisible characters), is a bad
    row, named; blank lines that end the file are none. Every input line up to the last with
    text is a record or a named fault, and record i is line i + 1."""
    textfiles.check_file(path)
    rows = unlabelled.Rows([], [], [], [])
    for number, line, fault in unlabelled.text_lines(path, encoding):
        words = split_words(line) if fault is None else []
        if not words:
            rows.bad.append(fault or f"{path}:{number}: no word to tag in {line.strip()[:40]!r}")
            continue
        rows.examples.append(RawSentence(tuple(words), (), line.strip()))
        rows.indices.append(len(rows.indices) + len(rows.bad))
        rows.lines.append(number)
    return rows


@dataclasses.dataclass(frozen=True)
class RawSentence(readers.TaggedSentence):
    """A sentence read from raw text: its words (split_words), no tags, and the line itself."""

    text: str = ""
