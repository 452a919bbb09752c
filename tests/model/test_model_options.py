"""The encoder options of BertConfig (pre-LN, gated FFN, no biases, rotary positions): what each
computes, against a hand computation or an invariant; their defaults leave BERT as it was; each
trains, saves, resumes exactly and evaluates; the Hugging Face export refuses them.

(BERT's own outputs against transformers, unchanged by the options, are in test_convert_hf.py.)
"""

import json
import os
import signal
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax import BertConfig, BertForPreTraining, BertModel
from bert_jax.config import settings
from bert_jax.config.bert import ConfigError, gated_intermediate_size
from bert_jax.convert import hf_export
from bert_jax.convert.hf_layout import CheckpointError
from bert_jax.model.layers import Embeddings, FeedForward, apply_rotary, rotary_angles
from bert_jax.recipes import pretrain
from bert_jax.train import optimizer, steps

from pretrain_runs import EVALUATE, command, env, last_logged_step, losses, train_here, wait_for
from random_params import randomise

SEQ, PREDICTIONS, VOCAB = 16, 3, 61
SMALL = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                   intermediate_size=64, max_position_embeddings=SEQ,
                   hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
OPTIONS = {
    "pre_ln": dict(layer_norm_position="pre"),
    "geglu": dict(ffn_kind="geglu"),
    "swiglu": dict(ffn_kind="swiglu"),
    "no_bias": dict(use_bias=False),
    "rotary": dict(position_embedding_type="rotary"),
    "all": dict(layer_norm_position="pre", ffn_kind="swiglu", use_bias=False,
                position_embedding_type="rotary"),
}


def unboxed_init(model, *args, seed=0, **kwargs):
    return nn.meta.unbox(model.init(jax.random.key(seed), *args, **kwargs)["params"])




def paths_and_shapes(tree) -> dict[str, tuple[int, ...]]:
    return {"/".join(str(k.key) for k in path): tuple(leaf.shape)
            for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


def ids(seed, shape=(2, SEQ)):
    return jax.random.randint(jax.random.key(seed), shape, 1, VOCAB, dtype=jnp.int32)


def pretraining_shapes(cfg):
    return paths_and_shapes(nn.meta.unbox(jax.eval_shape(
        BertForPreTraining(cfg).init, jax.random.key(0), jnp.zeros((1, 4), jnp.int32),
        jnp.zeros((1, 2), jnp.int32))["params"]))


# ----- defaults -------------------------------------------------------------------------------

def test_defaults_are_bert_as_published():
    cfg = BertConfig()
    assert (cfg.layer_norm_position, cfg.ffn_kind, cfg.use_bias, cfg.position_embedding_type) == (
        "post", "dense", True, "absolute")
    hf_export.check_exportable(cfg)  # exports


def test_default_tree_is_the_classic_bert_tree():
    d, n, h, f, v = (SMALL.hidden_size, SMALL.num_attention_heads, SMALL.head_dim,
                     SMALL.intermediate_size, SMALL.vocab_size)
    ln = {"scale": (d,), "bias": (d,)}
    expected = {"bert/embeddings/word_embeddings/embedding": (v, d),
                "bert/embeddings/position_embeddings/embedding": (SEQ, d),
                "bert/embeddings/token_type_embeddings/embedding": (2, d),
                "bert/pooler/dense/kernel": (d, d), "bert/pooler/dense/bias": (d,),
                "mlm/transform/kernel": (d, d), "mlm/transform/bias": (d,),
                "mlm/output_bias": (v,), "nsp/dense/kernel": (d, 2), "nsp/dense/bias": (2,)}
    expected.update({f"bert/embeddings/layer_norm/{k}": s for k, s in ln.items()})
    expected.update({f"mlm/transform_layer_norm/{k}": s for k, s in ln.items()})
    for i in range(SMALL.num_hidden_layers):
        layer = f"bert/encoder/layer_{i}"
        for name in ("query", "key", "value"):
            expected[f"{layer}/attention/{name}/kernel"] = (d, n, h)
            expected[f"{layer}/attention/{name}/bias"] = (n, h)
        expected[f"{layer}/attention/output/kernel"] = (n, h, d)
        expected[f"{layer}/attention/output/bias"] = (d,)
        expected[f"{layer}/feed_forward/intermediate/kernel"] = (d, f)
        expected[f"{layer}/feed_forward/intermediate/bias"] = (f,)
        expected[f"{layer}/feed_forward/output/kernel"] = (f, d)
        expected[f"{layer}/feed_forward/output/bias"] = (d,)
        for norm in ("attention_layer_norm", "output_layer_norm"):
            expected.update({f"{layer}/{norm}/{k}": s for k, s in ln.items()})
    assert pretraining_shapes(SMALL) == expected


def test_options_at_their_defaults_compute_the_same_as_unset():
    explicit = SMALL.replace(layer_norm_position="post", ffn_kind="dense", use_bias=True,
                             position_embedding_type="absolute")
    x = ids(0)
    params = unboxed_init(BertModel(SMALL), x)
    a = BertModel(SMALL).apply({"params": params}, x).sequence_output
    b = BertModel(explicit).apply({"params": params}, x).sequence_output
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# ----- validation, parameter count, export ----------------------------------------------------

@pytest.mark.parametrize("field, value", [
    ("layer_norm_position", "sandwich"), ("ffn_kind", "moe"), ("use_bias", 1),
    ("position_embedding_type", "relative_key")])
def test_unknown_option_values_are_refused_naming_the_field(field, value):
    with pytest.raises(ConfigError, match=field):
        SMALL.replace(**{field: value})


def test_rotary_needs_an_even_head_dim():
    with pytest.raises(ConfigError, match="position_embedding_type"):
        SMALL.replace(hidden_size=30, num_attention_heads=2, position_embedding_type="rotary")


@pytest.mark.parametrize("with_pooler", [True, False])
@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_num_params_equals_the_leaves_of_init(name, with_pooler):
    cfg = SMALL.replace(**OPTIONS[name])
    shapes = jax.eval_shape(BertModel(cfg, add_pooler=with_pooler).init, jax.random.key(0),
                            jnp.zeros((1, 4), jnp.int32))
    count = sum(int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(shapes["params"]))
    assert count == cfg.num_params(with_pooler=with_pooler)


def test_gated_width_keeps_the_parameter_budget_of_a_dense_ffn():
    assert gated_intermediate_size(768, 3072) == 2048
    assert gated_intermediate_size(768, 3072, multiple_of=256) == 2048
    base = BertConfig.preset("base")
    gated = base.replace(ffn_kind="swiglu", intermediate_size=gated_intermediate_size(768, 3072))
    # the same weights; the gated FFN has one more bias vector of width 2048 (minus 1024 fewer
    # intermediate-bias entries): 3 * 768 * 2048 == 2 * 768 * 3072
    per_layer_bias_change = 2 * 2048 - 3072
    assert gated.num_params() - base.num_params() == 12 * per_layer_bias_change


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_hugging_face_export_refuses_every_option(name):
    cfg = SMALL.replace(**OPTIONS[name])
    field = next(iter(OPTIONS[name]))
    assert field not in hf_export.HF_BERT_FIELDS
    with pytest.raises(CheckpointError, match="cannot be exported"):
        hf_export.check_exportable(cfg)
    with pytest.raises(CheckpointError, match=f"BertConfig.{field}="):
        hf_export.check_exportable(SMALL.replace(**{field: OPTIONS[name][field]}))
    params = unboxed_init(BertModel(cfg), ids(0))
    with pytest.raises(CheckpointError, match="cannot be exported"):
        hf_export.to_hf_tensors(cfg, params)


def test_hf_config_of_the_default_keeps_absolute_positions():
    hf = hf_export._hf_config(SMALL)
    assert hf["position_embedding_type"] == "absolute"
    for key in ("layer_norm_position", "ffn_kind", "use_bias"):
        assert key not in hf
    assert BertConfig.from_hf_dict(SMALL.to_hf_dict()) == SMALL


# ----- rotary positions -----------------------------------------------------------------------

def test_rotary_scores_depend_only_on_relative_positions():
    q = jax.random.normal(jax.random.key(0), (2, SEQ, 2, 8))
    k = jax.random.normal(jax.random.key(1), (2, SEQ, 2, 8))
    positions = jnp.broadcast_to(jnp.arange(SEQ), (2, SEQ))

    def scores(shift):
        rot = rotary_angles(positions + shift, 8)
        return jnp.einsum("bqnh,bknh->bnqk", apply_rotary(q, rot), apply_rotary(k, rot))

    np.testing.assert_allclose(scores(0), scores(7), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(scores(0), scores(123), rtol=1e-4, atol=1e-4)
    # and they do depend on the positions: without rotation the scores differ
    plain = jnp.einsum("bqnh,bknh->bnqk", q, k)
    assert not np.allclose(scores(0), plain, atol=1e-3)
    # a rotation: norms are kept
    rot = rotary_angles(positions, 8)
    np.testing.assert_allclose(jnp.linalg.norm(apply_rotary(q, rot), axis=-1),
                               jnp.linalg.norm(q, axis=-1), rtol=1e-5)


def test_rotary_model_has_no_position_table_and_sees_only_relative_positions():
    cfg = SMALL.replace(position_embedding_type="rotary", max_position_embeddings=64)
    assert not any("position_embeddings" in p for p in pretraining_shapes(cfg))
    model = BertModel(cfg)
    x = ids(2)
    params = randomise(unboxed_init(model, x))
    positions = jnp.broadcast_to(jnp.arange(SEQ, dtype=jnp.int32), x.shape)

    def out(pos):
        return np.asarray(model.apply({"params": params}, x, position_ids=pos).sequence_output)

    np.testing.assert_allclose(out(positions), out(positions + 9), rtol=1e-4, atol=1e-4)
    assert not np.allclose(out(positions), out(positions[:, ::-1]), atol=1e-3)


def test_rotary_positions_restart_per_packed_segment():
    cfg = SMALL.replace(position_embedding_type="rotary")
    model = BertModel(cfg, add_pooler=False)
    first, second = ids(3, (1, 6)), ids(4, (1, 10))
    params = randomise(unboxed_init(model, first))
    packed = jnp.concatenate([first, second], axis=1)
    segments = jnp.array([[1] * 6 + [2] * 10])
    together = model.apply({"params": params}, packed, segment_ids=segments).sequence_output
    alone = model.apply({"params": params}, second).sequence_output
    np.testing.assert_allclose(together[:, 6:], alone, rtol=1e-4, atol=1e-5)


# ----- pre-LN ---------------------------------------------------------------------------------

def layer_norm_by_hand(x, scale, bias, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale + bias


def test_pre_ln_keeps_the_residual_stream_unnormalised():
    cfg = SMALL.replace(layer_norm_position="pre", layer_norm_eps=1e-6)
    model = BertModel(cfg, add_pooler=False)
    x = ids(5)
    params = randomise(unboxed_init(model, x))
    assert set(params["encoder"]["final_layer_norm"]) == {"scale", "bias"}
    # Zero what each sub-layer adds to the stream: its output projection (kernel and bias).
    for i in range(cfg.num_hidden_layers):
        layer = params["encoder"][f"layer_{i}"]
        for sub in ("attention", "feed_forward"):
            layer[sub]["output"] = jax.tree.map(jnp.zeros_like, layer[sub]["output"])
    out = model.apply({"params": params}, x).sequence_output
    embedded = Embeddings(cfg).apply({"params": params["embeddings"]}, x,
                                     jnp.broadcast_to(jnp.arange(SEQ), x.shape),
                                     jnp.zeros_like(x), True)
    final = params["encoder"]["final_layer_norm"]
    expected = layer_norm_by_hand(np.asarray(embedded, np.float64), np.asarray(final["scale"]),
                                  np.asarray(final["bias"]), cfg.layer_norm_eps)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
    # post-LN with the same zeroed sub-layers normalises the stream twice per layer instead
    post = SMALL.replace(layer_norm_eps=1e-6)
    post_params = dict(params)
    post_params["encoder"] = {k: v for k, v in params["encoder"].items() if k != "final_layer_norm"}
    post_out = BertModel(post, add_pooler=False).apply({"params": post_params}, x).sequence_output
    assert not np.allclose(post_out, out, atol=1e-3)


def test_post_ln_has_no_final_layer_norm():
    assert not any("final_layer_norm" in p for p in pretraining_shapes(SMALL))
    assert any("encoder/final_layer_norm/scale" in p
               for p in pretraining_shapes(SMALL.replace(layer_norm_position="pre")))


# ----- gated FFN ------------------------------------------------------------------------------

@pytest.mark.parametrize("kind, act", [("geglu", lambda z: jax.nn.gelu(z, approximate=False)),
                                       ("swiglu", jax.nn.silu)])
def test_gated_ffn_equals_a_hand_computation(kind, act):
    cfg = SMALL.replace(ffn_kind=kind, intermediate_size=48)
    x = jax.random.normal(jax.random.key(0), (2, 5, cfg.hidden_size))
    params = randomise(unboxed_init(FeedForward(cfg), x))
    assert paths_and_shapes(params) == {
        "gate/kernel": (32, 48), "gate/bias": (48,), "intermediate/kernel": (32, 48),
        "intermediate/bias": (48,), "output/kernel": (48, 32), "output/bias": (32,)}
    out = FeedForward(cfg).apply({"params": params}, x)
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
    xs = np.asarray(x, np.float64)
    gate = xs @ p["gate"]["kernel"] + p["gate"]["bias"]
    up = xs @ p["intermediate"]["kernel"] + p["intermediate"]["bias"]
    expected = (np.asarray(act(jnp.asarray(gate)), np.float64) * up) @ p["output"]["kernel"] \
        + p["output"]["bias"]
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


# ----- no biases ------------------------------------------------------------------------------

def test_no_bias_tree_has_no_bias_anywhere_and_computes_finite_outputs():
    cfg = SMALL.replace(use_bias=False)
    shapes = pretraining_shapes(cfg)
    assert not [p for p in shapes if p.split("/")[-1] in ("bias", "output_bias")]
    assert shapes["bert/embeddings/layer_norm/scale"] == (cfg.hidden_size,)
    model = BertForPreTraining(cfg)
    x, masked = ids(6), jnp.array([[1, 2, 3], [4, 5, 6]], jnp.int32)
    params = unboxed_init(model, x, masked)
    out = model.apply({"params": params}, x, masked)
    assert np.isfinite(out.mlm_logits).all() and np.isfinite(out.nsp_logits).all()


# ----- one train step of each option, fp32 and bf16 -------------------------------------------

def make_batch(rows=4, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "input_ids": rng.integers(5, VOCAB, (rows, SEQ), dtype=np.int32),
        "token_type_ids": np.zeros((rows, SEQ), np.int32),
        "segment_ids": np.repeat([[1] * 10 + [2] * 6], rows, 0).astype(np.int32),
        "position_ids": np.repeat([list(range(10)) + list(range(6))], rows, 0).astype(np.int32),
        "masked_positions": np.sort(rng.integers(0, SEQ, (rows, PREDICTIONS)), 1).astype(np.int32),
        "masked_ids": rng.integers(5, VOCAB, (rows, PREDICTIONS), dtype=np.int32),
        "masked_weights": np.ones((rows, PREDICTIONS), np.float32),
    }


# Each option in fp32, and all of them together in bf16 too (bf16 compute is what the options
# share; each option's own arithmetic is checked in fp32 above). One layer: no option is about
# the number of layers, and every kind of parameter is there.
@pytest.mark.parametrize("name, dtype", [(name, "float32") for name in sorted(OPTIONS)]
                         + [("all", "bfloat16")])
def test_each_option_trains_a_step(name, dtype):
    cfg = SMALL.replace(dtype=dtype, hidden_dropout_prob=0.1, num_hidden_layers=1,
                        **OPTIONS[name])
    model = BertForPreTraining(cfg, with_nsp=False)
    params = unboxed_init(model, jnp.zeros((1, SEQ), jnp.int32),
                          jnp.zeros((1, PREDICTIONS), jnp.int32))
    tx = optimizer.make_optimizer(settings.OptimizerConfig(
        learning_rate=1e-3, total_steps=2, warmup_steps=0, decay="constant"))
    state = steps.TrainState.create(params, tx, jax.random.PRNGKey(0))
    train_step = jax.jit(steps.make_train_step(pretrain.make_loss(model), tx))
    new_state, metrics = train_step(state, make_batch())
    assert np.isfinite(float(metrics["loss"])) and float(metrics["grad_norm"]) > 0
    assert int(metrics["nonfinite_steps"]) == 0
    moved = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), state.params, new_state.params)
    assert all(jax.tree.leaves(moved))  # every parameter gets a gradient and moves


# ----- end to end: save, resume exactly, evaluate in a new process ----------------------------

# One layer (the options are per layer), 10 steps with a checkpoint every 3; the SIGTERM lands
# mid-run, at step 5 or later.
OPTION_FLAGS = ["--config.model.layer_norm_position=pre",
                "--config.model.position_embedding_type=rotary",
                "--config.model.ffn_kind=swiglu", "--config.model.use_bias=False",
                "--config.model.num_hidden_layers=1",
                "--config.total_steps=10", "--config.checkpoint_every_steps=3"]
TOTAL = 10


def test_options_checkpoint_resumes_exactly_and_evaluates(tmp_path):
    reference_dir, resumed_dir = str(tmp_path / "a"), str(tmp_path / "b")
    # the uninterrupted reference in this process (its stderr and exit status are not the point)
    train_here(reference_dir, *OPTION_FLAGS)
    reference = losses(reference_dir)
    assert sorted(reference) == list(range(1, TOTAL + 1))

    process = subprocess.Popen(
        command(resumed_dir, *OPTION_FLAGS, "--config.data.seconds_per_batch=0.2"),
        env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: last_logged_step(resumed_dir) >= 5, process)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr[-3000:]
    assert last_logged_step(resumed_dir) < TOTAL

    done = subprocess.run(command(resumed_dir, *OPTION_FLAGS), env=env(), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert losses(resumed_dir) == reference  # exact float equality at every step

    done = subprocess.run([sys.executable, EVALUATE, f"--workdir={resumed_dir}"], env=env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    with open(os.path.join(resumed_dir, "evaluation", f"step_{TOTAL}.json")) as f:
        reloaded = json.load(f)
    with open(os.path.join(reference_dir, "eval_metrics.jsonl")) as f:
        final = [json.loads(line) for line in f][-1]
    assert final["step"] == TOTAL
    for key in ("loss", "mlm_loss", "mlm_accuracy"):
        assert reloaded["metrics"][key] == final[key]
