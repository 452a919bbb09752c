"""The parent side of the comparison: the shared inputs, worker processes for each run
(benchmarks/harness/worker.py: a calibration, then the clocked run), one run after another, and
their results.

    settings = race.Settings(...)
    shared = race.prepare_shared(settings)          # vocabulary, held-out rows, peers' blocks
    results = race.run_all(settings, shared)        # [result of each (seed, implementation)]

Runs go seed by seed, and within a seed implementation by implementation, so that a slow drift
of the machine's speed touches every implementation alike. Each worker's output goes to
<output_dir>/logs/<implementation>_seed<seed>.log (smoke runs, `run_smoke`: every run in one
worker process, logged to <output_dir>/logs/smoke_runs.log).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

from benchmarks.harness import worker
from benchmarks.peers import IMPLEMENTATIONS, inputs

CALIBRATE = "benchmarks.peers.clocked:calibrate_job"
RUN = "benchmarks.peers.clocked:run_job"
SMOKE = "benchmarks.peers.clocked:smoke_runs_job"  # smoke runs: every run in one process
MODEL_SIZES = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything the runs share (the flags of benchmarks/compare_pretraining.py); a size of
    None in `sizes` is the preset's."""

    corpus: str
    data_dir: str
    output_dir: str
    preset: str
    sizes: dict  # hidden_size, num_hidden_layers, num_attention_heads, intermediate_size
    vocab_size: int
    budget_seconds: float
    batch_size: int
    learning_rate: float
    warmup_fraction: float
    seeds: tuple[int, ...]
    implementations: tuple[str, ...]
    eval_points: int
    eval_rows: int
    explicit: tuple[str, ...] = ()  # of batch_size, learning_rate, warmup_fraction: given by flag
    torch_threads: int = 0  # hf_torch's CPU threads; 0: torch's default

    def __post_init__(self):
        unknown = [name for name in self.implementations if name not in IMPLEMENTATIONS]
        if unknown or not self.implementations:
            raise ValueError(f"implementations {list(self.implementations)}: choose one or more "
                             f"of {list(IMPLEMENTATIONS)}")
        if len(set(self.implementations)) != len(self.implementations):
            raise ValueError(f"an implementation is named twice in {list(self.implementations)}")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds {list(self.seeds)}: give one or more distinct seeds")
        for name, least in (("budget_seconds", 0), ("batch_size", 0), ("learning_rate", 0),
                            ("eval_points", 0)):
            if not getattr(self, name) > least:
                raise ValueError(f"{name}={getattr(self, name)} must be positive")
        if not 0.0 <= self.warmup_fraction <= 1.0:
            raise ValueError(f"warmup_fraction={self.warmup_fraction} must be in [0, 1]")
        if self.torch_threads < 0:
            raise ValueError(f"torch_threads={self.torch_threads} must be >= 0 (0: torch's "
                             "default)")
        if self.eval_rows < 0:
            raise ValueError(f"eval_rows={self.eval_rows} must be >= 0 (0: every held-out row)")


def model_config(settings: Settings, vocab_size: int):
    """The classic BertConfig of the comparison's size (the peers' model, ours_classic's)."""
    from bert_jax.config.bert import BertConfig  # pylint: disable=import-outside-toplevel
    sizes = {k: v for k, v in settings.sizes.items() if v is not None}
    return BertConfig.preset(settings.preset, vocab_size=vocab_size, **sizes)


def check_sizes(settings: Settings) -> None:
    """ConfigError (a ValueError naming the fault) where a model of the comparison's size cannot
    be built: the classic BertConfig, and ours_modern's ModernBERT when it runs."""
    cfg = model_config(settings, settings.vocab_size)
    if "ours_modern" in settings.implementations:
        from benchmarks.peers import ours_mlm  # pylint: disable=import-outside-toplevel
        ours_mlm.check_modern_size(settings.preset, {k: getattr(cfg, k) for k in MODEL_SIZES},
                                   settings.vocab_size)


def train_settings() -> dict:
    """The optimizer every classic recipe shares: the project's AdamW block (BERT's values)."""
    from bert_jax.config import run as run_config
    block = run_config.optimizer_block().to_dict()
    return {k: block[k] for k in ("b1", "b2", "eps", "weight_decay", "clip_norm")}


def prepare_shared(settings: Settings) -> dict:
    """The vocabulary, held-out rows and blocks; returns what the specs and the report need."""
    from bert_jax.data.tokenizers import load as tokenizer  # pylint: disable=import-outside-toplevel

    check_sizes(settings)  # a bad size fails before anything long runs
    shared_dir = os.path.join(settings.output_dir, "shared")
    os.makedirs(shared_dir, exist_ok=True)
    vocab_path = inputs.prepare_vocabulary(settings.corpus, settings.data_dir,
                                           settings.vocab_size)
    vocab_size = tokenizer.load_tokenizer(vocab_path).vocab_size
    cfg = model_config(settings, vocab_size)
    heldout = inputs.write_heldout(settings.corpus, settings.data_dir, vocab_path,
                                   os.path.join(shared_dir, "heldout.npz"), settings.eval_rows)
    blocks = {}
    if {"hf_flax", "hf_torch"} & set(settings.implementations):
        blocks = inputs.write_blocks(settings.corpus, settings.data_dir, vocab_path,
                                     os.path.join(shared_dir, "blocks.npy"))
    return {"vocab_path": vocab_path, "vocab_size": vocab_size, "heldout": heldout,
            "blocks": blocks, "model": {k: getattr(cfg, k) for k in MODEL_SIZES},
            "hf_config": {k: v for k, v in cfg.to_hf_dict().items() if k != "architectures"}}


def run_spec(settings: Settings, shared: dict, implementation: str, seed: int) -> dict:
    """The spec of one run (benchmarks/peers/clocked.py reads it)."""
    name = f"{implementation}_seed{seed}"
    run_dir = os.path.join(os.path.abspath(settings.output_dir), "runs", name)
    return {
        "implementation": implementation, "seed": seed, "run_dir": run_dir,
        "result_path": os.path.join(run_dir, "result.json"),
        "calibration_path": os.path.join(run_dir, "calibration.json"),
        "torch_threads": settings.torch_threads,
        "budget_seconds": settings.budget_seconds, "eval_points": settings.eval_points,
        "corpus": settings.corpus, "data_dir": os.path.abspath(settings.data_dir),
        "vocab_path": shared["vocab_path"], "vocab_size": shared["vocab_size"],
        "heldout_path": shared["heldout"]["path"], "heldout_sha256": shared["heldout"]["sha256"],
        "blocks_path": shared["blocks"].get("path", ""),
        "model": {"preset": settings.preset, **shared["model"]},
        "hf_config": shared["hf_config"],
        "train": {"batch_size": settings.batch_size, "learning_rate": settings.learning_rate,
                  "warmup_fraction": settings.warmup_fraction, "optimizer": train_settings()},
        "explicit": list(settings.explicit),
    }


def run_one(spec: dict, log_path: str, timeout: Optional[float] = None) -> dict:
    """Runs one race run, its calibration then its clocked run, each in a worker process
    (benchmarks/harness/worker.py, jobs of benchmarks/peers/clocked.py), both logged to `log_path`;
    returns the clocked run's result (WorkerError if a process fails)."""
    run = f"{spec['implementation']} (seed {spec['seed']})"
    spec_path = os.path.join(spec["run_dir"], "spec.json")
    with open(log_path, "w", encoding="utf-8"):
        pass  # a fresh log for each run
    worker.run({**spec, "job": CALIBRATE, "result_path": spec["calibration_path"]}, spec_path,
               log_path, f"{run}: calibration", timeout)
    return worker.run({**spec, "job": RUN}, spec_path, log_path, f"{run}: clocked run",
                      timeout)


def run_smoke(specs: list[dict], log_path: str, result_path: str,
              timeout: Optional[float] = None) -> list[dict]:
    """Smoke runs only: every run of `specs`, its calibration then its clocked run, one after
    another in ONE worker process (clocked.smoke_runs_job), logged to `log_path`; their results
    in order. Compilation is then not cold, imports are shared and torch and JAX share the
    process: the seconds are not comparable measurements."""
    os.makedirs(os.path.dirname(os.path.abspath(result_path)), exist_ok=True)
    with open(log_path, "w", encoding="utf-8"):
        pass
    spec_path = os.path.join(os.path.dirname(os.path.abspath(result_path)), "smoke_spec.json")
    return worker.run({"job": SMOKE, "runs": specs, "result_path": result_path}, spec_path,
                      log_path, "the smoke runs (one process)", timeout)["results"]


def run_all(settings: Settings, shared: dict, report=print, one_process: bool = False
            ) -> list[dict]:
    """Every (seed, implementation) run, one process at a time; `report` gets a line per run.
    one_process (smoke runs only, `run_smoke`): all of them in one worker process, logged to
    <output_dir>/logs/smoke_runs.log."""
    log_dir = os.path.join(settings.output_dir, "logs")
    os.makedirs(log_dir, exist_ok=True)
    specs = [run_spec(settings, shared, implementation, seed)
             for seed in settings.seeds for implementation in settings.implementations]
    if one_process:
        results = run_smoke(specs, os.path.join(log_dir, "smoke_runs.log"),
                            os.path.join(os.path.abspath(settings.output_dir), "runs",
                                         "smoke_results.json"),
                            timeout=_timeout(settings) * len(specs))
        for result in results:
            _report_run(result, report)
        return results
    results = []
    for spec in specs:
        log_path = os.path.join(log_dir, f"{spec['implementation']}_seed{spec['seed']}.log")
        results.append(run_one(spec, log_path, timeout=_timeout(settings)))
        _report_run(results[-1], report)
    return results


def _report_run(result: dict, report) -> None:
    last = result["evaluations"][-1]
    report(f"{result['implementation']} seed {result['seed']}: accuracy {last['accuracy']:.4f}, "
           f"loss {last['loss']:.4f} after {last['steps']} steps in {last['seconds']:.1f} s")


def _timeout(settings: Settings) -> float:
    """A worker that runs this long is stuck: the budget, calibration, evaluations and start-up
    fit well inside it."""
    return 10 * settings.budget_seconds + 900
