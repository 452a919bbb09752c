"""suite.png: each (task, metric) of a suite table as a bar at its median over seeds, a line over
its min-max and a dot per seed; failed tasks are named; the score is in the title."""

from __future__ import annotations

from typing import Any, Mapping

from bert_jax.runtime import paths


def plot_table(table: Mapping[str, Any], output: str, title: str) -> str:
    """Draws `table` (scores.suite_table) into the PNG `output`; returns its path. Uses the Agg
    canvas directly: no display, no pyplot state."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    entries = [(row, metric) for row in table["rows"] for metric in row["metrics"]]
    figure = Figure(figsize=(8, 1.5 + 0.35 * max(len(entries), 1)), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots()
    labels = []
    for y, (row, metric) in enumerate(entries):
        labels.append(f"{row['task']} {metric['label']}" + ("" if row["scored"] else " *"))
        if metric["median"] is None:
            axes.text(0.01, y, "failed" if row["failed"] else "not run", va="center",
                      color="tab:red", fontsize="small")
            continue
        axes.barh(y, 100 * metric["median"], color="tab:blue" if row["scored"] else "tab:gray",
                  alpha=0.6)
        axes.plot([100 * metric["min"], 100 * metric["max"]], [y, y], color="black")
        axes.plot([100 * v for v in metric["values"]], [y] * len(metric["values"]), "o",
                  color="black", markersize=3)
    axes.set_yticks(range(len(entries)), labels, fontsize="small")
    axes.invert_yaxis()
    axes.set_xlabel("metric x 100: bar at the median over seeds, line min-max, dot per seed")
    axes.grid(True, axis="x", alpha=0.3)
    score = table["score"]
    value = "-" if score["value"] is None else f"{100 * score['value']:.1f}"
    note = f", missing {', '.join(score['missing'])}" if score["missing"] else ""
    axes.set_title(f"{title}: score {value} over {len(score['tasks'])} tasks{note}"
                   + ("; * not scored" if score["excluded"] else ""), fontsize="medium")
    target = paths.path(output)
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("wb") as f:
        figure.savefig(f, format="png", dpi=100)
    return str(target)
