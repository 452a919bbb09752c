"""One run of one implementation against the clock: the two jobs of the race's worker processes
(benchmarks/harness/worker.py), each in a fresh process, one after the other:

    calibrate_job(spec)  -> spec["result_path"] (the race's calibration_path): the planned steps
    run_job(spec)        -> spec["result_path"]: the evaluations along the clock, the description

The spec (written by benchmarks/peers/race.py) names the implementation, the seed, the shared
inputs and the settings. The two jobs run in two fresh processes so that the clocked run starts
as cold as any training run (no compilation cached by the calibration).

What the clock counts. An implementation has the same five calls (`Implementation`). The clock
runs through `init` (parameters and optimizer state) and every `train_step` (next batch, masking
included, one optimizer step; the first one compiles): compilation is on the clock. It stops for
every evaluation. Outside it: starting Python and importing the framework, `prepare` (opening the
data stream, building the optimizer), and the calibration.

Calibration. The learning rate decays linearly to 0 at the last step, so each run must know how
many steps fit its budget. Before the clocked run, a calibration process runs the implementation
for a few steps (fresh state, compilation included) and plans total_steps = 1 + (budget - time
to the end of the first step) / (seconds per later step). The clocked run then starts from
scratch in a new process.

Evaluation points: budget x k / eval_points, k = 1 .. eval_points. After each step the clock is
read; once it passes a point the step in flight is awaited, the clock stopped, and the held-out
rows scored (every point passed by then gets that evaluation). Training stops at the budget or
at the planned steps, whichever comes first; points not yet reached then get the final
parameters' evaluation, at the clock's final reading.
"""

from __future__ import annotations

import json
import time
from typing import Protocol

from benchmarks import peers
from benchmarks.peers import heldout as heldout_lib

CALIBRATION_STEPS = 10
CALIBRATION_FRACTION = 0.1  # of the budget, at most, spent timing steps after the first
PROVISIONAL_STEPS = 1000  # the schedule's length while calibrating (the timing ignores it)


class Implementation(Protocol):
    """What the harness calls; every implementation has these five and `describe`."""

    rows_per_step: int

    def prepare(self, total_steps: int) -> None:
        """Off the clock: the data stream from its start, the optimizer for total_steps."""

    def init(self) -> None:
        """On the clock: fresh parameters and optimizer state."""

    def train_step(self) -> None:
        """On the clock: the next batch and one optimizer step; at most one step may still be
        running when it returns (the next batch is made while the previous step computes)."""

    def sync(self) -> None:
        """Waits for the step in flight."""

    def evaluate(self, rows: heldout_lib.Heldout) -> dict[str, float]:
        """{"accuracy", "loss", "masked_tokens"}: the current parameters on the held-out rows,
        accuracy and cross-entropy over the masked tokens, the count of masked tokens scored."""

    def describe(self) -> dict:
        """The hyper-parameters in use and the parameter count, for the report."""


class Clock:
    """Seconds counted only while running."""

    def __init__(self):
        self.total, self.since = 0.0, None

    def start(self) -> None:
        self.since = time.perf_counter()

    def stop(self) -> None:
        self.total += time.perf_counter() - self.since
        self.since = None

    def seconds(self) -> float:
        return self.total + (time.perf_counter() - self.since if self.since is not None else 0.0)


def calibrate(impl: Implementation, budget: float) -> dict:
    """{"first_step_seconds", "seconds_per_step", "timed_steps", "planned_steps"} (docstring)."""
    impl.prepare(PROVISIONAL_STEPS)
    start = time.perf_counter()
    impl.init()
    impl.train_step()
    impl.sync()
    first = time.perf_counter() - start
    start, timed = time.perf_counter(), 0
    while timed == 0 or (timed < CALIBRATION_STEPS
                         and time.perf_counter() - start < CALIBRATION_FRACTION * budget):
        impl.train_step()
        timed += 1
    impl.sync()
    per_step = (time.perf_counter() - start) / timed
    planned = 1 + max(int((budget - first) / per_step), 0)
    return {"first_step_seconds": first, "seconds_per_step": per_step, "timed_steps": timed,
            "planned_steps": planned}


def _evaluation(impl: Implementation, rows: heldout_lib.Heldout, clock: Clock, steps: int
                ) -> dict:
    start = time.perf_counter()
    scores = impl.evaluate(rows)
    return {"seconds": clock.seconds(), "steps": steps, "examples": steps * impl.rows_per_step,
            **scores, "eval_seconds": time.perf_counter() - start}


def run_against_clock(impl: Implementation, rows: heldout_lib.Heldout, budget: float,
                      eval_points: int, planned_steps: int) -> list[dict]:
    """The evaluations at each point (module docstring): dicts with point_seconds, seconds,
    steps, examples, accuracy, loss, masked_tokens, eval_seconds."""
    points = [budget * k / eval_points for k in range(1, eval_points + 1)]
    impl.prepare(planned_steps)
    evaluations: list[dict] = []
    clock, steps = Clock(), 0
    clock.start()
    impl.init()
    while steps < planned_steps and clock.seconds() < budget:
        impl.train_step()
        steps += 1
        if len(evaluations) < len(points) and clock.seconds() >= points[len(evaluations)]:
            impl.sync()
            clock.stop()
            record = _evaluation(impl, rows, clock, steps)
            while len(evaluations) < len(points) and record["seconds"] >= points[len(evaluations)]:
                evaluations.append({"point_seconds": points[len(evaluations)], **record})
            clock.start()
    impl.sync()
    clock.stop()
    if len(evaluations) < len(points):
        record = _evaluation(impl, rows, clock, steps)
        evaluations += [{"point_seconds": p, **record} for p in points[len(evaluations):]]
    return evaluations


def calibrate_job(spec: dict) -> dict:
    """The job of the calibration process: `calibrate` of a fresh implementation."""
    return calibrate(peers.make(spec["implementation"], spec), spec["budget_seconds"])


def run_job(spec: dict) -> dict:
    """The job of the clocked process: the run planned by the calibration (its
    spec["calibration_path"]) scored on the held-out rows, and the implementation's description."""
    with open(spec["calibration_path"], encoding="utf-8") as f:
        planned = json.load(f)
    impl = peers.make(spec["implementation"], spec)
    rows = heldout_lib.load(spec["heldout_path"], spec["heldout_sha256"])
    evaluations = run_against_clock(impl, rows, spec["budget_seconds"], spec["eval_points"],
                                    planned["planned_steps"])
    return {"implementation": spec["implementation"], "seed": spec["seed"],
            "calibration": planned, "evaluations": evaluations, **impl.describe()}


def calibrate_then_run_job(spec: dict) -> dict:
    """Both jobs in one process, for smoke runs only (`smoke_runs_job`): the calibration's
    result written where run_job reads it, then the clocked run, whose compilation is then no
    longer cold (not a comparable measurement)."""
    import resource  # pylint: disable=import-outside-toplevel

    planned = calibrate_job(spec)
    planned["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    with open(spec["calibration_path"], "w", encoding="utf-8") as f:
        json.dump(planned, f, indent=1)
    return run_job(spec)


def smoke_runs_job(spec: dict) -> dict:
    """Smoke runs only (compare_pretraining.py --smoke_one_process): every run of spec["runs"]
    (run specs), each `calibrate_then_run_job`, one after another in this one process, so that
    the imports are shared; {"results": [each run's result]}. Compilation is not cold and torch
    and JAX share the process: the seconds are not comparable measurements."""
    import os  # pylint: disable=import-outside-toplevel

    results = []
    for run in spec["runs"]:
        os.makedirs(run["run_dir"], exist_ok=True)
        results.append(calibrate_then_run_job(run))
        print(f"done: {run['implementation']} seed {run['seed']}", flush=True)
    return {"results": results}
