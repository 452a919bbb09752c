"""Scanned encoder layers (BertConfig.scan_layers): the same model as the unrolled one.

Training: the same initial weights (unrolled, and stacked by scan.stack_layers) train through the
generic train step with the masked-LM loss to the same losses and weights, with and without
remat inside the scan. Dropout is off there: the two layouts draw their dropout keys differently
(one key per named layer vs. keys split along the scan), so only the deterministic computation
can be compared.

Checkpoints: a run of the real pre-training recipe with model.scan_layers=True saves the stacked
layout; load_params gives it unrolled on request (or for a tree of unrolled shardings) and it
evaluates the same; a new run from it takes its own layout; resuming it unrolled is refused; its
Hugging Face export is the one of the unrolled weights, and transformers computes the same
outputs from it.
"""

import json
import shutil

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import safetensors.numpy
import torch
import transformers

from bert_jax import BertConfig, BertModel
from bert_jax.config import run as run_config
from bert_jax.config import settings
from bert_jax.convert import hf
from bert_jax.data.pretraining.synthetic import RandomTokenBatches
from bert_jax.model import BertForPreTraining, scan
from bert_jax.recipes import common as recipe_common
from bert_jax.recipes import pretrain
from bert_jax.runtime import sharding
from bert_jax.runtime.pytree import flatten_dict
from bert_jax.train import optimizer, steps
from bert_jax.train.checkpoint import params as params_loading
from bert_jax.train.checkpoint import store as checkpointing
from experiments.configs import demo

import pretrain_runs

torch.set_num_threads(1)
transformers.logging.set_verbosity_error()

CFG = BertConfig.preset("tiny", vocab_size=97, max_position_embeddings=16,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
SEQ, PREDICTIONS, ROWS, STEPS = 16, 3, 8, 10
TOLERANCE = 1e-5


def init_fn(cfg: BertConfig):
    """() -> the unboxed params of a BertForPreTraining (no NSP) of `cfg`."""
    model = BertForPreTraining(cfg, with_nsp=False)
    ids = jnp.zeros((1, SEQ), jnp.int32)
    return lambda: nn.meta.unbox(model.init(jax.random.PRNGKey(0), ids, ids[:, :PREDICTIONS])[
        "params"])


def init_params(cfg: BertConfig):
    return jax.device_get(init_fn(cfg)())


def train(cfg: BertConfig, params):
    """(losses, final params) of STEPS AdamW steps of the masked-LM loss on random tokens."""
    model = BertForPreTraining(cfg, with_nsp=False)
    opt = optimizer.make_optimizer(
        settings.OptimizerConfig(learning_rate=1e-3, total_steps=STEPS, warmup_steps=2))
    train_step = jax.jit(steps.make_train_step(pretrain.make_loss(model), opt))
    state = steps.TrainState.create(params, opt, jax.random.PRNGKey(1))
    batches = RandomTokenBatches(ROWS, SEQ, PREDICTIONS, cfg.vocab_size, seed=0)
    losses = []
    for _ in range(STEPS):
        state, metrics = train_step(state, next(batches))
        losses.append(float(metrics["loss"]))
    return np.array(losses), jax.device_get(state.params)


@pytest.fixture(scope="module")
def unrolled_run():
    params = init_params(CFG)
    losses, final = train(CFG, params)
    return params, losses, final


def assert_trees_close(a, b, atol):
    flat_a, flat_b = flatten_dict(a), flatten_dict(b)
    assert flat_a.keys() == flat_b.keys()
    for path in flat_a:
        np.testing.assert_allclose(flat_a[path], flat_b[path], rtol=0, atol=atol,
                                   err_msg="/".join(path))


@pytest.mark.parametrize("remat_policy", ["none", "full", "dots_no_batch"])
def test_scanned_layers_train_like_unrolled_ones(unrolled_run, remat_policy):
    params, losses, final = unrolled_run
    scanned_cfg = CFG.replace(scan_layers=True, remat_policy=remat_policy)
    scanned_losses, scanned_final = train(scanned_cfg, scan.stack_layers(params, 2))
    assert losses[-1] < losses[0]  # it trains
    np.testing.assert_allclose(scanned_losses, losses, rtol=TOLERANCE, atol=0)
    assert_trees_close(scan.unstack_layers(scanned_final, 2), final, atol=TOLERANCE)


@pytest.mark.parametrize("options", [
    dict(layer_norm_position="pre", position_embedding_type="rotary"),
    dict(ffn_kind="swiglu", use_bias=False, remat_policy="dots")])
def test_scanned_encoder_options_compute_as_unrolled(options):
    cfg = CFG.replace(**options)
    ids = jnp.asarray(np.random.default_rng(0).integers(5, CFG.vocab_size, (2, SEQ)), jnp.int32)
    segments = jnp.asarray([[1] * 10 + [2] * 6, [1] * 12 + [0] * 4], jnp.int32)  # packed, padded
    model = BertModel(cfg)
    params = nn.meta.unbox(model.init(jax.random.PRNGKey(0), ids)["params"])
    unrolled = model.apply({"params": params}, ids, segment_ids=segments)
    scanned = BertModel(cfg.replace(scan_layers=True)).apply(
        {"params": scan.stack_layers(params, 2)}, ids, segment_ids=segments)
    for ours, theirs in zip(jax.tree.leaves(scanned), jax.tree.leaves(unrolled)):
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=TOLERANCE)


def _primitive_names(jaxpr) -> set[str]:
    return {eqn.primitive.name for eqn in jaxpr.eqns}


def test_remat_sits_inside_the_scan():
    cfg = CFG.replace(scan_layers=True, remat_policy="full")
    model = BertModel(cfg)
    ids = jnp.ones((2, SEQ), jnp.int32)
    params = nn.meta.unbox(model.init(jax.random.PRNGKey(0), ids)["params"])
    jaxpr = jax.make_jaxpr(lambda p: model.apply({"params": p}, ids).sequence_output)(params)
    scans = [eqn for eqn in jaxpr.jaxpr.eqns if eqn.primitive.name == "scan"]
    assert len(scans) == 1  # one loop over the layers
    assert scans[0].params["length"] == cfg.num_hidden_layers
    body = scans[0].params["jaxpr"].jaxpr
    remat = jax.make_jaxpr(jax.checkpoint(jnp.sin))(1.0).eqns[0].primitive.name
    assert remat in _primitive_names(body)  # each step rematerialised, not the whole loop
    assert remat not in _primitive_names(jaxpr.jaxpr)


def test_stack_and_unstack_are_exact_inverses():
    params = init_params(CFG)
    stacked = scan.stack_layers(params, 2)
    encoder = stacked["bert"]["encoder"]
    assert set(encoder) == {"layers"} and scan.is_scanned(stacked)
    kernel = encoder["layers"]["feed_forward"]["intermediate"]["kernel"]
    assert isinstance(kernel, np.ndarray) and kernel.shape == (2, 128, 512)
    np.testing.assert_array_equal(
        kernel[1], params["bert"]["encoder"]["layer_1"]["feed_forward"]["intermediate"]["kernel"])
    # The stacked tree is the tree of a scanned model: the same paths and shapes.
    scanned_shapes = jax.eval_shape(init_fn(CFG.replace(scan_layers=True)))
    assert jax.tree.map(np.shape, stacked) == jax.tree.map(lambda s: s.shape, scanned_shapes)

    back = scan.unstack_layers(stacked, 2)
    assert not scan.is_scanned(back)
    assert flatten_dict(back).keys() == flatten_dict(params).keys()
    for path, value in flatten_dict(back).items():
        np.testing.assert_array_equal(value, flatten_dict(params)[path])
    same = scan.unstack_layers(params, 2)  # already unrolled: the same leaves
    assert all(a is b for a, b in zip(jax.tree.leaves(same), jax.tree.leaves(params)))
    with pytest.raises(ValueError, match="layer_0 .. layer_2"):
        scan.stack_layers(params, 3)
    with pytest.raises(ValueError, match="num_layers=3"):
        scan.unstack_layers(stacked, 3)


# ----- a scanned run of the real recipe ----------------------------------------------------------

@pytest.fixture(scope="module")
def scanned_run(tmp_path_factory):
    """The workdir of 4 steps of experiments/pretrain.py with model.scan_layers=True (its recipe
    on the parsed flags, in this process)."""
    workdir = str(tmp_path_factory.mktemp("scanned_run"))
    pretrain_runs.train_here(workdir, "--config.model.scan_layers=True", "--config.total_steps=4")
    return workdir


def checkpoints(workdir):
    return checkpointing.checkpoint_dir(workdir)


def eval_loss(cfg, params):
    """The masked-LM loss of `params` on two fixed batches of random tokens (no dropout)."""
    model = BertForPreTraining(cfg, with_nsp=False)
    eval_step = jax.jit(steps.make_eval_step(pretrain.make_loss(model)))
    sums = None
    for batch in RandomTokenBatches(8, SEQ, PREDICTIONS, cfg.vocab_size, seed=5, num_batches=2):
        sums = steps.add_sums(sums, eval_step(params, batch))
    return steps.summarize(sums)["loss"]


def test_scanned_checkpoint_loads_unrolled_and_evaluates_the_same(scanned_run):
    scanned_cfg, scanned = params_loading.load_params(checkpoints(scanned_run))
    assert scanned_cfg.scan_layers and set(scanned["bert"]["encoder"]) == {"layers"}

    cfg, params = params_loading.load_params(checkpoints(scanned_run), scan_layers=False)
    assert not cfg.scan_layers
    assert cfg == scanned_cfg.replace(scan_layers=False)
    assert set(params["bert"]["encoder"]) == {"layer_0", "layer_1"}
    unstacked = scan.unstack_layers(jax.device_get(scanned), cfg.num_hidden_layers)
    assert_trees_close(jax.device_get(params), unstacked, atol=0)

    # A tree of shardings of an unrolled model asks for that layout too.
    model = BertForPreTraining(cfg, with_nsp=False)
    ids = jnp.zeros((1, SEQ), jnp.int32)
    abstract = jax.eval_shape(
        lambda: model.init(jax.random.PRNGKey(0), ids, ids[:, :PREDICTIONS])["params"])
    mesh = sharding.make_mesh(1, 1, 1, devices=jax.devices()[:1])
    by_tree_cfg, by_tree = params_loading.load_params(
        checkpoints(scanned_run), shardings=sharding.param_shardings(abstract, mesh))
    assert not by_tree_cfg.scan_layers
    assert_trees_close(jax.device_get(by_tree), unstacked, atol=0)

    loss = eval_loss(cfg, params)
    assert abs(loss - eval_loss(scanned_cfg, scanned)) <= TOLERANCE
    assert np.isfinite(loss)


def test_a_new_run_from_a_scanned_checkpoint_takes_its_own_layout(scanned_run):
    config = demo.get_config()
    config.model = run_config.model_block("tiny")  # the shape comes from the checkpoint
    config.init.checkpoint = checkpoints(scanned_run)
    config.model.scan_layers = False
    run = settings.read(config, "pretrain")
    cfg, params = recipe_common.initial_weights(run)
    assert not cfg.scan_layers and "layer_1" in params["bert"]["encoder"]
    assert not recipe_common.model_config(run, 97, cfg).scan_layers

    config.model.scan_layers = None  # not set: the weights' layout
    run = settings.read(config, "pretrain")
    cfg, params = recipe_common.initial_weights(run)
    assert cfg.scan_layers and set(params["bert"]["encoder"]) == {"layers"}
    assert recipe_common.model_config(run, 97, cfg).scan_layers


def test_resuming_a_scanned_run_unrolled_is_refused(scanned_run, tmp_path):
    workdir = str(tmp_path / "copy")
    shutil.copytree(scanned_run, workdir)
    # pretrain.py's one-line exit (status 1, no traceback), found in this process
    message = pretrain_runs.refusal(workdir, "--config.model.scan_layers=False",
                                    "--config.allow_config_change=True", "--config.total_steps=8")
    assert "pretrain.py: error:" in message and "scan_layers=True" in message
    assert params_loading.resolve_step(checkpoints(workdir)) == 4  # nothing was trained


def test_hugging_face_export_of_scanned_params_is_the_unrolled_one(scanned_run, tmp_path):
    scanned_cfg, scanned = params_loading.load_params(checkpoints(scanned_run))
    cfg, params = params_loading.load_params(checkpoints(scanned_run), scan_layers=False)
    hf.save(scanned_cfg, jax.device_get(scanned), tmp_path / "scanned")
    hf.save(cfg, jax.device_get(params), tmp_path / "unrolled")
    for name in ("config.json",):
        with open(tmp_path / "scanned" / name) as a, open(tmp_path / "unrolled" / name) as b:
            assert json.load(a) == json.load(b)
    tensors = safetensors.numpy.load_file(str(tmp_path / "scanned" / "model.safetensors"))
    reference = safetensors.numpy.load_file(str(tmp_path / "unrolled" / "model.safetensors"))
    assert tensors.keys() == reference.keys()
    for key, value in tensors.items():
        np.testing.assert_array_equal(value, reference[key], err_msg=key)

    rng = np.random.default_rng(0)
    ids = rng.integers(5, cfg.vocab_size, (2, SEQ)).astype(np.int64)
    mask = np.ones((2, SEQ), np.int64)
    mask[1, 10:] = 0
    torch_model = transformers.BertModel.from_pretrained(tmp_path / "scanned").eval()
    with torch.no_grad():
        theirs = torch_model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(
            mask)).last_hidden_state.numpy()
    ours = BertModel(cfg, add_pooler=False).apply(
        {"params": jax.device_get(params)["bert"]}, ids.astype(np.int32), None,
        mask.astype(np.int32)).sequence_output
    np.testing.assert_allclose(np.asarray(ours), theirs, rtol=0, atol=TOLERANCE)


def test_lamb_with_scanned_layers_is_refused(tmp_path):
    """LAMB's trust ratio is per parameter array; stacked layers would share one."""
    message = pretrain_runs.refusal(tmp_path / "run", "--config.model.scan_layers=True",
                                    "--config.optimizer.name=lamb")
    assert "optimizer.name=lamb with model.scan_layers=True" in message
    assert not (tmp_path / "run" / "checkpoints").exists()
