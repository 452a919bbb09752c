"""The interface of a fine-tuning task kind, and the registry that the recipe looks kinds up in.

A kind says, for one family of tasks, everything that differs between them:

    read(path, config)               examples of a local file (TFDS names are read generically)
    describe_labels(train_examples, config)
                                     {"label_map": [...], ...}: what the training labels fix,
                                     saved in task.json and with every checkpoint
    encode(tokenizer, examples, config, labels, source)
                                     numpy features, one row per model input row: input_ids,
                                     token_type_ids, attention_mask [N, L] and the targets
    encode_eval(tokenizer, examples, config, labels, source)
                                     the rows evaluation predicts: encode's, or, with
                                     data.long_inputs='slide' (`window_stride`), sliding
                                     windows: F rows, example_index [F] naming each row's
                                     example (targets stay one per example); score folds them
    make_model(cfg, labels)          the Flax module (encoder + head)
    loss(outputs, batch, example_weights)
                                     (loss terms, metrics) as (sum, weight) pairs (steps.LossFn),
                                     each example weighted by example_weights [B] (packed:
                                     [R, K]; 0 for padding; a packed batch with token targets
                                     also has the weight of each token, token_weights [R, L])
    predict(outputs, batch)          {name: float32 array [B, ...]}: what scoring needs
    score(data, outputs, config)     (metrics, prediction records) of the whole eval set
    write(records, directory)        prediction files; returns their paths
    head_outputs(labels, seq_len)    outputs per row of the head, for the FLOP count

and, for predictions on new inputs (bert_jax.recipes.finetune.predict):

    read_unlabelled(path, config, file_format)
                                     unlabelled.Rows: the good rows' examples (labels absent or
                                     ignored) and the bad rows named by file and line
    encode_unlabelled(tokenizer, examples, config, labels, source)
                                     (features, cut): the model inputs [N', L] plus what
                                     prediction_records reads (windows as in encode_eval);
                                     cut = {what was cut short (or read in windows): how
                                     many examples}, e.g. inputs truncated to max_seq_len
    prediction_records(examples, features, outputs, labels, config)
                                     one JSON-able dict per example, in order

`config` is the run's settings (bert_jax.config.settings.RunSettings: the recipe reads the run
config once and hands them on; never its ConfigDict), read by attribute: config.data.<key>,
config.squad.<key>, config.max_seq_len, ...

Adding a kind: one module with a TaskKind subclass decorated with `@register`, and its import in
`bert_jax/recipes/finetune/__init__.py` (see the multi-label kind).
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping, Optional, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.config import run as run_config
from bert_jax.config.bert import BertConfig, ConfigError
from bert_jax.config.settings import RunSettings
from bert_jax.data import example_packing
from bert_jax.data.finetuning import unlabelled
from bert_jax.recipes.finetune.losses import LossOutput
from bert_jax.runtime import paths

MODEL_INPUTS = ("input_ids", "token_type_ids", "attention_mask")

REGISTRY: dict[str, TaskKind] = {}


class TaskKind:
    """One family of fine-tuning tasks (module docstring). Subclasses set `name`."""

    name: str = ""
    target_keys: tuple[str, ...] = ("labels",)  # feature keys the loss reads
    # Targets and predict() outputs with a value per token ([N, L, ...]): bucketed batches cut
    # those targets with the inputs, and pad those outputs back to max_seq_len.
    token_keys: tuple[str, ...] = ()
    token_outputs: tuple[str, ...] = ()
    stratify_by_label = False  # a held-out split keeps the share of each (single) label
    # Training may pack several examples into one row (data.pack_examples): the model takes
    # the packed_inputs of the batch (example_packing: segment_ids; example_positions, where a
    # pooled head reads each example), and the per-example outputs, targets and weights get a
    # packed axis [rows, k, ...] that loss() must accept. Token targets (token_keys) stay
    # [rows, L, ...] under their tokens, no_token_value(key) elsewhere, and the batch has
    # token_weights [rows, L].
    packable = False
    packed_inputs: tuple[str, ...] = (example_packing.SEGMENT_IDS,
                                      example_packing.EXAMPLE_POSITIONS)
    # data.long_inputs='slide' applies: encode_eval and encode_unlabelled read long inputs in
    # windows (span QA's contexts always are)
    slides_long_inputs = False

    def read(self, path: str, config: RunSettings) -> list:
        raise NotImplementedError

    def no_token_value(self, key: str) -> Any:
        """What token target `key` holds at a position of no token (packed rows: the padding
        between and after the examples); the loss must give it no weight."""
        return 0

    def describe_labels(self, train_examples: Sequence[Any], config: RunSettings
                        ) -> dict[str, Any]:
        return {}

    def encode(self, tokenizer, examples: Sequence[Any], config: RunSettings,
               labels: Mapping[str, Any], source: str) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def encode_eval(self, tokenizer, examples: Sequence[Any], config: RunSettings,
                    labels: Mapping[str, Any], source: str) -> dict[str, np.ndarray]:
        """The rows evaluation predicts (module docstring): encode's, the training rows."""
        return self.encode(tokenizer, examples, config, labels, source)

    def make_model(self, cfg: BertConfig, labels: Mapping[str, Any]) -> nn.Module:
        raise NotImplementedError

    def loss(self, outputs: Any, batch: Mapping[str, jax.Array],
             example_weights: jax.Array) -> LossOutput:
        raise NotImplementedError

    def predict(self, outputs: Any, batch: Mapping[str, jax.Array]) -> dict[str, jax.Array]:
        return {"logits": outputs.astype(jnp.float32)}

    def score(self, data, outputs: Mapping[str, np.ndarray], config: RunSettings
              ) -> tuple[dict, Any]:
        raise NotImplementedError

    def write(self, records: Any, directory: str) -> list[str]:
        return [write_jsonl(records, os.path.join(directory, "predictions.jsonl"))]

    def num_outputs(self, labels: Mapping[str, Any]) -> int:
        """Outputs of the head per row (a logit per class, or one score)."""
        return len(labels.get("label_map", ())) or 1

    def head_outputs(self, labels: Mapping[str, Any], seq_len: int) -> int:
        return self.num_outputs(labels)

    def read_unlabelled(self, path: str, config: RunSettings, file_format: str
                        ) -> unlabelled.Rows:
        raise ValueError(f"task kind {self.name!r} does not read unlabelled input (prediction)")

    def encode_unlabelled(self, tokenizer, examples: Sequence[Any], config: RunSettings,
                          labels: Mapping[str, Any], source: str
                          ) -> tuple[dict[str, np.ndarray], dict[str, int]]:
        raise ValueError(f"task kind {self.name!r} does not encode unlabelled input")

    def prediction_records(self, examples: Sequence[Any], features: Mapping[str, np.ndarray],
                           outputs: Mapping[str, np.ndarray], labels: Mapping[str, Any],
                           config: RunSettings) -> list[dict[str, Any]]:
        raise ValueError(f"task kind {self.name!r} does not write prediction records")


def register(cls: type[TaskKind]) -> type[TaskKind]:
    """Class decorator: put one instance of the kind in REGISTRY under its name."""
    if not cls.name or cls.name in REGISTRY:
        raise ValueError(f"task kind {cls.__name__}: name {cls.name!r} is empty or taken")
    REGISTRY[cls.name] = cls()
    return cls


def get(name: str) -> TaskKind:
    if name not in REGISTRY:
        raise ValueError(f"config.task={name!r} is unknown; choose one of {sorted(REGISTRY)}")
    return REGISTRY[name]


def window_stride(config: RunSettings) -> Optional[int]:
    """Tokens between the starts of the sliding windows over inputs longer than a row
    (data.long_inputs='slide': data.window_stride, 0 for (max_seq_len - 2) // 2), or None
    when they are truncated ('truncate'). A value no run can use (predict.py's --long_inputs
    meets no schema check) is a one-line ConfigError."""
    data = config.data
    mode = data.long_inputs
    if mode not in run_config.LONG_INPUTS:
        raise ConfigError(f"config.data.long_inputs={mode!r} must be one of "
                          f"{', '.join(run_config.LONG_INPUTS)}")
    if mode == "truncate":
        return None
    window = config.max_seq_len - 2
    stride = data.window_stride or max(window // 2, 1)
    if not 1 <= stride <= window:
        raise ConfigError(f"config.data.window_stride={stride} must be in [1, max_seq_len - 2 "
                          f"= {window}] (the text tokens of a row; 0: half of them)")
    return stride


def write_jsonl(records: Sequence[Mapping[str, Any]], path: str) -> str:
    """One JSON object per line (UTF-8, non-ASCII kept), written whole; returns the path."""
    paths.write_text_atomically(
        path, "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records))
    return path


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax of float logits [..., C], computed stably on the host."""
    shifted = logits - logits.max(-1, keepdims=True)
    return np.exp(shifted) / np.exp(shifted).sum(-1, keepdims=True)


def by_label(label_map: Sequence[str], probabilities: np.ndarray,
             digits: Optional[int] = None) -> dict[str, float]:
    """{label: probability} of one example's probabilities [C], in label_map's order: the
    "probabilities" of every prediction record, the run's own and predict.py's alike (rounded
    to `digits` decimals when given)."""
    values = [float(p) for p in probabilities]
    return dict(zip(label_map, values if digits is None else [round(p, digits) for p in values]))
