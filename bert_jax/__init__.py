"""bert_jax: BERT encoders in JAX/Flax, for pre-training and fine-tuning on TPUs and GPUs."""

from bert_jax.config.bert import BertConfig, ConfigError
from bert_jax.model import (
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertModel,
    BertOutput,
)

__all__ = ["BertConfig", "ConfigError", "BertModel", "BertOutput", "BertForPreTraining",
           "BertForQuestionAnswering", "BertForSequenceClassification",
           "BertForTokenClassification"]
__version__ = "0.1.0"
