"""The pre-training modes of benchmarks/benchmark.py: the MLM train step ("train") and the
encoder's forward pass ("infer") on random token ids, ours against transformers (Flax, torch).

The timed region is the jitted (or eager, for torch) step, warm-up steps excluded; the figure is
the median over the timed steps. tokens/s counts every position (rows are full), MFU the model
FLOPs of the useful work (the MLM head at the masked positions only). Our train step is the
program that training runs (benchmarks/harness/pretrain_step.py: the recipe's task, optimizer and
loop settings, built by bert_jax.train.program), on one device; the peers' train steps use the
reference recipe (benchmarks/peers/recipe.py: AdamW without decay on biases and LayerNorm,
warm-up and linear decay, clipping) at that config's hyper-parameters.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from benchmarks.peers import recipe

SPEED = "tokens_per_second"  # the figure ratios compare


def settings(flags) -> dict:
    """The settings every implementation of this mode runs at, from the script's flags."""
    seq_len = flags.seq_len
    return {"preset": flags.preset, "batch_size": flags.batch_size, "seq_len": seq_len,
            "max_predictions": flags.max_predictions or max(1, round(0.15 * seq_len)),
            "mode": flags.mode, "dtype": flags.dtype, "remat": flags.remat,
            "steps": flags.steps, "warmup": flags.warmup}


def random_batch(settings: dict, vocab_size: int):
    """Random token ids and masked positions, identical for every implementation (seeded)."""
    rng = np.random.default_rng(0)
    b, length, p = settings["batch_size"], settings["seq_len"], settings["max_predictions"]
    input_ids = rng.integers(1000, vocab_size, size=(b, length), dtype=np.int32)
    positions = np.sort(np.stack([rng.choice(np.arange(1, length), p, replace=False)
                                  for _ in range(b)]), axis=1).astype(np.int32)
    masked_ids = np.take_along_axis(input_ids, positions, axis=1)
    return input_ids, positions, masked_ids


def time_steps(run_step, settings: dict) -> list[float]:
    """run_step() must block until the step's results exist."""
    for _ in range(settings["warmup"]):
        run_step()
    times = []
    for _ in range(settings["steps"]):
        start = time.perf_counter()
        run_step()
        times.append(time.perf_counter() - start)
    return times


def reference_recipe(settings: dict) -> recipe.Recipe:
    """The peers' training recipe (benchmarks/peers/recipe.py) at the hyper-parameters of our
    step's config (benchmarks/harness/pretrain_step.py): learning rate, warm-up, optimizer block."""
    from benchmarks.harness import pretrain_step
    config = pretrain_step.config(settings["preset"], settings["batch_size"], settings["seq_len"],
                                  settings["max_predictions"])
    return recipe.Recipe.of(config.learning_rate, config.warmup_fraction, config.total_steps,
                            config.optimizer)


# ----- implementations: step times; imports inside (one framework a process) ------------------

def run_ours(settings: dict) -> list[float]:
    """train: the pre-training step that training runs (benchmarks/harness/pretrain_step.py);
    infer: the encoder's jitted forward pass. On one device."""
    import jax
    import jax.numpy as jnp

    from benchmarks.harness import pretrain_step
    from bert_jax import BertConfig, BertModel
    from bert_jax.runtime import sharding

    mesh = sharding.make_mesh(devices=jax.devices()[:1])
    if settings["mode"] == "infer":
        cfg = BertConfig.preset(settings["preset"], dtype=settings["dtype"],
                                remat_policy=settings["remat"])
        input_ids, _, _ = random_batch(settings, cfg.vocab_size)
        model = BertModel(cfg)
        params, _ = sharding.init_sharded(
            lambda: model.init(jax.random.key(0), input_ids[:1])["params"], mesh)
        forward = jax.jit(lambda p, ids: model.apply({"params": p}, ids).sequence_output)
        ids = jnp.asarray(input_ids)
        return time_steps(lambda: forward(params, ids).block_until_ready(), settings)

    config = pretrain_step.config(settings["preset"], settings["batch_size"], settings["seq_len"],
                                  settings["max_predictions"], settings["dtype"],
                                  settings["remat"])
    _, train = pretrain_step.build(config, mesh)
    input_ids, positions, masked_ids = random_batch(settings, config.tokenizer.vocab_size)
    batch = {"input_ids": input_ids, "token_type_ids": np.zeros_like(input_ids),
             "segment_ids": np.ones_like(input_ids),
             "position_ids": np.broadcast_to(np.arange(input_ids.shape[1], dtype=np.int32),
                                             input_ids.shape).copy(),
             "masked_positions": positions, "masked_ids": masked_ids,
             "masked_weights": np.ones(positions.shape, np.float32)}
    batch = sharding.device_put_batch(batch, mesh)
    state = [train.state]

    def run_step():
        state[0], metrics = train.train_step(state[0], batch)
        metrics["loss"].block_until_ready()

    with jax.transfer_guard("disallow"):  # no hidden host<->device copies inside the step
        run_step()
    return time_steps(run_step, settings)


def run_hf_flax(settings: dict) -> list[float]:
    import jax
    import jax.numpy as jnp
    import optax
    import transformers

    from bert_jax import BertConfig

    cfg = BertConfig.preset(settings["preset"])
    hf_cfg = transformers.BertConfig(**cfg.to_hf_dict())
    dtype = jnp.dtype(settings["dtype"])
    input_ids, positions, masked_ids = random_batch(settings, cfg.vocab_size)
    batch = {"input_ids": jnp.asarray(input_ids), "masked_positions": jnp.asarray(positions),
             "masked_ids": jnp.asarray(masked_ids)}
    ones, zeros = jnp.ones_like(batch["input_ids"]), jnp.zeros_like(batch["input_ids"])
    position_ids = jnp.broadcast_to(jnp.arange(settings["seq_len"]), input_ids.shape)

    if settings["mode"] == "infer":
        model = transformers.FlaxBertModel(hf_cfg, seed=0, dtype=dtype)
        forward = jax.jit(lambda p, ids: model.module.apply(
            {"params": p}, ids, ones, zeros, position_ids, None, deterministic=True)[0])
        params = model.params
        return time_steps(lambda: forward(params, batch["input_ids"]).block_until_ready(), settings)

    model = transformers.FlaxBertForMaskedLM(hf_cfg, seed=0, dtype=dtype)
    optimizer = recipe.optax_transform(reference_recipe(settings))

    def loss_fn(params, batch, rng):
        logits = model.module.apply({"params": params}, batch["input_ids"], ones, zeros,
                                    position_ids, None, deterministic=False,
                                    rngs={"dropout": rng})[0]  # [batch, seq, vocab]
        logits = jnp.take_along_axis(logits, batch["masked_positions"][..., None], axis=1)
        return optax.softmax_cross_entropy_with_integer_labels(
            logits.astype(jnp.float32), batch["masked_ids"]).mean()

    # The peer at its best: state donated and the batch passed as arguments (a jitted step that
    # does neither runs about half as fast).
    def train_step(state, batch):
        params, opt_state, rng = state
        rng, dropout_rng = jax.random.split(rng)
        loss, grads = jax.value_and_grad(loss_fn)(params, batch, dropout_rng)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state, rng), loss

    train_step = jax.jit(train_step, donate_argnums=(0,))
    state = [(model.params, optimizer.init(model.params), jax.random.key(0))]

    def run_step():
        state[0], loss = train_step(state[0], batch)
        loss.block_until_ready()

    return time_steps(run_step, settings)


def run_hf_torch(settings: dict) -> list[float]:
    import torch
    import transformers

    from bert_jax import BertConfig

    torch.manual_seed(0)
    cfg = BertConfig.preset(settings["preset"])
    hf_cfg = transformers.BertConfig(**cfg.to_hf_dict())
    input_ids, positions, masked_ids = random_batch(settings, cfg.vocab_size)
    ids = torch.from_numpy(input_ids).long()
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=settings["dtype"] == "bfloat16")

    if settings["mode"] == "infer":
        model = transformers.BertModel(hf_cfg).eval()

        def run_infer():
            with torch.no_grad(), autocast:
                model(input_ids=ids)[0].sum().item()

        return time_steps(run_infer, settings)

    model = transformers.BertForMaskedLM(hf_cfg).train()
    labels = torch.full_like(ids, -100)
    labels.scatter_(1, torch.from_numpy(positions).long(), torch.from_numpy(masked_ids).long())
    trainer = recipe.TorchTrainer(model, reference_recipe(settings))

    def run_step():
        trainer.step({"input_ids": ids, "labels": labels}, autocast).item()

    return time_steps(run_step, settings)


def _timed(runner):
    """runner(settings) -> step times, as the worker's result: median and min step seconds."""
    def run(settings: dict) -> dict:
        times = runner(settings)
        return {"median_step_s": statistics.median(times), "min_step_s": min(times)}
    return run


RUNNERS = {"ours": _timed(run_ours), "hf_flax": _timed(run_hf_flax),
           "hf_torch": _timed(run_hf_torch)}


def report(result: dict, settings: dict, peak_flops: float | None) -> dict:
    """The worker's result with tokens/s and MFU (peak_flops None: by device)."""
    from bert_jax import BertConfig
    from bert_jax.train import flops

    cfg = BertConfig.preset(settings["preset"])
    b, length = settings["batch_size"], settings["seq_len"]
    if settings["mode"] == "train":  # useful work only: the MLM head at the masked positions
        step_flops = flops.pretraining_flops_per_step(cfg, b, length, settings["max_predictions"])
    else:
        step_flops = flops.encoder_flops_per_step(cfg, b, length, training=False)
    peak = peak_flops or flops.peak_flops_per_device()
    seconds = result["median_step_s"]
    return {**settings, **result, "tokens_per_second": round(b * length / seconds, 1),
            "model_flops_per_step": step_flops, "mfu": round(step_flops / seconds / peak, 4)}


def line(label: str, r: dict) -> str:
    """One human line of a report."""
    return (f"{label:17s} {r['tokens_per_second']:10.1f} tokens/s  mfu {r['mfu']:.3f}  "
            f"peak RSS {r['peak_rss_mb']:.0f} MB  (median step {r['median_step_s']:.3f} s)")
