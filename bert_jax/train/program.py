"""The train state of a run and its jitted step, built in one place for everything that runs,
times or compiles the train step.

    program = program.build(task, optimizer, loop_config, mesh, learning_rate_fn=schedule)
    state, metrics = program.train_step(program.state, batch)    # what loop.train runs
    compiled = program.compile(batch)    # ahead of time; with abstract=True nothing is allocated

`loop.train` builds its program here, and so do the pre-training recipe's `Pieces`,
`bert_jax.tools.scaling.program` (the scaling report), `experiments/device_check.py` and every
script in benchmarks/: a benchmark times, and a report reads, the very program a training run
executes.

What `build` makes:

    state       the TrainState (bert_jax/train/state.py): with a checkpoint `manager`, restored
                from its newest readable step (the train iterator's state with it); otherwise
                fresh and born sharded, task.init_fn with the key of config.seed, overlaid with
                task.initial_params where the paths match. abstract=True: the same TrainState as
                jax.ShapeDtypeStructs carrying their shardings, for compiling ahead of time.
    shardings   of the state: parameters by their logical axes (sharding.LOGICAL_AXIS_RULES),
                optimizer moments like their parameters, step and rng replicated
    train_step  steps.make_train_step over task.loss_fn with config.accumulation_steps,
                config.dropout_rng and, with config.fsdp_collectives="explicit" on a mesh with a
                split fsdp axis, the FSDP collectives written out (train/fsdp.py); traced under
                the activation constraints (sharding.with_activation_sharding); jax.jit with the
                state donated, the batch an argument sharded over (data, fsdp), the state
                sharded in and out as above, the metrics replicated, and the compiler options of
                the mesh's platform (xla_options). Remat, dtypes and the attention kernel are the
                model's own (task.model_config), so they are in the program too.
    compiled    with a `train_iterator` that lists its batch shapes (shape_examples, e.g.
                bert_jax.data.batches.TrainBatches, or pre-training's one shape), the step
                compiled for each shape the batches 0 .. config.total_steps - 1 come in (at
                most SCANNED_BATCHES of them looked at: half a millisecond of host time each),
                before the first step and in a second thread while the state is made or
                restored (the first step waits for the longer of the two, not their sum):
                jax.jit keeps the executables, so the training steps themselves never compile
                (a batch of a shape not listed, possible past SCANNED_BATCHES, would still
                compile when it comes; the log's `compilations` shows it).

This module sits below loop.py in the import graph (loop imports it): `task` is a loop.Task and
`config` a settings.LoopConfig, read by their fields (init_fn, loss_fn, initial_params,
model_config; seed, accumulation_steps, dropout_rng, fsdp_collectives, total_steps).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import time
from typing import Any, Iterator, Mapping, Optional

import jax
import numpy as np
import optax
from absl import logging
from jax.sharding import Mesh, NamedSharding

from bert_jax.runtime import platform, sharding, xla_options
from bert_jax.train import fsdp, steps
from bert_jax.train import state as state_lib

# The most batches whose shapes are listed before the first step (module docstring).
SCANNED_BATCHES = 4096


@dataclasses.dataclass(frozen=True)
class TrainProgram:
    """A train state and the jitted step that advances it (module docstring)."""

    state: steps.TrainState  # global arrays on the mesh, or ShapeDtypeStructs (abstract)
    start_step: int  # the step `state` is at: 0 fresh or abstract, else the restored one
    shardings: steps.TrainState  # the NamedShardings of `state`, leaf for leaf
    batch_sharding: NamedSharding  # of a batch's rows: over (data, fsdp)
    train_step: Any  # the jitted (state, batch) -> (state, metrics); `state` is donated
    compiled_shapes: tuple = ()  # the token shapes compiled by `build` (compile_shapes)

    def compile(self, batch: Any) -> jax.stages.Compiled:
        """The step lowered for this program's state and `batch` (global arrays, or
        ShapeDtypeStructs with `batch_sharding`) and compiled; running nothing."""
        return self.train_step.lower(self.state, batch).compile()


def build(task: Any, optimizer: optax.GradientTransformation, config: Any, mesh: Mesh, *,
          learning_rate_fn: Optional[optax.Schedule] = None, manager: Any = None,
          train_iterator: Optional[Iterator] = None, abstract: bool = False) -> TrainProgram:
    """The program of `task` on `mesh` (module docstring).

    learning_rate_fn: reported as the step's `learning_rate` metric (None: not reported).
    manager: an Orbax checkpoint manager (checkpointing.make_manager) to resume from; its newest
      readable step is restored, with `train_iterator`'s state. None: a fresh state.
    abstract: the state as ShapeDtypeStructs, nothing allocated (no manager then).
    """
    if abstract and manager is not None:
        raise ValueError("an abstract program restores nothing: pass a manager or abstract=True")
    target = state_lib.abstract_state(task.init_fn, optimizer, mesh, config.seed)
    shardings = jax.tree.map(lambda a: a.sharding, target)
    batch_sharding = sharding.batch_sharding(mesh)
    explicit_fsdp = (shardings.params if fsdp.uses_explicit(config.fsdp_collectives, mesh)
                     else None)
    step_fn = steps.make_train_step(task.loss_fn, optimizer, config.accumulation_steps,
                                    learning_rate_fn, batch_sharding, config.dropout_rng,
                                    explicit_fsdp)
    train_step = jax.jit(
        sharding.with_activation_sharding(step_fn, mesh),
        in_shardings=(shardings, batch_sharding),
        out_shardings=(shardings, sharding.replicated(mesh)),
        donate_argnums=(0,),
        compiler_options=xla_options.compiler_options(platform.platform_of(mesh)))
    examples = []
    if train_iterator is not None and hasattr(train_iterator, "shape_examples"):
        examples = train_iterator.shape_examples(min(config.total_steps, SCANNED_BATCHES))
    if abstract:
        return TrainProgram(state=target, start_step=0, shardings=shardings,
                            batch_sharding=batch_sharding, train_step=train_step,
                            compiled_shapes=compile_shapes(train_step, target, batch_sharding,
                                                           examples))
    # The step compiles for the state's abstract twin in a second thread while the state is made
    # or restored (XLA compiles outside Python's lock): the first step waits for the longer of
    # the two, not their sum.
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="compile") as pool:
        compiling = pool.submit(compile_shapes, train_step, target, batch_sharding, examples)
        if manager is not None:
            state, start_step, _ = state_lib.create_or_restore(
                task.init_fn, task.initial_params, optimizer, mesh, config.seed, manager,
                task.model_config, train_iterator, target)
        else:
            state, start_step = state_lib.fresh_state(
                task.init_fn, task.initial_params, optimizer, mesh, config.seed, target), 0
        compiled_shapes = compiling.result()
    return TrainProgram(state=state, start_step=start_step, shardings=shardings,
                        batch_sharding=batch_sharding, train_step=train_step,
                        compiled_shapes=compiled_shapes)


def abstract_batch(host_batch: Mapping[str, np.ndarray], batch_sharding: NamedSharding
                   ) -> dict[str, jax.ShapeDtypeStruct]:
    """The global arrays that sharding.device_put_batch makes of this process's host batch, as
    ShapeDtypeStructs: rows times the process count, dtypes as JAX stores them."""
    return {k: jax.ShapeDtypeStruct((v.shape[0] * jax.process_count(),) + v.shape[1:],
                                    jax.dtypes.canonicalize_dtype(v.dtype),
                                    sharding=batch_sharding)
            for k, v in host_batch.items()}


def compile_shapes(train_step: Any, state: Any, batch_sharding: NamedSharding,
                   host_batches: list[Mapping[str, np.ndarray]]) -> tuple:
    """Compiles the jitted `train_step` for each host batch's shapes (nothing runs; jax.jit keeps
    the executables for its calls); returns the token shapes compiled (of each batch's
    attention_mask, or its input_ids when it has no mask)."""
    if not host_batches:
        return ()
    start = time.perf_counter()
    for host_batch in host_batches:
        train_step.lower(state, abstract_batch(host_batch, batch_sharding)).compile()
    shapes = tuple(tuple((b["attention_mask"] if "attention_mask" in b else b["input_ids"]).shape)
                   for b in host_batches if "attention_mask" in b or "input_ids" in b)
    logging.info("train step compiled for %d batch shape(s) %s in %.1f s", len(host_batches),
                 list(shapes), time.perf_counter() - start)
    return shapes
