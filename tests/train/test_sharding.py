"""Sharded training on 8 CPU devices (a subprocess with XLA_FLAGS set before jax is imported).

Meshes (data, fsdp, tensor) = (8,1,1), (2,4,1) and (2,2,2) train the same tiny BERT (one layer,
dropout on) for 10 steps through the real loop and must log the losses of a one-device run within
1e-5 relative; their parameters must really be split over the mesh; a checkpoint written on
(2,2,2) must restore onto one device, equal to what was saved.
"""

import os
import sys

import numpy as np
import pytest

import eight_devices

MESHES = {"one_device": None, "8x1x1": (8, 1, 1), "2x4x1": (2, 4, 1), "2x2x2": (2, 2, 2)}
STEPS = 10


def _worker(out_dir: str) -> None:
    """Runs in the 8-device subprocess; writes results.json into out_dir."""
    import jax
    import jax.numpy as jnp

    from bert_jax import BertConfig
    from bert_jax.config import settings
    from bert_jax.model import BertForPreTraining
    from bert_jax.runtime import sharding
    from bert_jax.train import loop, optimizer, steps
    from bert_jax.train import state as state_lib
    from bert_jax.train.checkpoint import params as params_loading
    from bert_jax.train.checkpoint import store as checkpointing

    assert jax.device_count() == 8
    from bert_jax.recipes import pretrain

    cfg = BertConfig.preset("tiny", num_hidden_layers=1, vocab_size=96, hidden_size=32,
                            num_attention_heads=4, intermediate_size=64,
                            max_position_embeddings=16)
    model = BertForPreTraining(cfg, with_nsp=True)
    seq_len, predictions, batch_size = 16, 3, 16

    def init_fn(rng):
        ids = jnp.zeros((1, seq_len), jnp.int32)
        return model.init(rng, ids, jnp.zeros((1, predictions), jnp.int32))["params"]

    task = loop.Task(model_config=cfg, init_fn=init_fn, loss_fn=pretrain.make_loss(model))
    opt_cfg = settings.OptimizerConfig(learning_rate=1e-3, total_steps=STEPS, warmup_steps=2)
    loop_cfg = settings.LoopConfig(total_steps=STEPS, global_batch_size=batch_size,
                                   log_every_steps=1, checkpoint_every_steps=0,
                                   async_checkpoints=False)
    results = {}
    for name, shape in MESHES.items():
        mesh = (sharding.make_mesh(1, 1, 1, devices=jax.devices()[:1]) if shape is None
                else sharding.make_mesh(*shape))
        losses, result = eight_devices.train_on_random_tokens(
            task, opt_cfg, loop_cfg, mesh, os.path.join(out_dir, name), batch_size, seq_len,
            predictions)
        params = result.state.params
        word = params["bert"]["embeddings"]["word_embeddings"]["embedding"]
        ffn = params["bert"]["encoder"]["layer_0"]["feed_forward"]["intermediate"]["kernel"]
        mu = (result.state.opt_state.inner_state[1][0].mu["bert"]["encoder"]["layer_0"]
              ["feed_forward"]["intermediate"]["kernel"])
        results[name] = {
            "losses": losses,
            "word_spec": list(map(str, word.sharding.spec)),
            "word_shard_shape": list(word.addressable_shards[0].data.shape),
            "ffn_spec": list(map(str, ffn.sharding.spec)),
            "ffn_shard_shape": list(ffn.addressable_shards[0].data.shape),
            "mu_spec_equals_param_spec": mu.sharding.spec == ffn.sharding.spec,
            "devices": len(word.sharding.device_set),
        }
        if name == "2x2x2":
            saved_params = jax.device_get(params)

    # The (2,2,2) checkpoint, restored onto one device: the whole TrainState, and load_params.
    one = sharding.make_mesh(1, 1, 1, devices=jax.devices()[:1])
    optimizer_ = optimizer.make_optimizer(opt_cfg)
    abstract_boxed = jax.eval_shape(init_fn, jax.random.PRNGKey(0))
    _, state_shardings = state_lib.state_shardings(abstract_boxed, optimizer_, one)
    abstract_state = jax.eval_shape(
        lambda p: steps.TrainState.create(p, optimizer_, jax.random.PRNGKey(0)),
        jax.tree.map(lambda x: x.value if hasattr(x, "value") else x, abstract_boxed,
                     is_leaf=lambda x: hasattr(x, "value")))
    target = jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                          abstract_state, state_shardings)
    manager = checkpointing.make_manager(os.path.join(out_dir, "2x2x2", "checkpoints"),
                                         async_saves=False)
    restored = checkpointing.restore(manager, STEPS, target, model_config=cfg)
    manager.close()
    restored_params = restored.params
    leaves = jax.tree.leaves(restored_params)
    _, loaded = params_loading.load_params(os.path.join(out_dir, "2x2x2", "checkpoints"))
    results["restore_on_one_device"] = {
        "devices": sorted({len(x.sharding.device_set) for x in leaves}),
        "step": int(restored.step),
        "equal": all(np.array_equal(a, b) for a, b in zip(
            jax.tree.leaves(jax.device_get(restored_params)), jax.tree.leaves(saved_params))),
        "load_params_equal": all(np.array_equal(a, b) for a, b in zip(
            jax.tree.leaves(jax.device_get(loaded)), jax.tree.leaves(saved_params))),
    }
    eight_devices.write(out_dir, results)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return eight_devices.run(__file__, str(tmp_path_factory.mktemp("sharding")), timeout=600)


@pytest.mark.parametrize("mesh", ["8x1x1", "2x4x1", "2x2x2"])
def test_losses_match_one_device(results, mesh):
    reference = np.array(results["one_device"]["losses"])
    losses = np.array(results[mesh]["losses"])
    assert len(losses) == len(reference) == STEPS
    np.testing.assert_allclose(losses, reference, rtol=1e-5, atol=0)
    assert reference[-1] < reference[0]  # it trains


def test_params_are_sharded(results):
    # (8,1,1): pure data parallelism, parameters replicated on all 8 devices.
    assert results["8x1x1"]["devices"] == 8
    assert results["8x1x1"]["word_shard_shape"] == [96, 32]
    # (2,4,1): FSDP splits the embed axis in 4.
    assert results["2x4x1"]["word_spec"] == ["None", "fsdp"]
    assert results["2x4x1"]["word_shard_shape"] == [96, 8]
    assert results["2x4x1"]["ffn_shard_shape"] == [8, 64]
    # (2,2,2): embed over fsdp, vocab and mlp over tensor.
    assert results["2x2x2"]["word_spec"] == ["tensor", "fsdp"]
    assert results["2x2x2"]["word_shard_shape"] == [48, 16]
    assert results["2x2x2"]["ffn_spec"] == ["fsdp", "tensor"]
    assert results["2x2x2"]["ffn_shard_shape"] == [16, 32]
    for mesh in ("2x4x1", "2x2x2"):
        assert results[mesh]["mu_spec_equals_param_spec"]  # Adam moments sharded like params


def test_checkpoint_from_2x2x2_restores_on_one_device(results):
    restored = results["restore_on_one_device"]
    assert restored["devices"] == [1]
    assert restored["step"] == STEPS
    assert restored["equal"] and restored["load_params_equal"]


if __name__ == "__main__":
    _worker(sys.argv[1])
