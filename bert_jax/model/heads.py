"""Task heads on top of BertModel, and the composite models that pair them with the encoder.

Heads are small modules that take the encoder output. The masked-LM head gathers the masked
positions first, so its vocabulary-sized matmul costs [batch, max_predictions] rows, not
[batch, seq].
Every composite keeps the encoder under the name `bert`, as Hugging Face checkpoints do.
"""

from __future__ import annotations

from typing import Optional

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.config.bert import BertConfig
from bert_jax.model.activations import ACTIVATION_FNS
from bert_jax.model.encoder import BertModel
from bert_jax.model.layers import dense, layer_norm, zeros_init
from bert_jax.runtime.sharding import constrain

Array = jax.Array


def gather_positions(sequence: Array, positions: Array) -> Array:
    """sequence [batch, seq, hidden], positions [batch, num] int -> [batch, num, hidden]."""
    return jnp.take_along_axis(sequence, positions[:, :, None].astype(jnp.int32), axis=1)


class MaskedLMHead(nn.Module):
    """transform (dense, activation, LayerNorm), then the tied decoder (word embeddings^T + bias;
    no bias when cfg.use_bias is False).

    hidden: [batch, num, hidden] -> logits [batch, num, vocab]
    """

    cfg: BertConfig

    @nn.compact
    def __call__(self, hidden: Array, bert: BertModel) -> Array:
        cfg = self.cfg
        h = dense(cfg, cfg.hidden_size, ("embed", None), "transform")(hidden)
        h = layer_norm(cfg, "transform_layer_norm")(ACTIVATION_FNS[cfg.hidden_act](h))
        logits = constrain(bert.attend(h), ("batch", None, "vocab"))  # split like the table
        if not cfg.use_bias:
            return logits
        bias = self.param("output_bias", zeros_init(("vocab",)), (cfg.vocab_size,), cfg.param_dtype)
        return logits + jnp.asarray(bias, logits.dtype)


class ClassifierHead(nn.Module):
    """dropout then dense: [..., hidden] -> [..., num_labels]. Used for NSP, sequence and token
    tasks."""

    cfg: BertConfig
    num_labels: int
    dropout_rate: Optional[float] = None  # default: cfg.hidden_dropout_prob

    @nn.compact
    def __call__(self, hidden: Array, deterministic: bool) -> Array:
        rate = self.cfg.hidden_dropout_prob if self.dropout_rate is None else self.dropout_rate
        hidden = nn.Dropout(rate)(hidden, deterministic=deterministic)
        return dense(self.cfg, self.num_labels, ("embed", None), "dense")(hidden)


@flax.struct.dataclass
class PreTrainingOutput:
    mlm_logits: Array  # [batch, max_predictions, vocab]
    nsp_logits: Optional[Array]  # [batch, 2], or None without the NSP head


class BertForPreTraining(nn.Module):
    """BERT with the masked-LM head (logits only at `masked_positions`) and, optionally, NSP.

    masked_positions: [batch, max_predictions] int indices into the sequence.
    """

    cfg: BertConfig
    with_nsp: bool = True

    def setup(self):
        self.bert = BertModel(self.cfg, add_pooler=self.with_nsp)
        self.mlm = MaskedLMHead(self.cfg)
        if self.with_nsp:
            self.nsp = ClassifierHead(self.cfg, 2, dropout_rate=0.0)

    def __call__(self, input_ids, masked_positions, token_type_ids=None, attention_mask=None,
                 deterministic: bool = True, *, segment_ids=None,
                 position_ids=None) -> PreTrainingOutput:
        out = self.bert(input_ids, token_type_ids, attention_mask, deterministic,
                        segment_ids=segment_ids, position_ids=position_ids)
        mlm_logits = self.mlm(gather_positions(out.sequence_output, masked_positions), self.bert)
        nsp_logits = self.nsp(out.pooled_output, deterministic) if self.with_nsp else None
        return PreTrainingOutput(mlm_logits=mlm_logits, nsp_logits=nsp_logits)


class BertForSequenceClassification(nn.Module):
    """Pooled output -> dropout -> dense: logits [batch, num_labels] (num_labels=1: regression).

    Packed rows (several examples per row): segment_ids [batch, seq] tell the examples apart
    (1, 2, ...; 0 padding) and example_positions [batch, k] point at each one's first token;
    the logits are then [batch, k, num_labels], each example's as if it were alone in its row.
    """

    cfg: BertConfig
    num_labels: int

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None,
                 deterministic: bool = True, *, segment_ids=None,
                 example_positions=None) -> Array:
        out = BertModel(self.cfg, name="bert")(input_ids, token_type_ids, attention_mask,
                                               deterministic, segment_ids=segment_ids,
                                               pool_positions=example_positions)
        return ClassifierHead(self.cfg, self.num_labels, name="classifier")(
            out.pooled_output, deterministic)


class BertForTokenClassification(nn.Module):
    """Every token -> dropout -> dense: logits [batch, seq, num_labels].

    Packed rows: segment_ids [batch, seq] tell the examples apart (1, 2, ...; 0 padding); each
    token's logits are then those it has with its example alone in a row.
    """

    cfg: BertConfig
    num_labels: int

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None,
                 deterministic: bool = True, *, segment_ids=None) -> Array:
        out = BertModel(self.cfg, add_pooler=False, name="bert")(
            input_ids, token_type_ids, attention_mask, deterministic, segment_ids=segment_ids)
        return ClassifierHead(self.cfg, self.num_labels, name="classifier")(
            out.sequence_output, deterministic)


class BertForQuestionAnswering(nn.Module):
    """Span QA: every token -> dense(2): (start_logits, end_logits), each [batch, seq]."""

    cfg: BertConfig

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None,
                 deterministic: bool = True) -> tuple[Array, Array]:
        out = BertModel(self.cfg, add_pooler=False, name="bert")(
            input_ids, token_type_ids, attention_mask, deterministic)
        logits = ClassifierHead(self.cfg, 2, dropout_rate=0.0, name="qa_outputs")(
            out.sequence_output, deterministic)
        return logits[..., 0], logits[..., 1]
