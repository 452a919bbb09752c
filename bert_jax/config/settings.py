"""What a run is told, typed and checked: a run's ConfigDict read once, at the recipe's entry,
into frozen dataclasses whose construction checks their values.

    run = settings.read(config, "pretrain")   # the schema check, then RunSettings
    mesh = run.mesh.make()                    # MeshSpec
    run.model, run.init, run.tokenizer        # ModelSpec, InitSpec, TokenizerSpec
    run.optimizer, run.loop                   # OptimizerConfig, LoopConfig (of total_steps)
    run.data                                  # PretrainDataSpec (fine-tuning: its data block)
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
    """The device mesh of config.mesh (bert_jax.runtime.sharding.make_mesh)."""
    return MeshSpec(config.mesh.data, config.mesh.fsdp, config.mesh.tensor).make()


def fit_mesh_to_devices(config: Config) -> None:
    """Keep config.mesh if it fits the devices here, else use all of them data-parallel
    (MeshSpec.fitted, written back into config.mesh)."""
    fitted = MeshSpec(config.mesh.data, config.mesh.fsdp, config.mesh.tensor).fitted()
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


def check_lengths(config: Config, cfg: BertConfig) -> None:
    """ValueError unless the model takes rows of config.max_seq_len tokens (`config` a
    ConfigDict or RunSettings)."""
    if config.max_seq_len > cfg.max_sequence_length:  # RoBERTa: max_position_embeddings - 2
        offset = getattr(cfg, "position_offset", 0)
        raise ValueError(f"config.max_seq_len={config.max_seq_len} exceeds the model's "
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


def check_run(config: Config, mesh, total_steps: int, cfg: BertConfig) -> None:
    """Every check that needs no write (RunSettings.check_fits after the optimizer and loop
    settings of total_steps), for a caller holding a ConfigDict."""
    typed(config).for_steps(total_steps).check_fits(mesh, cfg)


# ----- the typed settings of a run ---------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class MeshSpec:
    """The device mesh's axis sizes (bert_jax.runtime.sharding): -1 takes the devices the other
    two leave."""

    data: int
    fsdp: int
    tensor: int

    def make(self) -> Mesh:
        """The mesh on this process's devices; ValueError when they do not fit."""
        return sharding.make_mesh(self.data, self.fsdp, self.tensor)

    def fitted(self) -> MeshSpec:
        """This mesh if it fits the devices here, else all of them data-parallel: for evaluating
        a saved run elsewhere (checkpoints restore onto any mesh, and held-out figures do not
        depend on the layout)."""
        try:
            sharding.mesh_shape(self.data, self.fsdp, self.tensor)
        except ValueError as e:
            logging.warning("%s; evaluating on mesh (%d, 1, 1) instead", e, jax.device_count())
            return MeshSpec(-1, 1, 1)
        return self


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """What the run says of its model: the family's preset, the config.model fields it sets
    (`fields`, sorted (name, value) pairs, unset ones left out), the compute dtype and the
    remat policy. recipes.common.model_config builds the BertConfig or ModernBertConfig."""

    family: str
    preset: str
    fields: tuple[tuple[str, Any], ...]
    dtype: str
    remat: str

    def __post_init__(self):
        unknown = sorted(name for name, _ in self.fields if name not in run_config.MODEL_FIELDS)
        if unknown:
            raise ValueError(f"config.model: unknown model fields {unknown} (bert_jax/config/"
                             "run.py, MODEL_FIELDS)")

    @classmethod
    def of(cls, block: Mapping[str, Any], dtype: str, remat: str) -> ModelSpec:
        """The spec of a config's model block (a mapping), dtype and remat."""
        fields = tuple(sorted((name, value) for name, value in block.items()
                              if name not in ("preset", "family") and value is not None))
        return cls(block.get("family") or "bert", block.get("preset") or "tiny", fields, dtype,
                   remat)

    @property
    def overrides(self) -> dict[str, Any]:
        """The model config's fields this run sets: the fields, dtype, remat_policy and the
        attention kernel (like dtype and remat the run's, default auto, not that of init
        weights that may have been trained on another platform)."""
        fields = dict(self.fields)
        return {**fields, "dtype": self.dtype, "remat_policy": self.remat,
                "attention": fields.get("attention") or "auto"}

    @property
    def scan_layers(self) -> Optional[bool]:
        """config.model.scan_layers: the layer layout asked for (None: the weights' own)."""
        return dict(self.fields).get("scan_layers")


@dataclasses.dataclass(frozen=True)
class InitSpec:
    """Where the weights start: a Hugging Face folder (hf_dir) or our checkpoints folder or one
    step of it (checkpoint), at most one; neither: random weights. with_heads keeps the heads
    that fit."""

    hf_dir: str
    checkpoint: str
    with_heads: bool

    def __post_init__(self):
        if self.hf_dir and self.checkpoint:
            raise ValueError("set config.init.hf_dir or config.init.checkpoint, not both")


@dataclasses.dataclass(frozen=True)
class TokenizerSpec:
    """The run's tokenizer: `path` (vocab.txt, tokenizer.json or a folder; empty: init.hf_dir's,
    or for pre-training on a demo or text corpus one of `vocab_size` tokens trained there), and
    `lowercase` for a vocab.txt whose casing nothing else states."""

    path: str
    lowercase: bool
    vocab_size: int


@dataclasses.dataclass(frozen=True)
class PretrainDataSpec:
    """The pre-training data block (bert_jax/config/run.py, pretrain_config, holds each key's
    default and meaning); recipes.pretrain.data_config makes the PretrainingDataConfig of it."""

    corpus: str
    document_delimiter: str
    data_dir: str
    max_predictions: int
    mask_rate: float
    eval_mask_rate: float
    whole_word_masking: bool
    sentence_pairs: bool
    num_workers: int
    seconds_per_batch: float
    batch_warmup_tokens: int
    batch_warmup_start: int

    def __post_init__(self):
        for name in ("mask_rate", "eval_mask_rate"):
            if not 0.0 < getattr(self, name) < 1.0:
                raise ValueError(f"config.data.{name}={getattr(self, name)!r} must be in (0, 1): "
                                 "the share of tokens masked")
        for name in ("batch_warmup_tokens", "batch_warmup_start", "num_workers",
                     "max_predictions"):
            if getattr(self, name) < 0:
                raise ValueError(f"config.data.{name}={getattr(self, name)!r} must be >= 0")


@dataclasses.dataclass(frozen=True)
class FinetuneDataSpec:
    """The fine-tuning data block (bert_jax/config/run.py, finetune_config, holds each key's
    default and meaning), read by the task's readers in bert_jax.recipes.finetune."""

    train_path: str
    eval_path: str
    format: str
    encoding: str
    tsv_quoting: bool
    text_column: str
    text_pair_column: str
    label_column: str
    label_separator: str
    conll_tag_column: int
    heldout_fraction: float
    split_seed: int
    tfds_name: str
    tfds_train_split: str
    tfds_eval_split: str
    tfds_data_dir: str
    tfds_download: bool
    bucket_lengths: str
    group_by_length: int
    pack_examples: int
    long_inputs: str
    window_stride: int


@dataclasses.dataclass(frozen=True)
class SquadSpec:
    """span_qa's windows over long contexts and how answers are read (config.squad)."""

    doc_stride: int
    max_query_len: int
    n_best: int
    max_answer_length: int
    version_2: bool
    no_answer_threshold: float


@dataclasses.dataclass(frozen=True)
class ContrastiveSpec:
    """The contrastive task's loss and pooling (config.contrastive)."""

    scale: float
    symmetric: bool
    pooling: str
    negative_column: str


def _spec(cls, block: Mapping[str, Any]):
    """An instance of the spec dataclass `cls` from a config block (keys beyond cls's fields,
    which the schema check refuses in a new run, are left out)."""
    return cls(**{field.name: block[field.name] for field in dataclasses.fields(cls)})


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """A run's config, typed: what every part of the run is told (read once, by `read`).

    data: PretrainDataSpec for pre-training, FinetuneDataSpec for fine-tuning, which also has
    task, epochs (the run's length when total_steps is 0), squad and contrastive (None in
    pre-training). optimizer and loop: those of
    total_steps, None for a run counted in epochs until `for_steps` is given the count.
    record: the config as a plain dict, what <workdir>/config.json holds
    (bert_jax.recipes.run_record; not to be changed).
    """

    recipe: str
    mesh: MeshSpec
    model: ModelSpec
    init: InitSpec
    tokenizer: TokenizerSpec
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
    squad: Optional[SquadSpec] = None
    contrastive: Optional[ContrastiveSpec] = None
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
        squad=_spec(SquadSpec, values["squad"]),
        contrastive=_spec(ContrastiveSpec, values["contrastive"]))
    return RunSettings(
        recipe=recipe, mesh=_spec(MeshSpec, values["mesh"]),
        model=ModelSpec.of(values["model"], values["dtype"], values["remat"]),
        init=_spec(InitSpec, values["init"]),
        tokenizer=TokenizerSpec(tokenizer["path"], tokenizer["lowercase"],
                                tokenizer.get("vocab_size", 0)),
        data=_spec(PretrainDataSpec if pretraining else FinetuneDataSpec, values["data"]),
        max_seq_len=values["max_seq_len"], batch_size=values["batch_size"],
        accumulation_steps=values["accumulation_steps"],
        eval_batch_size=values["eval_batch_size"], eval_batches=values.get("eval_batches", 0),
        total_steps=int(values["total_steps"] or 0), seed=values["seed"], record=record,
        **finetuning)


def of(run: RunSettings | Config) -> RunSettings:
    """`run` if it is RunSettings, else the `typed` settings of the config it is: the recipes'
    helpers take either, so callers holding a config need not read it first."""
    return run if isinstance(run, RunSettings) else typed(run)
