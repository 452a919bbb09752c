"""Deprecated: this module is bert_jax.embeddings.encode now. Importing it warns
(DeprecationWarning) and its names resolve to that module's; import bert_jax.embeddings.encode
instead."""

import warnings

from bert_jax.embeddings import encode as _encode

warnings.warn("bert_jax.sentence_embeddings is deprecated: it is bert_jax.embeddings.encode now; "
              "import that", DeprecationWarning, stacklevel=2)


def __getattr__(name: str):
    return getattr(_encode, name)


def __dir__() -> list[str]:
    return dir(_encode)
