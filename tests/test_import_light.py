"""The core imports without the input pipeline's libraries: the model, the config, the train step
(steps, optimizer, state, loop), the shardings and the synthetic batches load and run one
pre-training step in a process where grain, tensorflow_datasets, array_record, tensorboardX,
gensim, matplotlib and ml_collections cannot be imported (a bare GPU image has none of them).

The MLM loss lives in the pre-training recipe, which is config-driven (ml_collections): it must
import without the pipeline's libraries, and compute the loss the core step computed.
"""

import json
import math
import os
import subprocess
import sys
import textwrap

PIPELINE = ("grain", "tensorflow_datasets", "array_record", "tensorboardX", "gensim", "matplotlib")
CONFIG = ("ml_collections",)

SCRIPT = textwrap.dedent("""
    import json
    import sys

    BLOCKED = set(sys.argv[1].split(",") + sys.argv[2].split(","))

    class Blocker:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"{name} is blocked by test_import_light")
            return None

    sys.meta_path.insert(0, Blocker())

    import jax
    import jax.numpy as jnp
    import optax

    from bert_jax.runtime import sharding
    from bert_jax.config import settings
    from bert_jax.config.bert import BertConfig
    from bert_jax.data.pretraining.synthetic import RandomTokenBatches
    from bert_jax.model import BertForPreTraining
    from bert_jax.train.checkpoint import store as checkpointing
    from bert_jax.train import evaluation, loop, metrics_writer, program, steps
    from bert_jax.train import optimizer as optimizer_lib

    SEQ, PREDICTIONS, VOCAB, ROWS = 16, 4, 64, 4
    cfg = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=SEQ)
    model = BertForPreTraining(cfg, with_nsp=True)

    def init_fn(rng):
        ids = jnp.zeros((1, SEQ), jnp.int32)
        positions = jnp.zeros((1, PREDICTIONS), jnp.int32)
        return model.init(rng, ids, positions, ids, None, True, segment_ids=jnp.ones_like(ids),
                          position_ids=jnp.arange(SEQ, dtype=jnp.int32)[None])["params"]

    def loss_fn(params, batch, rng, deterministic):  # the recipe's MLM + NSP loss, written out
        out = model.apply(
            {"params": params}, batch["input_ids"], batch["masked_positions"],
            batch["token_type_ids"], None, deterministic, segment_ids=batch["segment_ids"],
            position_ids=batch["position_ids"], rngs=None if deterministic else {"dropout": rng})
        weights = batch["masked_weights"]
        mlm = optax.softmax_cross_entropy_with_integer_labels(
            out.mlm_logits.astype(jnp.float32), batch["masked_ids"])
        nsp = optax.softmax_cross_entropy_with_integer_labels(
            out.nsp_logits.astype(jnp.float32), batch["nsp_labels"])
        rows = jnp.ones(nsp.shape, jnp.float32)
        return ({"mlm_loss": (jnp.sum(mlm * weights), jnp.sum(weights)),
                 "nsp_loss": (jnp.sum(nsp), jnp.sum(rows))}, {})

    mesh = sharding.make_mesh()
    opt_config = settings.OptimizerConfig(learning_rate=1e-3, total_steps=10,
                                          warmup_steps=1)
    optimizer = optimizer_lib.make_optimizer(opt_config)
    init_rng, state_rng = jax.random.split(jax.random.PRNGKey(0))
    task = loop.Task(model_config=cfg, init_fn=init_fn, loss_fn=loss_fn)
    train = program.build(task, optimizer,
                          settings.LoopConfig(total_steps=10, global_batch_size=ROWS),
                          mesh, learning_rate_fn=optimizer_lib.learning_rate_schedule(opt_config))
    state, train_step = train.state, train.train_step
    batch = next(RandomTokenBatches(ROWS, SEQ, PREDICTIONS, VOCAB, seed=0, sentence_pairs=True))
    eval_before = steps.summarize(steps.add_sums(
        None, jax.jit(steps.make_eval_step(loss_fn))(state.params, batch)))
    state, metrics = train_step(state, sharding.device_put_batch(batch, mesh))
    core = {"loss": float(metrics["loss"]), "step": int(state.step),
            "eval_loss": eval_before["loss"],
            "loaded": sorted(name for name in BLOCKED if name in sys.modules)}

    # The recipe's loss: ml_collections allowed again, the pipeline's libraries still blocked.
    BLOCKED.difference_update(sys.argv[2].split(","))
    from bert_jax.recipes import pretrain

    fresh = steps.TrainState.create(
        sharding.init_sharded(lambda: init_fn(init_rng), mesh)[0], optimizer, state_rng)
    recipe = steps.summarize(steps.add_sums(
        None, jax.jit(steps.make_eval_step(pretrain.make_loss(model)))(fresh.params, batch)))
    print(json.dumps({**core, "recipe_eval_loss": recipe["loss"],
                      "loaded_after": sorted(name for name in BLOCKED if name in sys.modules)}))
""")


def test_one_pretraining_step_without_pipeline_libraries():
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, ",".join(PIPELINE), ",".join(CONFIG)],
        capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["step"] == 1
    assert math.isfinite(out["loss"]) and out["loss"] > 0, out
    assert out["loaded"] == [] and out["loaded_after"] == [], out
    # The recipe's MLM + NSP loss is the one the core step computed (no dropout in eval).
    assert math.isclose(out["recipe_eval_loss"], out["eval_loss"], rel_tol=1e-5), out
