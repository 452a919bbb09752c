"""The train state of a run on its mesh: built fresh (optionally from given parameters) or
restored from the newest readable checkpoint, with the shardings that the jitted step uses.

Optimizer moments are sharded like the parameters they belong to; step and rng are replicated.

Resuming (create_or_restore) takes the newest step that can be read. A step that cannot (a
truncated data file or manifest, a deleted metadata or data_iterator folder, a file whose bytes no
longer match the checksum recorded when it was saved: any CheckpointUnreadableError) is logged
as a warning naming the step and the error, and the previous step is tried. Once a step
restores, the newer unreadable ones are moved (never deleted) to
`<workdir>/checkpoints_unreadable/<step>` (a suffix `.1`, ... if that exists) and the manager
forgets them (so is, before anything, an entry named as a step that is no step folder: a
dangling symbolic link, a file), so the run continues from there exactly and later saves do not
meet them. If no step can be read the run stops with CheckpointUnreadableError listing each
step's error and nothing is moved: starting over silently would lose the run's position. A
CheckpointMismatchError (this config does not fit the run) stops the run at once.

With several processes, every process first checks the files of a step on its own
(`checkpointing.check_readable`), then reads its own shards (`checkpointing.restore`, which has no
collective inside); after each of the two, all processes meet in one allgather of their outcomes,
so an error on any process sends all of them to the same previous step (or stops all of them), and
none is left waiting. Process 0 moves the folders, and all wait at a barrier before forgetting
them.
"""

from __future__ import annotations

import functools
import gc
from typing import Any, Callable, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import logging
from jax.sharding import Mesh, NamedSharding

from bert_jax.config.bert import BertConfig
from bert_jax.runtime import platform, pytree, sharding, xla_options
from bert_jax.train import steps
from bert_jax.train.checkpoint import step_folders
from bert_jax.train.checkpoint import store as checkpointing


def state_shardings(abstract_params_boxed: Any, optimizer: optax.GradientTransformation,
                    mesh: Mesh) -> tuple[Any, steps.TrainState]:
    """(param shardings, TrainState of shardings): optimizer moments sharded like the params."""
    param_shardings = sharding.param_shardings(abstract_params_boxed, mesh)
    replicated = sharding.replicated(mesh)
    abstract_opt_state = jax.eval_shape(optimizer.init, nn.meta.unbox(abstract_params_boxed))
    opt_shardings = optax.tree_map_params(
        optimizer, lambda _, s: s, abstract_opt_state, param_shardings,
        transform_non_params=lambda _: replicated,
        is_leaf=lambda x: isinstance(x, NamedSharding))
    return param_shardings, steps.TrainState(step=replicated, params=param_shardings,
                                             opt_state=opt_shardings, rng=replicated)


def overlay_params(fresh: Any, given: Any, shardings: Any) -> tuple[Any, list[str], list[str]]:
    """Replace leaves of `fresh` by those of `given` where the paths match.

    Returns (params, paths kept fresh, paths of `given` not used). A path present in both with
    different shapes is an error naming it.
    """
    given_by_path = {pytree.path_name(p): v
                     for p, v in jax.tree_util.tree_flatten_with_path(given)[0]}
    used, kept_fresh = set(), []

    def pick(path, leaf, leaf_sharding):
        name = pytree.path_name(path)
        if name not in given_by_path:
            kept_fresh.append(name)
            return leaf
        value = given_by_path[name]
        if tuple(value.shape) != tuple(leaf.shape):
            raise ValueError(f"initial parameter {name} has shape {tuple(value.shape)}, but the "
                             f"model expects {tuple(leaf.shape)}")
        used.add(name)
        # a copy: the caller's own device array would otherwise be donated (deleted) by the jit
        # that consumes these params
        return jax.device_put(jnp.array(value, leaf.dtype, copy=True), leaf_sharding)

    params = jax.tree_util.tree_map_with_path(pick, fresh, shardings)
    return params, kept_fresh, sorted(set(given_by_path) - used)


def abstract_state(init_fn: Callable[[jax.Array], Any], optimizer: optax.GradientTransformation,
                   mesh: Mesh, seed: int) -> steps.TrainState:
    """The TrainState that create_or_restore builds or restores, as jax.ShapeDtypeStructs that
    carry its shardings (state_shardings): traced, nothing allocated. The target of a restore,
    and the input of an ahead-of-time compilation of the step."""
    init_rng, state_rng = jax.random.split(jax.random.PRNGKey(seed))
    abstract_boxed = jax.eval_shape(init_fn, init_rng)
    _, shardings = state_shardings(abstract_boxed, optimizer, mesh)
    abstract = jax.eval_shape(lambda p: steps.TrainState.create(p, optimizer, state_rng),
                              nn.meta.unbox(abstract_boxed))
    return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                        abstract, shardings)


def create_or_restore(init_fn: Callable[[jax.Array], Any], initial_params: Any,
                      optimizer: optax.GradientTransformation, mesh: Mesh, seed: int,
                      manager, model_config: BertConfig, train_iterator: Any,
                      target: Optional[steps.TrainState] = None
                      ) -> tuple[steps.TrainState, int, steps.TrainState]:
    """(state, its step, state shardings): the newest checkpoint of `manager`, else a fresh state.

    A fresh state is born sharded: init_fn(rng) -> boxed params, overlaid with `initial_params`
    where the paths match. Restoring also sets the train iterator's saved state. target: this
    run's abstract_state, when the caller has it already (else traced here).
    """
    target = abstract_state(init_fn, optimizer, mesh, seed) if target is None else target
    shardings = jax.tree.map(lambda a: a.sharding, target)
    _set_aside_entries_that_are_not_steps(manager)
    if manager.latest_step() is not None:
        resumable = hasattr(train_iterator, "set_state")
        if not resumable:
            logging.warning("the train iterator has no set_state: its batches restart from the "
                            "beginning, so this resumed run is not the uninterrupted one")
        state = _restore_newest_readable(manager, target, model_config,
                                         train_iterator if resumable else None)
        return state, int(jax.device_get(state.step)), shardings
    return fresh_state(init_fn, initial_params, optimizer, mesh, seed, target), 0, shardings


def fresh_state(init_fn: Callable[[jax.Array], Any], initial_params: Any,
                optimizer: optax.GradientTransformation, mesh: Mesh, seed: int,
                target: Optional[steps.TrainState] = None) -> steps.TrainState:
    """A new train state, born sharded on `mesh` (create_or_restore's, without a checkpoint).

    One jitted program makes the whole state: the model's initialisers, `initial_params`' leaves
    put in where the paths match (overlay_params' contract and its shape errors, checked before
    anything is computed), and the optimizer's state of those parameters. XLA drops the random
    initialisers whose leaves are replaced as dead code, so a model started from a checkpoint
    computes only its fresh leaves (a new head), and those are what a full initialisation gives
    them, bit for bit (flax derives each leaf's key from init_rng and its path). The program is
    dropped once it has run: XLA:CPU keeps an executable's scratch buffers for as long as it
    lives (hundreds of MB for BERT-base's initialiser). target: this run's abstract_state, when
    the caller has it already (else traced here)."""
    init_rng, state_rng = jax.random.split(jax.random.PRNGKey(seed))
    target = abstract_state(init_fn, optimizer, mesh, seed) if target is None else target
    shardings = jax.tree.map(lambda a: a.sharding, target)
    given = None
    if initial_params is not None:
        placed, fresh, unused = overlay_params(target.params, initial_params, shardings.params)
        logging.info("initial params loaded; kept fresh: %s; unused: %s", fresh, unused)
        given = jax.tree.map(lambda leaf: None if isinstance(leaf, jax.ShapeDtypeStruct)
                             else leaf, placed)

    def initialize(given):
        params = nn.meta.unbox(init_fn(init_rng))
        if given is not None:
            params = jax.tree.map(lambda g, p: p if g is None else g, given, params,
                                  is_leaf=lambda x: x is None)
        return steps.TrainState.create(params, optimizer, state_rng)

    options = xla_options.one_off_options(platform.platform_of(mesh))
    run = jax.jit(initialize, out_shardings=shardings, donate_argnums=(0,),
                  compiler_options=options)
    state = jax.block_until_ready(run(given))
    del run
    gc.collect()
    return state


# ----- resuming from the newest readable step (module doc) -------------------------------------

_OK, _UNREADABLE, _FAILED = 0, 1, 2  # a process's outcome of checking or restoring a step


def _outcomes(mine: int) -> np.ndarray:
    """Every process's outcome, in process order: one allgather, which every process reaches
    exactly once per check and per restore of a step (also the barrier after a restore)."""
    if jax.process_count() == 1:
        return np.asarray([mine])
    from jax.experimental import multihost_utils
    return np.asarray(multihost_utils.process_allgather(np.int32(mine))).reshape(-1)


def _attempt(fn: Callable[[], Any], where: str) -> tuple[Any, Optional[str]]:
    """(fn(), None), or (None, why the step cannot be read) once all processes agree it can't.

    Every other error (CheckpointMismatchError, a bug) stops every process: the process that had
    it raises it, the others an error naming that process.
    """
    result, problem, error = None, None, None
    try:
        result = fn()
    except checkpointing.CheckpointUnreadableError as e:
        problem = str(e)
    except Exception as e:  # noqa: BLE001 - re-raised below, once every process knows
        error = e
    outcomes = _outcomes(_FAILED if error else _UNREADABLE if problem else _OK)
    if error is not None:
        raise error
    failed = [int(i) for i in np.flatnonzero(outcomes == _FAILED)]
    if failed:
        raise checkpointing.CheckpointUnreadableError(
            f"restoring {where} failed on process(es) {failed} (their logs say why)")
    unreadable = [int(i) for i in np.flatnonzero(outcomes == _UNREADABLE)]
    if unreadable and problem is None:
        problem = (f"checkpoint {where} cannot be read on process(es) {unreadable} "
                   "(their logs say why)")
    return (None, problem) if unreadable else (result, None)


def _set_aside(manager, steps_to_move: list[int]) -> None:
    """Move `steps_to_move` out of the manager's directory (process 0) and make every process
    forget them."""
    if jax.process_index() == 0:
        for step in steps_to_move:
            target = checkpointing.set_aside(manager.directory, step)
            logging.warning("moved the unreadable checkpoint %s/%d to %s", manager.directory,
                            step, target)
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils
        multihost_utils.sync_global_devices("bert_jax: unreadable checkpoints set aside")
    manager.reload()


def _set_aside_entries_that_are_not_steps(manager) -> None:
    """An entry named as a step that is no step folder (a dangling symbolic link, a file:
    step_folders.not_step_folders) is moved aside like an unreadable step, one line each, before
    the steps are listed: Orbax does not list it, and the save of that step would meet it."""
    found = step_folders.not_step_folders(manager.directory)
    if jax.process_index() == 0:
        step_folders.warn_misnamed(manager.directory)  # Orbax skips them
        for step, what in found:
            target = checkpointing.set_aside(manager.directory, step)
            logging.warning("%s/%d is %s: not a checkpoint step; moved to %s, and the run goes on "
                            "from its newest step folder", manager.directory, step, what, target)
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils
        multihost_utils.sync_global_devices("bert_jax: entries that are not steps set aside")
    if found:
        manager.reload()


def _restore_newest_readable(manager, abstract_state: Any, model_config: BertConfig,
                             data_iterator: Any) -> steps.TrainState:
    """The state of the newest step of `manager` that can be read; the newer ones are set aside.

    Raises CheckpointMismatchError as restore does, and CheckpointUnreadableError if no step can
    be read (nothing is moved then).
    """
    unreadable: list[tuple[int, str]] = []
    candidates = sorted(manager.all_steps(), reverse=True)
    for i, step in enumerate(candidates):
        where = f"{manager.directory}/{step}"
        _, problem = _attempt(functools.partial(
            checkpointing.check_readable, manager, step,
            data_iterator=data_iterator is not None), where)
        if problem is None:
            logging.info("resuming from %s", where)
            # restore sets the iterator only once its process read the whole step; if another
            # process could not, the restore of the previous step sets it again.
            state, problem = _attempt(functools.partial(
                checkpointing.restore, manager, step, abstract_state, model_config=model_config,
                data_iterator=data_iterator, checked=True), where)
        if problem is None:
            if unreadable:
                _set_aside(manager, [s for s, _ in unreadable])
                logging.warning("resumed from %s instead of the newer unreadable step(s) %s",
                                where, [s for s, _ in unreadable])
            return state
        unreadable.append((step, problem))
        logging.warning("%s; %s", problem, f"trying step {candidates[i + 1]}"
                        if i + 1 < len(candidates) else "no older step")
    raise checkpointing.CheckpointUnreadableError(
        f"no checkpoint in {manager.directory} can be read, so the run cannot resume: "
        + "; ".join(problem for _, problem in unreadable)
        + ". Nothing was moved or deleted. To start this run over, move "
        f"{manager.directory} away (e.g. to {checkpointing.unreadable_dir(manager.directory)}) "
        "or use another --workdir")
