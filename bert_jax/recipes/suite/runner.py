"""Run a suite: every (task, seed) an ordinary fine-tuning run, then one table.

    plan = make_plan(suite, workdir, tasks="cola,rte", seeds=3, data_dir=..., init=...)
    outcome = run_suite(plan)         # writes <workdir>/suite.{json,md,png} after every run

Runs go seed by seed (every task at seed 0, then at seed 1, ...), a task after the task it
starts from (init_from). Each writes <workdir>/<task>/seed_<n>/ as experiments/finetune.py
would, and, once scored, `suite_result.json` there: the run's step and the task's metrics.

Resuming: a run with its suite_result.json is never redone (its numbers are read back; if the
suite now gives it another config, in a key that changes the run, it is reported failed, naming
the keys, rather than shown with numbers of the old config); any other resumes from its workdir
(the fine-tuning recipe restores its newest checkpoint). A run that fails (bad data, a diverged
loss, a bug) is recorded as failed with a one-line error (`<Type>: <first line>`, the traceback
in the log) and the suite goes on; a task that starts from a failed run fails too, saying so.
SIGTERM or Ctrl-C during a run saves it and stops the suite (`SuiteOutcome.signal_number`).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from typing import Any, Callable, Optional, Sequence

from absl import logging

from bert_jax.recipes import run_record
from bert_jax.recipes.finetune import kinds
from bert_jax.recipes.suite import figure, scores
from bert_jax.recipes.suite import spec as spec_lib
from bert_jax.recipes.suite.spec import Start, TaskSpec
from bert_jax.runtime import paths
from bert_jax.train.checkpoint import workdir as workdir_lib

RESULT_FILE = "suite_result.json"
SUITE_JSON, SUITE_MD, SUITE_PNG = "suite.json", "suite.md", "suite.png"


@dataclasses.dataclass
class Plan:
    """What a suite run will do, checked before any run starts (make_plan)."""

    suite: Any  # the suite ConfigDict with the command line's choices applied
    workdir: str
    specs: list[TaskSpec]  # in run order
    seeds: list[int]
    start: Start


@dataclasses.dataclass
class SuiteOutcome:
    runs: list[dict]  # {"task", "seed", "status": done | failed, "metrics", "error", ...}
    table: dict  # scores.suite_table
    signal_number: Optional[int] = None  # set when a signal stopped the suite

    @property
    def failed(self) -> list[dict]:
        return [r for r in self.runs if r["status"] == "failed"]


def make_plan(suite, workdir: str, tasks: Optional[str] = None, seeds: Optional[int] = None,
              data_dir: Optional[str] = None, init: Optional[str] = None,
              tokenizer: Optional[str] = None) -> Plan:
    """The suite with the command line's choices (None: the suite config's) applied, its tasks
    in run order, its data and start checked: an unknown task, a missing data file, a missing
    --init are errors naming the thing at fault, raised before anything is written."""
    suite = copy.deepcopy(suite)
    for key, value in (("data_dir", data_dir), ("init", init), ("seeds", seeds),
                       ("tokenizer", tokenizer)):
        if value is not None:
            suite[key] = value
    if suite.seeds < 1:
        raise ValueError(f"seeds={suite.seeds}: run at least one seed")
    specs = spec_lib.task_specs(suite)
    if not suite.get("chain_tasks", True):
        specs = {name: dataclasses.replace(s, init_from="") for name, s in specs.items()}
    order = spec_lib.selected_tasks(suite, specs, tasks)
    for name in order:
        kinds.get(specs[name].kind)
    spec_lib.check_data([specs[name] for name in order], suite.data_dir)
    start = spec_lib.resolve_start(suite.init, suite.tokenizer)
    return Plan(suite, os.fspath(paths.path(workdir)), [specs[n] for n in order],
                list(range(suite.seeds)), start)


class _Stopped(Exception):
    def __init__(self, signal_number: int):
        super().__init__(f"stopped by signal {signal_number}")
        self.signal_number = signal_number


def one_line(error: BaseException) -> str:
    """`<Type>: <the message's first line>`, at most 300 characters."""
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {message}"[:300]


def run_suite(plan: Plan, train_and_evaluate: Optional[Callable] = None,
              evaluate: Optional[Callable] = None) -> SuiteOutcome:
    """Every (task, seed) of the plan, then (and after each run) the table files. The
    fine-tuning entry points default to bert_jax.recipes.finetune's."""
    if train_and_evaluate is None or evaluate is None:
        from bert_jax.recipes import finetune
        train_and_evaluate = train_and_evaluate or finetune.train_and_evaluate
        evaluate = evaluate or finetune.evaluate
    runs: list[dict] = []
    outcome = SuiteOutcome(runs, {})
    for seed in plan.seeds:
        for spec in plan.specs:
            try:
                runs.append(_run_one(plan, spec, seed, runs, train_and_evaluate, evaluate))
            except _Stopped as stop:
                outcome.signal_number = stop.signal_number
                outcome.table = write_outputs(plan, runs)
                return outcome
            outcome.table = write_outputs(plan, runs)
    return outcome


def _run_one(plan: Plan, spec: TaskSpec, seed: int, runs: Sequence[dict],
             train_and_evaluate: Callable, evaluate: Callable) -> dict:
    directory = spec_lib.run_dir(plan.workdir, spec.name, seed)
    entry = {"task": spec.name, "seed": seed, "workdir": directory}
    saved = paths.path(directory) / RESULT_FILE
    if saved.exists():
        differences = _changed_keys(plan, spec, seed, directory)
        if differences:
            error = (f"{directory} finished with another config ({'; '.join(differences[:4])}): "
                     "use another --workdir, or remove the run's folder to run it again")
            logging.error("suite: %s seed %d failed: %s", spec.name, seed, error)
            return {**entry, "status": "failed", "error": error}
        result = paths.read_json(saved)
        logging.info("suite: %s seed %d was done (%s): not run again", spec.name, seed, saved)
        return {**entry, "status": "done", "reused": True, "step": result["step"],
                "metrics": result["metrics"]}
    source = spec.init_from
    if source and not (paths.path(spec_lib.run_dir(plan.workdir, source, seed))
                       / RESULT_FILE).exists():
        error = (f"starts from {source} seed {seed} (init_from), which has no finished run "
                 + ("(it failed)" if any(r["task"] == source and r["seed"] == seed
                                         and r["status"] == "failed" for r in runs) else
                    f"(run --tasks={source},{spec.name})"))
        logging.error("suite: %s seed %d failed: %s", spec.name, seed, error)
        return {**entry, "status": "failed", "error": error}
    logging.info("suite: %s seed %d in %s", spec.name, seed, directory)
    try:
        config = spec_lib.run_config(plan.suite, spec, seed, plan.start, plan.workdir)
        result = train_and_evaluate(config, directory)
        if result.preempted:
            raise _Stopped(result.signal_number)
        metrics = _score(plan, spec, config, directory, result.step, evaluate)
    except _Stopped:
        raise
    except Exception as e:  # noqa: BLE001 - one task's failure is recorded, the suite goes on
        logging.exception("suite: %s seed %d failed", spec.name, seed)
        return {**entry, "status": "failed", "error": one_line(e)}
    paths.write_text_atomically(os.fspath(saved), json.dumps(
        {"task": spec.name, "seed": seed, "step": result.step, "metrics": metrics}, indent=2))
    logging.info("suite: %s seed %d: %s", spec.name, seed, metrics)
    return {**entry, "status": "done", "reused": False, "step": result.step,
            "metrics": metrics}


def _changed_keys(plan: Plan, spec: TaskSpec, seed: int, directory: str) -> list[str]:
    """The keys that change a run (recipes/run_record.config_differences) in which the config the
    suite would give (task, seed) now differs from the finished run's config.json."""
    config_path = paths.path(directory) / workdir_lib.CONFIG_FILE
    if not config_path.exists():
        return []
    config = spec_lib.run_config(plan.suite, spec, seed, plan.start, plan.workdir)
    return run_record.config_differences(paths.read_json(config_path), config)


def _records(directory: str) -> list[dict]:
    path = paths.path(directory) / "predictions.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _score(plan: Plan, spec: TaskSpec, config, directory: str, step: int,
           evaluate: Callable) -> dict[str, float]:
    """The task's metrics of the run's final step: its own eval set's predictions (evaluated
    again when the run wrote none), and each extra evaluation set's, evaluated into
    <run>/evaluation/<name>/."""
    predictions = os.path.join(directory, "predictions", f"step_{step}")
    if not (paths.path(predictions) / "predictions.jsonl").exists():
        evaluate(config, directory, step, output_dir=predictions)
    records = {"": _records(predictions)}
    for name in spec_lib.extra_evals(spec, plan.suite.data_dir):
        output = os.path.join(directory, "evaluation", name)
        evaluate(spec_lib.extra_eval_config(config, spec, name, plan.suite.data_dir),
                 directory, step, output_dir=output)
        records[name] = _records(output)
    positive = spec_lib.positive_label(spec, plan.suite.data_dir)
    return {m.key: scores.metric_value(m.metric, records[m.evaluation], positive)
            for m in spec.metrics}


def write_outputs(plan: Plan, runs: Sequence[dict]) -> dict:
    """<workdir>/suite.json, suite.md and suite.png of the runs so far; returns the table."""
    excluded = spec_lib.names(plan.suite.score_excluded)
    table = scores.suite_table(plan.specs, runs, excluded)
    title = f"{plan.suite.name} suite"
    document = {"suite": plan.suite.name, "workdir": plan.workdir,
                "init": plan.start.hf_dir or plan.start.checkpoint or "random init",
                "tokenizer": plan.start.tokenizer,
                "data": plan.suite.data_dir or "tfds", "seeds": plan.seeds,
                "tasks": [s.name for s in plan.specs], "runs": list(runs),
                "rows": table["rows"], "score": table["score"]}
    paths.path(plan.workdir).mkdir(parents=True, exist_ok=True)
    paths.write_text_atomically(os.path.join(plan.workdir, SUITE_JSON),
                                json.dumps(document, indent=2))
    paths.write_text_atomically(os.path.join(plan.workdir, SUITE_MD),
                                scores.markdown(table, title))
    figure.plot_table(table, os.path.join(plan.workdir, SUITE_PNG), title)
    return table
