"""Ranking metrics of a retrieval run against graded relevance judgments (qrels), with the
BEIR / TREC (pytrec_eval) conventions, on host Python data.

    ranking_metrics({"q1": ["d3", "d1", ...]}, {"q1": {"d1": 2, "d7": 1}})
    -> {"recall@1": ..., "recall@10": ..., "recall@100": ..., "mrr@10": ..., "ndcg@10": ...,
        "queries": 1}

Per query, with R = the documents whose judged relevance is > 0:
    recall@k  |R in the first k ranked| / |R|
    mrr@10    1 / the rank (1-based) of the first document of R in the first 10; 0 if none
    ndcg@10   DCG@10 / IDCG@10, DCG@k = sum over ranks i = 1..k of gain(doc_i) / log2(i + 1),
              gain = the judged relevance (linear, as trec_eval's ndcg_cut; unjudged or <= 0:
              0); IDCG@k is the DCG@k of the judged documents sorted by relevance, best first
Every metric is the mean over the scored queries: those with at least one relevant document in
the qrels. A scored query missing from `ranked` counts as an empty ranking (all zeros, as
trec_eval -c), so leaving queries out never raises a score; ranked queries without judgments
are ignored. "queries" is the number of scored queries (an int).

Correlations of scores against gold scores (STS, and the fine-tuning regression kind): `pearson`,
`spearman` (Pearson of the average ranks, ties sharing their mean rank: `average_ranks`).
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

CUTOFFS_RECALL = (1, 10, 100)
CUTOFF_MRR = 10
CUTOFF_NDCG = 10
METRIC_NAMES = ("recall@1", "recall@10", "recall@100", "mrr@10", "ndcg@10")


def dcg(gains: Sequence[float]) -> float:
    """sum over ranks i = 1.. of gains[i - 1] / log2(i + 1)."""
    return sum(gain / math.log2(rank + 1) for rank, gain in enumerate(gains, start=1))


def query_metrics(ranked: Sequence[str], relevance: Mapping[str, int]) -> dict[str, float]:
    """METRIC_NAMES of one query: `ranked` corpus ids best first, `relevance` its qrels
    ({corpus id: relevance}) with at least one relevance > 0. A ranking that names a document
    twice is a caller's bug (it would count the document twice): ValueError."""
    if len(set(ranked)) != len(ranked):
        seen: set[str] = set()
        twice = next(doc for doc in ranked if doc in seen or seen.add(doc))
        raise ValueError(f"the ranking names corpus id {twice!r} more than once")
    relevant = {doc for doc, rel in relevance.items() if rel > 0}
    if not relevant:
        raise ValueError("a query without relevant documents has no ranking metrics")
    out = {f"recall@{k}": sum(doc in relevant for doc in ranked[:k]) / len(relevant)
           for k in CUTOFFS_RECALL}
    first = next((rank for rank, doc in enumerate(ranked[:CUTOFF_MRR], start=1)
                  if doc in relevant), None)
    out[f"mrr@{CUTOFF_MRR}"] = 1.0 / first if first else 0.0
    gains = [max(relevance.get(doc, 0), 0) for doc in ranked[:CUTOFF_NDCG]]
    ideal = sorted((rel for rel in relevance.values() if rel > 0), reverse=True)[:CUTOFF_NDCG]
    out[f"ndcg@{CUTOFF_NDCG}"] = dcg(gains) / dcg(ideal)
    return out


def ranking_metrics(ranked: Mapping[str, Sequence[str]],
                    qrels: Mapping[str, Mapping[str, int]]) -> dict[str, float]:
    """METRIC_NAMES averaged over the queries of `qrels` with a relevant document (module
    docstring), and "queries": how many. ranked: query id -> corpus ids, best first (at least
    100 of them for recall@100 to mean what it says). No such query: ValueError (a mean over
    nothing is undefined, and it is always an input mistake: an empty or mismatched qrels)."""
    scored = [query for query, relevance in qrels.items()
              if any(rel > 0 for rel in relevance.values())]
    if not scored:
        raise ValueError(f"none of the {len(qrels)} judged queries has a relevant document "
                         "(relevance > 0), so there is nothing to score")
    totals = dict.fromkeys(METRIC_NAMES, 0.0)
    for query in scored:
        try:
            one = query_metrics(list(ranked.get(query, ())), qrels[query])
        except ValueError as e:
            raise ValueError(f"query {query!r}: {e}") from None
        for name in METRIC_NAMES:
            totals[name] += one[name]
    out = {name: total / len(scored) for name, total in totals.items()}
    out["queries"] = len(scored)
    return out


# ----- correlations (STS, and the fine-tuning regression kind) -----------------------------------

def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    x, y = x - x.mean(), y - y.mean()
    denominator = np.sqrt((x @ x) * (y @ y))
    return float((x @ y) / denominator) if denominator > 0 else 0.0


def average_ranks(values: Sequence[float]) -> np.ndarray:
    """Ranks 1..n; tied values share the mean of the ranks they span."""
    values = np.asarray(values, np.float64)
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    ranks = np.empty(len(values), np.float64)
    start = 0
    while start < len(values):
        stop = start
        while stop + 1 < len(values) and sorted_values[stop + 1] == sorted_values[start]:
            stop += 1
        ranks[order[start:stop + 1]] = (start + stop) / 2 + 1
        start = stop + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    return pearson(average_ranks(x), average_ranks(y))
