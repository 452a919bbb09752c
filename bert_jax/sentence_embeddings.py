"""Deprecated: this module is bert_jax.embeddings.encode now, and its load_encoder is
bert_jax.tools.saved_runs.load_encoder. Importing it warns (DeprecationWarning) and its names
resolve to those; import them from there instead."""

import warnings

from bert_jax.embeddings import encode as _encode

warnings.warn("bert_jax.sentence_embeddings is deprecated: it is bert_jax.embeddings.encode now "
              "(load_encoder: bert_jax.tools.saved_runs); import those", DeprecationWarning,
              stacklevel=2)


def __getattr__(name: str):
    if name == "load_encoder":
        from bert_jax.tools import saved_runs
        return saved_runs.load_encoder
    return getattr(_encode, name)


def __dir__() -> list[str]:
    return sorted({*dir(_encode), "load_encoder"})
