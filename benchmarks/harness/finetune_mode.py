"""The fine-tuning mode of benchmarks/benchmark.py: training steps of a task on real short texts,
ours against transformers (torch, Flax), each in its own process.

Data (benchmarks/harness/finetune_data.py): the texts of --texts (default: gensim's 200
polarity sentences, `pang_lee_polarity.cor`, the set of experiments/configs/finetune_polarity.py).
Labels are made from the texts, since they do not change the speed: classification: two classes
in turn; token_classification: BIO tags of made-up types (word_tags); span_qa: "where is <the
text's longest word>?", answered by that word. Every implementation trains on the same token rows
(our encoding; span_qa: windows) in the same batches (row numbers from
bert_jax.data.batches.train_batches, seeded; grouped by length with --group_by_length), so they
see the same real tokens and differ in what they compute (peers:
benchmarks/peers/finetune.py):

  ours      the recipe's step: recipe.make_task (the kind's loss), the config's optimizer, the
            state and jitted step that the loop runs (bert_jax.train.program), fed by the
            recipe's batches (data.training_batches: every batch cut to its length bucket,
            --bucket_lengths, or with --pack_examples=K the batch's examples packed up to K
            to a row); each batch shape's program is compiled before the timing.
  hf_torch  AutoModelFor<task> (from --hf_dir, or the preset's config), each batch padded to
            its longest row (DataCollatorWithPadding): Trainer with run_glue's dynamic padding;
            --dtype=bfloat16 runs under torch.autocast on CPU.
  hf_flax   FlaxAutoModelFor<task>, a jitted step with the state donated, every row padded to
            max_seq_len: transformers' run_flax_glue.
Both peers train with the reference recipe (benchmarks/peers/recipe.py: AdamW with weight decay
off biases and LayerNorm, linear warm-up and decay, clipping at 1.0) at our config's learning
rate, warm-up and optimizer settings.

Figures after the warm-up steps: examples/s (rows: windows for span_qa), real tokens/s (tokens
under the attention mask), the share of computed positions that were padding; compilation (JAX)
apart, in compile_seconds (torch: its first step, first_step_seconds).
"""

from __future__ import annotations

import time
from typing import Optional

from benchmarks import benchmark_profile
from benchmarks.harness.finetune_data import encode, timed_steps
from benchmarks.peers import finetune as peers

SPEED = "examples_per_second"  # the figure ratios compare


def settings(flags) -> dict:
    """The settings every implementation of this mode runs at, from the script's flags."""
    return {"mode": "finetune", "task": flags.task, "preset": flags.preset,
            "hf_dir": flags.hf_dir or "", "batch_size": flags.batch_size,
            "max_seq_len": flags.seq_len, "dtype": flags.dtype, "remat": flags.remat,
            "steps": flags.steps, "warmup": flags.warmup, "texts": flags.texts or "",
            "texts_format": flags.texts_format, "texts_encoding": flags.texts_encoding,
            "bucket_lengths": flags.bucket_lengths, "group_by_length": flags.group_by_length,
            "pack_examples": flags.pack_examples, "dropout_rng": flags.dropout_rng,
            "torch_threads": flags.torch_threads, "dropout": flags.dropout,
            "profile_dir": flags.profile_dir or ""}


# ----- ours --------------------------------------------------------------------------------------

def run_ours(settings: dict) -> dict:
    """The recipe's step and batches (module docstring)."""
    import jax

    from bert_jax.recipes import common as recipe_common
    from bert_jax.recipes.finetune import recipe, task_data
    from bert_jax.runtime import sharding

    rows = encode(settings)
    run = rows.run
    init_cfg, initial_params = recipe_common.initial_weights(run)
    cfg = recipe_common.model_config(run, rows.tokenizer.vocab_size, init_cfg)
    data = task_data.TaskData(rows.kind, rows.labels, rows.examples, [], rows.features, {})
    mesh = run.mesh.make()
    built = recipe_common.train_program(
        run, mesh, recipe.make_task(run, cfg, data, initial_params), run.total_steps)
    state, train_step = built.state, built.train_step
    compiled, compile_seconds = set(), 0.0
    for batch in _one_batch_per_shape(run, data, rows.kind, settings):
        start = time.perf_counter()  # the first call of each batch shape: its compilation
        state, metrics = train_step(state, sharding.device_put_batch(batch, mesh))
        jax.block_until_ready(metrics)
        compile_seconds += time.perf_counter() - start
        compiled.add(batch["attention_mask"].shape)
    batch = sharding.device_put_batch(batch, mesh)
    with jax.transfer_guard("disallow"):  # no hidden host<->device copies inside the step
        state, metrics = train_step(state, batch)
    holder = {"state": state, "metrics": metrics}
    iterator = task_data.training_batches(run, data)

    def run_step():  # what loop._Run.next_step does: next batch -> global arrays -> step
        host = next(iterator)
        if host["attention_mask"].shape not in compiled:
            raise RuntimeError(f"a batch of shape {host['attention_mask'].shape} outside the "
                               f"compiled ones {sorted(compiled)}")
        holder["state"], holder["metrics"] = train_step(
            holder["state"], sharding.device_put_batch(host, mesh))
        mask = host["attention_mask"]
        return int(mask.sum()), mask.size

    finish = lambda: jax.block_until_ready(holder["metrics"])
    if not settings["profile_dir"]:
        result = timed_steps(run_step, finish, settings)
    else:
        with benchmark_profile.traced(settings["profile_dir"],
                                      train_step.lower(holder["state"], batch).compile().as_text()):
            result = timed_steps(run_step, finish, settings)
        result["profile"] = benchmark_profile.breakdown(settings["profile_dir"],
                                                        settings["steps"] + settings["warmup"])
    return {**result, "compile_seconds": compile_seconds, "programs": len(compiled)}


def _one_batch_per_shape(run, data, kind, settings: dict) -> list[dict]:
    """A batch of every shape the timed steps will see, to compile before the timing: each
    bucket length (a batch cut to it), or with packing each row count the batches drawn."""
    from bert_jax.recipes.finetune import task_data
    probe = task_data.training_batches(run, data)
    if settings["pack_examples"]:
        shapes = {}
        for _ in range(settings["warmup"] + settings["steps"] + 1):
            batch = next(probe)
            shapes.setdefault(batch["attention_mask"].shape, batch)
        return list(shapes.values())
    buckets, first = task_data.train_buckets(run, kind), next(probe)
    keys = buckets.token_keys if buckets else ()
    return [{k: v[:, :length] if k in keys else v for k, v in first.items()}
            for length in task_data.bucket_lengths(run) or (run.max_seq_len,)]


RUNNERS = {"ours": run_ours, "hf_torch": peers.run_hf_torch, "hf_flax": peers.run_hf_flax}


# ----- the report ------------------------------------------------------------------------------

def report(result: dict, settings: dict, peak_flops: Optional[float] = None) -> dict:
    """The worker's result with examples/s, real tokens/s and the padding share."""
    del peak_flops  # fine-tuning reports no MFU: its useful FLOPs depend on the real lengths
    seconds = result["seconds"]
    examples = settings["batch_size"] * settings["steps"]
    hidden = ("texts_encoding", "profile_dir")
    hidden += ("torch_threads",) if result["impl"] != "hf_torch" else ()
    if result["impl"] != "ours":  # only ours buckets, packs and picks its dropout bits
        hidden += ("bucket_lengths", "pack_examples", "dropout_rng")
    shown = {k: v for k, v in settings.items() if k not in hidden}
    return {**shown, **result, "examples_per_second": round(examples / seconds, 2),
            "tokens_per_second": round(result["real_tokens"] / seconds, 1),
            "padding_fraction": round(1 - result["real_tokens"]
                                      / max(result["computed_positions"], 1), 4)}


def line(label: str, r: dict) -> str:
    """One human line of a report."""
    compiled = (f"compile {r['compile_seconds']:.1f} s" if r.get("compile_seconds") is not None
                else f"first step {r['first_step_seconds']:.2f} s")
    text = (f"{label:17s} {r['examples_per_second']:8.2f} examples/s  "
            f"{r['tokens_per_second']:9.1f} real tokens/s  padding "
            f"{100 * r['padding_fraction']:4.1f}%  {compiled}  peak RSS {r['peak_rss_mb']:.0f} MB")
    return "\n".join([text] + benchmark_profile.lines(r.get("profile", [])))
