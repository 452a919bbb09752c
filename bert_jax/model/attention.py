"""The attention kernels behind one choice, BertConfig.attention: auto | xla | splash | cudnn.

    context = attend(query, key, value, mask, implementation=cfg.attention, dropout=...,
                     window=None)

query, key, value: [batch, seq, heads, head_dim] -> context [batch, seq, heads, head_dim],
softmax(Q K^T / sqrt(head_dim)) V per head, with keys masked by `mask` (a `Mask`: the padding
mask and the packed rows' segment ids, [batch, seq] each, never a [seq, seq] matrix; the XLA
composition builds its boolean mask from them, the kernels take them in their own forms).

`window`: None for global attention; an int for a sliding window (ModernBERT's
`local_attention`): query i may attend key j only where |i - j| <= window // 2, on top of the
padding and segment masks.

The kernels (`choose` states which one runs where):
- "xla": einsum with fp32 sums, softmax in fp32, attention-probability dropout as published. The
  reference: what BERT computed before this module existed, bit for bit.
- "splash": the Pallas TPU kernel of jax.experimental.pallas.ops.tpu.splash_attention (a flash
  attention: no [seq, seq] scores in memory). Padding and packing reach it as segment ids
  (padding: `PADDING_SEGMENT`, which no real token has), so it agrees with xla at real tokens
  (the outputs at padding, which nothing reads, differ). Off TPU it runs in interpret mode (how
  the CPU tests check it). Under a mesh it runs per device in `jax.shard_map`: batch over
  (data, fsdp), heads over tensor, as the activations are laid out (bert_jax.runtime.sharding).
- "cudnn": cuDNN's fused attention through jax.nn.dot_product_attention, the padding mask as
  sequence lengths (right padding, as every pipeline here pads).
- "local" (sliding windows only): bert_jax.model.local_attention, query blocks against their
  neighbouring key blocks in XLA, linear memory in the row length, on every platform; xla's
  arithmetic and dropout. Splash takes a window as its LocalMask (its blocks outside the band
  are skipped).
"""

from __future__ import annotations

import functools
import math
from typing import Callable, Optional

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.config.bert import ATTENTION_IMPLEMENTATIONS
from bert_jax.model import local_attention
from bert_jax.runtime import platform as platform_lib
from bert_jax.runtime.sharding import LOGICAL_AXIS_RULES, mesh_axes_for

Array = jax.Array

IMPLEMENTATIONS = ATTENTION_IMPLEMENTATIONS  # ("auto", "xla", "splash", "cudnn")
KERNELS = ("xla", "splash", "cudnn", "local")

# Splash attention: blocks of the sequence (queries and keys) are multiples of the TPU's 128
# lanes (with segment ids the kernel refuses others) and must divide the sequence; the largest
# of these that divides it is used.
SPLASH_BLOCKS = (512, 256, 128)
SPLASH_MIN_BLOCK = 128
# The segment id the splash kernel gets for padding tokens: no real token has it, so no real
# token attends to padding (and padding attends to padding, a row that is never empty).
PADDING_SEGMENT = int(np.iinfo(np.int32).min)
# cuDNN's flash attention: fp16/bf16, head_dim a multiple of 8 and at most 128 (256 on Hopper
# and later; 128 holds on every GPU it runs on).
CUDNN_DTYPES = ("bfloat16", "float16")
CUDNN_MAX_HEAD_DIM = 128

HEAD_AXES = ("batch", "length", "heads", "kv")  # [batch, seq, heads, head_dim]
TOKEN_AXES = ("batch", "length")  # [batch, seq]


@flax.struct.dataclass
class Mask:
    """Which keys each query may attend to, in the forms the kernels take.

    attention_mask: [batch, seq], 1 for real tokens, 0 for padding; None: every token is real.
    segment_ids: [batch, seq] int, the packed sequence of each token (1, 2, ...; 0 = padding);
    None: one sequence per row. A query attends to the real keys of its own segment.
    """

    attention_mask: Optional[Array] = None
    segment_ids: Optional[Array] = None

    @property
    def packed(self) -> bool:
        return self.segment_ids is not None

    def boolean(self, seq_len: int, window: Optional[int] = None) -> Array:
        """Boolean mask broadcastable to [batch, heads, seq, seq]: True where query i may attend
        key j (the xla kernel's form); with a window, only where |i - j| <= window // 2."""
        mask = jnp.ones((1, 1, 1, seq_len), dtype=bool)
        if window is not None:
            query_pos = jax.lax.broadcasted_iota(jnp.int32, (seq_len, seq_len), 0)
            key_pos = jax.lax.broadcasted_iota(jnp.int32, (seq_len, seq_len), 1)
            mask = mask & (jnp.abs(query_pos - key_pos) <= window_half(window))[None, None]
        if self.attention_mask is not None:
            mask = mask & (self.attention_mask.astype(bool)[:, None, None, :])
        if self.segment_ids is not None:
            segment_ids = self.segment_ids
            same_segment = segment_ids[:, :, None] == segment_ids[:, None, :]  # [batch, seq, seq]
            mask = mask & (same_segment & (segment_ids != 0)[:, None, :])[:, None, :, :]
        return mask

    def kernel_segment_ids(self) -> Optional[Array]:
        """[batch, seq] int32: each real token's segment (1 in an unpacked row), padding
        PADDING_SEGMENT (the splash kernel's form); None when every token is real and unpacked."""
        if self.attention_mask is None and self.segment_ids is None:
            return None
        real = None if self.attention_mask is None else self.attention_mask.astype(bool)
        if self.segment_ids is not None:
            ids = self.segment_ids.astype(jnp.int32)
            real = (ids != 0) if real is None else real & (ids != 0)
        else:
            ids = jnp.ones(real.shape, jnp.int32)
        return jnp.where(real, ids, jnp.int32(PADDING_SEGMENT))

    def seq_lengths(self) -> Optional[Array]:
        """[batch] int32, the real tokens of each row (cuDNN's form of right padding); None
        without a padding mask."""
        if self.attention_mask is None:
            return None
        return self.attention_mask.astype(bool).sum(axis=-1, dtype=jnp.int32)


def window_half(window: int) -> int:
    """The keys a sliding window of `window` reaches on each side of its query: window // 2
    (ModernBERT's symmetric window, (window // 2, window // 2)). A negative window or one that is
    not an int is a ValueError."""
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 0:
        raise ValueError(f"attention window must be an int >= 0 (or None for global attention), "
                         f"got {window!r}")
    return int(window) // 2


def splash_fits(seq_len: int) -> bool:
    """Whether the splash kernel takes a sequence of seq_len (queries and keys alike)."""
    return seq_len % SPLASH_MIN_BLOCK == 0


def cudnn_fits(dtype, head_dim: int, packed: bool) -> bool:
    """Whether cuDNN computes what xla does: half-precision operands, head_dim a multiple of 8
    and <= 128, and no packed rows (cuDNN does not honour segment ids; padding it takes as
    sequence lengths)."""
    return (jnp.dtype(dtype).name in CUDNN_DTYPES and head_dim % 8 == 0
            and head_dim <= CUDNN_MAX_HEAD_DIM and not packed)


def choose(requested: str, platform: str, *, dtype, head_dim: int, seq_len: int,
           with_dropout: bool, packed: bool, window: Optional[int] = None) -> str:
    """The kernel that runs: "xla", "splash", "cudnn" or "local".

    The rule:
    - "cudnn" asked for on a platform other than "gpu" is a ValueError (cuDNN runs nowhere else).
    - With attention-probability dropout (training with attention_probs_dropout_prob > 0):
      "xla" whatever was asked for; no other kernel here draws dropout.
    - "xla": "xla".
    - "auto": on "tpu" "splash", on "gpu" "cudnn", on "cpu" "xla", each where it fits (below).
    - "splash" (asked for, or by "auto"): "splash" where seq_len is a multiple of 128 (the
      kernel's block granularity), else "xla". On a platform other than TPU it runs in Pallas'
      interpret mode (for tests: slow, but the kernel's arithmetic).
    - "cudnn" (asked for, or by "auto"): "cudnn" where it computes the same as xla: dtype
      bfloat16 or float16, head_dim a multiple of 8 and at most 128, rows not packed (padding
      goes to cuDNN as sequence lengths, which assumes right padding); else "xla".
    An explicit kernel thus runs wherever it can compute the model, and xla elsewhere.

    With a sliding `window` (not None), after the same checks of `requested`: "splash" where
    splash would run for a global layer (asked for, or "auto" on TPU; no dropout; seq_len a
    multiple of 128), with the window as its local mask; else "local" (every other request and
    platform, with or without dropout: the blocked kernel, never a [seq, seq] tensor).
    """
    if requested not in IMPLEMENTATIONS:
        raise ValueError(f"attention implementation {requested!r} is unknown; choose one of "
                         f"{IMPLEMENTATIONS}")
    platform = platform_lib.normalise(platform)
    if requested == "cudnn" and platform != "gpu":
        raise ValueError(f"BertConfig.attention='cudnn' runs only on GPUs, and this program is "
                         f"compiled for {platform}: use attention='auto' or 'xla'")
    if window is not None:
        splash_asked = requested == "splash" or (requested == "auto" and platform == "tpu")
        return "splash" if splash_asked and not with_dropout and splash_fits(seq_len) else "local"
    if requested == "xla" or with_dropout:
        return "xla"
    if requested == "auto":
        requested = {"tpu": "splash", "gpu": "cudnn"}.get(platform, "xla")
    if requested == "splash":
        return "splash" if splash_fits(seq_len) else "xla"
    if requested == "cudnn":
        return "cudnn" if cudnn_fits(dtype, head_dim, packed) else "xla"
    return "xla"


def attend(query: Array, key: Array, value: Array, mask: Mask, *, implementation: str = "xla",
           dropout: Optional[Callable[[Array], Array]] = None,
           window: Optional[int] = None) -> Array:
    """softmax(Q K^T / sqrt(head_dim)) V per head by the kernel `choose` picks for
    `implementation` on the platform being compiled for (bert_jax.runtime.platform.current()).

    query, key, value: [batch, seq, heads, head_dim] -> [batch, seq, heads, head_dim].
    dropout: None, or what to apply to the attention probabilities (training); then xla runs.
    window: None (global attention), or a sliding window: query i attends key j only where
    |i - j| <= window // 2 (ModernBERT's local_attention).
    """
    _, seq_len, _, head_dim = query.shape
    if window is not None:
        window_half(window)  # a bad window fails here, whichever kernel runs
    kernel = choose(implementation, platform_lib.current(), dtype=query.dtype, head_dim=head_dim,
                    seq_len=seq_len, with_dropout=dropout is not None, packed=mask.packed,
                    window=window)
    if kernel == "local":
        return local_attention.local(query, key, value, window, mask.attention_mask,
                                     mask.segment_ids, dropout)
    if kernel == "splash":
        return splash(query, key, value, mask, window=window)
    if kernel == "cudnn":
        return cudnn(query, key, value, mask)
    return xla(query, key, value, mask, dropout, window=window)


def xla(query: Array, key: Array, value: Array, mask: Mask,
        dropout: Optional[Callable[[Array], Array]] = None,
        window: Optional[int] = None) -> Array:
    """The XLA composition (the reference); with a window, the band in its boolean mask (a
    [seq, seq] mask and scores: quadratic memory).

    Per-head products with operands in the compute dtype and fp32 sums (XLA:CPU runs bf16 x bf16
    -> fp32 on its fast kernel, and widens bf16 -> bf16 products to fp32 operands); softmax in
    fp32; attention-probability dropout, as published.
    """
    head_dim = query.shape[-1]
    scores = jnp.einsum("bqnh,bknh->bnqk", query, key,
                        preferred_element_type=jnp.float32) / jnp.sqrt(jnp.float32(head_dim))
    scores = jnp.where(mask.boolean(query.shape[1], window), scores,
                       jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1)
    if dropout is not None:
        probs = dropout(probs)
    return jnp.einsum("bnqk,bknh->bqnh", probs.astype(query.dtype), value,
                      preferred_element_type=jnp.float32).astype(query.dtype)


def cudnn(query: Array, key: Array, value: Array, mask: Mask) -> Array:
    """cuDNN's fused (flash) attention; padding as sequence lengths (right padding)."""
    if mask.packed:
        raise ValueError("cuDNN attention does not honour segment ids (packed rows): use xla")
    lengths = mask.seq_lengths()
    return jax.nn.dot_product_attention(query, key, value, query_seq_lengths=lengths,
                                        key_value_seq_lengths=lengths, implementation="cudnn")


# ----- splash ------------------------------------------------------------------------------------

def _splash_module():
    """jax's splash attention, imported where it is used (Pallas is not needed elsewhere)."""
    from jax.experimental.pallas.ops.tpu import splash_attention
    return splash_attention


def splash_block(seq_len: int) -> int:
    """The largest of SPLASH_BLOCKS that divides seq_len."""
    for block in SPLASH_BLOCKS:
        if seq_len % block == 0:
            return block
    raise ValueError(f"splash attention needs a sequence length that is a multiple of "
                     f"{SPLASH_MIN_BLOCK}, got {seq_len}")


def splash_mask(heads: int, seq_len: int, window: Optional[int] = None):
    """The static mask of the splash kernel, per head: every query may see every key (padding
    and packing come as segment ids), or with a window the keys within window // 2 of it
    (LocalMask: the kernel skips the blocks outside the band)."""
    sa = _splash_module()
    shape = (seq_len, seq_len)
    if window is None:
        return sa.MultiHeadMask([sa.FullMask(shape) for _ in range(heads)])
    half = window_half(window)
    return sa.MultiHeadMask([sa.LocalMask(shape, window_size=(half, half), offset=0)
                             for _ in range(heads)])


def _splash_kernel(heads: int, seq_len: int, interpret: bool, window: Optional[int] = None):
    """The splash MHA kernel for one example: q, k, v [heads, seq, head_dim] (and SegmentIds
    [seq]) -> [heads, seq, head_dim]. Built with one device's head count: under a mesh it is
    called per shard."""
    sa = _splash_module()
    block = splash_block(seq_len)
    block_sizes = sa.BlockSizes(
        block_q=block, block_kv=block, block_kv_compute=block,
        block_q_dkv=block, block_kv_dkv=block, block_kv_dkv_compute=block,
        block_q_dq=block, block_kv_dq=block)
    return sa.make_splash_mha_single_device(splash_mask(heads, seq_len, window),
                                            block_sizes=block_sizes, interpret=interpret)


def _splash_local(query: Array, key: Array, value: Array, segment_ids: Optional[Array],
                  interpret: bool, window: Optional[int] = None) -> Array:
    """splash on arrays that are whole on this device: [batch, seq, heads, head_dim]."""
    sa = _splash_module()
    _, seq_len, heads, head_dim = query.shape
    kernel = _splash_kernel(heads, seq_len, interpret, window)
    # The kernel does not scale the scores: scale the queries (in fp32, then the compute dtype;
    # exact when head_dim is a power of 4, as BERT's 64 is).
    query = (query.astype(jnp.float32) / math.sqrt(head_dim)).astype(query.dtype)
    q, k, v = (jnp.swapaxes(t, 1, 2) for t in (query, key, value))  # [batch, heads, seq, dim]
    if segment_ids is None:
        out = jax.vmap(kernel)(q, k, v)
    else:
        out = jax.vmap(lambda q, k, v, s: kernel(q, k, v, segment_ids=sa.SegmentIds(s, s)))(
            q, k, v, segment_ids)
    return jnp.swapaxes(out, 1, 2)


def splash(query: Array, key: Array, value: Array, mask: Mask,
           window: Optional[int] = None) -> Array:
    """The splash attention kernel (interpret mode off TPU); with a window, its LocalMask. Under
    a mesh (an abstract mesh in context, as `bert_jax.runtime.sharding.activation_sharding` sets),
    per device in jax.shard_map with the activations' layout: a Pallas TPU kernel is not
    partitioned by XLA."""
    interpret = platform_lib.current() != "tpu"
    segment_ids = mask.kernel_segment_ids()
    mesh = jax.sharding.get_abstract_mesh()
    local = functools.partial(_splash_local, interpret=interpret, window=window)
    # Axes already manual (inside bert_jax.train.fsdp's shard_map) need no second shard_map.
    auto_axes = set() if mesh.empty else set(mesh.axis_names) - set(mesh.manual_axes)
    if all(mesh.shape[a] == 1 for a in auto_axes):
        return local(query, key, value, segment_ids)
    rules = nn.get_logical_axis_rules() or LOGICAL_AXIS_RULES
    head_spec = mesh_axes_for(HEAD_AXES, query.shape, mesh, rules)
    token_spec = jax.sharding.PartitionSpec(*head_spec[:2])  # [batch, seq] as the heads' first two
    if segment_ids is None:
        body = lambda q, k, v: local(q, k, v, None)
        specs, args = (head_spec,) * 3, (query, key, value)
    else:
        body, specs, args = local, (head_spec,) * 3 + (token_spec,), (query, key, value,
                                                                      segment_ids)
    return jax.shard_map(body, mesh=mesh, in_specs=specs, out_specs=head_spec,
                         axis_names=auto_axes, check_vma=False)(*args)
