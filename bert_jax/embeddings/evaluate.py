"""Evaluate a sentence encoder on a BEIR retrieval split or an STS pair file.

    from bert_jax.embeddings import encode as se
    from bert_jax.embeddings import evaluate as ev
    from bert_jax.tools import saved_runs
    encoder = saved_runs.load_encoder(hf_dir=...)     # or workdir=RUN, step=N
    data = ev.load(beir_dir="scifact", split="test")  # or ev.load(sts_file="sts-test.tsv")
    ev.evaluate(encoder, data, pooling="mean")        # -> {"ndcg@10": ..., ...}

A training loop reads the data once with `load` and calls `evaluate` every N steps with an
Encoder of its current parameters: `se.Encoder(cfg, se.encoder_tree(params), tokenizer, "step
N")`. Every value of the returned dict is a number.

BEIR: documents and queries are embedded (sentence_embeddings.embed; cos: normalized), the top
100 documents of every judged query found by exact search over the corpus sharded on the mesh
(search.py), and ranked against the qrels (metrics.py). As BEIR's evaluation does by default, a
document whose id equals the query's id is dropped from that query's ranking (ArguAna, Quora:
the query itself is in the corpus); the search asks for one more to keep 100. Returned: the
ranking metrics, "queries" (scored: judged with a relevant document), and the counts read:
"documents", "queries_read" (queries.jsonl), "queries_judged" (in the split's qrels),
"judgments" (qrels rows).

STS: both sentences of every pair embedded (no normalization needed: cosine), Spearman and
Pearson of the cosines against the gold scores (sts.py), and "pairs" (all read pairs are
scored).
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

import numpy as np
from jax.sharding import Mesh

from bert_jax.embeddings import beir, metrics, search, sts
from bert_jax.embeddings import encode as sentence_embeddings

TOP_K = max(metrics.CUTOFFS_RECALL)
Data = Union[beir.BeirData, sts.Pairs]


def load(beir_dir: Optional[str] = None, split: str = "test", sts_file: Optional[str] = None,
         sts_format: str = "auto", sts_columns: Sequence[str] = sts.DEFAULT_COLUMNS) -> Data:
    """The split of a BEIR folder or the pairs of an STS file (exactly one); DataError naming
    the file and line of bad input."""
    if (beir_dir is None) == (sts_file is None):
        raise ValueError("give exactly one of a BEIR folder and an STS file")
    if beir_dir is not None:
        return beir.read_beir(beir_dir, split)
    return sts.read_pairs(sts_file, sts_format, sts_columns)


def evaluate(encoder: sentence_embeddings.Encoder, data: Data, pooling: str = "mean",
             similarity: str = "cos", batch_size: int = 64, max_seq_len: Optional[int] = None,
             mesh: Optional[Mesh] = None, query_block: int = 256,
             progress: bool = False) -> dict[str, float]:
    """The metrics of `encoder` on `data` (module docstring). similarity (BEIR only): "cos"
    or "dot", as the model was trained; mesh: where the corpus is searched (default all
    devices); progress: tqdm bars while embedding."""
    options = dict(pooling=pooling, batch_size=batch_size, max_seq_len=max_seq_len,
                   progress=progress)
    if isinstance(data, sts.Pairs):
        vectors = sentence_embeddings.embed(encoder, data.sentences1 + data.sentences2,
                                            **options)
        return sts.sts_metrics(vectors[:len(data)], vectors[len(data):], data.scores)
    return evaluate_beir(encoder, data, similarity, mesh, query_block, **options)


def rankings(data: beir.BeirData, ids: np.ndarray) -> dict[str, list[str]]:
    """query id -> its corpus ids, best first, from search row ids [queries, k]: without the
    query's own id, at most TOP_K."""
    out = {}
    for query, row in zip(data.queries, ids):
        ranked = [data.documents[j] for j in row]
        out[query] = [doc for doc in ranked if doc != query][:TOP_K]
    return out


def evaluate_beir(encoder: sentence_embeddings.Encoder, data: beir.BeirData,
                  similarity: str = "cos", mesh: Optional[Mesh] = None, query_block: int = 256,
                  **embed_options) -> dict[str, float]:
    if similarity not in search.SIMILARITIES:
        raise ValueError(f"similarity {similarity!r} is unknown; choose one of "
                         f"{search.SIMILARITIES}")
    normalize = similarity == "cos"
    documents = sentence_embeddings.embed(encoder, data.document_texts, normalize=normalize,
                                          **embed_options)
    queries = sentence_embeddings.embed(encoder, data.query_texts, normalize=normalize,
                                        **embed_options)
    return beir_metrics(data, documents, queries, similarity, mesh, query_block)


def beir_metrics(data: beir.BeirData, documents: np.ndarray, queries: np.ndarray,
                 similarity: str = "cos", mesh: Optional[Mesh] = None,
                 query_block: int = 256) -> dict[str, float]:
    """The BEIR metrics and counts (module docstring) of given vectors: documents [len(
    data.documents), D] and queries [len(data.queries), D] in data's order, from any encoder
    (sentence-transformers' too: scored exactly as evaluate scores ours)."""
    if len(documents) != len(data.documents) or len(queries) != len(data.queries):
        raise ValueError(f"{len(documents)} document and {len(queries)} query vectors for "
                         f"{len(data.documents)} documents and {len(data.queries)} queries")
    index = search.shard_corpus(documents, mesh, similarity)
    _, ids = search.search(index, queries, TOP_K + 1, query_block)
    out = metrics.ranking_metrics(rankings(data, ids), data.qrels)
    counts = data.counts
    out.update(documents=counts["documents"], queries_read=counts["queries_read"],
               queries_judged=counts["queries"], judgments=counts["judgments"])
    return out
