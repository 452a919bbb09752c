"""Semantic textual similarity (STS): how well the cosine similarity of two sentences'
embeddings ranks sentence pairs as gold scores do.

    pairs = read_pairs("sts-test.tsv")          # or .csv / .jsonl; columns configurable
    sts_metrics(embed(pairs.sentences1), embed(pairs.sentences2), pairs.scores)
    -> {"spearman": ..., "pearson": ..., "pairs": n}

Spearman's rank correlation (average ranks for ties) is the STS benchmark's headline number,
as in SentEval and MTEB; Pearson's is reported beside it. Both come from
bert_jax.embeddings.metrics, over the cosine of each pair against its gold score (the
score's scale does not matter).

Files: TSV (no quote processing: STS sentences hold unbalanced quotes) or CSV with a header row,
or JSONL with an object per line; the format by extension unless given. Any bad row (a missing
column, an empty sentence, a score that is not a finite number, undecodable bytes, bad JSON) is
one DataError (a ValueError) naming the file and line; fewer than two pairs too (no correlation).
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Iterator, Sequence

import numpy as np

from bert_jax.data import textfiles
from bert_jax.data.textfiles import DataError
from bert_jax.embeddings import metrics

FORMATS = ("auto", "tsv", "csv", "jsonl")
DEFAULT_COLUMNS = ("sentence1", "sentence2", "score")


@dataclasses.dataclass(frozen=True)
class Pairs:
    """The pairs of a file, in file order: sentences1[i], sentences2[i], scores[i] (float64)."""

    path: str
    sentences1: list[str]
    sentences2: list[str]
    scores: np.ndarray

    def __len__(self) -> int:
        return len(self.scores)


def file_format(path: str, fmt: str = "auto") -> str:
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r} is unknown; choose one of {FORMATS}")
    if fmt != "auto":
        return fmt
    extension = os.path.splitext(path)[1].lower()
    known = {".tsv": "tsv", ".csv": "csv", ".jsonl": "jsonl"}
    if extension not in known:
        raise DataError(f"{path}: cannot tell the format from the extension {extension!r}; "
                        "give the format (tsv, csv or jsonl)")
    return known[extension]


def _records(path: str, fmt: str, columns: Sequence[str]) -> Iterator[tuple[int, object]]:
    if fmt == "jsonl":
        return textfiles.jsonl_records(path, "utf-8")
    return textfiles.table_rows(path, "\t" if fmt == "tsv" else ",", fmt == "csv", "utf-8",
                                columns)


def read_pairs(path: str, fmt: str = "auto", columns: Sequence[str] = DEFAULT_COLUMNS) -> Pairs:
    """Every (sentence1, sentence2, score) row of `path`; columns: the names of the two
    sentences' and the score's columns (JSONL keys). DataError on the first bad row."""
    fmt = file_format(path, fmt)
    textfiles.check_file(path)
    first, second, gold = columns
    sentences1, sentences2, scores = [], [], []
    for line, record in _records(path, fmt, columns):
        where = f"{path}:{line}"
        if isinstance(record, str):
            raise DataError(f"{where}: {record}")
        missing = [c for c in columns if c not in record]
        if missing:
            raise DataError(f"{where}: no {missing} (the row has {sorted(record)})")
        a, b, raw = record[first], record[second], record[gold]
        for name, sentence in ((first, a), (second, b)):
            if not isinstance(sentence, str) or not sentence.strip():
                raise DataError(f"{where}: {name} is empty or not a string ({sentence!r})")
        try:
            score = float(raw) if not isinstance(raw, bool) else math.nan
        except (TypeError, ValueError):
            score = math.nan
        if not math.isfinite(score):
            raise DataError(f"{where}: {gold} {raw!r} is not a finite number")
        sentences1.append(a)
        sentences2.append(b)
        scores.append(score)
    if len(scores) < 2:
        raise DataError(f"{path}: {len(scores)} pair(s); a correlation needs at least 2")
    return Pairs(path, sentences1, sentences2, np.asarray(scores, np.float64))


def cosines(vectors1: np.ndarray, vectors2: np.ndarray) -> np.ndarray:
    """[n, D] and [n, D] -> [n] cosine of each row pair (0 for a zero vector)."""
    a, b = np.asarray(vectors1, np.float64), np.asarray(vectors2, np.float64)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"expected two [n, D] arrays of one shape, got {a.shape} and {b.shape}")
    norms = np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1)
    return np.sum(a * b, axis=-1) / np.maximum(norms, 1e-24)


def sts_metrics(vectors1: np.ndarray, vectors2: np.ndarray, scores: Sequence[float]
                ) -> dict[str, float]:
    """{"spearman", "pearson"} of the pairs' cosines against `scores`, and "pairs" (an int)."""
    similarity = cosines(vectors1, vectors2)
    if len(similarity) != len(scores):
        raise ValueError(f"{len(similarity)} vector pairs for {len(scores)} scores")
    return {"spearman": metrics.spearman(similarity, scores),
            "pearson": metrics.pearson(similarity, scores), "pairs": len(scores)}
