"""Embedding evaluation: retrieval over a BEIR-format folder and STS correlation.

    metrics   ranking metrics (recall@k, MRR@10, nDCG@10) of a ranking against qrels
    beir      reading a BEIR folder (corpus.jsonl, queries.jsonl, qrels/<split>.tsv)
    search    exact top-k search, the corpus sharded over a device mesh
    sts       Spearman / Pearson of cosine similarity against gold pair scores
    evaluate  an encoder + a BEIR folder or an STS file -> the metrics dict

Importing the package imports none of them (no JAX start-up for a caller of `metrics`).
"""
