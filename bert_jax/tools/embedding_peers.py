"""The same model through sentence-transformers and MTEB, set beside ours: what the folder that
`convert.py --format=sentence_transformers` writes gives where embedding models are consumed.

    vectors = st_vectors(st_folder, texts)                   # SentenceTransformer(folder).encode
    metrics = st_beir_metrics(st_folder, beir_dir)           # scored as evaluate_embeddings.py
    result = st_mteb(st_folder, beir_dir, output_dir)        # MTEB's own result file (a Path)
    scores = mteb_scores(result)                              # {split: {score name: value}}
    score_difference(scores, mteb_scores(our_result_file))   # the largest |difference|

st_beir_metrics embeds the BEIR folder's documents and queries with
`SentenceTransformer(folder).encode` (the folder's own pooling, normalisation and max length;
float32 on the CPU) and ranks them with bert_jax.embeddings.evaluate.beir_metrics, the exact
search and metrics our evaluation uses: the same vectors give the same figures. st_mteb runs the
folder as MTEB's SentenceTransformerEncoderWrapper on the BEIR folder as a local MTEB retrieval
task (bert_jax.embeddings.mteb_encoder.local_retrieval_task, named after the folder), writing
MTEB's result file under `output_dir`.

sentence-transformers (and, for st_mteb, mteb 2.x on Python >= 3.12) are imported on first use.
"""

from __future__ import annotations

import functools
import json
import math
import os
from typing import Sequence

import numpy as np


@functools.lru_cache(maxsize=4)
def st_model(folder: str):
    """SentenceTransformer(folder) on the CPU (loaded once per folder in a process)."""
    from sentence_transformers import SentenceTransformer
    return SentenceTransformer(os.fspath(folder), device="cpu")


def st_vectors(folder: str, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
    """float32 [len(texts), D]: `SentenceTransformer(folder).encode(texts)`."""
    return np.asarray(st_model(os.fspath(folder)).encode(
        list(texts), batch_size=batch_size, convert_to_numpy=True), np.float32)


def st_beir_metrics(folder: str, beir_dir: str, split: str = "test",
                    similarity: str = "cos", batch_size: int = 32) -> dict[str, float]:
    """evaluate_embeddings.py's BEIR metrics and counts (bert_jax/embeddings/evaluate.py) of
    the sentence-transformers folder's embeddings on `beir_dir`'s `split`."""
    from bert_jax.embeddings import beir, evaluate
    data = beir.read_beir(beir_dir, split)
    return evaluate.beir_metrics(data, st_vectors(folder, data.document_texts, batch_size),
                                 st_vectors(folder, data.query_texts, batch_size), similarity)


def st_mteb(folder: str, beir_dir: str, output_dir: str, split: str = "test"):
    """Run the local retrieval task of `beir_dir` through MTEB with the sentence-transformers
    folder (MTEB's own wrapper); returns the path of MTEB's result file under `output_dir`."""
    import mteb

    from bert_jax.embeddings import mteb_encoder
    model = mteb.models.SentenceTransformerEncoderWrapper(st_model(os.fspath(folder)))
    task = mteb_encoder.local_retrieval_task(beir_dir, split)
    cache = mteb.ResultCache(output_dir)
    mteb.evaluate(model, [task], cache=cache, overwrite_strategy="always",
                  show_progress_bar=False)
    return cache.get_task_result_path(task.metadata.name, model.mteb_model_meta)


def mteb_scores(result_file: str) -> dict[str, dict[str, float]]:
    """{split: {score name: value}} of an MTEB result file: the number-valued scores of each
    split's subsets (keys "<subset>/<name>" when a split has several subsets)."""
    with open(result_file, encoding="utf-8") as f:
        scores = json.load(f)["scores"]
    out = {}
    for split, subsets in scores.items():
        several = len(subsets) > 1
        out[split] = {(f"{s.get('hf_subset')}/{k}" if several else k): float(v)
                      for s in subsets for k, v in s.items()
                      if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return out


def score_difference(a: dict[str, dict[str, float]], b: dict[str, dict[str, float]]) -> float:
    """The largest |a - b| over the scores of two mteb_scores (NaN in both counts as equal);
    ValueError when they do not name the same splits and scores, inf when only one is NaN."""
    if {s: set(v) for s, v in a.items()} != {s: set(v) for s, v in b.items()}:
        raise ValueError("the two result files do not hold the same splits and scores")
    largest = 0.0
    for split, values in a.items():
        for name, x in values.items():
            y = b[split][name]
            if math.isnan(x) and math.isnan(y):
                continue
            largest = max(largest, abs(x - y) if not (math.isnan(x) or math.isnan(y))
                          else math.inf)
    return largest
