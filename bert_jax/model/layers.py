"""The building blocks of BERT: embeddings, multi-head self-attention, feed-forward, encoder layer.

The options of BertConfig (pre-LN, gated FFN, no biases, rotary positions) are read here; their
defaults compute BERT as published.

Every parameter carries logical axis names (`vocab`, `embed`, `heads`, `kv`, `mlp`); the rules in
`bert_jax.runtime.sharding` map them onto a device mesh, so the model itself knows nothing of
devices. The activations whose layout matters are named too (`constrain`: the residual stream,
queries, keys, values and context per head, the FFN's inner activation, and the word-embedding table
where rows are looked up); outside a sharded step (a plain `model.apply`) that is a no-op.
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.config.bert import BertConfig
from bert_jax.model import attention
from bert_jax.model.activations import ACTIVATION_FNS
from bert_jax.model.precision import Dense, matmul_transposed
from bert_jax.runtime.sharding import constrain

Array = jax.Array

# Logical axes of the activations (bert_jax.runtime.sharding.constrain).
HIDDEN_AXES = ("batch", "length", "embed")  # [batch, seq, hidden]: the residual stream
HEAD_AXES = ("batch", "length", "heads", "kv")  # [batch, seq, heads, head_dim]
MLP_AXES = ("batch", "length", "mlp")  # [batch, seq, intermediate]


def weight_init(cfg: BertConfig, axes: tuple[str | None, ...]):
    """Truncated normal(0, initializer_range), as in the original BERT, tagged with logical axes."""
    return nn.with_logical_partitioning(
        nn.initializers.truncated_normal(stddev=cfg.initializer_range), axes)


def zeros_init(axes: tuple[str | None, ...]):
    return nn.with_logical_partitioning(nn.initializers.zeros_init(), axes)


def layer_norm(cfg: BertConfig, name: str) -> nn.LayerNorm:
    """LayerNorm with a scale and (unless cfg.use_bias is False) a bias, both over `embed`."""
    return nn.LayerNorm(
        epsilon=cfg.layer_norm_eps, dtype=cfg.dtype, param_dtype=cfg.param_dtype, name=name,
        use_bias=cfg.use_bias,
        scale_init=nn.with_logical_partitioning(nn.initializers.ones_init(), ("embed",)),
        bias_init=zeros_init(("embed",)))


def dense(cfg: BertConfig, features: int | tuple[int, ...], axes: tuple[str | None, ...],
          name: str, num_contract: int = 1) -> Dense:
    """A dense layer whose kernel has logical `axes` (inputs then outputs); bias: the outputs'
    (none when cfg.use_bias is False)."""
    features = (features,) if isinstance(features, int) else tuple(features)
    return Dense(features, num_contract, kernel_init=weight_init(cfg, axes),
                 bias_init=zeros_init(axes[num_contract:]), dtype=cfg.dtype,
                 param_dtype=cfg.param_dtype, use_bias=cfg.use_bias, name=name)


def lookup(table: Array, ids: Array, name: str) -> Array:
    """Rows of table [num, hidden] at integer ids [batch, seq] -> [batch, seq, hidden].

    A one-row table (type_vocab_size=1, as in RoBERTa-style checkpoints) gives its row for any
    id, as nn.Embed does; otherwise an id outside the table gives NaN rows (jnp.take's default).
    """
    ids = jnp.asarray(ids)
    if not jnp.issubdtype(ids.dtype, jnp.integer):
        raise ValueError(f"{name} must be integers, got dtype {ids.dtype}")
    if table.shape[0] == 1:
        return jnp.broadcast_to(table[0], ids.shape + table.shape[1:])
    return jnp.take(table, ids, axis=0)


class Embeddings(nn.Module):
    """Word + position + token-type embeddings, then LayerNorm and dropout. Position p reads row
    p + cfg.position_offset of its table (RoBERTa's offset; 0 for BERT). With rotary positions
    (cfg.position_embedding_type="rotary") there is no position table: positions enter in attention.

    input_ids, position_ids, token_type_ids: [batch, seq] -> [batch, seq, hidden]
    """

    cfg: BertConfig

    def setup(self):
        cfg = self.cfg
        embed = functools.partial(nn.Embed, features=cfg.hidden_size, dtype=cfg.dtype,
                                  param_dtype=cfg.param_dtype)
        self.word_embeddings = embed(
            cfg.vocab_size, embedding_init=weight_init(cfg, ("vocab", "embed")))
        if cfg.position_embedding_type == "absolute":
            self.position_embeddings = embed(
                cfg.max_position_embeddings, embedding_init=weight_init(cfg, (None, "embed")))
        self.token_type_embeddings = embed(
            cfg.type_vocab_size, embedding_init=weight_init(cfg, (None, "embed")))
        self.layer_norm = layer_norm(cfg, "layer_norm")
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)

    def __call__(self, input_ids, position_ids, token_type_ids, deterministic: bool) -> Array:
        # Rows are gathered from the tables in their own dtype (fp32) and summed there; LayerNorm
        # then rounds to the compute dtype. (nn.Embed would round the whole [vocab, hidden] table
        # to bf16 first, so its gradient would be scatter-added in bf16 into a separate buffer
        # instead of in fp32 straight into the tied decoder's gradient.) The table is gathered
        # whole along `embed` (FSDP) but stays split along `vocab`: each device looks up its own
        # rows, where XLA would otherwise gather the whole vocabulary on every device.
        table = constrain(self.word_embeddings.embedding, ("vocab", None))
        x = lookup(table, input_ids, "input_ids")
        if self.cfg.position_embedding_type == "absolute":
            if self.cfg.position_offset:  # RoBERTa's rows start at pad_token_id + 1
                position_ids = jnp.asarray(position_ids) + self.cfg.position_offset
            x = x + lookup(self.position_embeddings.embedding, position_ids, "position_ids")
        x = x + lookup(self.token_type_embeddings.embedding, token_type_ids, "token_type_ids")
        return constrain(self.dropout(self.layer_norm(x), deterministic=deterministic), HIDDEN_AXES)

    def attend(self, hidden: Array) -> Array:
        """Scores against every word embedding (the tied MLM decoder):
        [..., hidden] -> [..., vocab]."""
        table = self.word_embeddings.embedding  # [vocab, hidden], in param_dtype
        return matmul_transposed(hidden, table, self.cfg.dtype)


ROPE_BASE = 10000.0


def rotary_angles(position_ids: Array, head_dim: int, base: float = ROPE_BASE
                  ) -> tuple[Array, Array]:
    """cos and sin of the RoPE angles p * base^(-2i/head_dim), i < head_dim/2 (Su et al., 2021).

    position_ids: [batch, seq] int -> (cos, sin), each [batch, seq, 1, head_dim/2] float32
    (the 1 broadcasts over heads).
    """
    inv_freq = base ** (-jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim)
    angles = position_ids.astype(jnp.float32)[..., None] * inv_freq  # [batch, seq, head_dim/2]
    return jnp.cos(angles)[:, :, None, :], jnp.sin(angles)[:, :, None, :]


def apply_rotary(x: Array, rotary: tuple[Array, Array]) -> Array:
    """Rotate each pair (x_i, x_{i + head_dim/2}) of every head by its angle, in fp32.

    x: [batch, seq, heads, head_dim]; rotary: rotary_angles(...) -> [batch, seq, heads, head_dim].
    Then q_m . k_n depends on the positions only through m - n.
    """
    cos, sin = rotary
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    rotated = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return rotated.astype(x.dtype)


class SelfAttention(nn.Module):
    """Multi-head self-attention: softmax(Q K^T / sqrt(head_dim)) V per head, then an output
    projection.

    x: [batch, seq, hidden]; mask: an attention.Mask (padding, packed rows) -> [batch, seq, hidden].
    rotary: None, or rotary_angles(position_ids) to rotate queries and keys (RoPE).
    The kernel is cfg.attention's (bert_jax.model.attention.choose).
    """

    cfg: BertConfig

    @nn.compact
    def __call__(self, x: Array, mask: attention.Mask, deterministic: bool,
                 rotary: tuple[Array, Array] | None = None) -> Array:
        cfg = self.cfg
        heads, head_dim = cfg.num_attention_heads, cfg.head_dim
        projection = functools.partial(dense, cfg, (heads, head_dim), ("embed", "heads", "kv"))
        query = projection("query")(x)  # [batch, seq, heads, head_dim]
        key = projection("key")(x)
        value = projection("value")(x)
        if rotary is not None:
            query, key = apply_rotary(query, rotary), apply_rotary(key, rotary)
        query, key, value = (constrain(t, HEAD_AXES) for t in (query, key, value))

        dropout_rate = cfg.attention_probs_dropout_prob
        dropout = (functools.partial(nn.Dropout(dropout_rate), deterministic=False)
                   if not deterministic and dropout_rate > 0.0 else None)
        context = attention.attend(query, key, value, mask, implementation=cfg.attention,
                                   dropout=dropout)
        return dense(cfg, cfg.hidden_size, ("heads", "kv", "embed"), "output", num_contract=2)(
            constrain(context, HEAD_AXES))  # [batch, seq, hidden]


# The activation of each gated FFN kind: act(x W_gate) * (x W_up).
GATE_ACTIVATIONS = {"geglu": "gelu", "swiglu": "silu"}


class FeedForward(nn.Module):
    """Position-wise FFN. cfg.ffn_kind "dense": act(x W_intermediate) W_output, act = hidden_act.
    "geglu" / "swiglu": (gelu / silu(x W_gate) * x W_intermediate) W_output (Shazeer, 2020).

    x: [batch, seq, hidden] -> [batch, seq, hidden]; the inner width is intermediate_size.
    """

    cfg: BertConfig

    @nn.compact
    def __call__(self, x: Array) -> Array:
        cfg = self.cfg
        up = dense(cfg, cfg.intermediate_size, ("embed", "mlp"), "intermediate")(x)
        if cfg.ffn_kind == "dense":
            h = ACTIVATION_FNS[cfg.hidden_act](up)
        else:
            gate = dense(cfg, cfg.intermediate_size, ("embed", "mlp"), "gate")(x)
            h = ACTIVATION_FNS[GATE_ACTIVATIONS[cfg.ffn_kind]](gate) * up
        return dense(cfg, cfg.hidden_size, ("mlp", "embed"), "output")(constrain(h, MLP_AXES))


class EncoderLayer(nn.Module):
    """One Transformer block, dropout on each sub-layer's output before the residual add.

    post-LN (BERT): x = LN(x + Attn(x)); x = LN(x + FFN(x)).
    pre-LN: x = x + Attn(LN(x)); x = x + FFN(LN(x)) (the Encoder adds a final LayerNorm).
    x: [batch, seq, hidden] -> [batch, seq, hidden]; mask, rotary: see SelfAttention.
    """

    cfg: BertConfig

    @nn.compact
    def __call__(self, x: Array, mask: attention.Mask, deterministic: bool,
                 rotary: tuple[Array, Array] | None = None) -> Array:
        cfg = self.cfg
        dropout = functools.partial(nn.Dropout(cfg.hidden_dropout_prob),
                                    deterministic=deterministic)
        attention = SelfAttention(cfg, name="attention")
        attention_norm = layer_norm(cfg, "attention_layer_norm")
        feed_forward = FeedForward(cfg, name="feed_forward")
        output_norm = layer_norm(cfg, "output_layer_norm")
        if cfg.layer_norm_position == "pre":
            x = x + dropout(attention(attention_norm(x), mask, deterministic, rotary))
            return constrain(x + dropout(feed_forward(output_norm(x))), HIDDEN_AXES)
        x = attention_norm(x + dropout(attention(x, mask, deterministic, rotary)))
        return constrain(output_norm(x + dropout(feed_forward(x))), HIDDEN_AXES)
