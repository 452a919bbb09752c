"""Sliding-window attention (attention.attend(..., window=w)): the band in xla's boolean mask, the
blocked kernel of bert_jax.model.local_attention against that masked reference (outputs and
gradients, padding, packed rows, sequences that are not a multiple of the block, dropout), the
rule that routes windowed calls, the kernel's memory (no [seq, seq] tensor in its program, XLA's
temporary bytes linear in the row length) and splash's LocalMask in interpret mode (the memory
benchmark's own tests: tests/scripts/test_long_rows_memory.py).

Tolerances against the masked reference (inputs ~N(0, 1), head_dim 16), the measured maxima in
brackets: fp32 outputs and q/k/v gradients 1e-6 (a few 1e-7: the same sums in another order),
bf16 outputs and gradients one bf16 ulp, 2^-7 relative to max(1, |value|) (outputs and q
gradients equal, k and v gradients at most one ulp apart: fp32 sums in another order, then
rounded to bf16; seeds 2-4, every mask); splash (interpret mode) against the reference 2e-5 in
fp32, as tests/model/test_attention.py allows the global splash kernel.
"""


import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.model import attention, local_attention
from bert_jax.model.attention import Mask

F32, BF16 = jnp.float32, jnp.bfloat16
B, S, H, D = 2, 100, 2, 16  # S: not a multiple of the blocks below


def _inputs(seed, shape=(B, S, H, D), dtype=F32):
    rng = np.random.default_rng(seed)
    return tuple(jnp.asarray(rng.normal(size=shape), dtype) for _ in range(3))


def _segments(seq=S) -> np.ndarray:
    """Packed rows: three sequences and padding (0) in the first, two in the second."""
    seg = np.zeros((B, seq), np.int32)
    seg[0, :30], seg[0, 30:61], seg[0, 61:88] = 1, 2, 3
    seg[1, :45], seg[1, 45:] = 1, 2
    return seg


def _padding(seq=S) -> np.ndarray:
    mask = np.ones((B, seq), np.int32)
    mask[1, 71:] = 0
    return mask


MASKS = {
    "none": lambda: Mask(),
    "padded": lambda: Mask(attention_mask=jnp.asarray(_padding())),
    "packed": lambda: Mask(segment_ids=jnp.asarray(_segments())),
    "both": lambda: Mask(attention_mask=jnp.asarray(_padding()),
                         segment_ids=jnp.asarray(_segments())),
}


def _boolean_reference(mask: Mask, seq: int, window) -> np.ndarray:
    """[batch, seq, seq]: query i sees key j, from the definitions, in numpy."""
    real = np.ones((B, seq), bool)
    if mask.attention_mask is not None:
        real &= np.asarray(mask.attention_mask).astype(bool)
    same = np.ones((B, seq, seq), bool)
    if mask.segment_ids is not None:
        seg = np.asarray(mask.segment_ids)
        real &= seg != 0
        same = seg[:, :, None] == seg[:, None, :]
    i = np.arange(seq)
    band = np.ones((seq, seq), bool) if window is None else (
        np.abs(i[:, None] - i[None, :]) <= window // 2)
    return real[:, None, :] & same & band[None]


def _seen(mask: Mask, window, seq=S) -> np.ndarray:
    """[batch, seq]: queries that see at least one key (where the kernels must agree)."""
    return _boolean_reference(mask, seq, window).any(axis=-1)


def _max_diff(a, b, where=None) -> float:
    d = np.abs(np.asarray(a, np.float32) - np.asarray(b, np.float32))
    return float((d if where is None else d[where]).max())


# ----- the band in xla's mask ---------------------------------------------------------------------

@pytest.mark.parametrize("window", [None, 0, 1, 6, 7, 40])
@pytest.mark.parametrize("mask_kind", ["padded", "both"])
def test_boolean_mask_with_a_window(mask_kind, window):
    mask = MASKS[mask_kind]()
    got = np.broadcast_to(np.asarray(mask.boolean(S, window)), (B, 1, S, S))[:, 0]
    np.testing.assert_array_equal(got, _boolean_reference(mask, S, window))


def test_window_none_is_global_attention_bit_for_bit():
    q, k, v = _inputs(0)
    mask = MASKS["both"]()
    for impl in ("auto", "xla"):
        np.testing.assert_array_equal(attention.attend(q, k, v, mask, implementation=impl),
                                      attention.xla(q, k, v, mask))
        np.testing.assert_array_equal(
            attention.attend(q, k, v, mask, implementation=impl, window=None),
            attention.xla(q, k, v, mask))


@pytest.mark.parametrize("window", [-1, 2.0, "128", True])
def test_a_bad_window_is_a_value_error(window):
    q, k, v = _inputs(0)
    with pytest.raises(ValueError, match="attention window must be an int >= 0"):
        attention.attend(q, k, v, Mask(), window=window)


# ----- the rule -----------------------------------------------------------------------------------

# (requested, platform, with_dropout, seq_len) -> kernel, all with a window of 128, bf16, head 64
WINDOWED_RULE = [
    (("auto", "cpu", False, 512), "local"),
    (("auto", "cpu", True, 512), "local"),
    (("xla", "cpu", False, 512), "local"),
    (("auto", "gpu", False, 512), "local"),
    (("cudnn", "gpu", False, 512), "local"),
    (("auto", "tpu", False, 512), "splash"),  # splash's LocalMask, as for global layers
    (("auto", "tpu", False, 200), "local"),  # not a multiple of 128
    (("auto", "tpu", True, 512), "local"),  # dropout: splash draws none
    (("xla", "tpu", False, 512), "local"),
    (("splash", "cpu", False, 256), "splash"),  # interpret mode
    (("splash", "gpu", False, 100), "local"),
]


@pytest.mark.parametrize("args, expected", WINDOWED_RULE,
                         ids=["-".join(map(str, a)) for a, _ in WINDOWED_RULE])
def test_choose_with_a_window(args, expected):
    requested, platform_name, with_dropout, seq_len = args
    assert attention.choose(requested, platform_name, dtype=BF16, head_dim=64, seq_len=seq_len,
                            with_dropout=with_dropout, packed=False, window=128) == expected
    # The same call without a window is the global rule (tests/model/test_attention.py), never
    # local.
    assert attention.choose(requested, platform_name, dtype=BF16, head_dim=64, seq_len=seq_len,
                            with_dropout=with_dropout, packed=False) != "local"


def test_cudnn_off_gpu_is_still_an_error_with_a_window():
    with pytest.raises(ValueError, match="attention='cudnn' runs only on GPUs"):
        attention.choose("cudnn", "cpu", dtype=BF16, head_dim=64, seq_len=512,
                         with_dropout=False, packed=False, window=128)


def test_attend_routes_a_window_to_the_blocked_kernel_on_cpu():
    q, k, v = _inputs(1)
    mask = MASKS["both"]()
    direct = local_attention.local(q, k, v, 16, mask.attention_mask, mask.segment_ids)
    for impl in ("auto", "xla"):
        np.testing.assert_array_equal(
            attention.attend(q, k, v, mask, implementation=impl, window=16), direct)


# ----- the blocked kernel against the masked reference ------------------------------------------

def _out_and_grads(fn, q, k, v, cotangent):
    def run(q, k, v):
        out, vjp = jax.vjp(fn, q, k, v)
        return out, vjp(cotangent)
    return jax.jit(run)(q, k, v)


def _compare(mask_kind, window, block, dtype, tol, seed=2, relative=False):
    """The blocked kernel against the masked reference: outputs where a query sees a key, and
    the q/k/v gradients; differences absolute, or with relative=True divided by max(1, |ref|)."""
    mask = MASKS[mask_kind]()
    seen = _seen(mask, window)
    q, k, v = _inputs(seed, dtype=dtype)
    rng = np.random.default_rng(seed + 100)
    # The cotangent is 0 where a query sees no key: only the outputs elsewhere must agree.
    cotangent = jnp.asarray(rng.normal(size=(B, S, H, D)) * seen[:, :, None, None], dtype)
    reference = _out_and_grads(lambda q, k, v: attention.xla(q, k, v, mask, window=window),
                               q, k, v, cotangent)
    blocked = _out_and_grads(
        lambda q, k, v: local_attention.local(q, k, v, window, mask.attention_mask,
                                              mask.segment_ids, block=block),
        q, k, v, cotangent)
    assert blocked[0].dtype == dtype and blocked[0].shape == (B, S, H, D)
    pairs = [(blocked[0], reference[0], seen, "output")] + [
        (got, want, None, name) for got, want, name in zip(blocked[1], reference[1], "qkv")]
    for got, want, where, name in pairs:
        got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
        scale = np.maximum(1.0, np.abs(want)) if relative else 1.0
        assert _max_diff(got / scale, want / scale, where) <= tol, name


@pytest.mark.parametrize("mask_kind", list(MASKS))
def test_blocked_matches_masked_xla_fp32(mask_kind):
    _compare(mask_kind, 16, None, F32, 1e-6)


@pytest.mark.parametrize("window, block", [(0, None), (1, None), (33, None), (16, 3), (16, 64),
                                           (250, None)],
                         ids=["w0", "w1", "w33", "block-under-half", "block-over-half",
                              "window-over-seq"])
def test_blocked_matches_masked_xla_any_window_and_block(window, block):
    _compare("both", window, block, F32, 1e-6)


def test_blocked_matches_masked_xla_bf16():
    """One bf16 ulp (2^-7 relative to values >= 1): the outputs and the q gradients come out
    equal, the k and v gradients (sums over the queries of a block, in another order) differ
    by at most one ulp."""
    _compare("both", 16, None, BF16, 2.0 ** -7, relative=True)


def test_layout():
    assert local_attention.layout(128, 8192) == (64, 128, 1)  # ModernBERT's window
    assert local_attention.layout(128, 100) == (64, 2, 1)
    assert local_attention.layout(128, 50) == (50, 1, 0)  # one block: no neighbours
    assert local_attention.layout(16, 100, block=3) == (3, 34, 3)
    assert local_attention.keys_per_query(128, 8192) == 192


# ----- dropout ----------------------------------------------------------------------------------

def test_dropout_gets_the_fp32_probabilities_of_the_band():
    mask = MASKS["packed"]()
    q, k, v = _inputs(3)
    seen = {}

    def record(probs):
        seen["probs"] = probs
        return probs

    out = local_attention.local(q, k, v, 16, None, mask.segment_ids, dropout=record)
    probs = seen["probs"]
    block, blocks, reach = local_attention.layout(16, S)
    assert probs.dtype == F32 and probs.shape == (B, H, blocks, block, (2 * reach + 1) * block)
    allowed = np.asarray(local_attention.allowed(None, mask.segment_ids, B, S, 16, block,
                                                 blocks, reach))
    p = np.asarray(probs)
    rows = allowed.any(-1)  # queries that see a key (the others average all K keys)
    outside = ~allowed & rows[..., None]  # keys such a query may not see: probability 0
    assert outside.any() and (p[np.broadcast_to(outside[:, None], p.shape)] == 0).all()
    sums = np.moveaxis(p.sum(-1), 1, -1)[rows]  # [rows, heads]: each sums to 1
    np.testing.assert_allclose(sums, 1.0, rtol=1e-6)
    # A dropout that drops everything leaves nothing: it is applied before P V.
    zero = local_attention.local(q, k, v, 16, None, mask.segment_ids, dropout=lambda p: p * 0)
    assert float(jnp.abs(zero).max()) == 0.0 and float(jnp.abs(out).max()) > 0.0


class _Windowed(nn.Module):
    """Attention with attention-probability dropout, as SelfAttention passes it."""

    rate: float

    @nn.compact
    def __call__(self, q, k, v, mask, deterministic):
        dropout = (None if deterministic else
                   lambda p: nn.Dropout(self.rate)(p, deterministic=False))
        return attention.attend(q, k, v, mask, implementation="auto", dropout=dropout, window=16)


def test_dropout_in_a_module():
    mask = MASKS["padded"]()
    q, k, v = _inputs(4)
    module = _Windowed(0.5)
    run = lambda deterministic, key: module.apply({}, q, k, v, mask, deterministic,
                                                  rngs={"dropout": jax.random.key(key)})
    off = run(True, 0)
    np.testing.assert_array_equal(off, local_attention.local(q, k, v, 16, mask.attention_mask))
    first, again, other = run(False, 0), run(False, 0), run(False, 1)
    np.testing.assert_array_equal(first, again)  # the same key draws the same mask
    assert _max_diff(first, off) > 0.1 and _max_diff(first, other) > 0.1


# ----- memory -----------------------------------------------------------------------------------

def _avals(jaxpr):
    """The abstract values of every equation's outputs, nested jaxprs (pjit, custom_vjp) too."""
    for eqn in jaxpr.eqns:
        for var in eqn.outvars:
            yield var.aval
        for param in eqn.params.values():
            for sub in param if isinstance(param, (tuple, list)) else (param,):
                sub = getattr(sub, "jaxpr", sub)  # a ClosedJaxpr's Jaxpr
                if hasattr(sub, "eqns"):
                    yield from _avals(sub)


def test_no_seq_by_seq_tensor_in_forward_or_gradient():
    """Every value in the program of the forward and the q/k/v gradients has fewer elements
    than one [seq, seq] matrix (here batch heads seq K is a quarter of it)."""
    seq, window = 512, 32
    shape = (1, seq, 2, 8)
    q, k, v = _inputs(5, shape)
    segment_ids = jnp.ones((1, seq), jnp.int32)

    def loss(q, k, v):
        return jnp.sum(local_attention.local(q, k, v, window, None, segment_ids) ** 2)

    jaxpr = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1, 2)))(q, k, v).jaxpr
    largest = max(int(np.prod(a.shape)) for a in _avals(jaxpr) if hasattr(a, "shape"))
    assert largest < seq * seq, largest
    # The same with the masked reference holds [batch, heads, seq, seq] scores.
    jaxpr = jax.make_jaxpr(jax.grad(
        lambda q, k, v: jnp.sum(attention.xla(q, k, v, Mask(segment_ids=segment_ids),
                                              window=window) ** 2),
        argnums=(0, 1, 2)))(q, k, v).jaxpr
    assert max(int(np.prod(a.shape)) for a in _avals(jaxpr) if hasattr(a, "shape")) >= 2 * seq * seq


def _temp_bytes(fn, seq: int) -> int:
    shape = (1, seq, 2, 8)
    args = [jax.ShapeDtypeStruct(shape, F32)] * 3 + [jax.ShapeDtypeStruct((1, seq), jnp.int32)]
    grad = jax.grad(lambda q, k, v, s: jnp.sum(fn(q, k, v, s) ** 2), argnums=(0, 1, 2))
    return jax.jit(grad).lower(*args).compile().memory_analysis().temp_size_in_bytes


def test_compiled_temporary_memory_is_linear_in_the_row_length():
    """XLA's temporary bytes of the forward and gradient for rows 4 times as long grow 4 times
    (measured 4.00 from 2,048 to 8,192 tokens; the masked reference's 16.0 from 1,024 to 4,096.
    From 1,024 to 2,048 the blocked kernel's grow 2.4x: XLA:CPU places small buffers
    differently.)"""
    blocked = lambda q, k, v, s: local_attention.local(q, k, v, 32, None, s)
    ratio = _temp_bytes(blocked, 8192) / _temp_bytes(blocked, 2048)
    assert 3.5 < ratio < 4.5, ratio


# ----- splash's local mask (Pallas interpret mode) ----------------------------------------------

def test_splash_local_mask_matches_masked_xla():
    """Rows of 384 in three 128-token blocks, window 64: the first and last blocks never meet,
    so the kernel skips blocks; padded and packed rows."""
    seq, window = 384, 64
    rng = np.random.default_rng(6)
    q, k, v = (jnp.asarray(rng.normal(size=(B, seq, H, D)), F32) for _ in range(3))
    segment_ids = np.ones((B, seq), np.int32)
    segment_ids[0, 150:] = 2
    segment_ids[1, 300:] = 0
    mask = Mask(segment_ids=jnp.asarray(segment_ids))
    seen = _seen(mask, window, seq)
    cotangent = jnp.asarray(rng.normal(size=(B, seq, H, D)) * seen[:, :, None, None], F32)
    reference = _out_and_grads(lambda q, k, v: attention.xla(q, k, v, mask, window=window),
                               q, k, v, cotangent)
    splash = _out_and_grads(lambda q, k, v: attention.attend(q, k, v, mask, window=window,
                                                             implementation="splash"),
                            q, k, v, cotangent)
    assert _max_diff(splash[0], reference[0], seen) < 2e-5
    for name, got, want in zip("qkv", splash[1], reference[1]):
        assert _max_diff(got, want) < 2e-5, name
    # The local mask reaches the kernel: without it the outputs are global attention's.
    global_out = attention.splash(q, k, v, mask)
    assert _max_diff(global_out, reference[0], seen) > 1e-2
