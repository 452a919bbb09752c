"""Fine-tuning: any registered task kind, trained with the one loop, scored by the kind.

    train_and_evaluate(config, workdir)   fine-tune (resuming from workdir), then write the
                                          metrics and predictions of the final step into
                                          <workdir>/predictions/step_<N>/
    evaluate(config, workdir, step=None)  reload a saved step in any process and write the same
                                          files into <workdir>/evaluation/step_<N>/

The encoder starts from config.init (a Hugging Face folder or one of our checkpoints; neither:
random init of config.model.preset); the task head starts fresh (or, with init.with_heads, from
the initial weights where it fits). The labels fixed by the training data are saved with every
checkpoint and in <workdir>/task.json, so evaluation maps classes the same way.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Mapping, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
from absl import logging

from bert_jax.config import settings
from bert_jax.config.bert import BertConfig
from bert_jax.config.settings import RunSettings
from bert_jax.recipes import common, run_record
from bert_jax.recipes.finetune import kinds
from bert_jax.recipes.finetune.task_data import (
    TASK_FILE,
    TaskData,
    build_task_data,
    eval_buckets,
    read_task_file,
    save_task_file,
    training_batches,
)
from bert_jax.runtime import paths, sharding
from bert_jax.train import evaluation, flops, loop, steps
from bert_jax.train.checkpoint import workdir as workdir_lib


def _forward(model: nn.Module, params, batch, rng, deterministic: bool,
             packed_inputs: tuple[str, ...]):
    """The model's outputs on `batch`; a packed training batch's `packed_inputs` (the kind's
    TaskKind.packed_inputs: segment_ids, example_positions) go to the model too."""
    packed = {k: batch[k] for k in packed_inputs if k in batch}  # packed training batches
    return model.apply({"params": params}, batch["input_ids"], batch["token_type_ids"],
                       batch["attention_mask"], deterministic, **packed,
                       rngs=None if deterministic else {"dropout": rng})


def make_loss_fn(kind: kinds.TaskKind, model: nn.Module) -> steps.LossFn:
    """loss_fn(params, batch, rng, deterministic) of the kind; examples weighted by the batch's
    example_weights (0 for the padding rows of a last eval batch; all 1 when absent)."""
    def loss_fn(params, batch, rng, deterministic):
        outputs = _forward(model, params, batch, rng, deterministic, kind.packed_inputs)
        example_weights = batch.get("example_weights",
                                    jnp.ones(batch["input_ids"].shape[:1], jnp.float32))
        return kind.loss(outputs, batch, example_weights)
    return loss_fn


NO_TOKEN_LOGIT = -1e9  # outputs past a bucketed batch's length: never chosen (as padding is)


def make_predict_fn(kind: kinds.TaskKind, model: nn.Module, seq_len: Optional[int] = None
                    ) -> Callable[[Any, Mapping], dict]:
    """predict(params, batch) -> the kind's float32 outputs (no dropout). With seq_len, the
    kind's token_outputs of a batch cut to a bucket are padded back to seq_len positions
    (NO_TOKEN_LOGIT), so every batch gives rows of one shape."""
    def predict(params, batch):
        outputs = kind.predict(
            _forward(model, params, batch, None, True, kind.packed_inputs), batch)
        if seq_len is None:
            return outputs
        return {name: _pad_tokens(value, seq_len) if name in kind.token_outputs else value
                for name, value in outputs.items()}
    return predict


def _pad_tokens(value: jax.Array, seq_len: int) -> jax.Array:
    """[B, L, ...] -> [B, seq_len, ...], the new positions NO_TOKEN_LOGIT."""
    widths = [(0, 0), (0, seq_len - value.shape[1])] + [(0, 0)] * (value.ndim - 2)
    return jnp.pad(value, widths, constant_values=NO_TOKEN_LOGIT)


def make_init_fn(model: nn.Module, seq_len: int) -> Callable[[jax.Array], Any]:
    def init_fn(rng):
        ids = jnp.zeros((1, seq_len), jnp.int32)
        return model.init(rng, ids, ids, jnp.ones_like(ids), True)["params"]
    return init_fn


def make_task(run: RunSettings, cfg: BertConfig, data: TaskData, initial_params=None
              ) -> loop.Task:
    model = data.kind.make_model(cfg, data.labels)
    return loop.Task(
        model_config=cfg, init_fn=make_init_fn(model, run.max_seq_len),
        loss_fn=make_loss_fn(data.kind, model), initial_params=initial_params,
        flops_per_step=flops.encoder_flops_per_step(
            cfg, run.batch_size, run.max_seq_len,
            data.kind.head_outputs(data.labels, run.max_seq_len)),
        tokens_per_step=run.batch_size * run.max_seq_len,
        checkpoint_metadata={"recipe": "finetune", "task": data.kind.name, **data.labels})


def make_evaluator(run: RunSettings, cfg: BertConfig, data: TaskData, mesh
                   ) -> evaluation.PredictEvaluator:
    """Predicts every eval row and scores the set with the kind's metrics."""
    model = data.kind.make_model(cfg, data.labels)
    inputs = {name: data.eval_features[name] for name in kinds.MODEL_INPUTS}
    return evaluation.PredictEvaluator(
        make_predict_fn(data.kind, model, run.max_seq_len), inputs,
        lambda outputs: data.kind.score(data, outputs, run), run.eval_batch_size, mesh,
        buckets=eval_buckets(run))


def write_results(directory: str, step: int, result: Mapping[str, float], data: TaskData,
                  records: Any) -> None:
    """<directory>/metrics.json and the kind's prediction files (process 0 only)."""
    if jax.process_index() != 0:
        return
    written = data.kind.write(records, directory)
    paths.write_text_atomically(os.path.join(directory, "metrics.json"),
                                json.dumps({"step": step, "metrics": result}, indent=2))
    logging.info("step %d metrics %s; predictions in %s", step, result, written)


def total_steps_of(run: RunSettings, num_train_rows: int) -> int:
    """run.total_steps, or the optimizer steps of run.epochs passes when it is 0."""
    return run.total_steps or settings.steps_for_epochs(num_train_rows, run.batch_size,
                                                        run.epochs)


def train_and_evaluate(config: settings.Config, workdir: str) -> loop.TrainResult:
    """Fine-tune as config says (resuming from workdir), then evaluate the final step. The
    config is read once (settings.read) into the RunSettings every part is given; it, the
    tokenizer, model and data are all checked before anything is written: a refused run leaves
    the workdir as it was."""
    run = settings.read(config, "finetune")
    mesh = run.mesh.make()
    tokenizer = common.finetuning_tokenizer(run)
    init_cfg, initial_params = common.initial_weights(run, workdir)
    cfg = common.model_config(run, tokenizer.vocab_size, init_cfg)
    settings.check_lengths(run, cfg)
    data = build_task_data(run, tokenizer, saved_task=read_task_file(workdir))
    run = common.for_steps(run, total_steps_of(run, len(data.train_features["input_ids"])))
    run.check_fits(mesh, cfg)
    with workdir_lib.lock(workdir):
        run_record.record_config(run.record, workdir)
        save_task_file(workdir, data)
        return _train(run, workdir, cfg, data, initial_params, mesh, run.total_steps)


def _train(run: RunSettings, workdir: str, cfg: BertConfig, data: TaskData, initial_params,
           mesh, total_steps: int) -> loop.TrainResult:
    """Train on data.train_features, then write the final step's predictions."""
    evaluator = make_evaluator(run, cfg, data, mesh)
    train_features = {k: data.train_features[k]
                      for k in kinds.MODEL_INPUTS + data.kind.target_keys}
    iterator = training_batches(run, data, jax.process_index(), jax.process_count(),
                                row_multiple=sharding.data_parallel_size(mesh))
    logging.info("%s: %d train rows (%d examples), %d eval examples; %d steps; labels %s",
                 data.kind.name, len(train_features["input_ids"]), len(data.train_examples),
                 len(data.eval_examples), total_steps, data.labels.get("label_map"))
    result = common.train(run, workdir, make_task(run, cfg, data, initial_params),
                          iterator, mesh, total_steps, evaluate=evaluator)
    if not result.preempted and evaluator.last_records is not None:
        write_results(os.path.join(workdir, "predictions", f"step_{result.step}"), result.step,
                      result.last_eval_metrics or {}, data, evaluator.last_records)
    return result


def evaluate(config: settings.Config, workdir: str, step: Optional[int] = None,
             output_dir: Optional[str] = None) -> tuple[int, dict[str, float]]:
    """(step, metrics) of a saved step (default: the newest), with its predictions written to
    output_dir (default <workdir>/evaluation/step_<N>/). The model and labels come from the
    workdir, the data and tokenizer from `config` (the run's, bert_jax.recipes.run_record's
    load_config, or one standing in for it), read once here (settings.typed)."""
    saved_task = read_task_file(workdir)
    if saved_task is None:
        raise FileNotFoundError(f"{os.path.join(workdir, TASK_FILE)} not found: is {workdir} the "
                                "workdir of a fine-tuning run?")
    run = settings.typed(config)
    mesh = run.mesh.make()
    data = build_task_data(run, common.finetuning_tokenizer(run), saved_task=saved_task,
                           with_train_features=False)
    step, cfg, params = common.load_checkpoint(
        workdir, step, lambda c: make_init_fn(data.kind.make_model(c, data.labels),
                                              run.max_seq_len), mesh)
    evaluator = make_evaluator(run, cfg, data, mesh)
    result = evaluator(params)
    write_results(output_dir or os.path.join(workdir, "evaluation", f"step_{step}"), step,
                  result, data, evaluator.last_records)
    return step, result
