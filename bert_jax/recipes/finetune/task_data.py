"""The data of a fine-tuning run: examples read from files or TFDS, labels fixed by the training
examples (or by the run's task.json when reloading), and the encoded features of both splits.

Config keys: `task` (a kind of bert_jax.recipes.finetune.kinds), `data.train_path` /
`data.eval_path` (local files) or `data.tfds_name` with `tfds_train_split` / `tfds_eval_split`,
`data.heldout_fraction` (> 0: hold this part of the training file out for evaluation,
stratified by label for classification), `data.split_seed`, and the kind's reading options
(`data.format`, `data.encoding`, columns, `data.label_separator`, `data.conll_tag_column`).

How rows are batched: `data.bucket_lengths` ("auto": 32, 64, ... up to max_seq_len; "none":
always max_seq_len; or lengths such as "16,32,48"): every batch, in training, evaluation and
prediction, is cut to the smallest bucket that holds its longest row (`batches.Buckets`), so
short texts are not computed at max_seq_len; results agree with unbucketed batches up to float
rounding, but dropout masks are drawn at the bucket's shape. `data.group_by_length` (0: off;
G > 1: rows of similar length batched together over windows of G batches) changes which rows
go together, for less padding still. `data.pack_examples` (0: off; K >= 2: up to K examples in
one row, bert_jax.data.example_packing) packs each training batch of examples into fewer rows,
for kinds with a pooled output per example (classification, regression, multi-label) and token
classification (its tags packed under their tokens): the same examples and loss, almost no
padding; evaluation and prediction stay unpacked (bucketed).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Mapping, Optional

import jax
import numpy as np
from etils import epath

from bert_jax.config.bert import ConfigError
from bert_jax.config.settings import RunSettings
from bert_jax.data import batches, example_packing
from bert_jax.data.finetuning import readers, tfds_tasks
from bert_jax.recipes.finetune import kinds
from bert_jax.runtime import paths

TASK_FILE = "task.json"
# Packed training batches have a multiple of batch_size / PACKED_ROW_COUNTS rows (and of the
# devices and processes): a run's batches come in at most this many row counts, each one compiled
# program (compiled before the first step: seconds each on a CPU), at the price of up to that many
# rows of padding per batch (about 1/16 of the batch's rows on average).
PACKED_ROW_COUNTS = 8
# The smallest "auto" bucket: each bucket costs a compilation, and a batch whose longest row is
# under 32 tokens is rare (all its rows must be that short).
AUTO_SMALLEST_BUCKET = 32


@dataclasses.dataclass
class TaskData:
    """Examples and features of a run: what training reads and what evaluation scores."""

    kind: kinds.TaskKind
    labels: dict[str, Any]  # label_map and what else the kind keeps (kinds.describe_labels)
    train_examples: list
    eval_examples: list
    train_features: Optional[dict[str, np.ndarray]]
    eval_features: dict[str, np.ndarray]

    @property
    def label_map(self) -> Optional[tuple[str, ...]]:
        return tuple(self.labels["label_map"]) if self.labels.get("label_map") else None


def _read(config: RunSettings, kind: kinds.TaskKind, split: str) -> list:
    """Examples of one split ("train" or "eval") from config.data (files or a TFDS name)."""
    data = config.data
    if data.tfds_name:
        tfds_split = data.tfds_train_split if split == "train" else data.tfds_eval_split
        return tfds_tasks.read_tfds(data.tfds_name, tfds_split, data.tfds_data_dir or None,
                                    data.tfds_download)
    path = data.train_path if split == "train" else data.eval_path
    if not path:
        raise ValueError(f"config.data.{split}_path is empty (and config.data.tfds_name too)")
    return kind.read(path, config)


def read_examples(config: RunSettings, kind: kinds.TaskKind) -> tuple[list, list]:
    """(train, eval) examples: eval from its own file/split, or held out from train."""
    train = _read(config, kind, "train")
    has_eval = bool(config.data.eval_path or config.data.tfds_name)
    if config.data.heldout_fraction > 0:
        if has_eval and not config.data.tfds_name:
            raise ValueError("set either config.data.eval_path or config.data.heldout_fraction, "
                             "not both")
        return readers.holdout_split(train, config.data.heldout_fraction,
                                     config.data.split_seed,
                                     stratify_by_label=kind.stratify_by_label)
    if not has_eval:
        raise ValueError("no evaluation data: set config.data.eval_path, a TFDS name, or "
                         "config.data.heldout_fraction")
    return train, _read(config, kind, "eval")


def eval_source(config: RunSettings) -> str:
    """Where the eval examples come from, for error messages."""
    data = config.data
    if data.eval_path:
        return data.eval_path
    if data.tfds_name:
        return f"tfds:{data.tfds_name}/{data.tfds_eval_split}"
    return f"held-out part of {data.train_path}"


def build_task_data(config: RunSettings, tokenizer, saved_task: Optional[Mapping[str, Any]] = None,
                    with_train_features: bool = True) -> TaskData:
    """Read, label and encode a run's data. `saved_task` (from task.json) fixes the labels."""
    kind = kinds.get(config.task)
    check_batching(config, kind)
    check_long_inputs(config, kind)
    if saved_task is not None and saved_task.get("task") != kind.name:
        raise ValueError(f"config.task={kind.name!r}, but the workdir's {TASK_FILE} was written "
                         f"for task {saved_task.get('task')!r}: use another --workdir")
    train, evaluation = read_examples(config, kind)
    if saved_task is not None:
        labels = labels_of(saved_task)
    else:
        labels = kind.describe_labels(train, config)
    train_features = (kind.encode(tokenizer, train, config, labels,
                                  config.data.train_path or "train")
                      if with_train_features else None)
    eval_features = kind.encode_eval(tokenizer, evaluation, config, labels,
                                     eval_source(config))
    return TaskData(kind, labels, train, evaluation, train_features, eval_features)


_TASK_FILE_COUNTS = ("num_train_examples", "num_eval_examples")


def labels_of(saved_task: Mapping[str, Any]) -> dict:
    """The labels that a task.json fixes (label_map and what else the kind keeps): all of it
    but the kind's name and the example counts."""
    return {k: v for k, v in saved_task.items() if k not in _TASK_FILE_COUNTS + ("task",)}


def save_task_file(workdir: str, data: TaskData) -> None:
    """<workdir>/task.json: the kind, its labels and the example counts (process 0 only)."""
    if jax.process_index() != 0:
        return
    paths.write_text_atomically(os.path.join(workdir, TASK_FILE), json.dumps(
        {"task": data.kind.name, **data.labels, "num_train_examples": len(data.train_examples),
         "num_eval_examples": len(data.eval_examples)}, indent=2))


def read_task_file(workdir: str) -> Optional[dict]:
    path = epath.Path(workdir) / TASK_FILE  # a local folder or gs://
    if not path.exists():
        return None
    return paths.read_json(path)


# ----- batching --------------------------------------------------------------------------------

def bucket_lengths(config: RunSettings) -> tuple[int, ...]:
    """The bucket lengths config.data.bucket_lengths asks for, max_seq_len last; () for none.
    (Bucketing changes only the padding: a run recorded before the key, which padded every batch
    to max_seq_len, evaluates to the same figures with the schema's default.)"""
    spec = config.data.bucket_lengths
    max_len = config.max_seq_len
    if isinstance(spec, str):
        text = spec.strip().lower()
        if text in ("none", ""):
            return ()
        if text == "auto":
            return batches.power_of_two_lengths(max_len, AUTO_SMALLEST_BUCKET)
        try:
            spec = [int(part) for part in text.replace(" ", "").strip("()[]").split(",") if part]
        except ValueError:
            raise ValueError(f"config.data.bucket_lengths={config.data.bucket_lengths!r}: use "
                             "auto, none, or lengths such as '16,32,64'") from None
    lengths = sorted({int(n) for n in spec})
    if any(n < 1 or n > max_len for n in lengths):
        raise ValueError(f"config.data.bucket_lengths={config.data.bucket_lengths!r}: each "
                         f"length must be in [1, max_seq_len={max_len}]")
    return tuple(n for n in lengths if n < max_len) + (max_len,) if lengths else ()


def check_batching(config: RunSettings, kind: Optional[kinds.TaskKind] = None) -> None:
    """ValueError naming a bad data.bucket_lengths, data.group_by_length or
    data.pack_examples (packing a kind that cannot be packed, when `kind` is given)."""
    bucket_lengths(config)
    for key in ("group_by_length", "pack_examples"):
        value = getattr(config.data, key)
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"config.data.{key}={value!r} must be an integer >= 0 (0: off)")
    pack = config.data.pack_examples
    if pack and kind is not None and not kind.packable:
        packable = ", ".join(sorted(k.name for k in kinds.REGISTRY.values() if k.packable))
        raise ValueError(f"config.data.pack_examples={pack}: task {kind.name!r} cannot be "
                         f"packed (only {packable}); set it to 0")


def check_long_inputs(config: RunSettings, kind: kinds.TaskKind) -> None:
    """ConfigError naming a bad data.long_inputs or data.window_stride, or 'slide' for a kind
    that reads no windows (kinds.TaskKind.slides_long_inputs)."""
    if kinds.window_stride(config) is not None and not kind.slides_long_inputs:
        slides = ", ".join(sorted(k.name for k in kinds.REGISTRY.values()
                                  if k.slides_long_inputs))
        raise ConfigError(f"config.data.long_inputs='slide': task {kind.name!r} reads no "
                          f"sliding windows (only {slides}); set it to 'truncate'")


def train_packer(config: RunSettings, kind: kinds.TaskKind, row_multiple: int
                 ) -> Optional[example_packing.Packer]:
    """The packer of training batches (data.pack_examples), or None. row_multiple: the packed
    rows split evenly over it (the data-parallel devices and the processes). The kind's
    token_keys among its targets are packed under their tokens, the others per example."""
    pack = config.data.pack_examples
    if not pack:
        return None
    per_token = {k: kind.no_token_value(k) for k in kind.target_keys if k in kind.token_keys}
    per_example = tuple(k for k in kind.target_keys if k not in per_token)
    return example_packing.Packer(pack, row_multiple, per_example, per_token)


def train_buckets(config: RunSettings, kind: kinds.TaskKind) -> Optional[batches.Buckets]:
    """The buckets of training batches (inputs and per-token targets), or None."""
    lengths = bucket_lengths(config)
    return batches.Buckets(lengths, kinds.MODEL_INPUTS + kind.token_keys) if lengths else None


def eval_buckets(config: RunSettings) -> Optional[batches.Buckets]:
    """The buckets of evaluation and prediction batches (model inputs only), or None."""
    lengths = bucket_lengths(config)
    return batches.Buckets(lengths, kinds.MODEL_INPUTS) if lengths else None


def training_batches(config: RunSettings, data: TaskData, process_index: int = 0,
                     process_count: int = 1, row_multiple: int = 1) -> batches.TrainBatches:
    """The run's endless, resumable iterator of host-local training batches
    (batches.TrainBatches): the model inputs and the kind's targets, bucketed, grouped by length
    or packed as config.data says; its shape_examples are what the train program compiles before
    the first step. row_multiple: packed batches have a multiple of this many rows (and of
    process_count)."""
    check_batching(config, data.kind)
    keys = kinds.MODEL_INPUTS + data.kind.target_keys
    rounding = max(1, config.batch_size // PACKED_ROW_COUNTS)
    packer = train_packer(config, data.kind,
                          np.lcm.reduce([row_multiple, process_count, rounding]).item())
    return batches.train_batches({k: data.train_features[k] for k in keys}, config.batch_size,
                                 config.seed, process_index, process_count,
                                 buckets=None if packer else train_buckets(config, data.kind),
                                 group_by_length=config.data.group_by_length,
                                 packer=packer)
