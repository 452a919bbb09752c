"""Deprecated: this module is bert_jax.train.checkpoint.store now, and the parameters of a saved
run are read by bert_jax.train.checkpoint.params (load_params, load_model_config, resolve_step).
Importing it warns (DeprecationWarning) and its names resolve to those modules'; import them
from there instead."""

import warnings

from bert_jax.train.checkpoint import params as _params
from bert_jax.train.checkpoint import store as _store

warnings.warn("bert_jax.train.checkpointing is deprecated: it is bert_jax.train.checkpoint.store "
              "now (load_params, load_model_config, resolve_step: "
              "bert_jax.train.checkpoint.params); import those", DeprecationWarning, stacklevel=2)

_FROM_PARAMS = ("load_params", "load_model_config", "resolve_step")


def __getattr__(name: str):
    return getattr(_params if name in _FROM_PARAMS else _store, name)


def __dir__() -> list[str]:
    return sorted({*dir(_store), *_FROM_PARAMS})
