"""One prepared check of an accelerator: attention kernels, and the train steps' speed and memory.

    python experiments/device_check.py --json=device_check.json          # a GPU or TPU host
    python experiments/device_check.py --tiny --json=/tmp/check.json     # any machine (CI)

Expected runtime: under 8 minutes on one H200 (about 2 minutes of it compiling); --tiny about a
minute on a 2-core CPU. Nothing is downloaded and no data is read: every input is synthetic.
Expected result: attention max differences to xla below 2e-2 (bf16), and one line of tokens/s,
MFU, compile seconds and peak memory per train step.

What it measures, each in the JSON under its key:
- attention: every kernel of this platform (GPU: cuDNN; TPU: splash; CPU: splash in Pallas
  interpret mode) against the xla composition, forward outputs and the gradients with respect
  to query, key and value, bf16, for padded rows and for packed rows (several sequences a row).
  Outputs are compared at real tokens only (what padding tokens hold is read by nothing). For
  cuDNN, packed rows are also tried through jax.nn.dot_product_attention's boolean mask, which
  bert_jax.model.attention.choose does not use (its result or error is recorded).
- pretrain: the masked-LM train step that training runs (bert_jax.train.program: donation,
  shardings, activation constraints) for BERT-base at 128- and 512-token rows and BERT-large at
  128, bf16: compile seconds, median step seconds, tokens/s, MFU against the chip's peak
  (bert_jax.train.flops), and the peak device memory where the backend reports it.
- finetune: the classification fine-tuning step for a MiniLM-sized model (batch 32, length 64)
  and BERT-base (batch 32, length 128), the same figures in examples/s.
The inputs are RandomTokenBatches rows (pre-training) and random ids (fine-tuning); the model
starts from random weights; the attention kernel is the model's default ("auto").

Exit status: 0 with the JSON written; 1 when a check failed (recorded under its key with the
error; the JSON is still written) or for bad input (one line).
"""

import json
import os
import statistics
import sys
import time

from absl import app, flags

# Runnable from a checkout without installing it (an accelerator image with jax but not us).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bert_jax import cli

FLAGS = flags.FLAGS
SCRIPT = "device_check.py"

# (name, preset or explicit sizes, batch, seq_len) of the full check and of --tiny (--tiny: the
# tiny preset's widths with one layer, the least that runs every piece of the steps).
TINY = dict(num_hidden_layers=1, hidden_size=128, num_attention_heads=2, intermediate_size=512)
PRETRAIN = {"full": [("base_128", "base", 64, 128), ("base_512", "base", 16, 512),
                     ("large_128", "large", 32, 128)],
            "tiny": [("tiny1_128", TINY, 8, 128)]}
MINILM = dict(num_hidden_layers=6, hidden_size=384, num_attention_heads=12,
              intermediate_size=1536)
FINETUNE = {"full": [("minilm_32x64", MINILM, 32, 64), ("base_32x128", "base", 32, 128)],
            "tiny": [("tiny1_8x64", TINY, 8, 64)]}
ATTENTION = {"full": dict(batch=8, seq_len=512, heads=12, head_dim=64),
             "tiny": dict(batch=2, seq_len=128, heads=2, head_dim=64)}


def model_config(sizes, vocab_size: int, max_len: int):
    from bert_jax.config.bert import BertConfig
    fields = dict(vocab_size=vocab_size, max_position_embeddings=max(512, max_len),
                  dtype="bfloat16")
    if isinstance(sizes, str):
        return BertConfig.preset(sizes, **fields)
    return BertConfig(**sizes, **fields)


# ----- attention --------------------------------------------------------------------------------

def _masks(batch: int, seq_len: int):
    """Padded rows (each row a different real length) and packed rows (segments 1, 2, 3 of
    unequal lengths, then padding) as bert_jax.model.attention.Mask, with the real-token mask."""
    import numpy as np

    from bert_jax.model.attention import Mask
    lengths = np.linspace(seq_len // 3, seq_len, batch).astype(int)
    attention_mask = (np.arange(seq_len)[None, :] < lengths[:, None]).astype(np.int32)
    cuts = [seq_len // 4, seq_len // 2, (7 * seq_len) // 8]
    segments = np.zeros((batch, seq_len), np.int32)
    for i, cut in enumerate(cuts):
        segments[:, (cuts[i - 1] if i else 0):cut] = i + 1
    return {"padded": (Mask(attention_mask=attention_mask, segment_ids=None), attention_mask),
            "packed": (Mask(attention_mask=(segments > 0).astype(np.int32),
                            segment_ids=segments), (segments > 0).astype(np.int32))}


def check_attention(sizes: dict, kernel: str) -> dict:
    """Max |kernel - xla| of outputs (real tokens) and of the q, k, v gradients, per mask."""
    import jax
    import jax.numpy as jnp

    from bert_jax.model import attention
    from bert_jax.runtime import platform
    shape = (sizes["batch"], sizes["seq_len"], sizes["heads"], sizes["head_dim"])
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    q, k, v, cotangent = (jax.random.normal(key, shape, jnp.float32).astype(jnp.bfloat16)
                          for key in keys)
    out = {}
    for name, (mask, real) in _masks(sizes["batch"], sizes["seq_len"]).items():
        real = jnp.asarray(real, jnp.bfloat16)[:, :, None, None]

        def objective(impl, q, k, v, mask=mask, real=real):
            context = getattr(attention, impl)(q, k, v, mask)  # the kernel itself
            return jnp.sum((context * real * cotangent).astype(jnp.float32)), context

        result = {"auto_chooses": attention.choose(
            "auto", platform.current(), dtype=q.dtype, head_dim=shape[3], seq_len=shape[1],
            with_dropout=False, packed=mask.packed)}
        try:
            grads = {}
            for impl in ("xla", kernel):
                fn = jax.jit(jax.value_and_grad(lambda q, k, v, i=impl: objective(i, q, k, v),
                                                argnums=(0, 1, 2), has_aux=True))
                (_, context), g = fn(q, k, v)
                grads[impl] = (context * real, g)
            diff = lambda a, b: float(jnp.max(jnp.abs(a.astype(jnp.float32)
                                                      - b.astype(jnp.float32))))
            result["output_max_abs_diff"] = diff(grads["xla"][0], grads[kernel][0])
            for label, a, b in zip("qkv", grads["xla"][1], grads[kernel][1]):
                result[f"grad_{label}_max_abs_diff"] = diff(a, b)
            result["xla_output_max_abs"] = float(jnp.max(jnp.abs(
                grads["xla"][0].astype(jnp.float32))))
        except Exception as e:  # noqa: BLE001 - recorded: this is what the check is for
            result["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
        out[name] = result
    if kernel == "cudnn":
        out["packed_as_boolean_mask"] = _cudnn_boolean_mask(q, k, v, *_masks(
            sizes["batch"], sizes["seq_len"])["packed"])
    return out


def _cudnn_boolean_mask(q, k, v, mask, real) -> dict:
    """cuDNN through jax.nn.dot_product_attention with a packed boolean mask, against xla."""
    import jax
    import jax.numpy as jnp

    from bert_jax.model import attention
    try:
        boolean = mask.boolean(q.shape[1])
        got = jax.jit(lambda q, k, v: jax.nn.dot_product_attention(
            q, k, v, mask=boolean, implementation="cudnn"))(q, k, v)
        want = attention.attend(q, k, v, mask, implementation="xla")
        real = jnp.asarray(real, jnp.float32)[:, :, None, None]
        return {"output_max_abs_diff": float(jnp.max(jnp.abs(
            (got.astype(jnp.float32) - want.astype(jnp.float32)) * real)))}
    except Exception as e:  # noqa: BLE001 - recorded
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}


# ----- train steps ------------------------------------------------------------------------------

def _timed(step, state, batches, steps: int) -> tuple[float, list[float], object]:
    """(compile + first step seconds, seconds of each later step, state)."""
    import jax
    start = time.perf_counter()
    state, metrics = step(state, batches[0])
    jax.block_until_ready(metrics)
    first = time.perf_counter() - start
    seconds = []
    for i in range(steps):
        start = time.perf_counter()
        state, metrics = step(state, batches[(i + 1) % len(batches)])
        jax.block_until_ready(metrics)
        seconds.append(time.perf_counter() - start)
    return first, seconds, state


def _peak_memory(device) -> int | None:
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    return int(stats["peak_bytes_in_use"]) if stats and "peak_bytes_in_use" in stats else None


def run_step(task, batches, mesh, steps: int, rows: int, tokens: int) -> dict:
    """Compile and time `task`'s train step as the training loop builds it."""
    import jax

    from bert_jax.config import settings
    from bert_jax.runtime import sharding
    from bert_jax.train import flops, program
    from bert_jax.train import optimizer as optimizer_lib
    opt_config = settings.OptimizerConfig(total_steps=1000, warmup_steps=10)
    built = program.build(task, optimizer_lib.make_optimizer(opt_config),
                          settings.LoopConfig(total_steps=1000, global_batch_size=rows), mesh,
                          learning_rate_fn=optimizer_lib.learning_rate_schedule(opt_config))
    device_batches = [sharding.device_put_batch(b, mesh) for b in batches]
    first, seconds, _ = _timed(built.train_step, built.state, device_batches, steps)
    median = statistics.median(seconds)
    peak = flops.peak_flops_per_device(jax.devices()[0])
    return {"compile_and_first_step_s": round(first, 3), "step_s_median": median,
            "step_s_all": [round(s, 5) for s in seconds], "rows_per_s": rows / median,
            "tokens_per_s": tokens / median,
            "model_flops_per_step": task.flops_per_step,
            "mfu": task.flops_per_step / median / (peak * mesh.devices.size) if peak else None,
            "peak_memory_bytes": _peak_memory(jax.devices()[0])}


def pretrain_task(cfg, batch: int, seq_len: int, max_predictions: int):
    import jax.numpy as jnp

    from bert_jax.model import BertForPreTraining
    from bert_jax.recipes import pretrain
    from bert_jax.train import flops, loop
    model = BertForPreTraining(cfg, with_nsp=False)

    def init_fn(rng):
        ids = jnp.zeros((1, seq_len), jnp.int32)
        return model.init(rng, ids, ids[:, :max_predictions])["params"]

    return loop.Task(model_config=cfg, init_fn=init_fn, loss_fn=pretrain.make_loss(model),
                     flops_per_step=flops.pretraining_flops_per_step(cfg, batch, seq_len,
                                                                    max_predictions),
                     tokens_per_step=batch * seq_len)


def finetune_task(cfg, batch: int, seq_len: int):
    from bert_jax.model import BertForSequenceClassification
    from bert_jax.recipes.finetune import kinds, recipe
    from bert_jax.train import flops, loop
    kind = kinds.get("classification")
    model = BertForSequenceClassification(cfg, num_labels=2)
    return loop.Task(model_config=cfg, init_fn=recipe.make_init_fn(model, seq_len),
                     loss_fn=recipe.make_loss_fn(kind, model),
                     flops_per_step=flops.encoder_flops_per_step(cfg, batch, seq_len, 2),
                     tokens_per_step=batch * seq_len)


def classification_batches(batch: int, seq_len: int, vocab_size: int, count: int) -> list:
    import numpy as np
    rng = np.random.default_rng(0)
    out = []
    for _ in range(count):
        lengths = rng.integers(seq_len // 4, seq_len + 1, batch)
        mask = (np.arange(seq_len)[None, :] < lengths[:, None]).astype(np.int32)
        out.append({"input_ids": (rng.integers(1, vocab_size, (batch, seq_len)) * mask
                                  ).astype(np.int32),
                    "token_type_ids": np.zeros((batch, seq_len), np.int32),
                    "attention_mask": mask,
                    "labels": rng.integers(0, 2, batch).astype(np.int32)})
    return out


def main(argv):
    if len(argv) > 1:
        sys.exit(f"{SCRIPT}: error: unexpected arguments {argv[1:]}")
    if FLAGS.steps < 1:
        sys.exit(f"{SCRIPT}: error: --steps={FLAGS.steps} must be positive")
    if not FLAGS.json:
        sys.exit(f"{SCRIPT}: error: --json=FILE is required")
    import jax

    from bert_jax.data.pretraining.synthetic import RandomTokenBatches
    from bert_jax.runtime import platform, sharding
    from bert_jax.tools.scaling import chips
    size = "tiny" if FLAGS.tiny else "full"
    device = jax.devices()[0]
    here = platform.normalise(device.platform)
    chip = chips.for_device_kind(device.device_kind)
    report = {"device": {"platform": here, "device_kind": device.device_kind,
                         "devices": jax.device_count(), "jax": jax.__version__,
                         "chip": chip.name if chip else None},
              "size": size, "attention": {}, "pretrain": {}, "finetune": {}}
    failed = False
    kernel = {"gpu": "cudnn", "tpu": "splash", "cpu": "splash"}[here]
    report["attention"] = {"kernel": kernel, "shape": ATTENTION[size],
                           **check_attention(ATTENTION[size], kernel)}
    print(f"attention {kernel} vs xla: {json.dumps(report['attention'])}", flush=True)
    mesh = sharding.make_mesh(-1, 1, 1)
    vocab_size = 30522 if not FLAGS.tiny else 1024
    for name, sizes, batch, seq_len in PRETRAIN[size]:
        cfg = model_config(sizes, vocab_size, seq_len)
        max_predictions = max(1, round(0.15 * seq_len))
        try:
            rows = RandomTokenBatches(batch, seq_len, max_predictions, vocab_size, seed=0)
            report["pretrain"][name] = run_step(
                pretrain_task(cfg, batch, seq_len, max_predictions),
                [next(rows) for _ in range(3)], mesh, FLAGS.steps, batch, batch * seq_len)
        except Exception as e:  # noqa: BLE001 - recorded, the other checks go on
            failed = True
            report["pretrain"][name] = {"error": f"{type(e).__name__}: {str(e)[:500]}"}
        print(f"pretrain {name}: {json.dumps(report['pretrain'][name])}", flush=True)
    for name, sizes, batch, seq_len in FINETUNE[size]:
        cfg = model_config(sizes, vocab_size, seq_len)
        try:
            result = run_step(finetune_task(cfg, batch, seq_len),
                              classification_batches(batch, seq_len, vocab_size, 3), mesh,
                              FLAGS.steps, batch, batch * seq_len)
            result["examples_per_s"] = result.pop("rows_per_s")
            report["finetune"][name] = result
        except Exception as e:  # noqa: BLE001 - recorded, the other checks go on
            failed = True
            report["finetune"][name] = {"error": f"{type(e).__name__}: {str(e)[:500]}"}
        print(f"finetune {name}: {json.dumps(report['finetune'][name])}", flush=True)
    failed = failed or any("error" in v for v in report["attention"].values()
                           if isinstance(v, dict) and v is not report["attention"].get(
                               "packed_as_boolean_mask"))
    os.makedirs(os.path.dirname(os.path.abspath(FLAGS.json)), exist_ok=True)
    with open(FLAGS.json, "w") as f:
        json.dump(report, f, indent=1)
    print(f"{SCRIPT}: wrote {FLAGS.json}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    flags.DEFINE_bool("tiny", False, "Tiny sizes (the tiny preset's widths with one layer; any "
                      "machine, about a minute on a CPU).")
    flags.DEFINE_integer("steps", 10, "Timed steps per train step after the first.")
    flags.DEFINE_string("json", "", "Write the report here.")
    app.run(main, flags_parser=cli.parse_flags)
