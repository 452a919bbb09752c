"""The train state of a run on its mesh: built fresh (optionally from given parameters) or
restored from the newest checkpoint, with the shardings that the jitted step uses.

Optimizer moments are sharded like the parameters they belong to; step and rng are replicated.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from absl import logging
from jax.sharding import Mesh, NamedSharding

from bert_jax import pytree, sharding
from bert_jax.config import BertConfig
from bert_jax.train import checkpointing, steps


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
        return jax.device_put(jnp.asarray(value, leaf.dtype), leaf_sharding)

    params = jax.tree_util.tree_map_with_path(pick, fresh, shardings)
    return params, kept_fresh, sorted(set(given_by_path) - used)


def _with_shardings(abstract: Any, shardings_tree: Any) -> Any:
    return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                        abstract, shardings_tree)


def create_or_restore(init_fn: Callable[[jax.Array], Any], initial_params: Any,
                      optimizer: optax.GradientTransformation, mesh: Mesh, seed: int,
                      manager, model_config: BertConfig,
                      train_iterator: Any) -> tuple[steps.TrainState, int, steps.TrainState]:
    """(state, its step, state shardings): the newest checkpoint of `manager`, else a fresh state.

    A fresh state is born sharded: init_fn(rng) -> boxed params, overlaid with `initial_params`
    where the paths match. Restoring also sets the train iterator's saved state.
    """
    init_rng, state_rng = jax.random.split(jax.random.PRNGKey(seed))
    abstract_boxed = jax.eval_shape(init_fn, init_rng)
    param_shardings, shardings = state_shardings(abstract_boxed, optimizer, mesh)
    create = lambda p: steps.TrainState.create(p, optimizer, state_rng)  # noqa: E731
    latest = manager.latest_step()
    if latest is not None:
        logging.info("resuming from %s/%d", manager.directory, latest)
        resumable = hasattr(train_iterator, "set_state")
        if not resumable:
            logging.warning("the train iterator has no set_state: its batches restart from the "
                            "beginning, so this resumed run is not the uninterrupted one")
        abstract_state = jax.eval_shape(create, nn.meta.unbox(abstract_boxed))
        state = checkpointing.restore(
            manager, latest, _with_shardings(abstract_state, shardings),
            model_config=model_config, data_iterator=train_iterator if resumable else None)
        return state, int(jax.device_get(state.step)), shardings
    params, _ = sharding.init_sharded(lambda: init_fn(init_rng), mesh)
    if initial_params is not None:
        params, fresh, unused = overlay_params(params, initial_params, param_shardings)
        logging.info("initial params loaded; kept fresh: %s; unused: %s", fresh, unused)
    state = jax.jit(create, in_shardings=(param_shardings,), out_shardings=shardings,
                    donate_argnums=(0,))(params)
    return state, 0, shardings
