"""What a run is told, typed and checked: the optimizer's and the loop's settings
(OptimizerConfig, LoopConfig) with the choices they check (DROPOUT_RNGS, fsdp CHOICES), and the
one reader of a run's ConfigDict into them (make_mesh, optimizer_config, loop_config, check_run).

train/ takes OptimizerConfig and LoopConfig from here and never reads a ConfigDict; the
recipes call the readers (check_config, check_run before anything of a run is written).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Optional

import jax
from absl import logging
from jax.sharding import Mesh

from bert_jax.config import run as run_config
from bert_jax.config import run_keys as run_config_keys
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


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    """Hyper-parameters of the optimizer and its learning-rate schedule (paper defaults)."""

    learning_rate: float = 1e-4
    total_steps: int = 1_000_000
    warmup_steps: int = 10_000
    decay: str = "linear"  # after warm-up: linear | cosine | constant | wsd | one_cycle
    end_learning_rate_ratio: float = 0.0  # final lr = ratio * learning_rate
    decay_fraction: float = 0.2  # wsd: the share of total_steps spent decaying, at the end
    name: str = "adamw"  # adamw | stable_adamw | lamb
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-6
    weight_decay: float = 0.01
    clip_norm: float = 1.0  # global-norm clipping; 0 disables it

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
    """config.warmup_steps when > 0 (at most total_steps), else warmup_fraction x total_steps."""
    fixed = int(config.get("warmup_steps", 0) or 0)
    if fixed > 0:
        return min(fixed, total_steps)
    return round(float(config.get("warmup_fraction", 0.0)) * total_steps)


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


def make_mesh(config: Config):
    return sharding.make_mesh(config.mesh.data, config.mesh.fsdp, config.mesh.tensor)


def fit_mesh_to_devices(config: Config) -> None:
    """Keep config.mesh if it fits the devices here, else use all of them data-parallel.

    For evaluating a saved run elsewhere: checkpoints restore onto any mesh, and held-out
    figures do not depend on the layout.
    """
    try:
        sharding.mesh_shape(config.mesh.data, config.mesh.fsdp, config.mesh.tensor)
    except ValueError as e:
        logging.warning("%s; evaluating on mesh (%d, 1, 1) instead", e, jax.device_count())
        config.mesh.data, config.mesh.fsdp, config.mesh.tensor = -1, 1, 1


def check_config(config: Config, recipe: str) -> None:
    """The config of a new run of `recipe` against the schema (bert_jax.config.run_keys.check):
    its recipe, unknown keys, types, the learning rate, the text encoding, values no run can
    use. Before anything of the run is written."""
    if config.get("recipe") != recipe:
        script = {"pretrain": "pretrain.py", "finetune": "finetune.py"}.get(config.get("recipe"))
        raise ValueError(f"config.recipe={config.get('recipe')!r}, but this is a {recipe!r} run"
                         + (f": train it with experiments/{script}" if script else ""))
    run_config_keys.check(config)


def check_lengths(config: Config, cfg: BertConfig) -> None:
    if config.max_seq_len > cfg.max_sequence_length:  # RoBERTa: max_position_embeddings - 2
        offset = getattr(cfg, "position_offset", 0)
        raise ValueError(f"config.max_seq_len={config.max_seq_len} exceeds the model's "
                         f"max_position_embeddings={cfg.max_position_embeddings}"
                         + (f" less position_offset={offset}" if offset else ""))


def optimizer_config(config: Config, total_steps: int) -> OptimizerConfig:
    """config.optimizer with the learning rate and a warm-up of warmup_fraction x total_steps
    (or config.warmup_steps when > 0)."""
    if not 0.0 <= config.warmup_fraction <= 1.0:
        raise ValueError(f"config.warmup_fraction={config.warmup_fraction} must be in [0, 1]")
    return OptimizerConfig(
        learning_rate=config.learning_rate, total_steps=total_steps,
        warmup_steps=warmup_steps(config, total_steps),
        **config.optimizer.to_dict())


def loop_config(config: Config, total_steps: int) -> LoopConfig:
    """The loop settings of `config` (checked: counts in range, a known nonfinite policy)."""
    return LoopConfig(total_steps=total_steps, global_batch_size=config.batch_size,
                           **{key: config[key] for key in run_config.LOOP_DEFAULTS})


def check_run(config: Config, mesh, total_steps: int, cfg: BertConfig) -> None:
    """Every check that needs no write: batch sizes on the mesh, optimizer and loop settings,
    the model's lengths. Recipes call it before anything in the workdir is written."""
    check_batch_size(config.batch_size, mesh, config.accumulation_steps)
    check_batch_size(config.eval_batch_size, mesh, key="eval_batch_size")
    optimizer_config(config, total_steps)
    loop_config(config, total_steps)
    check_lengths(config, cfg)
    if config.optimizer.name == "lamb" and cfg.scan_layers:
        raise ValueError("optimizer.name=lamb with model.scan_layers=True: LAMB's trust ratio is "
                         "taken per parameter array, and scanned layers stack every layer into "
                         "one array; train LAMB with scan_layers=False")
    if config.optimizer.name == "stable_adamw" and cfg.scan_layers:
        raise ValueError("optimizer.name=stable_adamw with model.scan_layers=True: its update "
                         "clipping is taken per parameter array, and scanned layers stack every "
                         "layer into one array; train it with scan_layers=False")
