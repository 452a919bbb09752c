"""The parts of a run's settings, one frozen dataclass per block of the run config: the mesh
(MeshSpec), the model (ModelSpec), the initial weights (InitSpec), the tokenizer
(TokenizerSpec), the data (PretrainDataSpec, FinetuneDataSpec) and the fine-tuning tasks'
options (SquadSpec, ContrastiveSpec). Each checks on construction what the schema's check of a
new run (bert_jax.config.run_keys.check: keys, types, ranges) leaves to it.

bert_jax.config.settings.read builds them from a run's config (spec_of); their defaults and
meanings are the schema's (bert_jax/config/run.py), so the fields here have none.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional

import jax
from absl import logging
from jax.sharding import Mesh

from bert_jax.config import run as run_config
from bert_jax.runtime import sharding


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
    default and meaning; run_keys.check its ranges); recipes.inputs.pretraining_data_config
    makes the PretrainingDataConfig of it, which checks the values the batches depend on."""

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


def spec_of(cls, block: Mapping[str, Any]):
    """An instance of the spec dataclass `cls` from a config block (keys beyond cls's fields,
    which the schema check refuses in a new run, are left out)."""
    return cls(**{field.name: block[field.name] for field in dataclasses.fields(cls)})
