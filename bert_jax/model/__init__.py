"""The BERT model: layers, encoder and task heads."""

from bert_jax.model.encoder import BertModel, BertOutput
from bert_jax.model.heads import (
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    PreTrainingOutput,
)

__all__ = ["BertModel", "BertOutput", "BertForPreTraining", "BertForQuestionAnswering",
           "BertForSequenceClassification", "BertForTokenClassification", "PreTrainingOutput"]
