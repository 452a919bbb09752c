"""Training and held-out curves of one or more runs, drawn into one PNG (`experiments/plot.py`).

    runs = [plotting.load_run(w) for w in ("runs/base", "runs/bf16")]
    plotting.plot_runs(runs, "curves.png", metrics=["loss", "mlm_accuracy"], x="step")

A run is a workdir of `bert_jax.train.loop`: `metrics.jsonl` (training, every log_every_steps)
and `eval_metrics.jsonl` (held-out, every eval_every_steps), read with
`metrics_writer.read_metrics` (a torn last line is dropped). The figure has one subplot per
metric, stacked, with a shared x axis; each run has one colour, its training curve a solid line,
its held-out curve markers joined by a dashed line; the legend names runs by their workdir's
basename.

x = "step": the optimizer step of each record. x = "seconds": training wall-clock seconds,
cumulative from each training record's `seconds_per_step` times the steps since the record
before it (evaluation and checkpoint time excluded; the first record's interval includes the
compilation). Held-out records get the training seconds at their step, interpolated between the
training records around it.

Errors are ValueError / FileNotFoundError with one line naming the fault (what `cli.run_or_exit`
turns into `plot.py: error: ...`): a missing workdir, a run with no metrics, a metric no run
logged, x="seconds" for a run without `seconds_per_step`.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional, Sequence

import numpy as np

from bert_jax.runtime import paths
from bert_jax.train import metrics_writer

X_AXES = ("step", "seconds")
DEFAULT_METRICS = ("loss", "mlm_accuracy")
_X_LABELS = {"step": "step", "seconds": "training seconds (evaluation excluded)"}


@dataclasses.dataclass
class Run:
    """The logged records of one workdir: `train` from metrics.jsonl, `held_out` from
    eval_metrics.jsonl (either may be empty, not both), each a list of {"step": int, ...}."""

    name: str
    workdir: str
    train: list[dict]
    held_out: list[dict]

    def metric_names(self) -> set[str]:
        """Every metric name in either file (without "step")."""
        return {key for record in self.train + self.held_out for key in record} - {"step"}


def load_run(workdir: str, name: Optional[str] = None) -> Run:
    """The records of `workdir`; name defaults to its basename. FileNotFoundError if the folder
    does not exist, ValueError if it holds no record in either metrics file."""
    folder = paths.path(workdir)  # a local folder or gs://
    if not folder.is_dir():
        raise FileNotFoundError(f"workdir {workdir!r} does not exist")
    records = []
    for file_name in (metrics_writer.TRAIN_FILE, metrics_writer.EVAL_FILE):
        path = folder / file_name
        records.append(metrics_writer.read_metrics(os.fspath(path)) if path.exists() else [])
    if not records[0] and not records[1]:
        raise ValueError(f"workdir {workdir!r} holds no metrics ({metrics_writer.TRAIN_FILE} and "
                         f"{metrics_writer.EVAL_FILE} are missing or empty)")
    name = name or folder.name
    return Run(name=name, workdir=workdir, train=records[0], held_out=records[1])


def load_runs(workdirs: Sequence[str]) -> list[Run]:
    """load_run of each workdir, in order; equal basenames get " (2)", " (3)", ... appended."""
    if not workdirs:
        raise ValueError("no workdir given")
    runs, seen = [], {}
    for workdir in workdirs:
        run = load_run(workdir)
        seen[run.name] = seen.get(run.name, 0) + 1
        if seen[run.name] > 1:
            run.name = f"{run.name} ({seen[run.name]})"
        runs.append(run)
    return runs


def cumulative_seconds(records: Sequence[dict], name: str = "run") -> np.ndarray:
    """Training seconds at each record: the running sum of seconds_per_step x (step - previous
    step), the first record counted from step 0. ValueError if a record lacks seconds_per_step."""
    seconds, previous, total = [], 0, 0.0
    for record in records:
        if "seconds_per_step" not in record:
            raise ValueError(f"{name}: the record of step {record['step']} in "
                             f"{metrics_writer.TRAIN_FILE} has no seconds_per_step, which "
                             "--x=seconds needs; use --x=step")
        total += float(record["seconds_per_step"]) * max(record["step"] - previous, 0)
        seconds.append(total)
        previous = record["step"]
    return np.asarray(seconds, np.float64)


def x_values(run: Run, records: Sequence[dict], x: str) -> np.ndarray:
    """The x coordinate of each of `records` (run.train or run.held_out) for x = "step" or
    "seconds" (held-out steps mapped onto the training seconds by linear interpolation)."""
    steps = np.asarray([record["step"] for record in records], np.float64)
    if x == "step":
        return steps
    if x != "seconds":
        raise ValueError(f"x={x!r}; choose one of {X_AXES}")
    if not run.train:
        raise ValueError(f"{run.name}: --x=seconds needs {metrics_writer.TRAIN_FILE} records "
                         "(their seconds_per_step); use --x=step")
    train_steps = np.asarray([0] + [r["step"] for r in run.train], np.float64)
    train_seconds = np.concatenate([[0.0], cumulative_seconds(run.train, run.name)])
    return np.interp(steps, train_steps, train_seconds)


def series(run: Run, records: Sequence[dict], metric: str, x: str
           ) -> Optional[tuple[np.ndarray, np.ndarray]]:
    """(x, values) of the records that hold `metric`, or None if none does."""
    kept = [record for record in records if metric in record]
    if not kept:
        return None
    return x_values(run, kept, x), np.asarray([float(r[metric]) for r in kept], np.float64)


def choose_metrics(runs: Sequence[Run], metrics: Optional[Sequence[str]]) -> list[str]:
    """The metrics to draw. Named ones must each be logged by some run (ValueError listing those
    that are); None: those of DEFAULT_METRICS that some run logged."""
    logged = set().union(*(run.metric_names() for run in runs))
    if metrics is None:
        chosen = [metric for metric in DEFAULT_METRICS if metric in logged]
        if not chosen:
            raise ValueError(f"the runs log none of {list(DEFAULT_METRICS)}; name metrics with "
                             f"--metrics among {sorted(logged)}")
        return chosen
    if not metrics:
        raise ValueError("no metric named")
    missing = [metric for metric in metrics if metric not in logged]
    if missing:
        raise ValueError(f"no run logged the metric(s) {missing}; the runs log {sorted(logged)}")
    return list(dict.fromkeys(metrics))


def draw_metric(axes, runs: Sequence[Run], metric: str, x: str) -> None:
    """One subplot: each run's training curve (solid) and held-out curve (markers, dashed), in the
    run's colour (C0, C1, ... in run order)."""
    for index, run in enumerate(runs):
        colour = f"C{index % 10}"
        train = series(run, run.train, metric, x)
        if train is not None:
            axes.plot(*train, color=colour, linestyle="-", linewidth=1.2,
                      marker="." if len(train[0]) == 1 else None,  # a lone point stays visible
                      label=f"{run.name} (train)")
        held_out = series(run, run.held_out, metric, x)
        if held_out is not None:
            axes.plot(*held_out, color=colour, linestyle="--", marker="o", markersize=4,
                      linewidth=1.0, label=f"{run.name} (held-out)")
    axes.set_title(metric)
    axes.set_ylabel(metric)
    axes.grid(True, alpha=0.3)


def plot_runs(runs: Sequence[Run], output: str, metrics: Optional[Sequence[str]] = None,
              x: str = "step") -> list[str]:
    """Draws `metrics` (see choose_metrics) of `runs` against x ("step" or "seconds") into the PNG
    `output` (its folder is created); returns the metrics drawn. Uses the Agg canvas directly:
    no display, no pyplot state."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if x not in X_AXES:
        raise ValueError(f"x={x!r}; choose one of {X_AXES}")
    chosen = choose_metrics(runs, metrics)
    figure = Figure(figsize=(8, 1.0 + 3.0 * len(chosen)), layout="constrained")
    FigureCanvasAgg(figure)
    grid = figure.subplots(len(chosen), 1, sharex=True, squeeze=False)
    for axes, metric in zip(grid[:, 0], chosen):
        draw_metric(axes, runs, metric, x)
    grid[-1, 0].set_xlabel(_X_LABELS[x])
    legend = {}  # label -> handle, over every subplot: a run missing from one still gets its entry
    for axes in grid[:, 0]:
        for handle, label in zip(*axes.get_legend_handles_labels()):
            legend.setdefault(label, handle)
    figure.legend(list(legend.values()), list(legend), loc="outside upper center",
                  ncols=min(len(legend), 4), fontsize="small")
    target = paths.path(output)  # a local file or gs://
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("wb") as f:
        figure.savefig(f, format="png", dpi=100)
    return chosen


def plot_workdirs(workdirs: Sequence[str], output: str,
                  metrics: Optional[Sequence[str]] = None, x: str = "step") -> dict:
    """load_runs + plot_runs; returns {"output", "runs", "metrics", "x"} for the script to print."""
    runs = load_runs(workdirs)
    drawn = plot_runs(runs, output, metrics, x)
    return {"output": os.fspath(paths.path(output)), "runs": [run.name for run in runs],
            "metrics": drawn, "x": x}
