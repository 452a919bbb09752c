"""ModernBERT for span question answering: transformers' ModernBertForQuestionAnswering.

Every token -> the classifier head (ModernBERT's prediction head, then a dense layer to 2
outputs): (start_logits, end_logits), each [batch, seq]. The tree is the token classifier's,
{"bert": ..., "classifier": ...} with two labels, as transformers' class has the same tensors as
its token classifier (model., head., classifier.).
"""

from __future__ import annotations

import flax.linen as nn
from jax import Array

from bert_jax.config.modernbert import ModernBertConfig
from bert_jax.model.modernbert import ClassifierHead, ModernBertModel


class ModernBertForQuestionAnswering(nn.Module):
    """Span QA over ModernBERT: (start_logits, end_logits), each [batch, seq]; packed rows as
    the token classifier takes them (segment_ids)."""

    cfg: ModernBertConfig

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None,
                 deterministic: bool = True, *, segment_ids=None) -> tuple[Array, Array]:
        out = ModernBertModel(self.cfg, add_pooler=False, name="bert")(
            input_ids, token_type_ids, attention_mask, deterministic, segment_ids=segment_ids)
        logits = ClassifierHead(self.cfg, 2, name="classifier")(out.sequence_output,
                                                                deterministic)
        return logits[..., 0], logits[..., 1]
