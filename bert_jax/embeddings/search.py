"""Exact top-k search by dot product or cosine similarity, the corpus sharded over a mesh.

    index = shard_corpus(corpus_vectors, make_mesh(), similarity="cos")   # [N, D] on devices
    scores, ids = search(index, query_vectors, k=100)     # [Q, k] float32, [Q, k] int32

Every corpus row is scored against every query (no approximation). The corpus rows are split
over all devices of the mesh (every mesh axis; rows padded to a multiple of the device count,
the padding never returned), the queries are replicated; per block of `query_block` queries
each device scores its rows and keeps its own top k (`jax.lax.top_k`), and the devices' k-lists
are gathered and merged into the global top k. Ids are row numbers of `corpus`. Ties: lax.top_k
keeps the lower index first within a device and the merge keeps the lower device first, so a
tie goes to the lower row number (checked against a stable numpy sort by the tests).

cos: rows and queries are scaled to unit L2 norm (a zero vector stays zero, score 0) before the
dot product. Scores are accumulated in float32 at the highest matmul precision (on TPU the
default would be bfloat16 passes, which can swap near ties), whatever `dtype` stores the corpus.

Memory per device, with n = ceil(N / devices) corpus rows, D dimensions, b bytes per stored
value (4 float32, 2 bfloat16) and B queries per block: the corpus n·D·b, plus the block's
scores n·B·4 (float32), plus the top-k lists (small): about D·b + 4·B bytes per corpus vector
(more while lax.top_k runs if the backend sorts a copy of the scores: leave headroom).
E.g. D = 384 (MiniLM) in float32 with B = 256: 1536 + 1024 = 2560 B per vector, so one device
with 16 GiB free holds about 6.7M vectors and an H200 (about 139 GiB) about 50M after 10%
headroom; D = 768 (BERT-base): 4096 B, about 4.2M and 32M. Halve B (or store bfloat16) to fit
more; the corpus term alone is 1536 B (D = 384) or 3072 B (D = 768) per float32 vector.
Throughput: benchmarks/retrieval_search.py measures queries/s.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from bert_jax.runtime import sharding

SIMILARITIES = ("cos", "dot")


@dataclasses.dataclass(frozen=True)
class CorpusIndex:
    """Corpus vectors on a mesh: `vectors` [padded rows, D], rows split over every mesh axis
    (unit-norm for cos); `size` real rows (the rest is padding, never returned)."""

    vectors: jax.Array
    size: int
    similarity: str
    mesh: Mesh

    @property
    def rows_per_device(self) -> int:
        return self.vectors.shape[0] // self.mesh.devices.size


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """float32 [n, D] rows divided by their L2 norm (at least 1e-12: a zero row stays zero)."""
    vectors = np.asarray(vectors, np.float32)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)


def _checked(vectors: np.ndarray, what: str) -> np.ndarray:
    vectors = np.asarray(vectors)
    if vectors.ndim != 2 or not len(vectors):
        raise ValueError(f"{what}: expected a non-empty [rows, dim] array, got shape "
                         f"{vectors.shape}")
    if not np.all(np.isfinite(vectors)):
        raise ValueError(f"{what}: holds NaN or infinite values")
    return vectors


def shard_corpus(corpus: np.ndarray, mesh: Optional[Mesh] = None, similarity: str = "cos",
                 dtype: jnp.dtype = jnp.float32) -> CorpusIndex:
    """corpus [N, D] -> a CorpusIndex on `mesh` (default: all devices, `sharding.make_mesh()`).
    In a multi-process job every process passes the whole corpus."""
    if similarity not in SIMILARITIES:
        raise ValueError(f"similarity {similarity!r} is unknown; choose one of {SIMILARITIES}")
    corpus = _checked(corpus, "corpus")
    mesh = sharding.make_mesh() if mesh is None else mesh
    rows = unit_rows(corpus) if similarity == "cos" else np.asarray(corpus, np.float32)
    devices = mesh.devices.size
    padded = np.zeros((-(-len(rows) // devices) * devices, rows.shape[1]), np.float32)
    padded[:len(rows)] = rows
    padded = padded.astype(dtype)
    row_sharding = NamedSharding(mesh, P(mesh.axis_names, None))
    vectors = jax.make_array_from_callback(padded.shape, row_sharding, lambda index: padded[index])
    return CorpusIndex(vectors, len(rows), similarity, mesh)


@functools.lru_cache(maxsize=16)
def _search_fn(mesh: Mesh, rows_per_device: int, size: int, k: int):
    """jitted (queries [B, D] replicated, corpus [padded, D] row-sharded) -> (scores, ids)
    [B, k], replicated."""
    axes = mesh.axis_names
    k_local = min(k, rows_per_device)

    def local(queries, rows):  # [B, D], this device's [rows_per_device, D]
        scores = jnp.einsum("bd,nd->bn", queries.astype(rows.dtype), rows,
                            precision=jax.lax.Precision.HIGHEST,
                            preferred_element_type=jnp.float32)
        first = jax.lax.axis_index(axes) * rows_per_device
        ids = first + jnp.arange(rows_per_device, dtype=jnp.int32)
        scores = jnp.where(ids[None, :] < size, scores, -jnp.inf)
        top_scores, top = jax.lax.top_k(scores, k_local)
        return top_scores, ids[top]

    per_device = jax.shard_map(local, mesh=mesh, in_specs=(P(), P(axes, None)),
                               out_specs=(P(None, axes), P(None, axes)), check_vma=False)

    def merged(queries, rows):
        scores, ids = per_device(queries, rows)  # [B, devices * k_local], device order
        top_scores, top = jax.lax.top_k(scores, k)
        return top_scores, jnp.take_along_axis(ids, top, axis=1)

    replicated = sharding.replicated(mesh)
    return jax.jit(merged, out_shardings=(replicated, replicated))


def search(index: CorpusIndex, queries: np.ndarray, k: int, query_block: int = 256
           ) -> tuple[np.ndarray, np.ndarray]:
    """The top min(k, N) corpus rows of every query, best first: (scores float32 [Q, k'],
    row ids int32 [Q, k']). Queries go through in blocks of `query_block` (the last block
    padded, so one program serves every block; a block of fewer queries if Q is smaller)."""
    queries = _checked(queries, "queries")
    if queries.shape[1] != index.vectors.shape[1]:
        raise ValueError(f"queries have {queries.shape[1]} dimensions, the corpus "
                         f"{index.vectors.shape[1]}")
    if k <= 0 or query_block <= 0:
        raise ValueError(f"k={k} and query_block={query_block} must be positive")
    k = min(k, index.size)
    queries = unit_rows(queries) if index.similarity == "cos" else queries.astype(np.float32)
    block = min(query_block, len(queries))
    fn = _search_fn(index.mesh, index.rows_per_device, index.size, k)
    replicated = sharding.replicated(index.mesh)
    scores = np.zeros((len(queries), k), np.float32)
    ids = np.zeros((len(queries), k), np.int32)
    for start in range(0, len(queries), block):
        part = queries[start:start + block]
        padded = np.zeros((block, queries.shape[1]), np.float32)
        padded[:len(part)] = part
        top_scores, top_ids = fn(jax.device_put(padded, replicated), index.vectors)
        # replicated: this process's first copy is the whole answer (also multi-process)
        scores[start:start + len(part)] = np.asarray(top_scores.addressable_data(0))[:len(part)]
        ids[start:start + len(part)] = np.asarray(top_ids.addressable_data(0))[:len(part)]
    return scores, ids


def exact_search(queries: np.ndarray, corpus: np.ndarray, k: int, mesh: Optional[Mesh] = None,
                 similarity: str = "cos", query_block: int = 256
                 ) -> tuple[np.ndarray, np.ndarray]:
    """shard_corpus then search, for a corpus searched once."""
    return search(shard_corpus(corpus, mesh, similarity), queries, k, query_block)
