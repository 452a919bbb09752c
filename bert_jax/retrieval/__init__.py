"""Deprecated: this package is bert_jax.embeddings now (metrics, beir, search, sts, evaluate).
Importing it warns (DeprecationWarning); `from bert_jax.retrieval import <module>` still gives
bert_jax.embeddings.<module>. Import from bert_jax.embeddings instead."""

import importlib
import warnings

_MODULES = ("metrics", "beir", "search", "sts", "evaluate")

warnings.warn("bert_jax.retrieval is deprecated: it is bert_jax.embeddings now; import its "
              "modules from there", DeprecationWarning, stacklevel=2)


def __getattr__(name: str):
    if name in _MODULES:
        return importlib.import_module(f"bert_jax.embeddings.{name}")
    raise AttributeError(f"module 'bert_jax.retrieval' has no attribute {name!r}")
