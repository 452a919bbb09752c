"""The BERT encoder: embeddings, a stack of post-LN Transformer layers, and the pooler.

(Options: pre-LN layers end with a final LayerNorm; rotary positions rotate queries and keys by
angles computed once here from the position ids; scan_layers runs the layers as one nn.scan. See
BertConfig.)

Packed rows: several sequences may share one row, told apart by `segment_ids` (1, 2, ... for the
sequences, 0 for padding). A token then attends only to tokens of its own segment, and positions
restart at 0 at the start of every segment, so each packed sequence is computed exactly as if it
were alone in its row.

The padding mask and the segment ids reach every layer's attention as they are (an
attention.Mask), not as a [seq, seq] matrix: each attention kernel takes them in its own form
(bert_jax.model.attention).
"""

from __future__ import annotations

from typing import Optional

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.config.bert import BertConfig
from bert_jax.model.attention import Mask
from bert_jax.model.layers import Embeddings, EncoderLayer, dense, layer_norm, rotary_angles
from bert_jax.model.scan import LAYERS, layer_name

Array = jax.Array

REMAT_POLICIES = {
    "full": None,  # keep nothing: recompute the whole layer in the backward pass
    "dots": jax.checkpoint_policies.checkpoint_dots,
    "dots_no_batch": jax.checkpoint_policies.checkpoint_dots_with_no_batch_dims,
}


@flax.struct.dataclass
class BertOutput:
    sequence_output: Array  # [batch, seq, hidden], the last layer
    # [batch, hidden], tanh(dense(first token)); [batch, k, hidden] at pool_positions [batch, k];
    # None without pooler
    pooled_output: Optional[Array]


def positions_from_segments(segment_ids: Array) -> Array:
    """Positions that restart at 0 where a new segment begins: [batch, seq] -> [batch, seq]."""
    seq = segment_ids.shape[1]
    index = jnp.broadcast_to(jnp.arange(seq, dtype=jnp.int32), segment_ids.shape)
    starts = jnp.concatenate(
        [jnp.ones_like(segment_ids[:, :1], dtype=bool), segment_ids[:, 1:] != segment_ids[:, :-1]],
        axis=1)
    segment_start = jax.lax.cummax(jnp.where(starts, index, 0), axis=1)
    return index - segment_start


class ScanStep(EncoderLayer):
    """EncoderLayer in the signature nn.scan wants: (carry, *broadcast) -> (carry, no output)."""

    @nn.compact
    def __call__(self, x: Array, mask: Mask, deterministic: bool,
                 rotary: Optional[tuple[Array, Array]] = None) -> tuple[Array, None]:
        return super().__call__(x, mask, deterministic, rotary), None


def rematerialised(layer_cls: type[nn.Module], cfg: BertConfig,
                   prevent_cse: bool = True) -> type[nn.Module]:
    """layer_cls under nn.remat with cfg.remat_policy (as it is with "none").

    prevent_cse=False is safe (and cheaper) inside a scan, whose loop already keeps XLA from
    merging the recomputation with the forward pass.
    """
    if cfg.remat_policy == "none":
        return layer_cls
    # static_argnums count the module as 0: (x, mask, deterministic) are 1, 2, 3.
    return nn.remat(layer_cls, policy=REMAT_POLICIES[cfg.remat_policy], static_argnums=(3,),
                    prevent_cse=prevent_cse)


def scanned_layers(cfg: BertConfig) -> type[nn.Module]:
    """The num_hidden_layers layers as one nn.scan of a (rematerialised) layer.

    Parameters are stacked on a leading axis, the logical axis `layers` (replicated by the rules
    in bert_jax.runtime.sharding); each layer draws its own init and dropout keys. The mask, the
    deterministic flag and the rotary angles are the same for every layer (broadcast).
    """
    return nn.scan(rematerialised(ScanStep, cfg, prevent_cse=False), variable_axes={"params": 0},
                   split_rngs={"params": True, "dropout": True},
                   in_axes=(nn.broadcast, nn.broadcast, nn.broadcast),
                   length=cfg.num_hidden_layers, metadata_params={nn.PARTITION_NAME: LAYERS})


class Encoder(nn.Module):
    """num_hidden_layers EncoderLayers, each optionally rematerialised: [batch, seq, hidden] ->
    same.

    mask: the attention.Mask of the batch (padding, packed rows), the same for every layer.

    Unrolled (`layer_0`, ...) or, with cfg.scan_layers, one scanned stack (`layers`; see
    bert_jax.model.scan). Pre-LN (cfg.layer_norm_position="pre"): then `final_layer_norm`.
    rotary: see SelfAttention.
    """

    cfg: BertConfig

    @nn.compact
    def __call__(self, x: Array, mask: Mask, deterministic: bool,
                 rotary: Optional[tuple[Array, Array]] = None) -> Array:
        if self.cfg.scan_layers:
            x, _ = scanned_layers(self.cfg)(self.cfg, name=LAYERS)(x, mask, deterministic, rotary)
        else:
            layer_cls = rematerialised(EncoderLayer, self.cfg)
            for i in range(self.cfg.num_hidden_layers):
                x = layer_cls(self.cfg, name=layer_name(i))(x, mask, deterministic, rotary)
        if self.cfg.layer_norm_position == "pre":
            x = layer_norm(self.cfg, "final_layer_norm")(x)
        return x


class Pooler(nn.Module):
    """tanh(dense(first token)): [batch, seq, hidden] -> [batch, hidden]; with positions
    [batch, k] (the first tokens of k sequences packed in each row) -> [batch, k, hidden]."""

    cfg: BertConfig

    @nn.compact
    def __call__(self, sequence_output: Array, positions: Optional[Array] = None) -> Array:
        first = (sequence_output[:, 0] if positions is None else jnp.take_along_axis(
            sequence_output, positions[:, :, None].astype(jnp.int32), axis=1))
        return jnp.tanh(dense(self.cfg, self.cfg.hidden_size, ("embed", None), "dense")(first))


class BertModel(nn.Module):
    """BERT (Devlin et al., 2019): embeddings -> encoder -> pooler.

    input_ids: [batch, seq] int. Optional, all [batch, seq] int: token_type_ids (default 0),
    attention_mask (1 = real token; default all 1), segment_ids (packed rows; see module doc),
    position_ids (default 0..seq-1, or restarting per segment when segment_ids are given).
    pool_positions [batch, k] int: pool the first token of each of k packed sequences instead.
    Returns BertOutput(sequence_output [batch, seq, hidden], pooled_output [batch, hidden] or
    [batch, k, hidden]).
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
                 position_ids: Optional[Array] = None,
                 pool_positions: Optional[Array] = None) -> BertOutput:
        input_ids = jnp.asarray(input_ids)
        if input_ids.ndim != 2:
            raise ValueError(f"input_ids must be [batch, seq], got shape {input_ids.shape}")
        batch, seq = input_ids.shape
        if seq > self.cfg.max_sequence_length:  # positions read rows up to seq - 1 + offset
            raise ValueError(f"sequence length {seq} exceeds max_position_embeddings="
                             f"{self.cfg.max_position_embeddings}"
                             + (f" less position_offset={self.cfg.position_offset}"
                                if self.cfg.position_offset else ""))
        if token_type_ids is None:
            token_type_ids = jnp.zeros_like(input_ids)
        if position_ids is None:
            position_ids = (positions_from_segments(segment_ids) if segment_ids is not None
                            else jnp.broadcast_to(jnp.arange(seq, dtype=jnp.int32), (batch, seq)))
        mask = Mask(attention_mask=None if attention_mask is None else jnp.asarray(attention_mask),
                    segment_ids=None if segment_ids is None else jnp.asarray(segment_ids))

        rotary = (rotary_angles(position_ids, self.cfg.head_dim)
                  if self.cfg.position_embedding_type == "rotary" else None)

        x = self.embeddings(input_ids, position_ids, token_type_ids, deterministic)
        x = self.encoder(x, mask, deterministic, rotary)
        pooled = self.pooler(x, pool_positions) if self.add_pooler else None
        return BertOutput(sequence_output=x, pooled_output=pooled)

    def attend(self, hidden: Array) -> Array:
        """Logits over the vocabulary with the (tied) word embeddings:
        [..., hidden] -> [..., vocab]."""
        return self.embeddings.attend(hidden)
