"""The one training loop, used by pre-training and by every fine-tuning task.

    result = loop.train(task, optimizer, train_iterator, workdir, loop_config, mesh,
                        learning_rate_fn=schedule, evaluate=evaluate_fn)

What varies between pre-training and fine-tuning is a `Task`:

    Task(model_config,                 # the BertConfig (saved with every checkpoint)
         init_fn,                      # rng -> boxed params (model.init(...)["params"]): shapes,
                                       #   logical axes for sharding, and fresh values
         loss_fn,                      # steps.LossFn: (params, batch, rng, deterministic) ->
                                       #   (loss_terms, metrics), each a dict of (sum, weight)
         initial_params=None,          # plain arrays overlaid on the fresh init where the paths
                                       #   match (an imported HF checkpoint, or load_params of a
                                       #   pre-training run); the rest (a new head) stays fresh
         flops_per_step, tokens_per_step,   # for tokens/s and MFU (see bert_jax.train.flops)
         checkpoint_metadata={})       # extra JSON kept with each checkpoint (labels, task kind)

`evaluate(params) -> dict[str, float]` is called every `eval_every_steps` and at the end
(`bert_jax.train.evaluation`: a held-out loss, or predictions scored by the task). Step counts are in optimizer steps:
for epochs use `steps_for_epochs(num_examples, batch_size, epochs)`. The train iterator yields
host-local numpy batches (this process's rows) and, to resume exactly, has get_state/set_state.

What the loop does, in order: builds the TrainState sharded on `mesh`, or restores the newest
checkpoint in `<workdir>/checkpoints` onto this mesh with the data iterator's state
(`bert_jax.train.state`); jits the train step with
in/out shardings and the state donated, the batch passed as an argument; then per step: next
batch -> global arrays -> step. Every `log_every_steps` it records step, loss, the task's metrics, learning_rate,
grad_norm, tokens_per_second, mfu and seconds_per_step (`bert_jax.train.metrics_writer`:
metrics.jsonl, TensorBoard) and logs a line; eval results go to eval_metrics.jsonl.
Checkpoints every `checkpoint_every_steps`, at the end, and on SIGTERM (save, then return with
`preempted=True`). A restart with the same arguments continues the same run: same batches, same
dropout, same losses; log lines past the restored step are dropped so the files read as one run.
"""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import time
from typing import Any, Callable, Iterator, Mapping, Optional

import jax
import numpy as np
import optax
from absl import logging
from jax.sharding import Mesh

from bert_jax import sharding, xla_options
from bert_jax.config import BertConfig
from bert_jax.train import checkpointing, flops, steps
from bert_jax.train import state as state_lib
from bert_jax.train.evaluation import Evaluator
from bert_jax.train.metrics_writer import MetricsWriter, format_log_line


@dataclasses.dataclass(frozen=True)
class LoopConfig:
    """Step counts and the global batch size of a run (everything else lives in the Task)."""

    total_steps: int
    global_batch_size: int
    log_every_steps: int = 100
    eval_every_steps: int = 0  # 0: evaluate only at the end
    checkpoint_every_steps: int = 1000  # 0: only at the end (and on SIGTERM)
    keep_checkpoints: int = 3
    async_checkpoints: bool = True
    accumulation_steps: int = 1
    seed: int = 0
    peak_flops_per_device: float = 0.0  # 0: look it up by device kind (bert_jax.train.flops)


@dataclasses.dataclass
class Task:
    """What is trained: the model, its loss and where its parameters come from (module doc)."""

    model_config: BertConfig
    init_fn: Callable[[jax.Array], Any]
    loss_fn: steps.LossFn
    initial_params: Any = None
    flops_per_step: float = 0.0
    tokens_per_step: int = 0
    checkpoint_metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class TrainResult:
    state: steps.TrainState
    step: int
    preempted: bool
    last_train_metrics: dict[str, float]
    last_eval_metrics: Optional[dict[str, float]]


def steps_for_epochs(num_examples: int, global_batch_size: int, epochs: float) -> int:
    """Optimizer steps for `epochs` passes over `num_examples` (the last partial batch counts)."""
    return max(1, math.ceil(epochs * math.ceil(num_examples / global_batch_size)))


def check_batch_size(global_batch_size: int, mesh: Mesh, accumulation_steps: int = 1,
                     process_count: Optional[int] = None) -> None:
    """Raise ValueError naming the fault if the batch doesn't split over devices/micro-batches."""
    data_parallel = sharding.data_parallel_size(mesh)
    process_count = jax.process_count() if process_count is None else process_count
    if global_batch_size <= 0:
        raise ValueError(f"batch_size={global_batch_size} must be positive")
    if global_batch_size % data_parallel:
        raise ValueError(
            f"global batch_size={global_batch_size} is not divisible by the data-parallel size "
            f"{data_parallel} (mesh data={mesh.shape['data']} x fsdp={mesh.shape['fsdp']}); "
            "change batch_size or mesh.data/mesh.fsdp")
    if global_batch_size % process_count:
        raise ValueError(f"global batch_size={global_batch_size} is not divisible by the "
                         f"{process_count} processes")
    if global_batch_size % (accumulation_steps * data_parallel):
        raise ValueError(
            f"global batch_size={global_batch_size} is not divisible by accumulation_steps="
            f"{accumulation_steps} x data-parallel size {data_parallel}: each micro-batch must "
            "split evenly over the devices")


# ----- preemption ------------------------------------------------------------------------------

class _PreemptionFlag:
    """Set by SIGTERM; all processes agree on it (any process preempted = all stop)."""

    def __init__(self):
        self.received = False
        self._previous = None

    def __enter__(self):
        try:
            self._previous = signal.signal(signal.SIGTERM, self._handle)
        except ValueError:  # not the main thread: no handler, the run is not preemptible
            self._previous = None
        return self

    def _handle(self, signum, frame):
        del signum, frame
        self.received = True

    def __exit__(self, *exc):
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)

    def should_stop(self) -> bool:
        if jax.process_count() == 1:
            return self.received
        from jax.experimental import multihost_utils
        return bool(np.any(multihost_utils.process_allgather(np.int32(self.received))))


# ----- the loop --------------------------------------------------------------------------------

def _compile_train_step(task: Task, optimizer: optax.GradientTransformation, config: LoopConfig,
                        mesh: Mesh, shardings: steps.TrainState,
                        learning_rate_fn: Optional[optax.Schedule]) -> steps.TrainStep:
    """The jitted step: state donated, batch an argument, sharded in and out on `mesh`."""
    batch_sharding = sharding.batch_sharding(mesh)
    return jax.jit(
        steps.make_train_step(task.loss_fn, optimizer, config.accumulation_steps,
                              learning_rate_fn, batch_sharding),
        in_shardings=(shardings, batch_sharding),
        out_shardings=(shardings, sharding.replicated(mesh)),
        donate_argnums=(0,), compiler_options=xla_options.memory_lean())


class _Throughput:
    """seconds_per_step, tokens_per_second and MFU between two log points (evaluation excluded)."""

    def __init__(self, task: Task, config: LoopConfig, start_step: int):
        self.task, self.step, self.time = task, start_step, time.perf_counter()
        self.peak = config.peak_flops_per_device or flops.peak_flops_per_device()
        # Forced host devices share the same cores: the CPU peak is per process, not per device.
        self.num_peak_devices = (jax.process_count() if jax.devices()[0].platform == "cpu"
                                 else jax.device_count())

    def restart(self) -> None:
        self.time = time.perf_counter()

    def measure(self, step: int) -> dict[str, float]:
        now = time.perf_counter()
        seconds_per_step = (now - self.time) / max(step - self.step, 1)
        self.step, self.time = step, now
        return {"seconds_per_step": seconds_per_step,
                "tokens_per_second": self.task.tokens_per_step / seconds_per_step,
                "mfu": flops.mfu(self.task.flops_per_step, seconds_per_step,
                                 self.num_peak_devices, self.peak)}


def _log(step: int, metrics: Mapping[str, jax.Array], config: LoopConfig, throughput: _Throughput,
         writer: MetricsWriter) -> dict[str, float]:
    """Fetch the step's metrics (the one host sync of a log step), add throughput, record them."""
    logged = {k: float(v) for k, v in jax.device_get(metrics).items()}
    logged.update(throughput.measure(step))
    writer.write(step, logged)
    logging.info(format_log_line(step, config.total_steps, logged))
    return logged


def train(task: Task, optimizer: optax.GradientTransformation, train_iterator: Iterator,
          workdir: str, config: LoopConfig, mesh: Mesh, *,
          learning_rate_fn: Optional[optax.Schedule] = None,
          evaluate: Optional[Evaluator] = None) -> TrainResult:
    """Train `task` for config.total_steps optimizer steps, resuming from `workdir` if possible."""
    check_batch_size(config.global_batch_size, mesh, config.accumulation_steps)
    os.makedirs(workdir, exist_ok=True)
    manager = checkpointing.make_manager(checkpointing.checkpoint_dir(workdir),
                                         keep=config.keep_checkpoints,
                                         async_saves=config.async_checkpoints)
    state, step, shardings = state_lib.create_or_restore(
        task.init_fn, task.initial_params, optimizer, mesh, config.seed, manager,
        task.model_config, train_iterator)
    train_step = _compile_train_step(task, optimizer, config, mesh, shardings, learning_rate_fn)
    writer, throughput = MetricsWriter(workdir, step), _Throughput(task, config, step)
    iterator_to_save = train_iterator if hasattr(train_iterator, "get_state") else None

    def save(force: bool = False) -> None:
        checkpointing.save(manager, step, state, model_config=task.model_config,
                           data_iterator=iterator_to_save,
                           extra_metadata=task.checkpoint_metadata, force=force)

    def run_eval() -> dict[str, float]:
        results = evaluate(state.params)
        writer.write(step, results, evaluation=True)
        logging.info("eval at step %d: %s", step,
                     ", ".join(f"{k} {v:.4f}" for k, v in sorted(results.items())))
        throughput.restart()  # evaluation is not training throughput
        return results

    preempted, last_train, last_eval = False, {}, None
    with _PreemptionFlag() as preemption:  # SIGTERM: save this step, then stop
        while step < config.total_steps:
            host_batch = next(train_iterator, None)
            if host_batch is None:
                logging.warning("train iterator exhausted at step %d of %d", step,
                                config.total_steps)
                break
            state, metrics = train_step(state, sharding.device_put_batch(host_batch, mesh))
            step += 1
            if step % config.log_every_steps == 0 or step == config.total_steps:
                last_train = _log(step, metrics, config, throughput, writer)
            if (evaluate is not None and config.eval_every_steps
                    and step % config.eval_every_steps == 0 and step != config.total_steps):
                last_eval = run_eval()
            if preemption.should_stop():
                logging.warning("SIGTERM received: saving step %d and stopping", step)
                preempted = save(force=True) or True
                break
            if config.checkpoint_every_steps and step % config.checkpoint_every_steps == 0:
                save()
    if not preempted:
        if manager.latest_step() != step:
            save(force=True)
        last_eval = run_eval() if evaluate is not None else last_eval
    manager.wait_until_finished()
    manager.close()
    writer.close()
    return TrainResult(state=state, step=step, preempted=preempted,
                       last_train_metrics=last_train, last_eval_metrics=last_eval)
