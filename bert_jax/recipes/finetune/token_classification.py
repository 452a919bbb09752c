"""Token classification (NER): every token -> dense -> logits [B, L, C], cross-entropy on the
first sub-word of each word only (the others carry encoding.IGNORE).

CoNLL-2003. Metric: entity-level precision / recall / F1 (conlleval chunks). Predictions are
written in CoNLL form: word, gold tag, predicted tag.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import jax.numpy as jnp
import numpy as np

from bert_jax import paths
from bert_jax.data import encoding, readers, unlabelled
from bert_jax.model import families
from bert_jax.recipes.finetune import metrics
from bert_jax.recipes.finetune.kinds import TaskKind, register
from bert_jax.recipes.finetune.losses import softmax_cross_entropy


@register
class TokenClassification(TaskKind):
    name = "token_classification"
    token_keys = ("labels",)
    token_outputs = ("logits",)

    def read(self, path: str, config) -> list:
        return readers.read_conll(path, config.data.conll_tag_column, config.data.encoding)

    def describe_labels(self, train_examples: Sequence[Any], config) -> dict[str, Any]:
        return {"label_map": list(encoding.build_label_map(
            [tag for sentence in train_examples for tag in sentence.tags]))}

    def encode(self, tokenizer, examples, config, labels: Mapping[str, Any], source: str):
        return encoding.encode_tagged_sentences(tokenizer, examples, config.max_seq_len,
                                                labels["label_map"], source)

    def make_model(self, cfg, labels):
        return families.of(cfg).token_classifier(cfg, len(labels["label_map"]))

    def loss(self, outputs, batch, example_weights):
        labels = batch["labels"]  # [B, L], IGNORE where a position carries no tag
        tagged = (labels != encoding.IGNORE).astype(jnp.float32) * example_weights[:, None]
        safe_labels = jnp.where(labels == encoding.IGNORE, 0, labels)
        return softmax_cross_entropy(outputs, safe_labels, tagged, "token_accuracy")

    def score(self, data, outputs, config):
        examples = data.eval_examples
        tags = encoding.tags_from_token_predictions(
            outputs["logits"].argmax(-1), data.eval_features["word_index"],
            [len(s.words) for s in examples], data.labels["label_map"])
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
        sentences); tag columns, if any, are ignored."""
        if file_format not in ("auto", "conll"):
            raise readers.DataError(f"{path}: token classification reads CoNLL files (format "
                                    f"auto or conll), not {file_format!r}")
        return unlabelled.read_unlabelled_conll(path, config.data.encoding)

    def encode_unlabelled(self, tokenizer, examples, config, labels, source):
        """Model inputs and word_index [N, L], and how many sentences lost words to
        max_seq_len (those words are tagged "O", as in evaluation)."""
        placeholder = labels["label_map"][0]  # encoding wants tags; prediction ignores them
        tagged = [readers.TaggedSentence(s.words, (placeholder,) * len(s.words))
                  for s in examples]
        features = encoding.encode_tagged_sentences(tokenizer, tagged, config.max_seq_len,
                                                    labels["label_map"], source)
        del features["labels"]
        placed = np.sum(features["word_index"] >= 0, axis=1)
        cut = int(np.sum(placed < np.asarray([len(s.words) for s in examples])))
        return features, {f"sentences truncated to max_seq_len={config.max_seq_len} tokens "
                          "(their last words tagged O)": cut}

    def prediction_records(self, examples, features, outputs, labels, config):
        """{"words", "tags"} per sentence; logits [N, L, C], read at first sub-words."""
        tags = encoding.tags_from_token_predictions(
            outputs["logits"].argmax(-1), features["word_index"],
            [len(s.words) for s in examples], labels["label_map"])
        return [{"words": list(s.words), "tags": t} for s, t in zip(examples, tags)]
