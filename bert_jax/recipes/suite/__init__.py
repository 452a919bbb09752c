"""Suites: a benchmark's tasks fine-tuned seed by seed, each (task, seed) an ordinary fine-tuning
run, and one table of their numbers (experiments/suite.py; a suite is a config file such as
experiments/configs/glue.py).

    spec.py     the suite config's tasks (TaskSpec) and the run config of one (task, seed)
    scores.py   metrics from prediction records, medians and spreads over seeds, the suite
                score: pure functions
    figure.py   the table as a PNG
    runner.py   make_plan (checks before anything runs), run_suite (resumable), write_outputs
"""

from bert_jax.recipes.suite.runner import Plan, SuiteOutcome, make_plan, run_suite

__all__ = ["Plan", "SuiteOutcome", "make_plan", "run_suite"]
