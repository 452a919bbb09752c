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
         flops_per_step, tokens_per_step,   # of a full batch, for MFU (bert_jax.train.flops);
                                       #   tokens/s counts the batches' real tokens (throughput.py)
         checkpoint_metadata={})       # extra JSON kept with each checkpoint (labels, task kind)

`evaluate(params) -> dict[str, float]` is called every `eval_every_steps` and at the end
(`bert_jax.train.evaluation`: a held-out loss, or predictions scored by the task). Step counts
are in optimizer steps: for epochs use `settings.steps_for_epochs(num_examples, batch_size,
epochs)` (bert_jax.config.settings, where LoopConfig lives).
The train iterator yields host-local numpy batches (this process's rows) and, to resume exactly,
has get_state/set_state.

What the loop does, in order: builds its program (`bert_jax.train.program`): the TrainState
sharded on `mesh`, or the newest checkpoint in `<workdir>/checkpoints` restored onto this mesh
with the data iterator's state, and the train step jitted with in/out shardings and the state
donated, the batch passed as an argument; then per step: next batch -> global arrays -> step.
Every `log_every_steps` it records step, loss, the task's metrics, learning_rate, grad_norm,
tokens_per_second, mfu and seconds_per_step; loss, the task's metrics and grad_norm are means
over the steps since the previous log (smooth curves whatever the interval), the last batch's
loss kept as loss_last_batch (`window_mean`; after a restart the first window starts at the
restored step) (`bert_jax.train.metrics_writer`: metrics.jsonl,
TensorBoard) and logs a line; eval results go to eval_metrics.jsonl. Checkpoints every
`checkpoint_every_steps`, at the end, and on SIGTERM or Ctrl-C (save, then return with
`preempted=True` and the signal; the signal handling is bert_jax.train.preemption). A restart
with the same arguments continues the same run: same batches, same dropout, same losses; log
lines past the restored step are dropped so the files read as one run.
"""

from __future__ import annotations

import dataclasses
import signal
from typing import Any, Callable, Iterator, Mapping, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import logging
from etils import epath
from jax.sharding import Mesh

from bert_jax.config.bert import BertConfig
from bert_jax.config.settings import LoopConfig, check_batch_size
from bert_jax.runtime import sharding
from bert_jax.train import preemption, program, steps
from bert_jax.train.checkpoint import store as checkpointing
from bert_jax.train.checkpoint import workdir as workdir_lib
from bert_jax.train.evaluation import Evaluator
from bert_jax.train.metrics_writer import (
    MetricsWriteError,
    MetricsWriter,
    format_log_line,
    read_metrics,
)
from bert_jax.train.optimizer import every_element_finite
from bert_jax.train.throughput import Throughput

_ADVICE = ("Lower the learning rate, set optimizer.clip_norm, or set nonfinite=skip to go on past "
           "such steps")


class NonFiniteError(ValueError):
    """The loss or gradients of a run stopped being finite (see LoopConfig.nonfinite), or its
    parameters did."""


# Logged as the last step's value, not averaged over the window: the rate in force, and counters.
_NOT_AVERAGED = ("learning_rate", "nonfinite_")


def _averaged(name: str) -> bool:
    return not name.startswith(_NOT_AVERAGED)


@jax.jit
def _add(window: Mapping[str, jax.Array], metrics: Mapping[str, jax.Array]) -> dict:
    """The running sums of the averaged metrics (one dispatch per step, no host sync)."""
    return {k: window[k] + metrics[k].astype(jnp.float32) for k in window}


def window_mean(last: Mapping[str, float], sums: Mapping[str, float], steps: int
                ) -> dict[str, float]:
    """The metrics to log: the sums of the averaged ones / `steps`, the others as `last`
    (the last step's), and loss_last_batch = the last step's loss."""
    logged = {k: (sums[k] / steps if k in sums and steps else v) for k, v in last.items()}
    if "loss" in last:
        logged["loss_last_batch"] = last["loss"]
    return logged


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
    preempted: bool  # stopped by a signal (saved first): signal_number says which
    last_train_metrics: dict[str, float]
    last_eval_metrics: Optional[dict[str, float]]
    signal_number: Optional[int] = None


# ----- the loop --------------------------------------------------------------------------------

class _Run:
    """One invocation of `train`: the state and everything around it that steps, logs,
    evaluates, checks finiteness and saves."""

    def __init__(self, task: Task, optimizer: optax.GradientTransformation,
                 train_iterator: Iterator, workdir: str, config: LoopConfig, mesh: Mesh,
                 learning_rate_fn: Optional[optax.Schedule], evaluate: Optional[Evaluator]):
        self.task, self.config, self.mesh, self.evaluate = task, config, mesh, evaluate
        self.iterator = train_iterator
        self.manager = checkpointing.make_manager(checkpointing.checkpoint_dir(workdir),
                                                  keep=config.keep_checkpoints,
                                                  async_saves=config.async_checkpoints)
        self.writer: Optional[MetricsWriter] = None
        try:  # an error from here on still shuts the manager's threads down (close)
            built = program.build(task, optimizer, config, mesh,
                                  learning_rate_fn=learning_rate_fn, manager=self.manager,
                                  train_iterator=train_iterator)
            self.state, self.step = built.state, built.start_step
            self.train_step = built.train_step
            self.writer = MetricsWriter(workdir, self.step)
        except BaseException:
            self.close(quietly=True)
            raise
        self.start_step, self.checked_step = self.step, self.step
        # Kept with every checkpoint: the run's config.json, so that a rerun whose config.json
        # is gone can be checked against it (recipes/run_record.record_config); params_finite:
        # see save.
        self.checkpoint_metadata = {**task.checkpoint_metadata, "params_finite": True,
                                    **workdir_lib.saved_config_metadata(workdir)}
        self.finite_saves: set[int] = set()  # steps saved by this invocation (finite params)
        self.all_finite = jax.jit(every_element_finite, out_shardings=sharding.replicated(mesh))
        self.throughput = Throughput(task.flops_per_step, task.tokens_per_step,
                                     config.peak_flops_per_device, self.step)
        self.metrics: Mapping[str, jax.Array] = {}
        self.window: Optional[dict[str, jax.Array]] = None  # sums since the last log
        self.window_steps = 0
        self.last_train: dict[str, float] = {}
        self.last_eval: Optional[dict[str, float]] = None

    def next_step(self) -> bool:
        """One optimizer step; False when the train iterator is exhausted."""
        host_batch = next(self.iterator, None)
        if host_batch is None:
            logging.warning("train iterator exhausted at step %d of %d", self.step,
                            self.config.total_steps)
            return False
        self.state, self.metrics = self.train_step(
            self.state, sharding.device_put_batch(host_batch, self.mesh))
        averaged = {k: v for k, v in self.metrics.items() if _averaged(k)}
        self.window = (_add({k: jnp.zeros((), jnp.float32) for k in averaged}, averaged)
                       if self.window is None else _add(self.window, averaged))
        self.window_steps += 1
        self.throughput.count(host_batch)
        self.step += 1
        return True

    def log(self) -> None:
        """Fetch the step's metrics and the window's sums (the one host sync of a log step),
        log their means (window_mean), add throughput, record."""
        last, sums = jax.device_get((self.metrics, self.window or {}))
        logged = window_mean({k: float(v) for k, v in last.items()},
                             {k: float(v) for k, v in sums.items()}, self.window_steps)
        self.window, self.window_steps = None, 0
        logged.update(self.throughput.measure(self.step))
        self.writer.write(self.step, logged)
        logging.info(format_log_line(self.step, self.config.total_steps, logged))
        self.last_train = logged
        self.check_finite(logged)

    def check_finite(self, metrics: Optional[Mapping[str, float]] = None) -> None:
        """Stop with NonFiniteError as config.nonfinite says (counts: bert_jax.train.optimizer)."""
        if metrics is None:  # a save point between log steps: fetch just the two counters
            metrics = jax.device_get({k: v for k, v in self.metrics.items()
                                      if k.startswith("nonfinite_")})
        total = int(metrics.get("nonfinite_steps", 0))
        in_a_row = int(metrics.get("nonfinite_in_a_row", 0))
        limit = 1 if self.config.nonfinite == "stop" else self.config.max_nonfinite_in_a_row
        counted = total if self.config.nonfinite == "stop" else in_a_row
        if counted >= limit:
            first = self.step - in_a_row + 1
            where = (f"by step {self.step}" if in_a_row != total else f"at step {first}"
                     if in_a_row == 1 else f"at steps {first}-{self.step}")
            raise NonFiniteError(
                f"training diverged: the loss or gradients were not finite in {total} step(s) "
                f"({in_a_row} in a row) {where}; those updates were skipped and nothing was "
                f"saved since; {self.finite_checkpoint()}. {_ADVICE}")
        self.checked_step = self.step

    def finite_checkpoint(self) -> str:
        """Which checkpoint holds finite parameters, checked: the newest step saved by this
        invocation (save checked it), else marked params_finite in its metadata, else whose
        parameters load finite; steps that cannot be read are passed over."""
        from bert_jax.train.checkpoint import params as params_loading
        try:
            self.manager.wait_until_finished()  # the newest save is on disk (or failed)
        except checkpointing.CheckpointWriteError as e:
            logging.error("%s", e)
        saved = sorted(self.manager.all_steps(), reverse=True)
        if not saved:
            return "no checkpoint had been saved"
        for step in saved:
            try:
                finite = step in self.finite_saves or checkpointing.read_metadata(
                    self.manager, step).get("params_finite") is True or bool(self.all_finite(
                        params_loading.load_params(self.manager.directory, step)[1]))
            except checkpointing.CheckpointUnreadableError:
                continue
            if finite:
                which = "the newest checkpoint" if step == saved[0] else "the newest finite one"
                return f"{which}, step {step}, holds finite parameters"
        return (f"no checkpoint holds finite parameters (steps {sorted(saved)} checked): start "
                "over in another --workdir")

    def save(self, force: bool = False) -> None:
        """Save this step (after checking the loss so far was finite); parameters that are not
        finite (a finite loss and gradient, but an update that overflowed, e.g. an infinite
        learning rate) are never saved: they would rotate finite checkpoints out."""
        if self.checked_step != self.step:
            self.check_finite()
        if not bool(self.all_finite(self.state.params)):
            raise NonFiniteError(
                f"training diverged: the parameters after step {self.step} are not finite (the "
                "update overflowed although the loss and gradients were finite) and were not "
                f"saved; {self.finite_checkpoint()}. {_ADVICE}")
        checkpointing.save(self.manager, self.step, self.state,
                           model_config=self.task.model_config,
                           data_iterator=self.iterator if hasattr(self.iterator, "get_state")
                           else None,
                           extra_metadata=self.checkpoint_metadata, force=force)
        self.finite_saves.add(self.step)

    def run_eval(self) -> None:
        self.last_eval = self.evaluate(self.state.params)
        self.writer.write(self.step, self.last_eval, evaluation=True)
        logging.info("eval at step %d: %s", self.step,
                     ", ".join(f"{k} {v:.4f}" for k, v in sorted(self.last_eval.items())))
        self.throughput.restart()  # evaluation is not training throughput

    def final_eval(self) -> None:
        """Evaluate the last step, unless this invocation trained nothing (a rerun of a finished
        run) and the step's record exists: then it is read back, so eval_metrics.jsonl keeps
        one line per step. Process 0 decides for all (the others may not see the file)."""
        record = None
        if self.step == self.start_step and self.writer.enabled and epath.Path(
                self.writer.eval_path).exists():
            records = [r for r in read_metrics(self.writer.eval_path) if r["step"] == self.step]
            record = records[-1] if records else None
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils
            found = multihost_utils.broadcast_one_to_all(np.int32(record is not None))
            if not int(found):
                record = None
            elif record is None:  # another process has it: this one keeps no copy
                return
        if record is None:
            self.run_eval()
        else:
            self.last_eval = {k: v for k, v in record.items() if k != "step"}

    def close(self, quietly: bool = False) -> None:
        """Wait for the saves and release everything, Orbax's background threads included (left
        running, they print tracebacks at exit); quietly: an error is already on its way, so a
        failed write here is logged rather than raised over it."""
        errors = []
        for release in (self.manager.wait_until_finished, self.manager.close,
                        self.writer.close if self.writer is not None else None):
            if release is None:
                continue
            try:
                release()
            except (checkpointing.CheckpointWriteError, MetricsWriteError) as e:
                errors.append(e)
        for error in errors[not quietly:]:
            logging.error("%s", error)
        if errors and not quietly:
            raise errors[0]


def train(task: Task, optimizer: optax.GradientTransformation, train_iterator: Iterator,
          workdir: str, config: LoopConfig, mesh: Mesh, *,
          learning_rate_fn: Optional[optax.Schedule] = None,
          evaluate: Optional[Evaluator] = None) -> TrainResult:
    """Train `task` for config.total_steps optimizer steps, resuming from `workdir` if possible."""
    check_batch_size(config.global_batch_size, mesh, config.accumulation_steps)
    epath.Path(workdir).mkdir(parents=True, exist_ok=True)  # a local folder or gs://
    run = _Run(task, optimizer, train_iterator, workdir, config, mesh, learning_rate_fn,
               evaluate)
    signal_number = None
    try:
        with preemption.StopSignals() as stop:  # SIGTERM or Ctrl-C: save this step, stop
            while run.step < config.total_steps and run.next_step():
                if run.step % config.log_every_steps == 0 or run.step == config.total_steps:
                    run.log()
                if (evaluate is not None and config.eval_every_steps and run.step
                        % config.eval_every_steps == 0 and run.step != config.total_steps):
                    run.run_eval()
                if stop.should_stop(run.step):
                    signal_number = stop.received
                    logging.warning("%s received: saving step %d and stopping",
                                    signal.Signals(signal_number).name, run.step)
                    run.save(force=True)
                    break
                if config.checkpoint_every_steps and run.step % config.checkpoint_every_steps == 0:
                    run.save()
        if signal_number is None:
            if run.manager.latest_step() != run.step:
                run.save(force=True)
            if evaluate is not None:
                run.final_eval()
    except BaseException:
        run.close(quietly=True)
        raise
    run.close()
    return TrainResult(state=run.state, step=run.step, preempted=signal_number is not None,
                       last_train_metrics=run.last_train, last_eval_metrics=run.last_eval,
                       signal_number=signal_number)
