"""Explicit fsdp collectives (bert_jax/train/fsdp.py, config.fsdp_collectives="explicit") on 8
CPU devices (a subprocess with XLA_FLAGS set before jax is imported).

Without dropout the explicit step computes what the partitioner's does: on (data, fsdp, tensor)
= (2, 4, 1) without and (2, 2, 2) with gradient accumulation (2 micro-batches), and on (1, 8, 1)
with its collectives in two levels (as TPU slices of more than 8 chips run them), the logged
losses of 4 steps through the real loop equal a one-device run's within 1e-5 relative, and the
parameters after them within 1e-5. The one reference is the one-device run WITHOUT accumulation
(accumulation divides the summed micro-batch gradients by the batch's weight, so it computes the
whole batch's step): fewer programs to compile, and a stricter comparison. The model has one
layer (its collectives are those of every layer). Its program reduces the gradients
with reduce-scatters over fsdp and gathers the parameters with all-gathers. With dropout it runs
(finite losses, other than without).
"""

import os
import sys

import numpy as np
import pytest

import eight_devices

STEPS = 4
# name: (mesh or None for one device, fsdp_collectives, accumulation_steps, dropout)
RUNS = {"one_device": (None, "xla", 1, 0.0), "2x4x1": ((2, 4, 1), "explicit", 1, 0.0),
        # the tensor axis and accumulation, in one run
        "2x2x2_acc2": ((2, 2, 2), "explicit", 2, 0.0),
        "2x4x1_dropout": ((2, 4, 1), "explicit", 1, 0.1),
        # fsdp over every device in two levels (fsdp.two_level_mesh: 4 groups of 2), as on TPU
        "1x8x1_two_level": ((1, 8, 1), "explicit", 1, 0.0)}


def _worker(out_dir: str) -> None:
    import jax
    import jax.numpy as jnp

    from bert_jax import BertConfig
    from bert_jax.config import settings
    from bert_jax.data.pretraining.synthetic import RandomTokenBatches
    from bert_jax.model import BertForPreTraining
    from bert_jax.recipes import pretrain
    from bert_jax.runtime import sharding
    from bert_jax.train import fsdp, loop, optimizer, program

    seq_len, predictions, batch_size = 16, 3, 16
    results = {}
    for name, (shape, collectives, accumulation, dropout) in RUNS.items():
        cfg = BertConfig.preset("tiny", num_hidden_layers=1, vocab_size=96, hidden_size=32,
                                num_attention_heads=4,
                                intermediate_size=64, max_position_embeddings=16,
                                hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
        model = BertForPreTraining(cfg, with_nsp=True)

        def init_fn(rng, model=model):
            ids = jnp.zeros((1, seq_len), jnp.int32)
            return model.init(rng, ids, jnp.zeros((1, predictions), jnp.int32))["params"]

        task = loop.Task(model_config=cfg, init_fn=init_fn, loss_fn=pretrain.make_loss(model))
        opt_cfg = settings.OptimizerConfig(learning_rate=3e-3, total_steps=STEPS, warmup_steps=1)
        loop_cfg = settings.LoopConfig(total_steps=STEPS, global_batch_size=batch_size,
                                       log_every_steps=1, checkpoint_every_steps=0,
                                       async_checkpoints=False, accumulation_steps=accumulation,
                                       fsdp_collectives=collectives)
        mesh = (sharding.make_mesh(1, 1, 1, devices=jax.devices()[:1]) if shape is None
                else sharding.make_mesh(*shape))
        two_level = name.endswith("two_level")
        fsdp.TWO_LEVEL_ABOVE, fsdp.TWO_LEVEL_PLATFORMS = (2, ("cpu",)) if two_level else (
            8, ("tpu",))
        if two_level:
            results["two_level_axes"] = list(fsdp.two_level_mesh(mesh)[0].axis_names)
        losses, result = eight_devices.train_on_random_tokens(
            task, opt_cfg, loop_cfg, mesh, os.path.join(out_dir, name), batch_size, seq_len,
            predictions)
        params = jax.device_get(result.state.params)
        results[name] = {"losses": losses,
                         "params": [np.asarray(x).ravel().tolist()
                                    for x in jax.tree.leaves(params)]}
        if name == "2x4x1":
            train = program.build(task, optimizer.make_optimizer(opt_cfg), loop_cfg, mesh,
                                  learning_rate_fn=optimizer.learning_rate_schedule(opt_cfg),
                                  abstract=True)  # the loop's program: a cache hit
            batch = next(iter(RandomTokenBatches(batch_size, seq_len, predictions, cfg.vocab_size,
                                                 seed=0, sentence_pairs=True)))
            text = train.compile(sharding.device_put_batch(batch, mesh)).as_text()
            results[name]["ops"] = {op: text.count(f" {op}(") for op in
                                    ("reduce-scatter", "all-gather", "all-reduce")}
    eight_devices.write(out_dir, results)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return eight_devices.run(__file__, str(tmp_path_factory.mktemp("fsdp")), timeout=600)


@pytest.mark.parametrize("name,reference", [("2x4x1", "one_device"),
                                            ("2x2x2_acc2", "one_device"),
                                            ("1x8x1_two_level", "one_device")])
def test_explicit_step_equals_the_one_device_step(results, name, reference):
    np.testing.assert_allclose(results[name]["losses"], results[reference]["losses"], rtol=1e-5)
    for ours, theirs in zip(results[name]["params"], results[reference]["params"]):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_two_level_mesh_splits_fsdp(results):
    assert results["two_level_axes"] == ["data", "fsdp_outer", "fsdp_inner", "tensor"]


def test_explicit_program_reduce_scatters_gradients(results):
    ops = results["2x4x1"]["ops"]
    assert ops["reduce-scatter"] > 0 and ops["all-gather"] > 0, ops


def test_explicit_step_with_dropout_runs(results):
    losses = results["2x4x1_dropout"]["losses"]
    assert len(losses) == STEPS and np.all(np.isfinite(losses))
    assert losses[1:] != results["2x4x1"]["losses"][1:]  # dropout did act


def test_choice_is_checked():
    from bert_jax.config import settings
    with pytest.raises(ValueError, match="fsdp_collectives='gspmd'"):
        settings.LoopConfig(total_steps=1, global_batch_size=1, fsdp_collectives="gspmd")
    assert settings.CHOICES == ("xla", "explicit")


if __name__ == "__main__":
    _worker(sys.argv[1])
