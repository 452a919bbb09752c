"""What a run is told, typed and checked: a run's ConfigDict read once, at the recipe's entry,
into frozen dataclasses whose construction checks their values.

    run = settings.read(config, "pretrain")   # the schema check, then RunSettings
    mesh = run.mesh.make()                    # MeshSpec (bert_jax.config.specs)
    run.model, run.init, run.tokenizer        # ModelSpec, InitSpec, TokenizerSpec
    run.optimizer, run.loop                   # OptimizerConfig, LoopConfig (of total_steps)
    run.data                                  # PretrainDataSpec | FinetuneDataSpec
    run.record                                # the plain dict that config.json holds

A run counted in epochs gets its optimizer and loop settings from run.for_steps(total) once the
data is read. train/ takes OptimizerConfig and LoopConfig from here (with the choices they
check: DROPOUT_RNGS, fsdp CHOICES) and never reads a ConfigDict; nor do data/, model/ and
convert/. The schema (defaults and meanings) is bert_jax/config/run.py.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any, Mapping, Optional

import jax
from jax.sharding import Mesh

from bert_jax.config import run as run_config
from bert_jax.config import run_keys as run_config_keys
from bert_jax.config import specs
from bert_jax.config.bert import BertConfig
from bert_jax.runtime import sharding

Config = Any  # an ml_collections.ConfigDict (imported where configs are read, not here)

# Random-bit generators for dropout: "hash" (a counter hash, bert_jax.train.dropout_bits: the
# cheapest to compile and run, the same bits on any mesh and backend), "threefry" (JAX's default
# generator: the same on any mesh and backend) or "rbg" (XLA's RngBitGenerator: the same bits for
# the same program, so resumption stays exact, but not necessarily under another sharding or
# backend).
DROPOUT_RNGS = ("hash", "threefry", "rbg")

CHOICES = ("xla", "explicit")  # config.fsdp_collectives

OPTIMIZERS = ("adamw", "stable_adamw", "lamb")

DECAYS = ("linear", "cosine", "constant", "wsd", "one_cycle")


_OPTIMIZER = {key: entry.default for key, entry in run_config.OPTIMIZER.items()}


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    """Hyper-parameters of the optimizer and its learning-rate schedule: the run config's
    learning_rate and optimizer block (bert_jax/config/run.py: their defaults and meanings),
    over total_steps with warmup_steps of warm-up (defaults: BERT's 1M and 10k)."""

    learning_rate: float = run_config.LEARNING_RATE.default
    total_steps: int = 1_000_000
    warmup_steps: int = 10_000
    decay: str = _OPTIMIZER["decay"]  # DECAYS
    end_learning_rate_ratio: float = _OPTIMIZER["end_learning_rate_ratio"]
    decay_fraction: float = _OPTIMIZER["decay_fraction"]
    name: str = _OPTIMIZER["name"]  # OPTIMIZERS
    b1: float = _OPTIMIZER["b1"]
    b2: float = _OPTIMIZER["b2"]
    eps: float = _OPTIMIZER["eps"]
    weight_decay: float = _OPTIMIZER["weight_decay"]
    clip_norm: float = _OPTIMIZER["clip_norm"]

    def __post_init__(self):
        if self.name not in OPTIMIZERS:
            raise ValueError(f"optimizer name={self.name!r} is unknown; choose one of {OPTIMIZERS}")
        if self.decay not in DECAYS:
            raise ValueError(f"optimizer decay={self.decay!r} is unknown; choose one of {DECAYS}")
        if self.total_steps <= 0:
            raise ValueError(f"optimizer total_steps={self.total_steps} must be positive")
        if not 0 <= self.warmup_steps <= self.total_steps:
            raise ValueError(f"optimizer warmup_steps={self.warmup_steps} must be in "
                             f"[0, total_steps={self.total_steps}]")
        if self.learning_rate <= 0:
            raise ValueError(f"optimizer learning_rate={self.learning_rate} must be positive")
        if not 0.0 < self.decay_fraction <= 1.0:
            raise ValueError(f"optimizer decay_fraction={self.decay_fraction} must be in (0, 1]")
        if self.decay == "wsd" and self.wsd_decay_start < self.warmup_steps:
            raise ValueError(
                f"optimizer decay='wsd': the decay (the last decay_fraction={self.decay_fraction} "
                f"of total_steps={self.total_steps}) would start before the warm-up "
                f"(warmup_steps={self.warmup_steps}) ends")
        if self.decay == "one_cycle" and not 0.0 <= self.end_learning_rate_ratio < 1.0:
            raise ValueError(f"optimizer decay='one_cycle' needs end_learning_rate_ratio in "
                             f"[0, 1), got {self.end_learning_rate_ratio}")

    @property
    def wsd_decay_start(self) -> int:
        """decay="wsd": the step where the decay starts, total_steps * (1 - decay_fraction)."""
        return self.total_steps - round(self.decay_fraction * self.total_steps)


def warmup_steps(config: Mapping[str, Any], total_steps: int) -> int:
    """config.warmup_steps when > 0 (at most total_steps), else warmup_fraction x total_steps;
    `config` a whole one (a saved one completed: bert_jax.config.run.complete)."""
    fixed = int(config["warmup_steps"] or 0)
    if fixed > 0:
        return min(fixed, total_steps)
    return round(float(config["warmup_fraction"]) * total_steps)


_DEFAULTS = run_config.LOOP_DEFAULTS

NONFINITE_POLICIES = ("stop", "skip")

_CONFIG_KEYS = {"global_batch_size": "batch_size"}  # LoopConfig field -> the config key


@dataclasses.dataclass(frozen=True)
class LoopConfig:
    """Step counts and the global batch size of a run (everything else lives in the Task)."""

    total_steps: int
    global_batch_size: int
    # The rest are the config keys of the same names, meant and defaulted as in
    # bert_jax.config.run.LOOP_DEFAULTS.
    log_every_steps: int = _DEFAULTS["log_every_steps"]
    eval_every_steps: int = _DEFAULTS["eval_every_steps"]
    checkpoint_every_steps: int = _DEFAULTS["checkpoint_every_steps"]
    keep_checkpoints: int = _DEFAULTS["keep_checkpoints"]
    async_checkpoints: bool = _DEFAULTS["async_checkpoints"]
    accumulation_steps: int = _DEFAULTS["accumulation_steps"]
    seed: int = _DEFAULTS["seed"]
    peak_flops_per_device: float = _DEFAULTS["peak_flops_per_device"]
    nonfinite: str = _DEFAULTS["nonfinite"]  # NONFINITE_POLICIES
    max_nonfinite_in_a_row: int = _DEFAULTS["max_nonfinite_in_a_row"]
    dropout_rng: str = _DEFAULTS["dropout_rng"]  # DROPOUT_RNGS
    fsdp_collectives: str = _DEFAULTS["fsdp_collectives"]  # CHOICES

    def __post_init__(self):
        for name, least in (("total_steps", 1), ("global_batch_size", 1), ("log_every_steps", 1),
                            ("eval_every_steps", 0), ("checkpoint_every_steps", 0),
                            ("keep_checkpoints", 1), ("accumulation_steps", 1),
                            ("max_nonfinite_in_a_row", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or value < least:
                raise ValueError(f"config.{_CONFIG_KEYS.get(name, name)}={value!r} must be an "
                                 f"integer >= {least}")
        if self.nonfinite not in NONFINITE_POLICIES:
            raise ValueError(f"config.nonfinite={self.nonfinite!r}: choose one of "
                             f"{NONFINITE_POLICIES}")
        if self.dropout_rng not in DROPOUT_RNGS:
            raise ValueError(f"config.dropout_rng={self.dropout_rng!r}: choose one of "
                             f"{DROPOUT_RNGS}")
        if self.fsdp_collectives not in CHOICES:
            raise ValueError(f"config.fsdp_collectives={self.fsdp_collectives!r}: choose one of "
                             f"{CHOICES}")


def steps_for_epochs(num_examples: int, global_batch_size: int, epochs: float) -> int:
    """Optimizer steps for `epochs` passes over `num_examples` (the last partial batch counts)."""
    return max(1, math.ceil(epochs * math.ceil(num_examples / global_batch_size)))


def check_batch_size(global_batch_size: int, mesh: Mesh, accumulation_steps: int = 1,
                     process_count: Optional[int] = None, key: str = "batch_size") -> None:
    """Raise ValueError naming the fault (and the config `key`: batch_size, eval_batch_size) if
    the batch doesn't split over devices/micro-batches."""
    data_parallel = sharding.data_parallel_size(mesh)
    process_count = jax.process_count() if process_count is None else process_count
    if global_batch_size <= 0:
        raise ValueError(f"{key}={global_batch_size} must be positive")
    if global_batch_size % data_parallel:
        raise ValueError(
            f"global {key}={global_batch_size} is not divisible by the data-parallel size "
            f"{data_parallel} (mesh data={mesh.shape['data']} x fsdp={mesh.shape['fsdp']}); "
            f"change {key} or mesh.data/mesh.fsdp")
    if global_batch_size % process_count:
        raise ValueError(f"global {key}={global_batch_size} is not divisible by the "
                         f"{process_count} processes")
    if global_batch_size % (accumulation_steps * data_parallel):
        raise ValueError(
            f"global {key}={global_batch_size} is not divisible by accumulation_steps="
            f"{accumulation_steps} x data-parallel size {data_parallel}: each micro-batch must "
            "split evenly over the devices")


def fit_mesh_to_devices(config: Config) -> None:
    """Keep config.mesh if it fits the devices here, else use all of them data-parallel
    (specs.MeshSpec.fitted, written back into config.mesh)."""
    fitted = specs.MeshSpec(config.mesh.data, config.mesh.fsdp, config.mesh.tensor).fitted()
    config.mesh.data, config.mesh.fsdp, config.mesh.tensor = (fitted.data, fitted.fsdp,
                                                               fitted.tensor)


def check_config(config: Config, recipe: str) -> None:
    """The config of a new run of `recipe` against the schema (bert_jax.config.run_keys.check):
    its recipe, unknown keys, types, the learning rate, the text encoding, values no run can
    use. Before anything of the run is written."""
    if config.get("recipe") != recipe:
        script = {"pretrain": "pretrain.py", "finetune": "finetune.py"}.get(config.get("recipe"))
        raise ValueError(f"config.recipe={config.get('recipe')!r}, but this is a {recipe!r} run"
                         + (f": train it with experiments/{script}" if script else ""))
    run_config_keys.check(config)


def check_lengths(run: RunSettings, cfg: BertConfig) -> None:
    """ValueError unless the model takes rows of the run's max_seq_len tokens."""
    if run.max_seq_len > cfg.max_sequence_length:  # RoBERTa: max_position_embeddings - 2
        offset = getattr(cfg, "position_offset", 0)
        raise ValueError(f"config.max_seq_len={run.max_seq_len} exceeds the model's "
                         f"max_position_embeddings={cfg.max_position_embeddings}"
                         + (f" less position_offset={offset}" if offset else ""))


def optimizer_config(config: Mapping[str, Any], total_steps: int) -> OptimizerConfig:
    """config["optimizer"] with the learning rate and a warm-up of warmup_fraction x total_steps
    (or config["warmup_steps"] when > 0); `config` a ConfigDict or its plain dict."""
    fraction = config["warmup_fraction"]
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"config.warmup_fraction={fraction} must be in [0, 1]")
    options = config["optimizer"]
    return OptimizerConfig(
        learning_rate=config["learning_rate"], total_steps=total_steps,
        warmup_steps=warmup_steps(config, total_steps),
        **{key: options[key] for key in options.keys()})


def loop_config(config: Mapping[str, Any], total_steps: int) -> LoopConfig:
    """The loop settings of `config` (a ConfigDict or its plain dict; checked: counts in range,
    a known nonfinite policy)."""
    return LoopConfig(total_steps=total_steps, global_batch_size=config["batch_size"],
                      **{key: config[key] for key in run_config.LOOP_DEFAULTS})


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """A run's config, typed: what every part of the run is told (read once, by `read`).

    The parts are bert_jax.config.specs's. data: PretrainDataSpec for pre-training,
    FinetuneDataSpec for fine-tuning, which also has task, epochs (the run's length when
    total_steps is 0), squad and contrastive (None in pre-training). optimizer and loop: those
    of total_steps, None for a run counted in epochs until `for_steps` is given the count.
    record: the config as a plain dict, what <workdir>/config.json holds
    (bert_jax.recipes.run_record; not to be changed).
    """

    recipe: str
    mesh: specs.MeshSpec
    model: specs.ModelSpec
    init: specs.InitSpec
    tokenizer: specs.TokenizerSpec
    data: Any
    max_seq_len: int
    batch_size: int
    accumulation_steps: int
    eval_batch_size: int
    eval_batches: int
    total_steps: int
    seed: int
    record: dict
    task: Optional[str] = None
    epochs: Optional[float] = None
    squad: Optional[specs.SquadSpec] = None
    contrastive: Optional[specs.ContrastiveSpec] = None
    optimizer: Optional[OptimizerConfig] = None
    loop: Optional[LoopConfig] = None

    def __post_init__(self):
        if self.max_seq_len < 1:
            raise ValueError(f"config.max_seq_len={self.max_seq_len} must be positive")

    def for_steps(self, total_steps: int) -> RunSettings:
        """These settings with the optimizer and loop settings of `total_steps` (checked)."""
        values = run_config.complete(self.record)
        return dataclasses.replace(self, total_steps=total_steps,
                                   optimizer=optimizer_config(values, total_steps),
                                   loop=loop_config(values, total_steps))

    def check_fits(self, mesh: Mesh, cfg: BertConfig) -> None:
        """Every check that needs no write, once the optimizer and loop settings are known
        (`for_steps`): the batch sizes on `mesh`, the model's lengths, an optimizer that works
        per parameter array on unscanned layers. Recipes call it before anything in the workdir
        is written."""
        if self.loop is None or self.optimizer is None:
            raise ValueError("RunSettings.check_fits needs the run's step count: for_steps first")
        check_batch_size(self.batch_size, mesh, self.accumulation_steps)
        check_batch_size(self.eval_batch_size, mesh, key="eval_batch_size")
        check_lengths(self, cfg)
        if self.optimizer.name == "lamb" and cfg.scan_layers:
            raise ValueError("optimizer.name=lamb with model.scan_layers=True: LAMB's trust "
                             "ratio is taken per parameter array, and scanned layers stack "
                             "every layer into one array; train LAMB with scan_layers=False")
        if self.optimizer.name == "stable_adamw" and cfg.scan_layers:
            raise ValueError("optimizer.name=stable_adamw with model.scan_layers=True: its "
                             "update clipping is taken per parameter array, and scanned layers "
                             "stack every layer into one array; train it with "
                             "scan_layers=False")


def read(config: Config, recipe: str) -> RunSettings:
    """The settings of a new run of `recipe` (pretrain | finetune): its config checked against
    the schema (`check_config`), then read into RunSettings, whose parts check their values;
    a run with a step count (every pre-training run) gets its optimizer and loop settings.
    The recipes call it first, once, before anything of the run is written."""
    record = run_config.plain(config.to_dict() if hasattr(config, "to_dict") else dict(config))
    check_config(record, recipe)
    run = typed(record)
    if recipe == "pretrain" or run.total_steps:
        run = run.for_steps(run.total_steps)
    return run


def typed(config: Config | Mapping[str, Any]) -> RunSettings:
    """RunSettings of a config (a ConfigDict, or a saved config.json's dict: keys it lacks read
    as the schema's defaults), without the schema check of a new run or the step count."""
    tree = config.to_dict() if hasattr(config, "to_dict") else copy.deepcopy(dict(config))
    record = run_config.plain(tree)
    values = run_config.complete(record)
    recipe = values.get("recipe", "pretrain")
    tokenizer = values["tokenizer"]
    pretraining = recipe == "pretrain"
    finetuning = {} if pretraining else dict(
        task=values["task"], epochs=float(values["epochs"]),
        squad=specs.spec_of(specs.SquadSpec, values["squad"]),
        contrastive=specs.spec_of(specs.ContrastiveSpec, values["contrastive"]))
    return RunSettings(
        recipe=recipe, mesh=specs.spec_of(specs.MeshSpec, values["mesh"]),
        model=specs.ModelSpec.of(values["model"], values["dtype"], values["remat"]),
        init=specs.spec_of(specs.InitSpec, values["init"]),
        tokenizer=specs.TokenizerSpec(tokenizer["path"], tokenizer["lowercase"],
                                      tokenizer.get("vocab_size", 0)),
        data=specs.spec_of(specs.PretrainDataSpec if pretraining else specs.FinetuneDataSpec,
                           values["data"]),
        max_seq_len=values["max_seq_len"], batch_size=values["batch_size"],
        accumulation_steps=values["accumulation_steps"],
        eval_batch_size=values["eval_batch_size"], eval_batches=values.get("eval_batches", 0),
        total_steps=int(values["total_steps"] or 0), seed=values["seed"], record=record,
        **finetuning)
