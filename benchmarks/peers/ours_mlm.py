"""Our implementation in the race: bert_jax's pre-training recipe, piece by piece.

Everything comes from the library as `experiments/pretrain.py` would build it
(`bert_jax.recipes.pretrain.pieces`): the data pipeline (packing, dynamic masking in
`make_iterator`), the model and MLM loss of the recipe, the optimizer of
`bert_jax.train.optimizer`, and the TrainState and jitted step that `bert_jax.train.loop` runs
(`bert_jax.train.program`: sharded, state donated); evaluation is the recipe's `LossEvaluator`.

    ours_classic    BERT as published: post-LN, learned absolute positions, GELU, dense FFN,
                    AdamW with linear warm-up and linear decay, 15% dynamic masking; the
                    comparison's shared hyper-parameters (the peers' too)
    ours_efficient  experiments/configs/efficient.py: everything from its get_config() but the
                    model size, the corpus and vocabulary, the 128-token rows, the seed and the
                    step count; batch size, learning rate and warm-up only where the comparison's
                    flags name them. A gated FFN gets the width that keeps the dense FFN's
                    parameter count. Without that file: PLACEHOLDER_EFFICIENT on the classic
                    recipe.
    ours_modern     experiments/configs/modern.py's phase of 128-token rows (MODERN_PHASE),
                    taken as ours_efficient takes efficient.py: the ModernBERT family and the
                    rest of that phase's config (its initialisation, schedule and optimizer; its
                    30% masking in training, while the held-out rows stay the shared 15%); batch
                    size, learning rate and warm-up only where the comparison's flags name them.
                    The model (`modern_sizes`): the comparison's hidden size, layers and heads,
                    the GeGLU width that keeps the dense FFN's parameter count, and modern.py's
                    attention pattern (ModernBertConfig's defaults: layer i global iff
                    i % 3 == 0, the others a window of 128 tokens, 64 on each side).

At the comparison's 128-token rows that window is not the whole row: a query of a local layer
sees the keys within 64 positions (and, in a packed row, of its own piece), about 75% of a full
row's query-key pairs, and all of a piece of at most 65 tokens. What the window saves, memory
linear in the row length, pays at modern.py's 1,024-token rows, not here.
"""

from __future__ import annotations

import dataclasses
import importlib

import jax
import numpy as np

from benchmarks.peers import heldout as heldout_lib
from benchmarks.peers import inputs
from bert_jax.config import run as run_config
from bert_jax.config.bert import gated_intermediate_size
from bert_jax.model import families
from bert_jax.recipes import pretrain
from bert_jax.runtime import sharding
from bert_jax.train import evaluation

EFFICIENT_MODULE = "experiments.configs.efficient"
MODERN_MODULE = "experiments.configs.modern"
MODERN_PHASE = "short"  # modern.py's phase of the comparison's row length (inputs.SEQ_LEN)
PLACEHOLDER_EFFICIENT = {"model.layer_norm_position": "pre",
                         "model.position_embedding_type": "rotary", "data.mask_rate": 0.3,
                         "data.max_predictions": 40}  # ceil((128 - 2) x 0.3) = 38, rounded up
SIZE_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
TRAIN_KEYS = ("batch_size", "learning_rate", "warmup_fraction")


def _shared(config, spec: dict) -> None:
    """What every implementation shares: size, vocabulary, corpus, 128-token rows, seed;
    random initialisation."""
    config.model.preset = spec["model"]["preset"]
    for field in SIZE_FIELDS:
        config.model[field] = spec["model"][field]
    config.model.vocab_size = spec["vocab_size"]
    config.tokenizer.path = spec["vocab_path"]
    config.init.hf_dir, config.init.checkpoint = "", ""
    config.data.corpus, config.data.data_dir = spec["corpus"], spec["data_dir"]
    config.data.num_workers = 0
    config.max_seq_len = inputs.SEQ_LEN
    config.seed = spec["seed"]


def classic_config(spec: dict):
    """The classic recipe with the comparison's hyper-parameters (spec["train"])."""
    config = run_config.pretrain_config()
    config.model = run_config.model_block(spec["model"]["preset"])
    _shared(config, spec)
    config.data.mask_rate, config.data.max_predictions = inputs.MASK_RATE, inputs.MAX_PREDICTIONS
    train = spec["train"]
    for key in TRAIN_KEYS:
        config[key] = train[key]
    config.optimizer = run_config.optimizer_block(**train["optimizer"])
    return config


def efficient_config(spec: dict):
    """(config, where it came from): experiments/configs/efficient.py, or the placeholder."""
    try:
        module = importlib.import_module(EFFICIENT_MODULE)
    except ModuleNotFoundError as e:
        if e.name != EFFICIENT_MODULE:
            raise
        config = classic_config(spec)
        for key, value in PLACEHOLDER_EFFICIENT.items():
            block, field = key.split(".")
            config[block][field] = value
        return config, f"placeholder (no {EFFICIENT_MODULE}): {PLACEHOLDER_EFFICIENT}"
    config = module.get_config()
    _shared(config, spec)
    if config.model.ffn_kind in ("geglu", "swiglu"):
        config.model.intermediate_size = gated_intermediate_size(
            spec["model"]["hidden_size"], spec["model"]["intermediate_size"])
    for key in spec["explicit"]:
        config[key] = spec["train"][key]
    return config, module.__file__


def modern_sizes(model: dict) -> dict:
    """ours_modern's size fields for the comparison's `model` (the dense BERT's hidden_size,
    num_hidden_layers, num_attention_heads, intermediate_size): the same, but the GeGLU width
    that keeps the dense FFN's parameter count."""
    return {"hidden_size": model["hidden_size"],
            "num_hidden_layers": model["num_hidden_layers"],
            "num_attention_heads": model["num_attention_heads"],
            "intermediate_size": gated_intermediate_size(model["hidden_size"],
                                                         model["intermediate_size"])}


def check_modern_size(preset: str, model: dict, vocab_size: int) -> None:
    """ConfigError where ours_modern cannot be of the comparison's size (rotary positions need
    an even head_dim): the parent asks before anything long runs."""
    families.get(families.MODERNBERT).preset(preset, vocab_size=vocab_size,
                                             **modern_sizes(model))


def modern_config(spec: dict):
    """(config, its file): experiments/configs/modern.py's MODERN_PHASE with the comparison's
    size (`modern_sizes`), corpus, vocabulary, seed and rows, its own masking in training; the
    comparison's batch size, learning rate and warm-up only where flagged."""
    module = importlib.import_module(MODERN_MODULE)
    config = module.get_config(MODERN_PHASE)
    if config.max_seq_len != inputs.SEQ_LEN:  # its prediction slots are sized for its rows
        raise ValueError(f"{MODERN_MODULE}:{MODERN_PHASE} trains {config.max_seq_len}-token "
                         f"rows, not the comparison's {inputs.SEQ_LEN}")
    _shared(config, spec)
    for field, value in modern_sizes(spec["model"]).items():
        config.model[field] = value
    for key in spec["explicit"]:
        config[key] = spec["train"][key]
    return config, module.__file__


class _Ours:
    """The recipe's pieces behind the harness's calls (benchmarks/peers/clocked.py)."""

    def __init__(self, spec: dict, config, source: str):
        self.spec, self.config, self.source = spec, config, source
        self.rows_per_step = config.batch_size
        self.pieces = self.state = self.train_fn = self.pending = self.evaluator = None
        self.rows: heldout_lib.Heldout | None = None
        self.masked = 0.0

    def prepare(self, total_steps: int) -> None:
        config = self.config.copy_and_resolve_references()
        config.total_steps = total_steps
        self.pieces = pretrain.pieces(config, self.spec["run_dir"])
        self.evaluator = evaluation.LossEvaluator(self.pieces.task.loss_fn, self._eval_batches,
                                                  self.pieces.mesh)

    def init(self) -> None:
        self.state = self.train_fn = self.pending = None  # the previous state's memory first
        built = self.pieces.build()  # a fresh state and the loop's jitted step
        self.state, self.train_fn = built.state, built.train_step

    def train_step(self) -> None:
        batch = next(self.pieces.train_iterator)
        self.sync()
        self.state, metrics = self.train_fn(
            self.state, sharding.device_put_batch(batch, self.pieces.mesh))
        self.pending = metrics["loss"]

    def sync(self) -> None:
        if self.pending is not None:
            self.pending.block_until_ready()

    def _eval_batches(self):
        for batch in self.rows.batches():
            self.masked += float(batch["masked_weights"].sum())
            yield batch

    def evaluate(self, rows: heldout_lib.Heldout) -> dict[str, float]:
        self.rows, self.masked = rows, 0.0
        metrics = self.evaluator(self.state.params)
        return {"accuracy": metrics["mlm_accuracy"], "loss": metrics["mlm_loss"],
                "masked_tokens": int(self.masked)}

    def describe(self) -> dict:
        config = self.config
        return {"config_source": self.source,
                "model": dataclasses.asdict(self.pieces.task.model_config),
                "recipe": {"max_seq_len": config.max_seq_len, "batch_size": config.batch_size,
                           "learning_rate": config.learning_rate,
                           "warmup_fraction": config.warmup_fraction,
                           "optimizer": config.optimizer.to_dict(),
                           "data": config.data.to_dict(), "dtype": config.dtype},
                "num_params": int(sum(np.size(x) for x in jax.tree.leaves(self.state.params)))}


class OursClassic(_Ours):
    def __init__(self, spec: dict):
        super().__init__(spec, classic_config(spec), "the classic BERT recipe")


class OursEfficient(_Ours):
    def __init__(self, spec: dict):
        super().__init__(spec, *efficient_config(spec))


class OursModern(_Ours):
    def __init__(self, spec: dict):
        super().__init__(spec, *modern_config(spec))
