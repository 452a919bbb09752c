"""The BERT encoder: embeddings, a stack of post-LN Transformer layers, and the pooler.

(Options: pre-LN layers end with a final LayerNorm; rotary positions rotate queries and keys by
angles computed once here from the position ids. See BertConfig.)

Packed rows: several sequences may share one row, told apart by `segment_ids` (1, 2, ... for the
sequences, 0 for padding). A token then attends only to tokens of its own segment, and positions
restart at 0 at the start of every segment, so each packed sequence is computed exactly as if it
were alone in its row.
"""

from __future__ import annotations

from typing import Optional

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.config import BertConfig
from bert_jax.model.layers import Embeddings, EncoderLayer, dense, layer_norm, rotary_angles

Array = jax.Array

REMAT_POLICIES = {
    "full": None,  # keep nothing: recompute the whole layer in the backward pass
    "dots": jax.checkpoint_policies.checkpoint_dots,
    "dots_no_batch": jax.checkpoint_policies.checkpoint_dots_with_no_batch_dims,
}


@flax.struct.dataclass
class BertOutput:
    sequence_output: Array  # [batch, seq, hidden], the last layer
    pooled_output: Optional[Array]  # [batch, hidden], tanh(dense(first token)); None without pooler


def attention_mask_from(attention_mask: Optional[Array], segment_ids: Optional[Array],
                        input_shape: tuple[int, int]) -> Array:
    """Boolean mask broadcastable to [batch, heads, seq, seq]: True where query i may attend key j.

    attention_mask: [batch, seq], 1 for real tokens, 0 for padding.
    segment_ids: [batch, seq], same id = same packed sequence; 0 = padding.
    """
    batch, seq = input_shape
    mask = jnp.ones((batch, 1, 1, seq), dtype=bool)
    if attention_mask is not None:
        mask = mask & (attention_mask.astype(bool)[:, None, None, :])
    if segment_ids is not None:
        same_segment = segment_ids[:, :, None] == segment_ids[:, None, :]  # [batch, seq, seq]
        mask = mask & (same_segment & (segment_ids != 0)[:, None, :])[:, None, :, :]
    return mask


def positions_from_segments(segment_ids: Array) -> Array:
    """Positions that restart at 0 where a new segment begins: [batch, seq] -> [batch, seq]."""
    seq = segment_ids.shape[1]
    index = jnp.broadcast_to(jnp.arange(seq, dtype=jnp.int32), segment_ids.shape)
    starts = jnp.concatenate(
        [jnp.ones_like(segment_ids[:, :1], dtype=bool), segment_ids[:, 1:] != segment_ids[:, :-1]],
        axis=1)
    segment_start = jax.lax.cummax(jnp.where(starts, index, 0), axis=1)
    return index - segment_start


class Encoder(nn.Module):
    """num_hidden_layers EncoderLayers, each optionally rematerialised: [batch, seq, hidden] -> same.

    Pre-LN (cfg.layer_norm_position="pre"): then `final_layer_norm`. rotary: see SelfAttention.
    """

    cfg: BertConfig

    @nn.compact
    def __call__(self, x: Array, mask: Array, deterministic: bool,
                 rotary: Optional[tuple[Array, Array]] = None) -> Array:
        layer_cls = EncoderLayer
        if self.cfg.remat_policy != "none":
            layer_cls = nn.remat(EncoderLayer, policy=REMAT_POLICIES[self.cfg.remat_policy],
                                 static_argnums=(3,))
        for i in range(self.cfg.num_hidden_layers):
            x = layer_cls(self.cfg, name=f"layer_{i}")(x, mask, deterministic, rotary)
        if self.cfg.layer_norm_position == "pre":
            x = layer_norm(self.cfg, "final_layer_norm")(x)
        return x


class Pooler(nn.Module):
    """tanh(dense(first token)): [batch, seq, hidden] -> [batch, hidden]."""

    cfg: BertConfig

    @nn.compact
    def __call__(self, sequence_output: Array) -> Array:
        return jnp.tanh(dense(self.cfg, self.cfg.hidden_size, ("embed", None), "dense")(
            sequence_output[:, 0]))


class BertModel(nn.Module):
    """BERT (Devlin et al., 2019): embeddings -> encoder -> pooler.

    input_ids: [batch, seq] int. Optional, all [batch, seq] int: token_type_ids (default 0),
    attention_mask (1 = real token; default all 1), segment_ids (packed rows; see module doc),
    position_ids (default 0..seq-1, or restarting per segment when segment_ids are given).
    Returns BertOutput(sequence_output [batch, seq, hidden], pooled_output [batch, hidden]).
    """

    cfg: BertConfig
    add_pooler: bool = True

    def setup(self):
        self.embeddings = Embeddings(self.cfg)
        self.encoder = Encoder(self.cfg)
        if self.add_pooler:
            self.pooler = Pooler(self.cfg)

    def __call__(self, input_ids: Array, token_type_ids: Optional[Array] = None,
                 attention_mask: Optional[Array] = None, deterministic: bool = True, *,
                 segment_ids: Optional[Array] = None,
                 position_ids: Optional[Array] = None) -> BertOutput:
        input_ids = jnp.asarray(input_ids)
        if input_ids.ndim != 2:
            raise ValueError(f"input_ids must be [batch, seq], got shape {input_ids.shape}")
        batch, seq = input_ids.shape
        if seq > self.cfg.max_position_embeddings:
            raise ValueError(f"sequence length {seq} exceeds max_position_embeddings="
                             f"{self.cfg.max_position_embeddings}")
        if token_type_ids is None:
            token_type_ids = jnp.zeros_like(input_ids)
        if position_ids is None:
            position_ids = (positions_from_segments(segment_ids) if segment_ids is not None
                            else jnp.broadcast_to(jnp.arange(seq, dtype=jnp.int32), (batch, seq)))
        mask = attention_mask_from(attention_mask, segment_ids, (batch, seq))

        rotary = (rotary_angles(position_ids, self.cfg.head_dim)
                  if self.cfg.position_embedding_type == "rotary" else None)

        x = self.embeddings(input_ids, position_ids, token_type_ids, deterministic)
        x = self.encoder(x, mask, deterministic, rotary)
        pooled = self.pooler(x) if self.add_pooler else None
        return BertOutput(sequence_output=x, pooled_output=pooled)

    def attend(self, hidden: Array) -> Array:
        """Logits over the vocabulary with the (tied) word embeddings: [..., hidden] -> [..., vocab]."""
        return self.embeddings.attend(hidden)
