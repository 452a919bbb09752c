"""The fine-tuning recipe: task kinds behind one interface (kinds.py), one module per kind,
registered by importing it here.

    classification         pooled output -> logits [B, C], cross-entropy       (SST-2, MRPC)
    regression             pooled output -> score [B], squared error            (STS-B)
    multi_label            pooled output -> C sigmoids, binary cross-entropy    (topic tags)
    token_classification   every token -> logits [B, L, C], first sub-words     (CoNLL NER)
    span_qa                every token -> (start, end) logits [B, L]            (SQuAD 1.1/2.0)
    contrastive            each text -> a pooled unit vector, in-batch negatives (sentence
                           embeddings from (anchor, positive[, hard negative]) rows)
"""

from bert_jax.recipes.finetune import (
    classification,
    contrastive,
    multi_label,
    regression,
    span_qa,
    token_classification,
)
from bert_jax.recipes.finetune.recipe import evaluate, train_and_evaluate

__all__ = ["train_and_evaluate", "evaluate", "classification", "regression", "multi_label",
           "token_classification", "span_qa", "contrastive"]
