"""What the comparison reports: time to a target accuracy, the seed-to-seed spread, the PNG.

Time to target: the training seconds (the clock of benchmarks/peers/clocked.py) of the first
evaluation whose held-out masked-LM accuracy is at or above the target; None if no evaluation
reached it. Its resolution is the spacing of the evaluation points (budget / eval_points).
"""

from __future__ import annotations

import os
from typing import Optional, Sequence

import numpy as np


def time_to_target(evaluations: Sequence[dict], target: float) -> Optional[float]:
    """Seconds of the first evaluation with accuracy >= target, or None."""
    for record in evaluations:
        if record["accuracy"] >= target:
            return float(record["seconds"])
    return None


def spread(values: Sequence[float]) -> dict:
    """{"mean", "std" (over seeds, ddof 1; None with one seed), "min", "max", "runs"}."""
    array = np.asarray(values, np.float64)
    return {"mean": float(array.mean()), "std": float(array.std(ddof=1)) if len(array) > 1
            else None, "min": float(array.min()), "max": float(array.max()), "runs": len(array)}


def summarize(results: Sequence[dict], targets: Sequence[float]) -> dict:
    """Per implementation: final accuracy and loss over seeds, and per target the runs that
    reached it and the spread of their times."""
    summary = {}
    for name in dict.fromkeys(r["implementation"] for r in results):
        runs = [r for r in results if r["implementation"] == name]
        finals = [r["evaluations"][-1] for r in runs]
        reached = {}
        for target in targets:
            times = [t for t in (time_to_target(r["evaluations"], target) for r in runs)
                     if t is not None]
            reached[f"{target:g}"] = {"reached": len(times), "runs": len(runs),
                                      **(spread(times) if times else {})}
        summary[name] = {"seeds": [r["seed"] for r in runs],
                         "final_accuracy": spread([f["accuracy"] for f in finals]),
                         "final_loss": spread([f["loss"] for f in finals]),
                         "final_steps": spread([f["steps"] for f in finals]),
                         "time_to_target": reached}
    return summary


def target_lines(summary: dict, targets: Sequence[float]) -> list[str]:
    """"time to reach accuracy X" per implementation, for the terminal."""
    lines = []
    for target in targets:
        lines.append(f"time to reach held-out masked-LM accuracy {target:g}:")
        for name, entry in summary.items():
            hit = entry["time_to_target"][f"{target:g}"]
            if not hit["reached"]:
                lines.append(f"  {name:15s} not reached in any of {hit['runs']} run(s)")
                continue
            spread_text = (f" (min {hit['min']:.1f}, max {hit['max']:.1f})"
                           if hit["reached"] > 1 else "")
            lines.append(f"  {name:15s} {hit['mean']:8.1f} s{spread_text}; reached in "
                         f"{hit['reached']} of {hit['runs']} run(s)")
    return lines


def plot(results: Sequence[dict], output: str, targets: Sequence[float] = ()) -> None:
    """Held-out accuracy against training seconds into the PNG `output`: one colour per
    implementation, each seed a thin line, their mean a thick one; targets dotted."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 5), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots()
    for index, name in enumerate(dict.fromkeys(r["implementation"] for r in results)):
        colour = f"C{index % 10}"
        runs = [r["evaluations"] for r in results if r["implementation"] == name]
        for evaluations in runs:
            axes.plot([e["seconds"] for e in evaluations], [e["accuracy"] for e in evaluations],
                      color=colour, linewidth=0.6, alpha=0.5)
        points = min(len(e) for e in runs)

        def mean(key, runs=runs, points=points):
            return np.mean([[e[key] for e in ev[:points]] for ev in runs], 0)

        axes.plot(mean("seconds"), mean("accuracy"), color=colour, linewidth=2.0, marker="o",
                  markersize=3, label=f"{name} ({len(runs)} seed{'s' * (len(runs) > 1)})")
    for target in targets:
        axes.axhline(target, color="grey", linestyle=":", linewidth=0.8)
    axes.set_xlabel("training seconds (compilation included, evaluation excluded)")
    axes.set_ylabel("held-out masked-LM accuracy")
    axes.grid(True, alpha=0.3)
    axes.legend(loc="lower right", fontsize="small")
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    figure.savefig(output, format="png", dpi=100)


def run_records(results: Sequence[dict], targets: Sequence[float]) -> list[dict]:
    """Each worker's result with its time to each target ({"0.3": seconds or None})."""
    return [{**r, "time_to_target": {f"{t:g}": time_to_target(r["evaluations"], t)
                                     for t in targets}} for r in results]
