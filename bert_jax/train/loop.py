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

`evaluate(params) -> dict[str, float]` is called every `eval_every_steps` and at the end; for a
held-out loss, `make_evaluator(loss_fn, make_eval_iterator, mesh)` builds one from the eval step;
fine-tuning passes its own (predictions, F1, exact match...). Step counts are in optimizer steps:
for epochs use `steps_for_epochs(num_examples, batch_size, epochs)`. The train iterator yields
host-local numpy batches (this process's rows) and, to resume exactly, has get_state/set_state.

What the loop does, in order: builds the TrainState sharded on `mesh` (logical-axis rules of
bert_jax.sharding, optimizer state sharded like the params), or restores the newest checkpoint in
`<workdir>/checkpoints` onto this mesh (with the data iterator's state); jits the train step with
in/out shardings and the state donated, the batch passed as an argument; then per step: next
batch -> global arrays -> step. Every `log_every_steps` it appends one JSON line to
`<workdir>/metrics.jsonl` (step, loss, the task's metrics, learning_rate, grad_norm,
tokens_per_second, mfu, seconds_per_step), writes TensorBoard events (tensorboardX) under
`<workdir>/tensorboard` and logs a line. Eval results go to `<workdir>/eval_metrics.jsonl`.
Checkpoints every `checkpoint_every_steps`, at the end, and on SIGTERM (save, then return with
`preempted=True`). A restart with the same arguments continues the same run: same batches, same
dropout, same losses; log lines past the restored step are dropped so the files read as one run.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import time
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import logging
from jax.sharding import Mesh, NamedSharding

from bert_jax import sharding, xla_options
from bert_jax.config import BertConfig
from bert_jax.train import checkpointing, flops, steps

Evaluator = Callable[[Any], dict[str, float]]


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


# ----- building the state ----------------------------------------------------------------------

def _path_name(path) -> str:
    return "/".join(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path)


def overlay_params(fresh: Any, given: Any, shardings: Any) -> tuple[Any, list[str], list[str]]:
    """Replace leaves of `fresh` by those of `given` where the paths match.

    Returns (params, paths kept fresh, paths of `given` not used). A path present in both with
    different shapes is an error naming it.
    """
    given_by_path = {_path_name(p): v for p, v in jax.tree_util.tree_flatten_with_path(given)[0]}
    used, kept_fresh = set(), []

    def pick(path, leaf, leaf_sharding):
        name = _path_name(path)
        if name not in given_by_path:
            kept_fresh.append(name)
            return leaf
        value = given_by_path[name]
        if tuple(value.shape) != tuple(leaf.shape):
            raise ValueError(f"initial parameter {name} has shape {tuple(value.shape)}, but the "
                             f"model expects {tuple(leaf.shape)}")
        used.add(name)
        return jax.device_put(jnp.asarray(value, leaf.dtype), leaf_sharding)

    params = jax.tree_util.tree_map_with_path(pick, fresh, shardings)
    return params, kept_fresh, sorted(set(given_by_path) - used)


def state_shardings(abstract_params_boxed: Any, optimizer: optax.GradientTransformation,
                    mesh: Mesh) -> tuple[Any, steps.TrainState]:
    """(param shardings, TrainState of shardings): optimizer moments sharded like the params."""
    abstract_params = nn.meta.unbox(abstract_params_boxed)
    param_shardings = sharding.shardings_for(
        abstract_params, sharding.logical_specs(abstract_params_boxed), mesh)
    replicated = sharding.replicated(mesh)
    abstract_opt_state = jax.eval_shape(optimizer.init, abstract_params)
    opt_shardings = optax.tree_map_params(
        optimizer, lambda _, s: s, abstract_opt_state, param_shardings,
        transform_non_params=lambda _: replicated,
        is_leaf=lambda x: isinstance(x, NamedSharding))
    return param_shardings, steps.TrainState(step=replicated, params=param_shardings,
                                             opt_state=opt_shardings, rng=replicated)


def _abstract_with_shardings(abstract: Any, shardings_tree: Any) -> Any:
    return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                        abstract, shardings_tree)


# ----- metrics ---------------------------------------------------------------------------------

class MetricsWriter:
    """metrics.jsonl / eval_metrics.jsonl + TensorBoard events, written by process 0 only."""

    def __init__(self, workdir: str, start_step: int):
        self.enabled = jax.process_index() == 0
        self.train_path = os.path.join(workdir, "metrics.jsonl")
        self.eval_path = os.path.join(workdir, "eval_metrics.jsonl")
        self.tensorboard = None
        if not self.enabled:
            return
        for path in (self.train_path, self.eval_path):  # a resumed run rewrites what comes later
            _drop_lines_after(path, start_step)
        from tensorboardX import SummaryWriter
        self.tensorboard = SummaryWriter(os.path.join(workdir, "tensorboard"),
                                         purge_step=start_step + 1 if start_step else None)

    def write(self, step: int, metrics: Mapping[str, float], evaluation: bool = False) -> None:
        if not self.enabled:
            return
        record = {"step": step, **{k: float(v) for k, v in metrics.items()}}
        with open(self.eval_path if evaluation else self.train_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        prefix = "eval/" if evaluation else "train/"
        for name, value in metrics.items():
            self.tensorboard.add_scalar(prefix + name, float(value), step)
        self.tensorboard.flush()

    def close(self) -> None:
        if self.tensorboard is not None:
            self.tensorboard.close()


def _drop_lines_after(path: str, step: int) -> None:
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        lines = [line for line in f if line.strip()]
    kept = [line for line in lines if json.loads(line)["step"] <= step]
    if len(kept) != len(lines):
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(kept)


def _format_log_line(step: int, total: int, metrics: Mapping[str, float]) -> str:
    shown = [f"{k} {metrics[k]:.4f}" for k in sorted(metrics)
             if k not in ("learning_rate", "tokens_per_second", "mfu", "seconds_per_step")]
    return (f"step {step}/{total}: " + ", ".join(shown)
            + f", lr {metrics.get('learning_rate', 0.0):.3g}"
            + f", {metrics.get('tokens_per_second', 0.0):.0f} tokens/s"
            + f", MFU {100 * metrics.get('mfu', 0.0):.2f}%")


# ----- evaluation ------------------------------------------------------------------------------

def pad_rows(batch: Mapping[str, np.ndarray], multiple: int) -> dict[str, np.ndarray]:
    """Pad a (last, partial) batch with zero rows to a multiple of `multiple` rows.

    Adds `example_weights` (1 for real rows, 0 for padding); masked_weights of padding rows are 0,
    so padding counts in no masked-LM metric, and loss functions weight rows by example_weights.
    """
    rows = len(next(iter(batch.values())))
    padded_rows = -(-rows // multiple) * multiple
    if padded_rows == rows and "example_weights" in batch:
        return dict(batch)
    out = {k: np.concatenate([v, np.zeros((padded_rows - rows,) + v.shape[1:], v.dtype)])
           for k, v in batch.items()}
    if "example_weights" not in batch:
        out["example_weights"] = (np.arange(padded_rows) < rows).astype(np.float32)
    return out


def make_evaluator(loss_fn: steps.LossFn, make_iterator: Callable[[], Iterable[Mapping[str, Any]]],
                   mesh: Mesh, max_batches: int = 0) -> Evaluator:
    """evaluate(params) -> {'loss', each term, each metric}: means over one pass of the iterator.

    make_iterator() gives a fresh, finite iterator of host-local numpy batches each call.
    """
    eval_step = jax.jit(steps.make_eval_step(loss_fn))
    data_parallel_per_process = max(1, sharding.data_parallel_size(mesh) // jax.process_count())

    def evaluate(params) -> dict[str, float]:
        sums = None
        for index, batch in enumerate(make_iterator()):
            if max_batches and index >= max_batches:
                break
            batch = pad_rows(batch, data_parallel_per_process)
            sums = steps.add_sums(sums, eval_step(params, sharding.device_put_batch(batch, mesh)))
        if sums is None:
            raise ValueError("the evaluation iterator yielded no batches")
        return steps.summarize(sums)

    return evaluate


def quiet_orbax_logs() -> None:
    """Keep Orbax's per-save INFO chatter out of the training log (its warnings still show)."""
    import logging as std_logging

    class _DropOrbaxInfo(std_logging.Filter):
        def filter(self, record):
            return record.levelno >= std_logging.WARNING or "/orbax/" not in record.pathname

    logging.get_absl_handler().addFilter(_DropOrbaxInfo())


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

def train(task: Task, optimizer: optax.GradientTransformation, train_iterator: Iterator,
          workdir: str, config: LoopConfig, mesh: Mesh, *,
          learning_rate_fn: Optional[optax.Schedule] = None,
          evaluate: Optional[Evaluator] = None) -> TrainResult:
    """Train `task` for config.total_steps optimizer steps, resuming from `workdir` if possible."""
    check_batch_size(config.global_batch_size, mesh, config.accumulation_steps)
    os.makedirs(workdir, exist_ok=True)
    rng = jax.random.PRNGKey(config.seed)
    init_rng, state_rng = jax.random.split(rng)

    abstract_boxed = jax.eval_shape(task.init_fn, init_rng)
    param_shardings, shardings = state_shardings(abstract_boxed, optimizer, mesh)
    create_state = lambda p: steps.TrainState.create(p, optimizer, state_rng)  # noqa: E731
    abstract_state = jax.eval_shape(create_state, nn.meta.unbox(abstract_boxed))

    manager = checkpointing.make_manager(os.path.join(workdir, "checkpoints"),
                                         keep=config.keep_checkpoints,
                                         async_saves=config.async_checkpoints)
    latest = manager.latest_step()
    if latest is not None:
        logging.info("resuming from %s/%d", manager.directory, latest)
        if not hasattr(train_iterator, "set_state"):
            logging.warning("the train iterator has no set_state: its batches restart from the "
                            "beginning, so this resumed run is not the uninterrupted one")
        state = checkpointing.restore(
            manager, latest, _abstract_with_shardings(abstract_state, shardings),
            model_config=task.model_config,
            data_iterator=train_iterator if hasattr(train_iterator, "set_state") else None)
        start_step = int(jax.device_get(state.step))
    else:
        params, _ = sharding.init_sharded(lambda: task.init_fn(init_rng), mesh)
        if task.initial_params is not None:
            params, fresh, unused = overlay_params(params, task.initial_params, param_shardings)
            logging.info("initial params loaded; kept fresh: %s; unused: %s", fresh, unused)
        state = jax.jit(create_state, in_shardings=(param_shardings,), out_shardings=shardings,
                        donate_argnums=(0,))(params)
        start_step = 0

    train_step = jax.jit(
        steps.make_train_step(task.loss_fn, optimizer, config.accumulation_steps,
                              learning_rate_fn, sharding.batch_sharding(mesh)),
        in_shardings=(shardings, sharding.batch_sharding(mesh)),
        out_shardings=(shardings, sharding.replicated(mesh)),
        donate_argnums=(0,), compiler_options=xla_options.memory_lean())

    peak = config.peak_flops_per_device or flops.peak_flops_per_device()
    # Forced host devices share the same cores: the CPU peak is per process, not per device.
    num_peak_devices = (jax.process_count() if jax.devices()[0].platform == "cpu"
                        else jax.device_count())
    writer = MetricsWriter(workdir, start_step)
    can_save_iterator = hasattr(train_iterator, "get_state")

    def save(step: int, force: bool = False) -> None:
        checkpointing.save(manager, step, state, model_config=task.model_config,
                           data_iterator=train_iterator if can_save_iterator else None,
                           extra_metadata=task.checkpoint_metadata, force=force)

    def run_eval(step: int) -> Optional[dict[str, float]]:
        if evaluate is None:
            return None
        results = evaluate(state.params)
        writer.write(step, results, evaluation=True)
        logging.info("eval at step %d: %s", step,
                     ", ".join(f"{k} {v:.4f}" for k, v in sorted(results.items())))
        return results

    step, preempted = start_step, False
    last_train: dict[str, float] = {}
    last_eval: Optional[dict[str, float]] = None
    last_log_time, last_log_step = time.perf_counter(), start_step
    with _PreemptionFlag() as preemption:
        while step < config.total_steps:
            try:
                host_batch = next(train_iterator)
            except StopIteration:
                logging.warning("train iterator exhausted at step %d of %d", step,
                                config.total_steps)
                break
            batch = sharding.device_put_batch(host_batch, mesh)
            state, metrics = train_step(state, batch)
            step += 1

            if step % config.log_every_steps == 0 or step == config.total_steps:
                metrics = {k: float(v) for k, v in jax.device_get(metrics).items()}
                now = time.perf_counter()
                seconds_per_step = (now - last_log_time) / (step - last_log_step)
                last_log_time, last_log_step = now, step
                metrics["seconds_per_step"] = seconds_per_step
                metrics["tokens_per_second"] = task.tokens_per_step / seconds_per_step
                metrics["mfu"] = flops.mfu(task.flops_per_step, seconds_per_step,
                                           num_peak_devices, peak)
                writer.write(step, metrics)
                logging.info(_format_log_line(step, config.total_steps, metrics))
                last_train = metrics

            if config.eval_every_steps and step % config.eval_every_steps == 0 \
                    and step != config.total_steps:
                last_eval = run_eval(step)
                last_log_time = time.perf_counter()  # evaluation is not training throughput
            if preemption.should_stop():
                logging.warning("SIGTERM received: saving step %d and stopping", step)
                save(step, force=True)
                preempted = True
                break
            if config.checkpoint_every_steps and step % config.checkpoint_every_steps == 0:
                save(step)

    if not preempted:
        if manager.latest_step() != step:
            save(step, force=True)
        last_eval = run_eval(step) if evaluate is not None else last_eval
    manager.wait_until_finished()
    manager.close()
    writer.close()
    return TrainResult(state=state, step=step, preempted=preempted,
                       last_train_metrics=last_train, last_eval_metrics=last_eval)
