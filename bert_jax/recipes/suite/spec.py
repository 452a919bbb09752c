"""A suite's tasks as its config file describes them, and the fine-tuning run config of one
(task, seed).

A suite config (e.g. experiments/configs/glue.py) is a ConfigDict:

    name          the suite's name ("glue"), for the table's title
    tasks         "cola,sst2,...": the tasks run when --tasks names none, in this order
    seeds         how many seeds each task runs (0, 1, ... n-1: config.seed of the run)
    data_dir      the folder of the benchmark's own release (GLUE: CoLA/, SST-2/, ...); empty:
                  each task's TFDS name
    init          where every run starts: a Hugging Face folder, one of our checkpoints folders
                  (or a step of one), or a workdir holding checkpoints/; empty: random init
    tokenizer     a vocab.txt, tokenizer.json or folder; empty: the init's (a Hugging Face
                  folder's, or the config.json of the workdir `init` names)
    score_excluded  "wnli": tasks shown in the table but left out of the suite score
    chain_tasks   True: a task with init_from starts from that task's run of the same seed;
                  False: every task starts from `init`
    run           the fine-tuning run config every task starts from (run_config.finetune_config)
    specs.<task>  one task (TaskSpec's fields), with `run`: the keys that task sets over `run`
                  (learning_rate, epochs, batch_size, ...)

Every run is an ordinary fine-tuning run: its config.json, task.json, checkpoints and
predictions are what experiments/finetune.py would write, so evaluate.py and predict.py work on
it.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from typing import Any, Mapping, Optional, Sequence

import ml_collections

from bert_jax.runtime import paths

# Metric names a task may ask for (bert_jax.recipes.suite.scores computes them from the run's
# predictions), and how the table labels them.
METRIC_LABELS = {"mcc": "MCC", "accuracy": "acc", "f1": "F1", "pearson": "Pearson",
                 "spearman": "Spearman"}
CLASS_METRICS = ("mcc", "accuracy", "f1")
SCORE_METRICS = ("pearson", "spearman")


@dataclasses.dataclass(frozen=True)
class MetricSpec:
    """One number of a task: `metric` on the evaluation set `evaluation` ("" for the run's own
    eval set, else the name of one of the task's extra evaluation sets)."""

    metric: str
    evaluation: str = ""

    @property
    def key(self) -> str:
        return f"{self.evaluation}/{self.metric}" if self.evaluation else self.metric


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """One task of a suite: where its data is, how to read it, what it reports, how it runs."""

    name: str
    kind: str  # classification | regression (a kind of bert_jax.recipes.finetune)
    metrics: tuple[MetricSpec, ...]
    folder: str = ""  # under the suite's data_dir
    train: str = "train.tsv"
    eval: str = "dev.tsv"
    evals: tuple[tuple[str, str], ...] = ()  # (name, file) of extra evaluation sets
    eval_name: str = ""  # the run's own eval set in labels ("matched" for MNLI)
    format: str = "tsv"  # config.data.format
    text_column: str = "sentence"
    text_pair_column: str = ""
    label_column: str = "label"
    positive_label: str = "1"  # the class whose F1 is reported (files)
    tfds_name: str = ""
    tfds_eval_split: str = "validation"
    tfds_evals: tuple[tuple[str, str], ...] = ()  # (name, split)
    tfds_positive_label: str = ""  # the class whose F1 is reported (TFDS class names)
    init_from: str = ""  # start from this task's fine-tuned encoder, same seed
    run: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def metric_label(self, metric: MetricSpec) -> str:
        evaluation = metric.evaluation or self.eval_name
        label = METRIC_LABELS.get(metric.metric, metric.metric)
        return f"{evaluation} {label}" if evaluation else label


def _pairs(text: str, what: str) -> tuple[tuple[str, str], ...]:
    """"a=x,b=y" -> (("a", "x"), ("b", "y"))."""
    pairs = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise ValueError(f"{what}={text!r}: expected name=value pairs separated by commas")
        pairs.append((name.strip(), value.strip()))
    return tuple(pairs)


def names(text: str) -> list[str]:
    """"a, b,c" -> ["a", "b", "c"]."""
    return [part.strip() for part in text.split(",") if part.strip()]


def task_spec(name: str, block: Mapping[str, Any]) -> TaskSpec:
    """The TaskSpec of the suite config's specs.<name>; ValueError naming a bad field."""
    fields = {f.name for f in dataclasses.fields(TaskSpec)}
    block = dict(block.items())
    unknown = sorted(set(block) - fields)
    if unknown:
        raise ValueError(f"suite task {name!r}: unknown field(s) {unknown}; the fields are "
                         f"{sorted(fields - {'name'})}")
    metrics = []
    for item in names(block.pop("metrics", "")):
        evaluation, _, metric = item.rpartition("/")
        if metric not in METRIC_LABELS:
            raise ValueError(f"suite task {name!r}: metric {metric!r} is unknown; choose from "
                             f"{sorted(METRIC_LABELS)}")
        metrics.append(MetricSpec(metric, evaluation))
    if not metrics:
        raise ValueError(f"suite task {name!r}: no metrics")
    run = block.pop("run", {})
    run = run.to_dict() if isinstance(run, ml_collections.ConfigDict) else dict(run)
    spec = TaskSpec(name=name, metrics=tuple(metrics), run=run,
                    evals=_pairs(block.pop("evals", ""), f"{name}.evals"),
                    tfds_evals=_pairs(block.pop("tfds_evals", ""), f"{name}.tfds_evals"),
                    **block)
    wrong = [m.metric for m in spec.metrics
             if m.metric not in (SCORE_METRICS if spec.kind == "regression" else CLASS_METRICS)]
    if wrong:
        raise ValueError(f"suite task {name!r}: metric(s) {wrong} do not fit kind {spec.kind!r}")
    known_evals = {n for n, _ in spec.evals} | {n for n, _ in spec.tfds_evals}
    missing = sorted({m.evaluation for m in spec.metrics if m.evaluation} - known_evals)
    if missing:
        raise ValueError(f"suite task {name!r}: metrics on evaluation set(s) {missing} that "
                         "neither evals nor tfds_evals name")
    return spec


def task_specs(suite) -> dict[str, TaskSpec]:
    """Every task the suite config describes, by name."""
    return {name: task_spec(name, block) for name, block in suite.specs.items()}


def selected_tasks(suite, specs: Mapping[str, TaskSpec], requested: Optional[str]) -> list[str]:
    """The tasks to run, in run order: `requested` ("cola,rte"; None or "": suite.tasks), each
    task after the one it starts from (init_from). An unknown name is a ValueError naming it."""
    chosen = names(requested or suite.tasks)
    unknown = [n for n in chosen if n not in specs]
    if unknown:
        raise ValueError(f"unknown task(s) {unknown}; the suite {suite.name!r} has "
                         f"{sorted(specs)}")
    if not chosen:
        raise ValueError("no tasks to run")
    for name in chosen:
        source = specs[name].init_from
        if source and source not in specs:
            raise ValueError(f"suite task {name!r}: init_from={source!r} is not a task of the "
                             "suite")
    ordered: list[str] = []

    def place(name: str, trail: tuple[str, ...]) -> None:
        if name in ordered:
            return
        if name in trail:
            raise ValueError(f"suite tasks start from each other in a circle: {trail + (name,)}")
        source = specs[name].init_from
        if source and source in chosen:
            place(source, trail + (name,))
        ordered.append(name)

    for name in chosen:
        place(name, ())
    return ordered


@dataclasses.dataclass(frozen=True)
class Start:
    """Where a suite's runs start: init.hf_dir or init.checkpoint, and the tokenizer."""

    hf_dir: str = ""
    checkpoint: str = ""
    tokenizer: str = ""


def resolve_start(init: str, tokenizer: str = "") -> Start:
    """The Start of `init` (a Hugging Face folder, a workdir with checkpoints/, a checkpoints
    folder or one step of it; "": random init) and `tokenizer` ("": the init's own)."""
    if not init:
        if not tokenizer:
            raise ValueError("no --init and no tokenizer: a random-init suite needs the "
                             "suite's tokenizer (a vocab.txt, tokenizer.json or folder)")
        return Start(tokenizer=tokenizer)
    path = paths.path(init)
    if not path.exists():
        raise FileNotFoundError(f"--init={init}: no such folder")
    if (path / "checkpoints").is_dir():
        return Start(checkpoint=os.fspath(path / "checkpoints"),
                     tokenizer=tokenizer or _workdir_tokenizer(os.fspath(path)))
    if (path / "config.json").exists() and not (path / "metadata").exists():
        return Start(hf_dir=os.fspath(path), tokenizer=tokenizer or os.fspath(path))
    if not tokenizer:
        raise ValueError(f"--init={init} is a checkpoints folder: name the tokenizer its runs "
                         "used (the suite's tokenizer), or give the run's workdir instead")
    return Start(checkpoint=os.fspath(path), tokenizer=tokenizer)


def _workdir_tokenizer(workdir: str) -> str:
    """The vocabulary a training run used, as a path: its tokenizer.path or init.hf_dir, or the
    demo corpus's vocabulary of a pre-training run."""
    from bert_jax.config import settings
    from bert_jax.recipes import run_record
    run = settings.typed(run_record.load_config(workdir))
    if run.tokenizer.path or run.init.hf_dir:
        return run.tokenizer.path or run.init.hf_dir
    if run.recipe == "pretrain":
        from bert_jax.data.pretraining import pipeline as pretraining
        from bert_jax.recipes import inputs
        return os.fspath(pretraining.resolve_vocab_path(
            inputs.pretraining_data_config(run, workdir)))
    raise ValueError(f"--init={workdir}: its config.json names no tokenizer; set the suite's "
                     "tokenizer")


def data_files(spec: TaskSpec, data_dir: str) -> dict[str, str]:
    """{"train": path, "eval": path, <extra eval name>: path} of a task read from files."""
    folder = os.path.join(data_dir, spec.folder)
    files = {"train": os.path.join(folder, spec.train), "eval": os.path.join(folder, spec.eval)}
    files.update((name, os.path.join(folder, file)) for name, file in spec.evals)
    return files


def check_data(specs: Sequence[TaskSpec], data_dir: str) -> None:
    """FileNotFoundError naming the first missing file of the tasks (before any run starts);
    a task without a folder or TFDS name is a ValueError."""
    for spec in specs:
        if data_dir:
            for path in data_files(spec, data_dir).values():
                if not os.path.isfile(path):
                    raise FileNotFoundError(f"task {spec.name}: {path}: no such file (the "
                                            f"GLUE layout: {spec.folder}/{spec.train}, ...)")
        elif not spec.tfds_name:
            raise ValueError(f"task {spec.name}: no data_dir (--glue_dir) and no tfds_name")


def _overlay(config: ml_collections.ConfigDict, values: Mapping[str, Any], where: str) -> None:
    for key, value in values.items():
        if key not in config:
            raise ValueError(f"{where}: {key!r} is not a run config key")
        if isinstance(value, Mapping):
            _overlay(config[key], value, f"{where}.{key}")
        else:
            config[key] = value


def run_config(suite, spec: TaskSpec, seed: int, start: Start, workdir: str
               ) -> ml_collections.ConfigDict:
    """The fine-tuning config of (spec, seed): the suite's run config, the task's own keys over
    it, its data, its seed and its start (another task's run of the same seed for init_from)."""
    config = copy.deepcopy(suite.run)
    config.task = spec.kind
    _overlay(config, spec.run, f"suite task {spec.name!r} run")
    config.seed = seed
    data = config.data
    data.format = spec.format
    if suite.data_dir:
        files = data_files(spec, suite.data_dir)
        data.train_path, data.eval_path = files["train"], files["eval"]
        data.text_column, data.text_pair_column = spec.text_column, spec.text_pair_column
        data.label_column = spec.label_column
        data.tfds_name = ""
    else:
        data.tfds_name, data.tfds_eval_split = spec.tfds_name, spec.tfds_eval_split
        data.train_path = data.eval_path = ""
    config.init.hf_dir, config.init.checkpoint = start.hf_dir, start.checkpoint
    config.init.with_heads = False
    config.tokenizer.path = start.tokenizer
    if spec.init_from:
        config.init.hf_dir = ""
        config.init.checkpoint = os.path.join(run_dir(workdir, spec.init_from, seed),
                                              "checkpoints")
    return config


def extra_eval_config(config: ml_collections.ConfigDict, spec: TaskSpec, name: str,
                      data_dir: str) -> ml_collections.ConfigDict:
    """The run's config with its eval set replaced by the extra evaluation set `name`."""
    config = copy.deepcopy(config)
    if data_dir:
        config.data.eval_path = data_files(spec, data_dir)[name]
    else:
        config.data.tfds_eval_split = dict(spec.tfds_evals)[name]
    return config


def extra_evals(spec: TaskSpec, data_dir: str) -> list[str]:
    """The names of the task's extra evaluation sets for its data source."""
    return [name for name, _ in (spec.evals if data_dir else spec.tfds_evals)]


def positive_label(spec: TaskSpec, data_dir: str) -> str:
    return spec.positive_label if data_dir else (spec.tfds_positive_label or spec.positive_label)


def run_dir(workdir: str, task: str, seed: int) -> str:
    """<workdir>/<task>/seed_<n>: the fine-tuning workdir of one (task, seed)."""
    return os.path.join(workdir, task, f"seed_{seed}")
