"""Throughput and memory of the BERT MLM train step (or forward pass), ours against peers.

  python experiments/benchmark.py --preset=base --batch_size=8 --seq_len=128 --mode=train \
      --peer=hf_flax,hf_torch --json
  python experiments/benchmark.py --dtype=bfloat16 --peer=hf_flax@float32,hf_flax,hf_torch

Each implementation runs in its own process (torch and JAX in one process slow each other), at the
same settings, on the same random token ids; the timed region is the jitted (or eager, for torch)
step, warm-up steps excluded, and the figure is the median over --steps steps. Every setting prints
one JSON object with --json (tokens_per_second, mfu, peak_rss_mb, ...), then the ratios
ours / peer. A peer may run at its own dtype (`hf_flax@float32`), so that ours at its best
settings and a peer at its own are measured in one run. Peers need the `bench` extra:
pip install -e '.[bench]'.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np
from absl import app, flags

IMPLEMENTATIONS = ("ours", "hf_flax", "hf_torch")

FLAGS = flags.FLAGS
flags.DEFINE_string("preset", "base", "BertConfig preset: tiny, mini, small, medium, base, large.")
flags.DEFINE_integer("batch_size", 8, "Sequences per step.")
flags.DEFINE_integer("seq_len", 128, "Tokens per sequence.")
flags.DEFINE_integer("max_predictions", None, "Masked positions per sequence (default 15% of seq_len).")
flags.DEFINE_enum("mode", "train", ["train", "infer"], "MLM train step or encoder forward pass.")
flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "Compute dtype (params stay fp32).")
flags.DEFINE_string("remat", "none", "Remat policy of our model (none, full, dots, dots_no_batch).")
flags.DEFINE_string("peer", "", "Comma-separated peers to run after ours: hf_flax, hf_torch, each "
                    "optionally at its own compute dtype (hf_flax@float32); default --dtype.")
flags.DEFINE_boolean("skip_ours", False, "Run only the peers.")
flags.DEFINE_integer("steps", 10, "Timed steps (the median is reported).")
flags.DEFINE_integer("warmup", 3, "Untimed steps first (compilation, allocator warm-up).")
flags.DEFINE_float("peak_flops", None, "Peak FLOP/s of the device for MFU (default: by device).")
flags.DEFINE_boolean("json", False, "Print one JSON object per measured setting.")
flags.DEFINE_string("worker", None, "Internal: run one implementation in this process.")


def _settings() -> dict:
    seq_len = FLAGS.seq_len
    return {"preset": FLAGS.preset, "batch_size": FLAGS.batch_size, "seq_len": seq_len,
            "max_predictions": FLAGS.max_predictions or max(1, round(0.15 * seq_len)),
            "mode": FLAGS.mode, "dtype": FLAGS.dtype, "remat": FLAGS.remat,
            "steps": FLAGS.steps, "warmup": FLAGS.warmup}


def _random_batch(settings: dict, vocab_size: int):
    """Random token ids and masked positions, identical for every implementation (seeded)."""
    rng = np.random.default_rng(0)
    b, l, p = settings["batch_size"], settings["seq_len"], settings["max_predictions"]
    input_ids = rng.integers(1000, vocab_size, size=(b, l), dtype=np.int32)
    positions = np.sort(np.stack([rng.choice(np.arange(1, l), p, replace=False) for _ in range(b)]),
                        axis=1).astype(np.int32)
    masked_ids = np.take_along_axis(input_ids, positions, axis=1)
    return input_ids, positions, masked_ids


def _time_steps(run_step, settings: dict) -> list[float]:
    """run_step() must block until the step's results exist."""
    for _ in range(settings["warmup"]):
        run_step()
    times = []
    for _ in range(settings["steps"]):
        start = time.perf_counter()
        run_step()
        times.append(time.perf_counter() - start)
    return times


# ------------------------------------------------------------------------------------------------
# Implementations: each returns the list of step times. Imports stay inside (one framework a process).

def _run_ours(settings: dict) -> list[float]:
    """The real pre-training step (bert_jax.train.steps), jitted with the state donated."""
    import jax
    import jax.numpy as jnp

    from bert_jax import BertConfig, BertForPreTraining, BertModel, sharding, xla_options
    from bert_jax.recipes import pretrain
    from bert_jax.train import optimizer as optimizer_lib
    from bert_jax.train import steps

    cfg = BertConfig.preset(settings["preset"], dtype=settings["dtype"],
                            remat_policy=settings["remat"])
    input_ids, positions, masked_ids = _random_batch(settings, cfg.vocab_size)
    mesh = sharding.make_mesh(devices=jax.devices()[:1])

    if settings["mode"] == "infer":
        model = BertModel(cfg)
        params, _ = sharding.init_sharded(
            lambda: model.init(jax.random.key(0), input_ids[:1])["params"], mesh)
        forward = jax.jit(lambda p, ids: model.apply({"params": p}, ids).sequence_output)
        ids = jnp.asarray(input_ids)
        return _time_steps(lambda: forward(params, ids).block_until_ready(), settings)

    model = BertForPreTraining(cfg, with_nsp=False)
    params, _ = sharding.init_sharded(
        lambda: model.init(jax.random.key(0), input_ids[:1], positions[:1])["params"], mesh)
    optimizer = optimizer_lib.make_optimizer(optimizer_lib.OptimizerConfig(
        learning_rate=1e-4, total_steps=1000, warmup_steps=10))
    train_step = jax.jit(steps.make_train_step(pretrain.make_loss(model), optimizer),
                         donate_argnums=(0,), compiler_options=xla_options.memory_lean())
    batch = {"input_ids": input_ids, "token_type_ids": np.zeros_like(input_ids),
             "segment_ids": np.ones_like(input_ids),
             "position_ids": np.broadcast_to(np.arange(input_ids.shape[1], dtype=np.int32),
                                             input_ids.shape).copy(),
             "masked_positions": positions, "masked_ids": masked_ids,
             "masked_weights": np.ones(positions.shape, np.float32)}
    batch = sharding.device_put_batch(batch, mesh)
    state = [steps.TrainState.create(params, optimizer, jax.random.key_data(jax.random.key(0)))]

    def run_step():
        state[0], metrics = train_step(state[0], batch)
        metrics["loss"].block_until_ready()

    with jax.transfer_guard("disallow"):  # no hidden host<->device copies inside the step
        run_step()
    return _time_steps(run_step, settings)


def _run_hf_flax(settings: dict) -> list[float]:
    import jax
    import jax.numpy as jnp
    import optax
    import transformers

    from bert_jax import BertConfig

    cfg = BertConfig.preset(settings["preset"])
    hf_cfg = transformers.BertConfig(**cfg.to_hf_dict())
    dtype = jnp.dtype(settings["dtype"])
    input_ids, positions, masked_ids = _random_batch(settings, cfg.vocab_size)
    batch = {"input_ids": jnp.asarray(input_ids), "masked_positions": jnp.asarray(positions),
             "masked_ids": jnp.asarray(masked_ids)}
    ones, zeros = jnp.ones_like(batch["input_ids"]), jnp.zeros_like(batch["input_ids"])
    position_ids = jnp.broadcast_to(jnp.arange(settings["seq_len"]), input_ids.shape)

    if settings["mode"] == "infer":
        model = transformers.FlaxBertModel(hf_cfg, seed=0, dtype=dtype)
        forward = jax.jit(lambda p, ids: model.module.apply(
            {"params": p}, ids, ones, zeros, position_ids, None, deterministic=True)[0])
        params = model.params
        return _time_steps(lambda: forward(params, batch["input_ids"]).block_until_ready(), settings)

    model = transformers.FlaxBertForMaskedLM(hf_cfg, seed=0, dtype=dtype)
    optimizer = optax.adamw(1e-4, b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.01)

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

    return _time_steps(run_step, settings)


def _run_hf_torch(settings: dict) -> list[float]:
    import torch
    import transformers

    from bert_jax import BertConfig

    torch.manual_seed(0)
    cfg = BertConfig.preset(settings["preset"])
    hf_cfg = transformers.BertConfig(**cfg.to_hf_dict())
    input_ids, positions, masked_ids = _random_batch(settings, cfg.vocab_size)
    ids = torch.from_numpy(input_ids).long()
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=settings["dtype"] == "bfloat16")

    if settings["mode"] == "infer":
        model = transformers.BertModel(hf_cfg).eval()

        def run_infer():
            with torch.no_grad(), autocast:
                model(input_ids=ids)[0].sum().item()

        return _time_steps(run_infer, settings)

    model = transformers.BertForMaskedLM(hf_cfg).train()
    labels = torch.full_like(ids, -100)
    labels.scatter_(1, torch.from_numpy(positions).long(), torch.from_numpy(masked_ids).long())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, eps=1e-6, weight_decay=0.01)

    def run_step():
        optimizer.zero_grad(set_to_none=True)
        with autocast:
            loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        optimizer.step()
        loss.item()

    return _time_steps(run_step, settings)


RUNNERS = {"ours": _run_ours, "hf_flax": _run_hf_flax, "hf_torch": _run_hf_torch}


def _worker(name: str) -> None:
    settings = _settings()
    times = RUNNERS[name](settings)
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("BENCHMARK_RESULT " + json.dumps(
        {"impl": name, "median_step_s": statistics.median(times), "min_step_s": min(times),
         "peak_rss_mb": round(peak_rss_mb, 1)}), flush=True)


def _measure_in_subprocess(name: str, dtype: str) -> dict:
    argv = [sys.executable, os.path.abspath(__file__), f"--worker={name}", f"--dtype={dtype}"]
    argv += [a for a in sys.argv[1:]
             if not a.startswith(("--peer", "--worker", "--json", "--dtype"))]
    proc = subprocess.run(argv, capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith("BENCHMARK_RESULT "):
            return json.loads(line[len("BENCHMARK_RESULT "):])
    raise RuntimeError(f"benchmark worker {name!r} failed (exit {proc.returncode}):\n"
                       f"{proc.stderr[-3000:]}")


def _report(result: dict, settings: dict) -> dict:
    from bert_jax import BertConfig
    from bert_jax.train import flops

    cfg = BertConfig.preset(settings["preset"])
    b, l = settings["batch_size"], settings["seq_len"]
    tokens = b * l
    if settings["mode"] == "train":  # useful work only: the MLM head at the masked positions
        step_flops = flops.pretraining_flops_per_step(cfg, b, l, settings["max_predictions"])
    else:
        step_flops = flops.encoder_flops_per_step(cfg, b, l, training=False)
    peak = FLAGS.peak_flops or flops.peak_flops_per_device()
    seconds = result["median_step_s"]
    return {**settings, **result, "tokens_per_second": round(tokens / seconds, 1),
            "model_flops_per_step": step_flops, "mfu": round(step_flops / seconds / peak, 4)}


def _parse_peer(text: str) -> tuple[str, str]:
    """'hf_flax' -> ('hf_flax', --dtype); 'hf_flax@float32' -> ('hf_flax', 'float32')."""
    name, _, dtype = text.partition("@")
    if name not in IMPLEMENTATIONS or name == "ours":
        raise app.UsageError(f"--peer: unknown peer {name!r}; choose from hf_flax, hf_torch")
    if dtype and dtype not in ("float32", "bfloat16"):
        raise app.UsageError(f"--peer: unknown dtype {dtype!r} in {text!r}; float32 or bfloat16")
    return name, dtype or FLAGS.dtype


def main(argv):
    del argv
    if FLAGS.worker:
        _worker(FLAGS.worker)
        return
    settings = _settings()
    peers = [_parse_peer(p) for p in FLAGS.peer.split(",") if p]
    runs = ([] if FLAGS.skip_ours else [("ours", FLAGS.dtype)]) + peers
    if len(set(runs)) != len(runs):
        raise app.UsageError(f"--peer: the same peer at the same dtype twice: {FLAGS.peer!r}")
    if not runs:
        raise app.UsageError("nothing to run: --skip_ours without --peer")
    reports = {}
    for name, dtype in runs:
        label = name if dtype == FLAGS.dtype else f"{name}@{dtype}"
        reports[label] = _report(_measure_in_subprocess(name, dtype), {**settings, "dtype": dtype})
        if FLAGS.json:
            print(json.dumps(reports[label]), flush=True)
        else:
            r = reports[label]
            print(f"{label:17s} {r['tokens_per_second']:10.1f} tokens/s  mfu {r['mfu']:.3f}  "
                  f"peak RSS {r['peak_rss_mb']:.0f} MB  (median step {r['median_step_s']:.3f} s)",
                  flush=True)
    if "ours" in reports:
        for peer in [label for label in reports if label != "ours"]:
            ratio = {"ratio": f"ours/{peer}",
                     "tokens_per_second": round(reports["ours"]["tokens_per_second"]
                                                / reports[peer]["tokens_per_second"], 3),
                     "peak_rss": round(reports["ours"]["peak_rss_mb"] / reports[peer]["peak_rss_mb"], 3)}
            print(json.dumps(ratio) if FLAGS.json else
                  f"ours/{peer}: {ratio['tokens_per_second']:.2f}x tokens/s, "
                  f"{ratio['peak_rss']:.2f}x peak RSS", flush=True)


if __name__ == "__main__":
    app.run(main)
