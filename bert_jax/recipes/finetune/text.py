"""What the kinds over one text (or a pair of texts) per example share: reading tables, JSONL
and fastText files, and [CLS] A [SEP] B [SEP] rows, with the head on the pooled output.

A text longer than a row is truncated to max_seq_len, or, in evaluation and prediction with
data.long_inputs='slide', read in windows [CLS] piece of the text [SEP] (single texts only):
every window is predicted, and the text's logits (regression: its score) are the mean of its
windows' (`example_logits`); the metrics and the records count each text once."""

from __future__ import annotations

import os
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from bert_jax.config.bert import BertConfig, ConfigError
from bert_jax.data import textfiles
from bert_jax.data.finetuning import encoding, readers, unlabelled, windows
from bert_jax.model import families
from bert_jax.recipes.finetune.kinds import TaskKind, window_stride


class TextTask(TaskKind):
    """Base of classification, regression and multi-label classification."""

    regression = False  # labels are numbers, not class names
    list_labels = False  # a JSON list of class names is a label (multi-label classification)
    packable = True  # a pooled output per example: BertForSequenceClassification packs
    slides_long_inputs = True

    def read(self, path: str, config) -> list:
        """The file's examples; a file that does not read as config.data.format says which
        config key chose the format (a DataError)."""
        data = config.data
        try:
            return readers.read_text_examples(
                path, data.format, data.text_column, data.label_column,
                data.text_pair_column or None, regression=self.regression,
                encoding=data.encoding, tsv_quoting=data.tsv_quoting,
                list_labels=self.list_labels)
        except readers.DataError as e:
            raise readers.DataError(f"{e} ({format_hint(path, data.format)})") from None

    def encode_inputs(self, tokenizer, examples: Sequence[readers.TextExample], config,
                      source: str) -> dict[str, np.ndarray]:
        """input_ids, token_type_ids, attention_mask [N, max_seq_len] (labels left out)."""
        return encoding.encode_text_examples(tokenizer, examples, config.max_seq_len, None,
                                             source, with_labels=False)

    def encode_eval(self, tokenizer, examples, config, labels, source):
        """encode's features; with data.long_inputs='slide', the model inputs are windows
        [F, L] with example_index [F], the targets still one per example."""
        features = self.encode(tokenizer, examples, config, labels, source)
        stride = self.stride(config, examples, source)
        if stride is None:
            return features
        return {**features, **encoding.encode_text_windows(tokenizer, examples,
                                                           config.max_seq_len, stride)}

    @staticmethod
    def stride(config, examples: Sequence[readers.TextExample], source: str) -> Optional[int]:
        """kinds.window_stride; sliding over text pairs is refused (a ConfigError)."""
        stride = window_stride(config)
        if stride is not None and any(e.text_pair is not None for e in examples):
            raise ConfigError(f"config.data.long_inputs='slide' reads single texts, but {source} "
                              "holds text pairs: set data.long_inputs to 'truncate'")
        return stride

    @staticmethod
    def example_logits(outputs: Mapping[str, np.ndarray], features: Mapping[str, np.ndarray],
                       num_examples: int) -> np.ndarray:
        """outputs["logits"] of the rows [F, C] -> one per example [N, C]: the mean over each
        example's windows (features' example_index), or the rows themselves without windows."""
        if "example_index" not in features:
            return outputs["logits"]
        return windows.mean_by_example(outputs["logits"], features["example_index"],
                                       num_examples)

    def make_model(self, cfg: BertConfig, labels: Mapping[str, Any]):
        """The sequence classifier of cfg's family (bert_jax.model.families)."""
        return families.of(cfg).sequence_classifier(cfg, self.num_outputs(labels))

    @staticmethod
    def record(index: int, example: readers.TextExample, **fields) -> dict[str, Any]:
        """A prediction record: the example as read (the fields predict.py writes, `input_fields`,
        and the gold "label"), then what the kind adds."""
        return {"index": index, **TextTask.input_fields(example), "label": example.label,
                **fields}

    # ----- prediction on unlabelled input ---------------------------------------------------

    def read_unlabelled(self, path: str, config, file_format: str) -> unlabelled.Rows:
        """Texts (and pairs, when the run had config.data.text_pair_column) of csv | tsv | jsonl
        | fasttext | lines, or auto by extension; a label column may be absent."""
        data = config.data
        return unlabelled.read_unlabelled_text(
            path, file_format, data.text_column, data.text_pair_column or None, data.encoding,
            data.tsv_quoting)

    def encode_unlabelled(self, tokenizer, examples, config, labels, source):
        """Model inputs [N, max_seq_len], and how many examples were truncated to fit; with
        data.long_inputs='slide', windows [F, max_seq_len] with example_index [F], and how
        many examples took more than one."""
        stride = self.stride(config, examples, source)
        if stride is not None:
            features = encoding.encode_text_windows(tokenizer, examples, config.max_seq_len,
                                                    stride)
            windowed = int(np.sum(np.bincount(features["example_index"]) > 1))
            return features, {f"inputs longer than max_seq_len={config.max_seq_len} tokens, "
                              "read in sliding windows": windowed}
        features = self.encode_inputs(tokenizer, examples, config, source)
        cut = truncated_examples(tokenizer, examples, features["attention_mask"])
        return features, {f"inputs truncated to max_seq_len={config.max_seq_len} tokens": cut}

    @staticmethod
    def input_fields(example: readers.TextExample) -> dict[str, Any]:
        """{"text"} (and "text_pair" for a pair): the start of a prediction record."""
        fields = {"text": example.text}
        if example.text_pair is not None:
            fields["text_pair"] = example.text_pair
        return fields


def format_hint(path: str, file_format: str) -> str:
    """Which config key read `path` as what, and how to read it otherwise (for read errors)."""
    others = "csv, tsv, jsonl, fasttext, csv_no_header or tsv_no_header"
    if file_format != "auto":
        return (f"data.format={file_format!r}; set --config.data.format to {others}, or auto "
                "(by the extension), to read it otherwise")
    try:
        chosen = textfiles.format_of(path, "auto")
    except textfiles.DataError:
        return f"data.format='auto'; set --config.data.format to {others}"
    return (f"data.format='auto' reads {os.path.splitext(path)[1]!r} files as {chosen}; set "
            f"--config.data.format to {others} to read it otherwise")


def truncated_examples(tokenizer, examples: Sequence[readers.TextExample],
                       attention_mask: np.ndarray) -> int:
    """How many examples did not fit their row ([CLS] A [SEP] (B [SEP]) longer than the row).

    attention_mask: [N, L] of the encoded rows; only full rows are tokenized again to tell."""
    full = np.nonzero(attention_mask[:, -1] == 1)[0]
    if not len(full):
        return 0
    lengths = np.asarray([len(ids) + 2 for ids in
                          tokenizer.encode_batch([examples[i].text for i in full])])
    if examples[full[0]].text_pair is not None:
        lengths += np.asarray([len(ids) + 1 for ids in
                               tokenizer.encode_batch([examples[i].text_pair for i in full])])
    return int(np.sum(lengths > attention_mask.shape[1]))
