"""BertConfig.attention (bert_jax.model.attention): the rule that picks the kernel, the splash
kernel (Pallas interpret mode on CPU) against the XLA composition, in the attention function and
in the whole model, `auto` leaving BERT on CPU bit for bit as it was, and the kernel in the
program compiled for a TPU slice (jax.experimental.topologies; skipped without libtpu).

Tolerances (splash against xla, seq 128, head_dim 16, inputs ~N(0, 1)), measured max abs
differences at real tokens in brackets: fp32 outputs and gradients 2e-5 (<= 8e-7); bf16 outputs
and the gradients w.r.t. q and k 3e-2 (<= 8e-3: one or two bf16 ulps at values ~1-2, xla rounds
the probabilities to bf16 before P V, the kernel keeps them in fp32), w.r.t. v 1e-2 (<= 1e-3);
the fp32 model's sequence outputs 1e-4 (<= 4e-7), its parameter gradients 1e-5 relative to
the largest entry of each (or absolute below 1) (<= ~1e-7).
"""

import dataclasses
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bert_jax import BertConfig, BertModel
from bert_jax.config.bert import ConfigError
from bert_jax.model import attention
from bert_jax.model.attention import Mask
from bert_jax.runtime import platform, sharding

B, S, H, D = 2, 128, 2, 16  # the kernel's smallest sequence: one 128-token block
F32, BF16, F16 = jnp.float32, jnp.bfloat16, jnp.float16

# ----- the rule -----------------------------------------------------------------------------------

# (requested, platform, dtype, head_dim, seq_len, with_dropout, packed) -> kernel
RULE = [
    # auto
    (("auto", "cpu", BF16, 64, 512, False, False), "xla"),
    (("auto", "cpu", F32, 64, 512, False, True), "xla"),
    (("auto", "tpu", BF16, 64, 512, False, False), "splash"),
    (("auto", "tpu", F32, 64, 512, False, True), "splash"),  # packed rows: segment ids
    (("auto", "tpu", BF16, 64, 128, False, True), "splash"),
    (("auto", "tpu", BF16, 64, 200, False, False), "xla"),  # not a multiple of 128
    (("auto", "tpu", BF16, 64, 64, False, False), "xla"),
    (("auto", "tpu", BF16, 64, 512, True, False), "xla"),  # attention dropout
    (("auto", "gpu", BF16, 64, 512, False, False), "cudnn"),
    (("auto", "gpu", F16, 128, 100, False, False), "cudnn"),
    (("auto", "cuda", BF16, 64, 512, False, False), "cudnn"),  # a device's platform name
    (("auto", "gpu", F32, 64, 512, False, False), "xla"),  # fp32
    (("auto", "gpu", BF16, 60, 512, False, False), "xla"),  # head_dim not a multiple of 8
    (("auto", "gpu", BF16, 256, 512, False, False), "xla"),  # head_dim > 128
    (("auto", "gpu", BF16, 64, 512, False, True), "xla"),  # packed rows: cuDNN ignores them
    (("auto", "gpu", BF16, 64, 512, True, False), "xla"),  # attention dropout
    # xla
    (("xla", "tpu", BF16, 64, 512, False, False), "xla"),
    (("xla", "gpu", BF16, 64, 512, False, False), "xla"),
    (("xla", "cpu", F32, 64, 512, False, False), "xla"),
    # splash: anywhere (interpret mode off TPU), where the sequence fits and without dropout
    (("splash", "tpu", BF16, 64, 512, False, True), "splash"),
    (("splash", "cpu", F32, 16, 128, False, True), "splash"),
    (("splash", "gpu", BF16, 64, 256, False, False), "splash"),
    (("splash", "cpu", F32, 16, 100, False, False), "xla"),
    (("splash", "tpu", BF16, 64, 512, True, False), "xla"),
    # cudnn: on GPU where it computes what xla does
    (("cudnn", "gpu", BF16, 64, 512, False, False), "cudnn"),
    (("cudnn", "gpu", F32, 64, 512, False, False), "xla"),
    (("cudnn", "gpu", BF16, 64, 512, False, True), "xla"),
    (("cudnn", "gpu", BF16, 64, 512, True, False), "xla"),
]


@pytest.mark.parametrize("args, expected", RULE, ids=[
    "-".join(str(a if not hasattr(a, "dtype") else jnp.dtype(a).name) for a in args)
    for args, _ in RULE])
def test_choose(args, expected):
    requested, platform_name, dtype, head_dim, seq_len, with_dropout, packed = args
    assert attention.choose(requested, platform_name, dtype=dtype, head_dim=head_dim,
                            seq_len=seq_len, with_dropout=with_dropout, packed=packed) == expected


@pytest.mark.parametrize("platform_name", ["cpu", "tpu"])
def test_cudnn_off_gpu_is_an_error(platform_name):
    with pytest.raises(ValueError, match=r"attention='cudnn' runs only on GPUs.*compiled for "
                                         + platform_name):
        attention.choose("cudnn", platform_name, dtype=BF16, head_dim=64, seq_len=128,
                         with_dropout=False, packed=False)
    with pytest.raises(ValueError, match="unknown"):
        attention.choose("flash", platform_name, dtype=BF16, head_dim=64, seq_len=128,
                         with_dropout=False, packed=False)


# ----- the config field -----------------------------------------------------------------------

def test_config_field():
    assert BertConfig().attention == "auto"
    for value in ("auto", "xla", "splash", "cudnn"):
        assert BertConfig(attention=value).attention == value
    with pytest.raises(ConfigError, match=r"BertConfig\.attention='flash'"):
        BertConfig(attention="flash")
    # How the model runs is no part of the Hugging Face config, either way.
    assert "attention" not in BertConfig(attention="splash").to_hf_dict()
    assert BertConfig.from_hf_dict(BertConfig(attention="xla").to_hf_dict()).attention == "auto"
    # A model config saved before the field existed restores with its default.
    saved = {k: v for k, v in dataclasses.asdict(BertConfig()).items() if k != "attention"}
    assert BertConfig(**saved) == BertConfig()


# ----- splash against xla -----------------------------------------------------------------------

def _segments() -> np.ndarray:
    """Packed rows: three and two sequences, the first row ending in padding (0)."""
    seg = np.zeros((B, S), np.int32)
    seg[0, :40], seg[0, 40:90], seg[0, 90:120] = 1, 2, 3
    seg[1, :70], seg[1, 70:] = 1, 2
    return seg


def _padding() -> np.ndarray:
    mask = np.ones((B, S), np.int32)
    mask[1, 100:] = 0
    return mask


MASKS = {
    "packed": lambda: Mask(segment_ids=jnp.asarray(_segments())),
    "padded": lambda: Mask(attention_mask=jnp.asarray(_padding())),
}


def _real(mask: Mask) -> np.ndarray:
    real = np.ones((B, S), bool)
    if mask.attention_mask is not None:
        real &= np.asarray(mask.attention_mask).astype(bool)
    if mask.segment_ids is not None:
        real &= np.asarray(mask.segment_ids) != 0
    return real


def _max_diff(a, b, where=None) -> float:
    d = np.abs(np.asarray(a, np.float32) - np.asarray(b, np.float32))
    return float((d if where is None else d[where]).max())


@pytest.mark.parametrize("dtype, tol_out, tol_v", [(F32, 2e-5, 2e-5), (BF16, 3e-2, 1e-2)],
                         ids=["fp32", "bf16"])
@pytest.mark.parametrize("mask_kind", list(MASKS))
def test_splash_matches_xla(mask_kind, dtype, tol_out, tol_v):
    mask = MASKS[mask_kind]()
    real = _real(mask)
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.normal(size=(B, S, H, D)), dtype) for _ in range(3))
    # The cotangent is 0 at padding: only the outputs at real tokens must agree.
    cotangent = jnp.asarray(rng.normal(size=(B, S, H, D)) * real[:, :, None, None], dtype)

    def out_and_grads(fn):
        def run(q, k, v):
            out, vjp = jax.vjp(lambda q, k, v: fn(q, k, v, mask), q, k, v)
            return out, vjp(cotangent)
        return jax.jit(run)(q, k, v)

    out_xla, grads_xla = out_and_grads(attention.xla)
    out_splash, grads_splash = out_and_grads(attention.splash)
    assert out_splash.dtype == dtype and out_splash.shape == (B, S, H, D)
    assert _max_diff(out_splash, out_xla, real) < tol_out
    for name, g_splash, g_xla, tol in zip("qkv", grads_splash, grads_xla,
                                          (tol_out, tol_out, tol_v)):
        assert _max_diff(g_splash, g_xla) < tol, name


def test_splash_without_a_mask_and_with_both():
    rng = np.random.default_rng(1)
    q, k, v = (jnp.asarray(rng.normal(size=(B, S, H, D)), F32) for _ in range(3))
    both = Mask(attention_mask=jnp.asarray(_padding()), segment_ids=jnp.asarray(_segments()))
    for mask in (Mask(), both):
        real = _real(mask)
        out = jax.jit(lambda q, k, v, m: (attention.xla(q, k, v, m), attention.splash(q, k, v, m))
                      )(q, k, v, mask)
        assert _max_diff(out[1], out[0], real) < 2e-5


# ----- the model --------------------------------------------------------------------------------

TINY = BertConfig(vocab_size=64, hidden_size=H * D, num_hidden_layers=2, num_attention_heads=H,
                  intermediate_size=64, max_position_embeddings=S, hidden_dropout_prob=0.0,
                  attention_probs_dropout_prob=0.0)


def _batch():
    ids = jax.random.randint(jax.random.key(1), (B, S), 1, TINY.vocab_size, dtype=jnp.int32)
    return ids, jnp.asarray(_segments()), jnp.asarray(_padding())


def _params(cfg):
    ids, _, _ = _batch()
    return nn.meta.unbox(BertModel(cfg).init(jax.random.key(0), ids)["params"])


def test_model_with_splash_matches_xla():
    """Sequence outputs at real tokens: unrolled layers, rows packed and padded."""
    params = _params(TINY)
    ids, segment_ids, attention_mask = _batch()
    real = _real(Mask(attention_mask, segment_ids))

    def run(impl):
        model = BertModel(TINY.replace(attention=impl))
        return jax.jit(lambda p: model.apply({"params": p}, ids, attention_mask=attention_mask,
                                             segment_ids=segment_ids).sequence_output)(params)

    assert _max_diff(run("splash"), run("xla"), real) < 1e-4


def test_scanned_remat_model_with_splash_on_a_mesh_matches_xla():
    """Scanned layers under remat, traced under activation_sharding (splash in shard_map, here
    over one CPU device): outputs at real tokens and the parameter gradients of a loss over
    them, relative to the gradient's scale."""
    cfg = TINY.replace(scan_layers=True, remat_policy="full")
    params = _params(cfg)
    ids, segment_ids, _ = _batch()
    real = _real(Mask(segment_ids=segment_ids))
    mesh = sharding.make_mesh(devices=jax.devices()[:1])

    def run(impl):
        model = BertModel(cfg.replace(attention=impl))

        def loss(params):
            out = model.apply({"params": params}, ids, segment_ids=segment_ids).sequence_output
            return jnp.sum(jnp.sin(out) * real[:, :, None]), out

        fn = sharding.with_activation_sharding(jax.value_and_grad(loss, has_aux=True), mesh)
        (_, out), grads = jax.jit(fn)(params)
        return out, grads

    out_xla, grads_xla = run("xla")
    out_splash, grads_splash = run("splash")
    assert _max_diff(out_splash, out_xla, real) < 1e-4
    relative = jax.tree.map(lambda a, b: _max_diff(a, b) / max(1.0, float(jnp.abs(b).max())),
                            grads_splash, grads_xla)
    assert max(jax.tree.leaves(relative)) < 1e-5, relative


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_auto_is_xla_bit_for_bit_on_cpu(dtype):
    cfg = TINY.replace(dtype=dtype, attention_probs_dropout_prob=0.1, hidden_dropout_prob=0.1)
    params = _params(cfg)
    ids, segment_ids, attention_mask = _batch()

    def run(impl, deterministic):
        model = BertModel(cfg.replace(attention=impl))
        return jax.jit(lambda p: model.apply(
            {"params": p}, ids, attention_mask=attention_mask, deterministic=deterministic,
            segment_ids=segment_ids, rngs={"dropout": jax.random.key(2)}).sequence_output)(params)

    assert platform.current() == "cpu"
    for deterministic in (True, False):
        np.testing.assert_array_equal(run("auto", deterministic), run("xla", deterministic))


def test_cudnn_off_gpu_fails_when_traced():
    ids, _, _ = _batch()
    model = BertModel(TINY.replace(attention="cudnn"))  # the config itself is valid anywhere
    with pytest.raises(ValueError, match="attention='cudnn' runs only on GPUs"):
        jax.eval_shape(lambda: model.init(jax.random.key(0), ids))


# ----- compiled for a TPU slice ---------------------------------------------------------------

@pytest.fixture(scope="module")
def tpu_devices():
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # compiling touches no chip
    try:
        from jax.experimental import topologies
        return list(topologies.get_topology_desc(topology_name="v5e:2x2", platform="tpu").devices)
    except Exception as e:  # noqa: BLE001 - no libtpu: RuntimeError, XlaRuntimeError, ...
        pytest.skip(f"no TPU topology on this host: {e}")


def _tpu_program_texts(devices, impl: str) -> tuple[str, str]:
    """The compiled forward and gradient of TINY (bf16, packed rows) on a (data, tensor) =
    (2, 2) v5e mesh: heads split over tensor, rows over data."""
    cfg = TINY.replace(dtype="bfloat16", attention=impl)
    model = BertModel(cfg)
    mesh = sharding.make_mesh(data=2, tensor=2, devices=devices)
    abstract = jax.eval_shape(
        lambda: model.init(jax.random.key(0), jnp.zeros((1, S), jnp.int32))["params"])
    param_shardings = sharding.param_shardings(abstract, mesh)
    params = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                          nn.meta.unbox(abstract), param_shardings)
    rows = sharding.batch_sharding(mesh)
    ids = jax.ShapeDtypeStruct((4, S), jnp.int32, sharding=rows)

    def forward(params, ids, segment_ids):
        return model.apply({"params": params}, ids, segment_ids=segment_ids).sequence_output

    def loss(params, ids, segment_ids):
        return jnp.sum(forward(params, ids, segment_ids).astype(jnp.float32) ** 2)

    out = NamedSharding(mesh, P(("data", "fsdp")))
    texts = []
    for fn, out_shardings in ((forward, out), (jax.grad(loss), param_shardings)):
        compiled = jax.jit(sharding.with_activation_sharding(fn, mesh),
                           in_shardings=(param_shardings, rows, rows),
                           out_shardings=out_shardings).lower(params, ids, ids).compile()
        texts.append(compiled.as_text())
    return tuple(texts)


def test_auto_compiles_splash_for_tpu(tpu_devices):
    forward, gradient = _tpu_program_texts(tpu_devices, "auto")
    assert "tpu_custom_call" in forward
    assert gradient.count("tpu_custom_call") >= 3 * TINY.num_hidden_layers  # fwd, dq, dkv
    forward, gradient = _tpu_program_texts(tpu_devices, "xla")
    assert "tpu_custom_call" not in forward and "tpu_custom_call" not in gradient
