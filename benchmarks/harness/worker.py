"""One process per measured run: the worker protocol of every harness in benchmarks/
(benchmark.py, one process per implementation; peers/race.py, two per run of the race).

    result = worker.run(spec, spec_path, log_path, label)   # the parent: one process, to its end
    python -m benchmarks.harness.worker SPEC.json                   # the child

SPEC.json is a JSON object with at least

    "job"          "package.module:function", called in the child as function(spec) -> dict
    "result_path"  where the child writes that dict, with "peak_rss_mb" (the child's peak
                   resident memory) added, as JSON

and whatever the job reads. The child is a fresh interpreter: torch and JAX in one process slow
each other down, and a fresh process starts as cold as a training run does (nothing compiled or
cached in memory before). It runs with the repository root as its working directory and on its
PYTHONPATH (a checkout runs without being installed), its stdout and stderr appended to
`log_path`. The protocol itself imports only the job's module, so a torch job never imports JAX.

A child that exits non-zero, or runs past `timeout`, raises WorkerError in the parent: the
message names the run (`label`), the exit status and the log's last line and path; `log_tail`
holds the end of the log.
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import subprocess
import sys
from typing import Optional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TAIL_CHARS = 3000


class WorkerError(RuntimeError):
    """A worker process failed (module docstring)."""

    def __init__(self, message: str, log_tail: str = ""):
        super().__init__(message)
        self.log_tail = log_tail


def run(spec: dict, spec_path: str, log_path: str, label: str,
        timeout: Optional[float] = None) -> dict:
    """Writes `spec` to spec_path, runs one child on it to its end and returns its result
    (module docstring)."""
    for path in (spec_path, log_path, spec["result_path"]):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(spec_path, "w", encoding="utf-8") as f:
        json.dump(spec, f, indent=1)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p))
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"----- {spec['job']}\n")
        log.flush()
        try:
            done = subprocess.run([sys.executable, "-m", "benchmarks.harness.worker", spec_path],
                                  stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env,
                                  timeout=timeout, check=False)
        except subprocess.TimeoutExpired as e:
            raise WorkerError(f"{label}: the process was still running after {timeout:.0f} s "
                              f"and was stopped (its log: {log_path})", _tail(log_path)) from e
    if done.returncode != 0:
        tail = _tail(log_path)
        lines = [line.strip() for line in tail.splitlines() if line.strip()]
        raise WorkerError(f"{label}: the process failed with exit status {done.returncode}: "
                          f"{lines[-1] if lines else '(no output)'} (its log: {log_path})", tail)
    with open(spec["result_path"], encoding="utf-8") as f:
        return json.load(f)


def _tail(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()[-TAIL_CHARS:]


def main(argv: list[str]) -> None:
    """argv: [program, SPEC.json] (module docstring)."""
    with open(argv[1], encoding="utf-8") as f:
        spec = json.load(f)
    module, _, function = spec["job"].partition(":")
    result = getattr(importlib.import_module(module), function)(spec)
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    with open(spec["result_path"], "w", encoding="utf-8") as f:
        json.dump({**result, "peak_rss_mb": round(peak_rss_mb, 1)}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv)
