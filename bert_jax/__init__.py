"""bert_jax: BERT encoders in JAX/Flax, for pre-training and fine-tuning on TPUs and GPUs.

`from bert_jax import BertConfig, BertModel, ...` is the public spelling. The model classes are
imported on first use (PEP 562), so that importing any part of the package (a corpus reader in a
preparation worker process, say) does not load jax and flax: 190 MB of memory and a second of
start-up in each such process.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from bert_jax.config.bert import BertConfig, ConfigError

if TYPE_CHECKING:
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

_MODEL_NAMES = frozenset(__all__) - {"BertConfig", "ConfigError"}


def __getattr__(name: str):
    if name in _MODEL_NAMES:
        return getattr(importlib.import_module("bert_jax.model"), name)
    raise AttributeError(f"module 'bert_jax' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
