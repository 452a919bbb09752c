"""Orbax checkpoints: state + iterator state + model config saved together, keep-N, mismatch
errors that name the difference, load_params (the public API). Restoring onto another mesh is
tested in test_sharding.py (8 devices)."""

import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax import BertConfig
from bert_jax.config import settings
from bert_jax.model import BertForPreTraining
from bert_jax.train import optimizer, steps
from bert_jax.train import state as state_lib
from bert_jax.train.checkpoint import params as params_loading
from bert_jax.train.checkpoint import store as checkpointing


class CountingIterator:
    def __init__(self):
        self.position = 0

    def __next__(self):
        self.position += 1
        return self.position

    def get_state(self):
        return {"position": self.position, "note": "any JSON"}

    def set_state(self, state):
        self.position = state["position"]


def tiny_config(**overrides):
    return BertConfig.preset("tiny", **{"vocab_size": 50, "hidden_size": 16,
                                        "num_attention_heads": 2, "intermediate_size": 32,
                                        "max_position_embeddings": 8, **overrides})


def make_state(cfg, with_nsp=False):
    model = BertForPreTraining(cfg, with_nsp=with_nsp)
    tx = optimizer.make_optimizer(settings.OptimizerConfig(total_steps=10, warmup_steps=1))

    def init_fn(rng):
        return model.init(rng, jnp.zeros((1, 8), jnp.int32), jnp.zeros((1, 2), jnp.int32))["params"]

    boxed = init_fn(jax.random.PRNGKey(0))
    state = steps.TrainState.create(nn.meta.unbox(boxed), tx, jax.random.PRNGKey(1))
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1, 1),
                             ("data", "fsdp", "tensor"))
    _, shardings = state_lib.state_shardings(jax.eval_shape(init_fn, jax.random.PRNGKey(0)), tx,
                                             mesh)
    abstract = jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                            jax.eval_shape(lambda: state), shardings)
    return state.replace(step=jnp.asarray(7, jnp.int32)), abstract


def test_state_iterator_and_config_round_trip(tmp_path):
    cfg = tiny_config()
    state, abstract = make_state(cfg)
    iterator = CountingIterator()
    for _ in range(5):
        next(iterator)
    manager = checkpointing.make_manager(tmp_path / "ckpt", async_saves=True)
    checkpointing.save(manager, 7, state, model_config=cfg, data_iterator=iterator,
                       extra_metadata={"task": "unit-test"})
    next(iterator)  # moves on while the save completes; the saved state stays 5
    manager.wait_until_finished()
    fresh = CountingIterator()
    restored = checkpointing.restore(manager, 7, abstract, model_config=cfg, data_iterator=fresh)
    assert fresh.position == 5
    assert int(restored.step) == 7
    jax.tree.map(np.testing.assert_array_equal, jax.device_get(restored), jax.device_get(state))
    metadata = checkpointing.read_metadata(manager, 7)
    assert metadata["task"] == "unit-test" and metadata["model_config"]["hidden_size"] == 16
    manager.close()


def test_keeps_the_newest_n(tmp_path):
    cfg = tiny_config()
    state, _ = make_state(cfg)
    manager = checkpointing.make_manager(tmp_path, keep=2, async_saves=False)
    for step in (1, 2, 3, 4):
        checkpointing.save(manager, step, state, model_config=cfg)
    manager.wait_until_finished()
    assert list(manager.all_steps()) == [3, 4]
    manager.close()


def test_another_model_shape_is_named(tmp_path):
    small = tiny_config()
    state, _ = make_state(small)
    manager = checkpointing.make_manager(tmp_path, async_saves=False)
    checkpointing.save(manager, 1, state, model_config=small)
    bigger = tiny_config(hidden_size=32, intermediate_size=64)
    _, abstract = make_state(bigger)
    with pytest.raises(checkpointing.CheckpointMismatchError,
                       match=r"another shape \(hidden_size: checkpoint 16 vs config 32; "
                             r"intermediate_size"):
        checkpointing.restore(manager, 1, abstract, model_config=bigger)
    manager.close()


def test_another_head_is_named(tmp_path):
    cfg = tiny_config()
    state, _ = make_state(cfg, with_nsp=False)
    manager = checkpointing.make_manager(tmp_path, async_saves=False)
    checkpointing.save(manager, 1, state, model_config=cfg)
    _, abstract_with_nsp = make_state(cfg, with_nsp=True)
    with pytest.raises(checkpointing.CheckpointMismatchError,
                       match="missing in checkpoint: .*nsp/dense"):
        checkpointing.restore(manager, 1, abstract_with_nsp, model_config=cfg)
    manager.close()


def test_load_params_latest_and_named_step(tmp_path):
    cfg = tiny_config()
    state, _ = make_state(cfg)
    manager = checkpointing.make_manager(tmp_path, async_saves=False)
    checkpointing.save(manager, 3, state, model_config=cfg)
    later = state.replace(params=jax.tree.map(lambda p: p + 1, state.params))
    checkpointing.save(manager, 5, later, model_config=cfg)
    manager.close()

    loaded_cfg, params = params_loading.load_params(tmp_path)
    assert loaded_cfg == cfg
    jax.tree.map(np.testing.assert_array_equal, jax.device_get(params),
                 jax.device_get(later.params))
    _, params_3 = params_loading.load_params(tmp_path, step=3)
    jax.tree.map(np.testing.assert_array_equal, jax.device_get(params_3),
                 jax.device_get(state.params))
    _, from_step_dir = params_loading.load_params(os.path.join(tmp_path, "3"))
    jax.tree.map(np.testing.assert_array_equal, jax.device_get(from_step_dir),
                 jax.device_get(state.params))
    with pytest.raises(FileNotFoundError, match=r"no checkpoint for step 4; it has \[3, 5\]"):
        params_loading.load_params(tmp_path, step=4)
    with pytest.raises(FileNotFoundError, match="no checkpoint directory"):
        params_loading.load_params(tmp_path / "nowhere")


def test_restoring_an_iterator_from_a_checkpoint_without_one_is_an_error(tmp_path):
    cfg = tiny_config()
    state, abstract = make_state(cfg)
    manager = checkpointing.make_manager(tmp_path, async_saves=False)
    checkpointing.save(manager, 1, state, model_config=cfg)
    with pytest.raises(checkpointing.CheckpointMismatchError, match="no data-iterator state"):
        checkpointing.restore(manager, 1, abstract, model_config=cfg,
                              data_iterator=CountingIterator())
    manager.close()


def test_a_state_from_given_params_is_the_fresh_state_with_them_in_place():
    """fresh_state with initial params (one program in which the replaced leaves' initialisers
    are dead code): the given leaves where the paths match, the others exactly what a fresh
    state without any gives them; a given leaf of another shape is an error naming it."""
    from bert_jax.runtime import pytree

    cfg = tiny_config()
    model = BertForPreTraining(cfg, with_nsp=True)
    tx = optimizer.make_optimizer(settings.OptimizerConfig(total_steps=10, warmup_steps=1))

    def init_fn(rng):
        return model.init(rng, jnp.zeros((1, 8), jnp.int32), jnp.zeros((1, 2), jnp.int32))["params"]

    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1, 1),
                             ("data", "fsdp", "tensor"))
    fresh = state_lib.fresh_state(init_fn, None, tx, mesh, seed=3)
    given = {"bert": jax.tree.map(lambda x: x + 1.0, fresh.params["bert"])}  # device arrays
    state_lib.fresh_state(init_fn, given, tx, mesh, seed=3)
    started = state_lib.fresh_state(init_fn, given, tx, mesh, seed=3)  # given is not consumed
    leaves = jax.tree_util.tree_flatten_with_path(started.params)[0]
    heads = 0
    for (path, leaf), (_, fresh_leaf) in zip(leaves,
                                             jax.tree_util.tree_flatten_with_path(fresh.params)[0]):
        name = pytree.path_name(path)
        expected = np.asarray(fresh_leaf) + 1.0 if name.startswith("bert/") else fresh_leaf
        heads += not name.startswith("bert/")
        np.testing.assert_array_equal(np.asarray(leaf), np.asarray(expected), err_msg=name)
    assert heads >= 2  # the MLM and NSP heads' own leaves stayed fresh
    assert int(started.step) == 0

    wrong = jax.tree.map(lambda x: x, given)
    wrong["bert"]["embeddings"]["word_embeddings"]["embedding"] = np.zeros((3, 16), np.float32)
    with pytest.raises(ValueError, match="initial parameter bert/embeddings/word_embeddings/"
                                         r"embedding has shape \(3, 16\)"):
        state_lib.fresh_state(init_fn, wrong, tx, mesh, seed=3)
