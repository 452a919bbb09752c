"""ModernBERT (Warner et al., 2024): a pre-norm encoder with rotary positions, GeGLU and no
biases, whose attention alternates between global layers and a local window.

    x = Dropout(LN(TokenEmbedding(ids)))                              no position table
    for layer i = 0 .. N-1:
        x = x + Attention_i(LN(x))        (layer 0: no LN, x as it is)
        x = x + GeGLU(LN(x))
    x = LN(x)                                                          final_norm

Attention_i: one fused projection Wqkv -> Q, K, V per head; RoPE on Q and K with base
global_rope_theta on global layers (i % global_attn_every_n_layers == 0) and local_rope_theta on
the others, where query i sees key j only if |i - j| <= local_attention // 2; then Wo.
GeGLU: one fused projection Wi -> (input, gate), GELU(input) * gate, dropout, Wo.

Heads (as transformers' ModernBert*): the prediction head is dense, activation, LN; the MLM
decoder is the token embedding matrix (tied) plus a bias; the sequence classifier pools the first
token ("cls") or the mean of the real tokens ("mean") before the head, the token classifier runs
the head on every token; both end in dropout and a dense layer with a bias.

The interface is BertModel's (bert_jax.model.encoder): BertOutput, `attend` for the tied decoder,
packed rows through segment_ids (positions restart at each segment, attention stays within it
and within the window), composites with the encoder under `bert`. Parameters are named as in the
Hugging Face checkpoints (tok_embeddings, Wqkv, Wo, Wi, attn_norm, mlp_norm, final_norm) and carry
the logical axes of bert_jax.runtime.sharding; the fused kernels keep their parts on an axis of
their own (Wqkv [hidden, 3, heads, head_dim], Wi [hidden, 2, intermediate]) so that tensor
parallelism splits each part alike. Weights are initialised as transformers does (truncated normal,
cut at initializer_cutoff_factor standard deviations; output projections scaled by 1/sqrt(2N)).
"""

from __future__ import annotations

import functools
import math
from typing import Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.config.modernbert import ModernBertConfig
from bert_jax.model import attention
from bert_jax.model.activations import ACTIVATION_FNS
from bert_jax.model.attention import Mask
from bert_jax.model.encoder import BertOutput, positions_from_segments, rematerialised
from bert_jax.model.heads import PreTrainingOutput, gather_positions
from bert_jax.model.layers import (
    HEAD_AXES,
    HIDDEN_AXES,
    MLP_AXES,
    apply_rotary,
    lookup,
    rotary_angles,
    zeros_init,
)
from bert_jax.model.modernbert_scan import LAYERS, layer_name, member_name, scan_plan
from bert_jax.model.precision import Dense, matmul_transposed
from bert_jax.runtime.sharding import constrain

Array = jax.Array
Rotary = tuple[Array, Array]  # rotary_angles(...): cos, sin, each [batch, seq, 1, head_dim/2]


# ----- parameters ----------------------------------------------------------------------------

def _init(cfg: ModernBertConfig, std: float, axes: tuple[Optional[str], ...]):
    """Truncated normal(0, std) cut at +-initializer_cutoff_factor std, tagged with logical axes."""
    cut = cfg.initializer_cutoff_factor
    return nn.with_logical_partitioning(
        nn.initializers.truncated_normal(stddev=std, lower=-cut, upper=cut), axes)


def _std_in(cfg: ModernBertConfig) -> float:
    return cfg.initializer_range


def _std_out(cfg: ModernBertConfig) -> float:
    """Output projections (attention Wo, GeGLU Wo, the prediction head): scaled by depth."""
    return cfg.initializer_range / math.sqrt(2.0 * cfg.num_hidden_layers)


def _dense(cfg: ModernBertConfig, features: int | tuple[int, ...],
           axes: tuple[Optional[str], ...], name: str, use_bias: bool, std: float,
           num_contract: int = 1) -> Dense:
    """A dense layer whose kernel has logical `axes` (inputs then outputs), bias optional."""
    features = (features,) if isinstance(features, int) else tuple(features)
    return Dense(features, num_contract, kernel_init=_init(cfg, std, axes),
                 bias_init=zeros_init(axes[num_contract:]), dtype=cfg.dtype,
                 param_dtype=cfg.param_dtype, use_bias=use_bias, name=name)


def _norm(cfg: ModernBertConfig, name: str) -> nn.LayerNorm:
    """LayerNorm over `embed`, a bias only with norm_bias (torch's two-pass variance)."""
    return nn.LayerNorm(
        epsilon=cfg.norm_eps, dtype=cfg.dtype, param_dtype=cfg.param_dtype, name=name,
        use_bias=cfg.norm_bias, use_fast_variance=False,
        scale_init=nn.with_logical_partitioning(nn.initializers.ones_init(), ("embed",)),
        bias_init=zeros_init(("embed",)))


# ----- the encoder ---------------------------------------------------------------------------

class Embeddings(nn.Module):
    """Token embeddings, LayerNorm, dropout: input_ids [batch, seq] -> [batch, seq, hidden].
    No position table: positions enter as RoPE in attention."""

    cfg: ModernBertConfig

    def setup(self):
        cfg = self.cfg
        self.tok_embeddings = nn.Embed(
            cfg.vocab_size, cfg.hidden_size, dtype=cfg.dtype, param_dtype=cfg.param_dtype,
            embedding_init=_init(cfg, cfg.initializer_range, ("vocab", "embed")))
        self.norm = _norm(cfg, "norm")
        self.drop = nn.Dropout(cfg.embedding_dropout)

    def __call__(self, input_ids: Array, deterministic: bool) -> Array:
        # Rows gathered from the fp32 table, the table split along `vocab` (as BERT's Embeddings).
        table = constrain(self.tok_embeddings.embedding, ("vocab", None))
        x = lookup(table, input_ids, "input_ids")
        return constrain(self.drop(self.norm(x), deterministic=deterministic), HIDDEN_AXES)

    def attend(self, hidden: Array) -> Array:
        """Scores against every token embedding (the tied decoder):
        [..., hidden] -> [..., vocab]."""
        return matmul_transposed(hidden, self.tok_embeddings.embedding, self.cfg.dtype)


class Attention(nn.Module):
    """Self-attention with RoPE: x [batch, seq, hidden] -> [batch, seq, hidden].

    window: None (global) or local_attention; rotary: the angles of this layer's RoPE base.
    Dropout (attention_dropout) on the probabilities and on the output, as transformers does.
    """

    cfg: ModernBertConfig
    window: Optional[int]

    @nn.compact
    def __call__(self, x: Array, mask: Mask, deterministic: bool, rotary: Rotary) -> Array:
        cfg = self.cfg
        heads, head_dim = cfg.num_attention_heads, cfg.head_dim
        qkv = _dense(cfg, (3, heads, head_dim), ("embed", None, "heads", "kv"), "Wqkv",
                     cfg.attention_bias, _std_in(cfg))(x)  # [batch, seq, 3, heads, head_dim]
        query, key, value = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        query, key = apply_rotary(query, rotary), apply_rotary(key, rotary)
        query, key, value = (constrain(t, HEAD_AXES) for t in (query, key, value))

        rate = cfg.attention_dropout
        dropout = (functools.partial(nn.Dropout(rate), deterministic=False)
                   if not deterministic and rate > 0.0 else None)
        # window None: the kernel of cfg.attention; else only |i - j| <= window // 2
        context = attention.attend(query, key, value, mask, implementation=cfg.attention,
                                   dropout=dropout, window=self.window)
        out = _dense(cfg, cfg.hidden_size, ("heads", "kv", "embed"), "Wo", cfg.attention_bias,
                     _std_out(cfg), num_contract=2)(constrain(context, HEAD_AXES))
        return nn.Dropout(rate)(out, deterministic=deterministic)


class GeGLU(nn.Module):
    """Wo(dropout(act(input) * gate)), (input, gate) = the two halves of Wi x (input first):
    [batch, seq, hidden] -> [batch, seq, hidden]; the inner width is intermediate_size."""

    cfg: ModernBertConfig

    @nn.compact
    def __call__(self, x: Array, deterministic: bool) -> Array:
        cfg = self.cfg
        both = _dense(cfg, (2, cfg.intermediate_size), ("embed", None, "mlp"), "Wi", cfg.mlp_bias,
                      _std_in(cfg))(x)  # [batch, seq, 2, intermediate]
        inner = ACTIVATION_FNS[cfg.hidden_activation](both[..., 0, :]) * both[..., 1, :]
        inner = nn.Dropout(cfg.mlp_dropout)(constrain(inner, MLP_AXES),
                                             deterministic=deterministic)
        return _dense(cfg, cfg.hidden_size, ("mlp", "embed"), "Wo", cfg.mlp_bias,
                      _std_out(cfg))(inner)


class Layer(nn.Module):
    """One pre-norm block: x = x + Attn(LN(x)); x = x + GeGLU(LN(x)).
    [batch, seq, hidden] -> same.

    window: see Attention; attn_norm False (layer 0): attention reads x itself.
    """

    cfg: ModernBertConfig
    window: Optional[int]
    attn_norm: bool = True

    @nn.compact
    def __call__(self, x: Array, mask: Mask, deterministic: bool, rotary: Rotary) -> Array:
        cfg = self.cfg
        normed = _norm(cfg, "attn_norm")(x) if self.attn_norm else x
        x = x + Attention(cfg, self.window, name="attn")(normed, mask, deterministic, rotary)
        x = x + GeGLU(cfg, name="mlp")(_norm(cfg, "mlp_norm")(x), deterministic)
        return constrain(x, HIDDEN_AXES)


def _rotary_of(cfg: ModernBertConfig, layer: int, rotary: dict[str, Rotary]) -> Rotary:
    return rotary["global" if cfg.is_global(layer) else "local"]


class LayerGroup(nn.Module):
    """global_attn_every_n_layers consecutive layers, the body of the scan (modernbert_scan):
    the layers after layer 0, n - 1 local then one global. Signature of nn.scan:
    (carry, *broadcast) -> (carry, None)."""

    cfg: ModernBertConfig

    @nn.compact
    def __call__(self, x: Array, mask: Mask, deterministic: bool,
                 rotary: dict[str, Rotary]) -> tuple[Array, None]:
        cfg = self.cfg
        plan = scan_plan(cfg)
        layer_cls = rematerialised(Layer, cfg, prevent_cse=False)
        for offset in range(plan.group_size):
            index = plan.layer_of(0, offset)  # the kinds are the same in every group
            x = layer_cls(cfg, cfg.window_of(index), name=member_name(offset))(
                x, mask, deterministic, _rotary_of(cfg, index, rotary))
        return x, None


class Encoder(nn.Module):
    """The N layers, then final_norm: [batch, seq, hidden] -> same.

    Unrolled (`layer_0` ...) or, with cfg.scan_layers, layer 0 and the layers after the last
    whole group unrolled and the groups in one nn.scan (`layers`; see modernbert_scan).
    rotary: {"global": angles, "local": angles}, each layer taking those of its kind.
    """

    cfg: ModernBertConfig

    @nn.compact
    def __call__(self, x: Array, mask: Mask, deterministic: bool,
                 rotary: dict[str, Rotary]) -> Array:
        cfg = self.cfg
        layer_cls = rematerialised(Layer, cfg)

        def unrolled(i: int, x: Array) -> Array:
            return layer_cls(cfg, cfg.window_of(i), attn_norm=i > 0, name=layer_name(i))(
                x, mask, deterministic, _rotary_of(cfg, i, rotary))

        if not cfg.scan_layers:
            for i in range(cfg.num_hidden_layers):
                x = unrolled(i, x)
        else:
            plan = scan_plan(cfg)
            for i in plan.head:
                x = unrolled(i, x)
            if plan.groups:
                groups = nn.scan(LayerGroup, variable_axes={"params": 0},
                                 split_rngs={"params": True, "dropout": True},
                                 in_axes=(nn.broadcast, nn.broadcast, nn.broadcast),
                                 length=plan.groups,
                                 metadata_params={nn.PARTITION_NAME: LAYERS})
                x, _ = groups(cfg, name=LAYERS)(x, mask, deterministic, rotary)
            for i in plan.tail:
                x = unrolled(i, x)
        return _norm(cfg, "final_norm")(x)


def pool(hidden: Array, how: str, attention_mask: Optional[Array] = None,
         segment_ids: Optional[Array] = None, positions: Optional[Array] = None) -> Array:
    """The classifier's pooling: the first token ("cls") or the mean of the real tokens ("mean").

    hidden [batch, seq, hidden] -> [batch, hidden]; with positions [batch, k] (the first tokens
    of k sequences packed in each row) -> [batch, k, hidden], "mean" then averaging each
    sequence's tokens (those of the segment at its position).
    """
    if how == "cls":
        return hidden[:, 0] if positions is None else gather_positions(hidden, positions)
    real = jnp.ones(hidden.shape[:2], bool) if attention_mask is None else (
        jnp.asarray(attention_mask).astype(bool))
    if segment_ids is not None:
        real = real & (segment_ids != 0)
    weights = real[:, None, :]  # [batch, 1, seq]
    if positions is not None and segment_ids is not None:
        own = jnp.take_along_axis(segment_ids, positions.astype(jnp.int32), axis=1)  # [batch, k]
        weights = weights & (segment_ids[:, None, :] == own[:, :, None])  # [batch, k, seq]
    weights = weights.astype(jnp.float32)
    total = jnp.einsum("bks,bsh->bkh", weights, hidden.astype(jnp.float32))
    mean = (total / weights.sum(axis=-1, keepdims=True)).astype(hidden.dtype)
    if positions is None:
        return mean[:, 0]
    return jnp.broadcast_to(mean, positions.shape + hidden.shape[-1:])


class ModernBertModel(nn.Module):
    """ModernBERT: embeddings -> N layers -> final_norm (and the classifier pooling).

    input_ids: [batch, seq] int. Optional, all [batch, seq] int: token_type_ids (accepted for
    BertModel's interface and ignored: ModernBERT has no token types), attention_mask
    (1 = real token), segment_ids (packed rows), position_ids (default 0..seq-1, restarting per
    segment with segment_ids). pool_positions [batch, k]: pool each of k packed sequences.
    Returns BertOutput(sequence_output [batch, seq, hidden], pooled_output: the
    classifier_pooling of the sequence output, [batch, hidden] or [batch, k, hidden], or None
    without add_pooler). The pooling has no parameters, so the tree is the same either way.
    """

    cfg: ModernBertConfig
    add_pooler: bool = True

    def setup(self):
        self.embeddings = Embeddings(self.cfg)
        self.encoder = Encoder(self.cfg)

    def __call__(self, input_ids: Array, token_type_ids: Optional[Array] = None,
                 attention_mask: Optional[Array] = None, deterministic: bool = True, *,
                 segment_ids: Optional[Array] = None,
                 position_ids: Optional[Array] = None,
                 pool_positions: Optional[Array] = None) -> BertOutput:
        del token_type_ids
        cfg = self.cfg
        input_ids = jnp.asarray(input_ids)
        if input_ids.ndim != 2:
            raise ValueError(f"input_ids must be [batch, seq], got shape {input_ids.shape}")
        batch, seq = input_ids.shape
        if seq > cfg.max_position_embeddings:
            raise ValueError(f"sequence length {seq} exceeds max_position_embeddings="
                             f"{cfg.max_position_embeddings}")
        attention_mask = None if attention_mask is None else jnp.asarray(attention_mask)
        segment_ids = None if segment_ids is None else jnp.asarray(segment_ids)
        if position_ids is None:
            position_ids = (positions_from_segments(segment_ids) if segment_ids is not None
                            else jnp.broadcast_to(jnp.arange(seq, dtype=jnp.int32), (batch, seq)))
        mask = Mask(attention_mask=attention_mask, segment_ids=segment_ids)
        rotary = {"global": rotary_angles(position_ids, cfg.head_dim, cfg.global_rope_theta),
                  "local": rotary_angles(position_ids, cfg.head_dim, cfg.local_rope_theta)}

        x = self.embeddings(input_ids, deterministic)
        x = self.encoder(x, mask, deterministic, rotary)
        pooled = (pool(x, cfg.classifier_pooling, attention_mask, segment_ids, pool_positions)
                  if self.add_pooler else None)
        return BertOutput(sequence_output=x, pooled_output=pooled)

    def attend(self, hidden: Array) -> Array:
        """Logits over the vocabulary with the tied token embeddings: [..., hidden] ->
        [..., vocab]."""
        return self.embeddings.attend(hidden)


# ----- heads ---------------------------------------------------------------------------------

class PredictionHead(nn.Module):
    """LN(act(dense(x))), act = classifier_activation, the dense bias with classifier_bias:
    [..., hidden] -> [..., hidden]."""

    cfg: ModernBertConfig

    @nn.compact
    def __call__(self, x: Array) -> Array:
        cfg = self.cfg
        h = _dense(cfg, cfg.hidden_size, ("embed", None), "dense", cfg.classifier_bias,
                   _std_out(cfg))(x)
        return _norm(cfg, "norm")(ACTIVATION_FNS[cfg.classifier_activation](h))


class MaskedLMHead(nn.Module):
    """The prediction head, then the tied decoder (token embeddings^T, plus `decoder_bias` with
    cfg.decoder_bias): hidden [batch, num, hidden] -> logits [batch, num, vocab]."""

    cfg: ModernBertConfig

    @nn.compact
    def __call__(self, hidden: Array, model: ModernBertModel) -> Array:
        cfg = self.cfg
        logits = constrain(model.attend(PredictionHead(cfg, name="head")(hidden)),
                           ("batch", None, "vocab"))
        if not cfg.decoder_bias:
            return logits
        bias = self.param("decoder_bias", zeros_init(("vocab",)), (cfg.vocab_size,),
                          cfg.param_dtype)
        return logits + jnp.asarray(bias, logits.dtype)


class ClassifierHead(nn.Module):
    """The prediction head, dropout (classifier_dropout), then dense with a bias:
    [..., hidden] -> [..., num_labels]."""

    cfg: ModernBertConfig
    num_labels: int

    @nn.compact
    def __call__(self, hidden: Array, deterministic: bool) -> Array:
        cfg = self.cfg
        h = nn.Dropout(cfg.classifier_dropout)(PredictionHead(cfg, name="head")(hidden),
                                               deterministic=deterministic)
        return _dense(cfg, self.num_labels, ("embed", None), "dense", True,
                      cfg.hidden_size ** -0.5)(h)


class ModernBertForMaskedLM(nn.Module):
    """ModernBERT with its MLM head, in BertForPreTraining's interface (no NSP).

    masked_positions: [batch, max_predictions] int, the positions to score (the vocabulary-sized
    matmul then costs those rows only); None: every position, [batch, seq, vocab].
    """

    cfg: ModernBertConfig

    def setup(self):
        self.bert = ModernBertModel(self.cfg, add_pooler=False)
        self.mlm = MaskedLMHead(self.cfg)

    def __call__(self, input_ids, masked_positions=None, token_type_ids=None, attention_mask=None,
                 deterministic: bool = True, *, segment_ids=None,
                 position_ids=None) -> PreTrainingOutput:
        out = self.bert(input_ids, token_type_ids, attention_mask, deterministic,
                        segment_ids=segment_ids, position_ids=position_ids)
        hidden = (out.sequence_output if masked_positions is None
                  else gather_positions(out.sequence_output, masked_positions))
        return PreTrainingOutput(mlm_logits=self.mlm(hidden, self.bert), nsp_logits=None)


class ModernBertForSequenceClassification(nn.Module):
    """Pooled output (cls or mean) -> classifier head: logits [batch, num_labels].

    Packed rows: segment_ids tell the examples apart, example_positions [batch, k] point at each
    one's first token; the logits are then [batch, k, num_labels].
    """

    cfg: ModernBertConfig
    num_labels: int

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None,
                 deterministic: bool = True, *, segment_ids=None,
                 example_positions=None) -> Array:
        out = ModernBertModel(self.cfg, name="bert")(
            input_ids, token_type_ids, attention_mask, deterministic, segment_ids=segment_ids,
            pool_positions=example_positions)
        return ClassifierHead(self.cfg, self.num_labels, name="classifier")(
            out.pooled_output, deterministic)


class ModernBertForTokenClassification(nn.Module):
    """Every token -> classifier head: logits [batch, seq, num_labels].

    Packed rows: segment_ids tell the examples apart (positions restart, attention stays within
    each), so each token's logits are those it has with its example alone in a row.
    """

    cfg: ModernBertConfig
    num_labels: int

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None,
                 deterministic: bool = True, *, segment_ids=None) -> Array:
        out = ModernBertModel(self.cfg, add_pooler=False, name="bert")(
            input_ids, token_type_ids, attention_mask, deterministic, segment_ids=segment_ids)
        return ClassifierHead(self.cfg, self.num_labels, name="classifier")(
            out.sequence_output, deterministic)
