"""The peers of benchmarks/harness/finetune_mode.py: transformers + torch (as Trainer with
run_glue's dynamic padding trains) and transformers + Flax (as run_flax_glue trains), on the rows
and batches of benchmarks/harness/finetune_data.py, both with the reference recipe
(benchmarks/peers/recipe.py) at our config's hyper-parameters. Imports stay inside the functions:
one framework a process.
"""

from __future__ import annotations

import time
from typing import Iterator

import numpy as np

from benchmarks.harness.finetune_data import Rows, batch_rows, encode, timed_steps, tokenizer_dir
from benchmarks.peers import recipe


def reference_recipe(config) -> recipe.Recipe:
    """The reference recipe at our run's hyper-parameters: the config's learning rate, warm-up
    fraction, optimizer block and step count (benchmarks/harness/finetune_data.py)."""
    return recipe.Recipe.of(config.learning_rate, config.warmup_fraction, config.total_steps,
                            config.optimizer)


# ----- transformers + torch ------------------------------------------------------------------

TORCH_HEADS = {"classification": "AutoModelForSequenceClassification",
               "token_classification": "AutoModelForTokenClassification",
               "span_qa": "AutoModelForQuestionAnswering"}
TARGETS = {"classification": ("labels",), "token_classification": ("labels",),
           "span_qa": ("start_positions", "end_positions")}


def hf_config(settings: dict, rows: Rows):
    """The transformers BertConfig of the model: --hf_dir's, or the preset's."""
    import transformers

    from bert_jax import BertConfig
    dropout = ({} if settings["dropout"] is None else
               {"hidden_dropout_prob": settings["dropout"],
                "attention_probs_dropout_prob": settings["dropout"]})
    if settings["hf_dir"]:
        return transformers.AutoConfig.from_pretrained(settings["hf_dir"],
                                                       num_labels=rows.num_labels, **dropout)
    cfg = BertConfig.preset(settings["preset"], vocab_size=rows.tokenizer.vocab_size)
    return transformers.BertConfig(**{**cfg.to_hf_dict(), **dropout}, num_labels=rows.num_labels)


def _torch_row(rows: Rows, i: int, task: str) -> dict:
    """Row i unpadded, as a tokenized dataset holds it before the collator."""
    n = int(rows.lengths[i])
    row = {"input_ids": rows.features["input_ids"][i, :n].tolist(),
           "token_type_ids": rows.features["token_type_ids"][i, :n].tolist()}
    for key in TARGETS[task]:
        value = rows.features[key][i]
        row[key] = value[:n].tolist() if value.ndim else int(value)
    return row


def run_hf_torch(settings: dict) -> dict:
    """transformers + torch as Trainer trains (benchmarks/harness/finetune_mode.py)."""
    import torch
    import transformers

    torch.manual_seed(0)
    if settings["torch_threads"]:
        torch.set_num_threads(settings["torch_threads"])
    rows = encode(settings)
    task = settings["task"]
    head = getattr(transformers, TORCH_HEADS[task])
    config = hf_config(settings, rows)
    model = (head.from_pretrained(settings["hf_dir"], config=config) if settings["hf_dir"]
             else head.from_config(config)).train()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_dir(settings))
    collator = (transformers.DataCollatorForTokenClassification(hf_tokenizer)
                if task == "token_classification"
                else transformers.DataCollatorWithPadding(hf_tokenizer))
    trainer = recipe.TorchTrainer(model, reference_recipe(rows.config))
    autocast = torch.autocast("cpu", dtype=torch.bfloat16,
                              enabled=settings["dtype"] == "bfloat16")

    def step(order: Iterator[np.ndarray]) -> tuple[int, int]:
        batch = collator([_torch_row(rows, i, task) for i in next(order)])
        trainer.step(batch, autocast)
        return int(batch["attention_mask"].sum()), batch["attention_mask"].numel()

    start = time.perf_counter()
    step(batch_rows(settings, rows))  # the first step apart, as JAX's compilation is
    first = time.perf_counter() - start
    order = batch_rows(settings, rows)
    return {**timed_steps(lambda: step(order), lambda: None, settings),
            "first_step_seconds": first, "compile_seconds": None}


# ----- transformers + Flax -----------------------------------------------------------------

FLAX_HEADS = {"classification": "FlaxAutoModelForSequenceClassification",
              "token_classification": "FlaxAutoModelForTokenClassification",
              "span_qa": "FlaxAutoModelForQuestionAnswering"}


def _flax_loss(task: str, outputs, batch):
    """The mean loss of run_flax_glue / run_flax_ner / run_qa."""
    import jax.numpy as jnp
    import optax
    if task == "span_qa":
        start, end = outputs[0].astype(jnp.float32), outputs[1].astype(jnp.float32)
        cross_entropy = optax.softmax_cross_entropy_with_integer_labels
        return 0.5 * (cross_entropy(start, batch["start_positions"]).mean()
                      + cross_entropy(end, batch["end_positions"]).mean())
    logits, labels = outputs[0].astype(jnp.float32), batch["labels"]
    if task == "classification":
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
    tagged = labels != -100
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, jnp.where(tagged, labels, 0))
    return jnp.sum(losses * tagged) / jnp.maximum(jnp.sum(tagged), 1)


def run_hf_flax(settings: dict) -> dict:
    """transformers + Flax as run_flax_glue trains (benchmarks/harness/finetune_mode.py)."""
    import jax
    import jax.numpy as jnp
    import optax
    import transformers

    rows = encode(settings)
    task, dtype = settings["task"], jnp.dtype(settings["dtype"])
    head = getattr(transformers, FLAX_HEADS[task])
    config = hf_config(settings, rows)
    model = (head.from_pretrained(settings["hf_dir"], config=config, dtype=dtype)
             if settings["hf_dir"] else head.from_config(config, seed=0, dtype=dtype))
    tx = recipe.optax_transform(reference_recipe(rows.config))

    def train_step(state, batch):
        params, opt_state, rng = state
        rng, dropout_rng = jax.random.split(rng)

        def loss_fn(p):
            outputs = model(input_ids=batch["input_ids"],
                            attention_mask=batch["attention_mask"],
                            token_type_ids=batch["token_type_ids"], params=p,
                            dropout_rng=dropout_rng, train=True)
            return _flax_loss(task, outputs, batch)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state, rng), loss

    train_step = jax.jit(train_step, donate_argnums=(0,))
    holder = {"state": (model.params, tx.init(model.params), jax.random.PRNGKey(0))}

    def step(order: Iterator[np.ndarray]) -> tuple[int, int]:
        indices = next(order)  # rows padded to max_seq_len, as run_flax_glue pads them
        batch = {k: v[indices] for k, v in rows.features.items()}
        holder["state"], holder["loss"] = train_step(holder["state"], batch)
        mask = batch["attention_mask"]
        return int(mask.sum()), mask.size

    finish = lambda: jax.block_until_ready(holder["loss"])
    start = time.perf_counter()
    step(batch_rows(settings, rows))
    finish()
    compile_seconds = time.perf_counter() - start
    order = batch_rows(settings, rows)
    return {**timed_steps(lambda: step(order), finish, settings),
            "compile_seconds": compile_seconds, "programs": 1}
