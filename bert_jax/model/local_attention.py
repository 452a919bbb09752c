"""Sliding-window (local) attention at linear memory: only the key blocks a query block can see.

A window of w (ModernBERT's `local_attention`) lets query i attend key j only where
|i - j| <= half = w // 2. The sequence is cut into blocks of `block` tokens (by default half,
so a query block reaches no further than its neighbouring key blocks); query block c is scored
against key blocks c - r .. c + r, r = ceil(half / block), concatenated into K = (2r + 1) block
keys. Scores, probabilities and the mask are then [batch, heads, seq, K]: linear in the row
length, never [seq, seq]. A sequence that is not a multiple of the block is padded internally
(the padding is never a key and its outputs are cut off).

Within those K keys the mask is the one `attention.xla` builds, restricted: a key is seen when
it is a real token (padding mask; segment id != 0 in packed rows), of the query's segment
(packed rows), inside the window, and inside the sequence (the blocks before the first and after
the last one are out of range). The arithmetic is xla's: scores Q K^T / sqrt(head_dim) with fp32
sums, masked scores set to float32's minimum, softmax in fp32, the dropout given (training)
applied to the probabilities, P V with P in the compute dtype and fp32 sums. So at every query
that sees at least one key the output is xla's with the band in its mask up to the order of
fp32 sums, and the gradients (JAX's, through the same operations) likewise. A query that sees
no key at all (padding in a packed row, or padding further than half from every real token)
gets a uniform average over its K keys where xla averages all seq keys: an output nothing reads.
"""

from __future__ import annotations

from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array


def default_block(window: int, seq_len: int) -> int:
    """The query block: half the window (each query block then needs its own key block and one
    on each side), at least 1, at most the sequence."""
    return max(1, min(window // 2, seq_len))


def layout(window: int, seq_len: int, block: Optional[int] = None) -> tuple[int, int, int]:
    """(block, blocks, reach): the block size, the number of query blocks (seq_len rounded up
    to whole blocks) and the neighbouring key blocks on each side a query block is scored
    against (ceil(half / block), no more than there are other blocks)."""
    if window < 0:
        raise ValueError(f"attention window must be >= 0, got {window}")
    block = default_block(window, seq_len) if block is None else block
    if block < 1:
        raise ValueError(f"local attention block must be >= 1, got {block}")
    blocks = -(-seq_len // block)
    reach = min(-(-(window // 2) // block), blocks - 1)
    return block, blocks, reach


def _neighbours(x: Array, block: int, blocks: int, reach: int) -> Array:
    """Each block's neighbourhood: x [batch, (blocks + 2 reach) block, ...] (reach blocks of
    padding either side) -> [batch, blocks, (2 reach + 1) block, ...], key blocks c - reach ..
    c + reach for query block c."""
    batch, rest = x.shape[0], x.shape[2:]
    shifted = [x[:, o * block:(o + blocks) * block].reshape(batch, blocks, block, *rest)
               for o in range(2 * reach + 1)]
    return jnp.concatenate(shifted, axis=2) if len(shifted) > 1 else shifted[0]


def _pad_tokens(x: Array, before: int, after: int, value=0) -> Array:
    """Pad axis 1 (the tokens) of x [batch, seq, ...]."""
    widths = [(0, 0), (before, after)] + [(0, 0)] * (x.ndim - 2)
    return jnp.pad(x, widths, constant_values=value)


def allowed(attention_mask: Optional[Array], segment_ids: Optional[Array], batch: int,
            seq_len: int, window: int, block: int, blocks: int, reach: int) -> Array:
    """Which of its K keys each query may attend: [batch, blocks, block, K] bool.

    attention_mask, segment_ids: [batch, seq] or None, as in attention.Mask.
    """
    padded = blocks * block
    edge = reach * block
    real = jnp.ones((batch, seq_len), bool)
    if attention_mask is not None:
        real = real & attention_mask.astype(bool)
    if segment_ids is not None:
        real = real & (segment_ids != 0)
    # Keys: real tokens inside the sequence; the internal padding and the edges are never seen.
    key_real = _neighbours(_pad_tokens(real, edge, padded - seq_len + edge, False),
                           block, blocks, reach)  # [batch, blocks, K]
    # The band depends only on a query's and a key's places in their blocks: query i of block c
    # is token c block + i, key k of its neighbourhood token (c - reach) block + k.
    query_place = np.arange(block)[:, None]
    key_place = np.arange((2 * reach + 1) * block)[None, :] - edge
    band = jnp.asarray(np.abs(key_place - query_place) <= window // 2)  # [block, K]
    mask = band[None, None] & key_real[:, :, None, :]
    if segment_ids is not None:
        segment_ids = segment_ids.astype(jnp.int32)
        query_segment = _pad_tokens(segment_ids, 0, padded - seq_len).reshape(batch, blocks, block)
        key_segment = _neighbours(_pad_tokens(segment_ids, edge, padded - seq_len + edge),
                                  block, blocks, reach)
        mask = mask & (query_segment[:, :, :, None] == key_segment[:, :, None, :])
    return mask


def local(query: Array, key: Array, value: Array, window: int,
          attention_mask: Optional[Array] = None, segment_ids: Optional[Array] = None,
          dropout: Optional[Callable[[Array], Array]] = None,
          block: Optional[int] = None) -> Array:
    """Sliding-window attention, blocks of queries against their neighbouring key blocks.

    query, key, value: [batch, seq, heads, head_dim] -> [batch, seq, heads, head_dim].
    window: query i attends key j only where |i - j| <= window // 2.
    attention_mask, segment_ids: [batch, seq] or None (attention.Mask's fields).
    dropout: None, or what to apply to the probabilities [batch, heads, blocks, block, K] (fp32).
    block: the query block (default window // 2); any block >= 1 computes the same.
    """
    batch, seq_len, heads, head_dim = query.shape
    block, blocks, reach = layout(window, seq_len, block)
    padded, edge = blocks * block, reach * block
    q = _pad_tokens(query, 0, padded - seq_len).reshape(batch, blocks, block, heads, head_dim)
    k, v = (_neighbours(_pad_tokens(t, edge, padded - seq_len + edge), block, blocks, reach)
            for t in (key, value))  # [batch, blocks, K, heads, head_dim]
    scores = jnp.einsum("bcqnh,bcknh->bncqk", q, k,
                        preferred_element_type=jnp.float32) / jnp.sqrt(jnp.float32(head_dim))
    mask = allowed(attention_mask, segment_ids, batch, seq_len, window, block, blocks, reach)
    scores = jnp.where(mask[:, None], scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1)  # [batch, heads, blocks, block, K]
    if dropout is not None:
        probs = dropout(probs)
    out = jnp.einsum("bncqk,bcknh->bcqnh", probs.astype(query.dtype), v,
                     preferred_element_type=jnp.float32).astype(query.dtype)
    return out.reshape(batch, padded, heads, head_dim)[:, :seq_len]


def keys_per_query(window: int, seq_len: int, block: Optional[int] = None) -> int:
    """K, the keys each query is scored against (2 reach + 1) block: what replaces seq_len in
    the memory of scores and probabilities."""
    block, _, reach = layout(window, seq_len, block)
    return (2 * reach + 1) * block

