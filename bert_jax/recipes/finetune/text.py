"""What the kinds over one text (or a pair of texts) per example share: reading tables, JSONL
and fastText files, and [CLS] A [SEP] B [SEP] rows, with the head on the pooled output."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from bert_jax.config import BertConfig
from bert_jax.data import encoding, readers
from bert_jax.model import BertForSequenceClassification
from bert_jax.recipes.finetune.kinds import TaskKind


class TextTask(TaskKind):
    """Base of classification, regression and multi-label classification."""

    regression = False  # labels are numbers, not class names

    def read(self, path: str, config) -> list:
        data = config.data
        return readers.read_text_examples(
            path, data.format, data.text_column, data.label_column,
            data.text_pair_column or None, regression=self.regression, encoding=data.encoding,
            tsv_quoting=data.tsv_quoting)

    def encode_inputs(self, tokenizer, examples: Sequence[readers.TextExample], config,
                      source: str) -> dict[str, np.ndarray]:
        """input_ids, token_type_ids, attention_mask [N, max_seq_len] (labels left out)."""
        return encoding.encode_text_examples(tokenizer, examples, config.max_seq_len, None,
                                             source, with_labels=False)

    def make_model(self, cfg: BertConfig, labels: Mapping[str, Any]):
        return BertForSequenceClassification(cfg, self.num_outputs(labels))

    @staticmethod
    def record(index: int, example: readers.TextExample, **fields) -> dict[str, Any]:
        """A prediction record: the example as read, then what the kind adds."""
        return {"index": index, "text": example.text, "text_pair": example.text_pair,
                "label": example.label, **fields}
