"""A suite's numbers, as pure functions of its runs' predictions and results.

    metric_value("f1", records, positive_label="1")   one metric from a run's prediction records
    suite_table(specs, runs, excluded)                 per task: each metric's median and spread
                                                       (min-max) over seeds, the task's number,
                                                       and the suite score
    markdown(table)                                    the table as suite.md shows it

Metrics are computed from the prediction records a fine-tuning run writes (predictions.jsonl:
"label" the gold label, "prediction" the predicted class or score), so a task reports what its
benchmark defines (CoLA's Matthews correlation, MRPC's F1 of the paraphrase class, ...)
whatever the kind's own metrics.json holds, and the kinds report what they always did.

The suite score is computed as the GLUE benchmark does: a task with two metrics (MRPC and QQP:
F1 and accuracy; STS-B: Pearson and Spearman; MNLI: matched and mismatched accuracy) counts as
the mean of the two, and the score is the mean over tasks; tasks in `excluded` (WNLI, by
convention since BERT's paper) are shown but not scored. With several seeds, each metric's median
over seeds is taken first: a task's number is the mean of its metrics' medians. The spread of
the score is the min-max of the per-seed scores (seeds done on every scored task).
"""

from __future__ import annotations

import statistics
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from bert_jax.recipes.finetune import metrics as metrics_lib
from bert_jax.recipes.suite.spec import TaskSpec


def metric_value(metric: str, records: Sequence[Mapping[str, Any]],
                 positive_label: Optional[str] = None) -> float:
    """`metric` (mcc | accuracy | f1 | pearson | spearman) of records with "label" (gold) and
    "prediction". F1 is of the class `positive_label` (a ValueError when no gold label is it)."""
    if not records:
        raise ValueError("no prediction records to score")
    gold = [r["label"] for r in records]
    predicted = [r["prediction"] for r in records]
    if metric in ("pearson", "spearman"):
        function = metrics_lib.pearson if metric == "pearson" else metrics_lib.spearman
        return function(np.asarray(predicted, np.float64), np.asarray(gold, np.float64))
    if metric == "accuracy":
        return float(np.mean([g == p for g, p in zip(gold, predicted)]))
    if metric == "f1":
        if positive_label not in gold:
            raise ValueError(f"F1 of class {positive_label!r}: no gold label is that class "
                             f"(the labels are {sorted(set(map(str, gold)))})")
        return metrics_lib.f1_score([int(p == positive_label) for p in predicted],
                                    [int(g == positive_label) for g in gold], 2, 1)
    if metric == "mcc":
        classes = {name: i for i, name in enumerate(sorted(set(gold) | set(predicted)))}
        return metrics_lib.matthews_corrcoef([classes[p] for p in predicted],
                                             [classes[g] for g in gold], len(classes))
    raise ValueError(f"metric {metric!r} is unknown")


def summary(values: Sequence[float]) -> dict[str, Any]:
    """{"median", "min", "max", "values"} of a metric over seeds (None for no values)."""
    values = [float(v) for v in values]
    if not values:
        return {"median": None, "min": None, "max": None, "values": []}
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "values": values}


def task_number(values: Mapping[str, float], keys: Sequence[str]) -> float:
    """One number of a task: the mean of its metrics (GLUE's rule for two-metric tasks)."""
    return float(np.mean([values[k] for k in keys]))


def suite_table(specs: Sequence[TaskSpec], runs: Sequence[Mapping[str, Any]],
                excluded: Sequence[str] = ()) -> dict[str, Any]:
    """The table of a suite from its runs ({"task", "seed", "status": done | failed,
    "metrics": {key: value}, "error"}), one row per spec in order, and the suite score.

    Row: {"task", "scored", "seeds_done", "failed": [{"seed", "error"}], "metrics": [{"key",
    "label", "median", "min", "max", "values"}], "number": the mean of the metrics' medians or
    None, "number_range": [min, max] of the per-seed task numbers}.
    Score: {"value": the mean of the scored rows' numbers (None without any), "tasks": those
    rows, "missing": scored tasks without a result, "excluded", "per_seed": {seed: score} for
    the seeds done on every scored task, "range": [min, max] of those}."""
    excluded = set(excluded)
    rows = []
    for spec in specs:
        keys = [m.key for m in spec.metrics]
        done = sorted((r for r in runs if r["task"] == spec.name and r["status"] == "done"),
                      key=lambda r: r["seed"])
        failed = [{"seed": r["seed"], "error": r.get("error", "")} for r in runs
                  if r["task"] == spec.name and r["status"] == "failed"]
        metric_rows = [{"key": m.key, "label": spec.metric_label(m),
                        **summary([r["metrics"][m.key] for r in done])} for m in spec.metrics]
        per_seed = [task_number(r["metrics"], keys) for r in done]
        rows.append({
            "task": spec.name, "scored": spec.name not in excluded,
            "seeds_done": [r["seed"] for r in done], "failed": failed, "metrics": metric_rows,
            "number": (float(np.mean([m["median"] for m in metric_rows])) if done else None),
            "number_range": [min(per_seed), max(per_seed)] if per_seed else None,
            "per_seed": {r["seed"]: n for r, n in zip(done, per_seed)}})
    return {"rows": rows, "score": suite_score(rows)}


def suite_score(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The score of the table's rows (suite_table's docstring)."""
    scored = [row for row in rows if row["scored"]]
    present = [row for row in scored if row["number"] is not None]
    seeds = set.intersection(*(set(row["per_seed"]) for row in scored)) if scored else set()
    per_seed = {seed: float(np.mean([row["per_seed"][seed] for row in scored]))
                for seed in sorted(seeds)}
    return {"value": float(np.mean([row["number"] for row in present])) if present else None,
            "tasks": [row["task"] for row in present],
            "missing": [row["task"] for row in scored if row["number"] is None],
            "excluded": [row["task"] for row in rows if not row["scored"]],
            "per_seed": per_seed,
            "range": [min(per_seed.values()), max(per_seed.values())] if per_seed else None}


def _pct(value: Optional[float]) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def markdown(table: Mapping[str, Any], title: str) -> str:
    """suite.md: one line per (task, metric), values x 100, then the score."""
    lines = [f"# {title}", "",
             "Median over seeds, (min-max) over seeds; values x 100. A task's number is the mean "
             "of its metrics' medians; the score is the mean of the scored tasks' numbers.", "",
             "| task | metric | median | min-max | seeds | task number |",
             "|---|---|---|---|---|---|"]
    for row in table["rows"]:
        name = row["task"] + ("" if row["scored"] else " (not scored)")
        seeds = len(row["seeds_done"])
        for i, metric in enumerate(row["metrics"]):
            spread = (f"{_pct(metric['min'])}-{_pct(metric['max'])}"
                      if metric["median"] is not None else "-")
            number = _pct(row["number"]) if i == 0 else ""
            lines.append(f"| {name if i == 0 else ''} | {metric['label']} | "
                         f"{_pct(metric['median'])} | {spread} | {seeds if i == 0 else ''} | "
                         f"{number} |")
        for failure in row["failed"]:
            error = failure["error"].replace("|", "/")
            lines.append(f"| {row['task']} | FAILED seed {failure['seed']} | | | | {error} |")
    score = table["score"]
    lines.append("")
    text = f"**Score: {_pct(score['value'])}** (mean over {len(score['tasks'])} tasks"
    if score["missing"]:
        text += f"; missing: {', '.join(score['missing'])}"
    if score["excluded"]:
        text += f"; not scored: {', '.join(score['excluded'])}"
    text += ")"
    if score["range"]:
        text += (f"; per-seed scores {_pct(score['range'][0])}-{_pct(score['range'][1])} over "
                 f"{len(score['per_seed'])} seed(s)")
    lines.append(text)
    return "\n".join(lines) + "\n"
