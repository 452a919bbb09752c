"""Prepared token shards on the training side: the `shards:DIR` corpus spec and its documents.

`ShardDocuments` is `bert_jax.data.corpora.token_shards.TokenShards`, the one reader of the
format (its docstring: the folder, the manifest, the per-document token counts and where they
come from): one split's documents by global index (`len`, `[i]`, `read(indices)`), their token
counts (`document_tokens()`, what `bert_jax.data.pretraining.shard_rows` plans rows from) and
`identity()` (what the iterator's state fingerprint hashes). This module adds the spec's prefix
and `shards_directory`.
"""

from __future__ import annotations

import os

from bert_jax.data.corpora.token_shards import FORMAT, FORMAT_VERSION, MANIFEST, read_manifest
from bert_jax.data.corpora.token_shards import TokenShards as ShardDocuments

__all__ = ["FORMAT", "FORMAT_VERSION", "MANIFEST", "PREFIX", "ShardDocuments", "read_manifest",
           "shards_directory"]

PREFIX = "shards:"


def shards_directory(corpus: str) -> str:
    """DIR of a `shards:DIR` corpus spec."""
    if not corpus.startswith(PREFIX) or not corpus[len(PREFIX):]:
        raise ValueError(f"corpus {corpus!r} is not {PREFIX}DIR")
    return os.path.abspath(os.path.expanduser(corpus[len(PREFIX):]))
