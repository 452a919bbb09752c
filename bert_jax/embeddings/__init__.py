"""Sentence embeddings and their evaluation: retrieval over a BEIR-format folder and STS
correlation.

    encode    any BERT encoder's sentence embeddings (mean or CLS pooling, L2), packed rows
    metrics   ranking metrics (recall@k, MRR@10, nDCG@10) of a ranking against qrels; the
              correlations (Pearson, Spearman) of STS and of the regression kind
    beir      reading a BEIR folder (corpus.jsonl, queries.jsonl, qrels/<split>.tsv)
    search    exact top-k search, the corpus sharded over a device mesh
    sts       Spearman / Pearson of cosine similarity against gold pair scores
    evaluate  an encoder + a BEIR folder or an STS file -> the metrics dict
    mteb_encoder  an encoder as an MTEB (mteb 2.x) model; local MTEB tasks from a BEIR folder or
              an STS file (mteb imported on first use)

Importing the package imports none of them (no JAX start-up for a caller of `metrics`).
"""
