"""The run config's schema: every key a recipe reads, with its default and its meaning, once.

    config = run_config.pretrain_config()           # or run_config.finetune_config(task)
    config.model = run_config.model_block("base", vocab_size=30522)
    config.total_steps = 10_000
    run_config.meanings("pretrain")                 # {"optimizer.b1": "Adam's decay of ...", ...}

A run's config is an `ml_collections.ConfigDict` built from these functions (the files under
experiments/configs/ start from them, and every `--config.<key>=...` flag names one of these keys).
The schema is data: each key is a `Key(default, meaning)` (a model field a `Field(type,
meaning)`, None by default: the preset's) in the trees below, from which the configs are built
and `--help` takes each key's meaning (bert_jax.config.run_keys.help_lines);
bert_jax.config.run_keys.check holds a new run's config to it before anything of the run is
written. The loop's settings (`LOOP_DEFAULTS`) are also the defaults of
`bert_jax.config.settings.LoopConfig`.
A key added later must default to the behaviour runs had before it existed: a saved config.json
that lacks it is read with the default (`complete`), so old workdirs resume and evaluate as they
ran.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Mapping, NamedTuple, Union

if TYPE_CHECKING:  # ml_collections loads where a config is built: the train loop imports
    import ml_collections  # LOOP_DEFAULTS on images without it


class Key(NamedTuple):
    """A config key: its default and its meaning (what --help says of it)."""

    default: Any
    meaning: str


class Field(NamedTuple):
    """A model field a config may override: its type and meaning; None (the default) keeps the
    preset's or the init weights' value."""

    kind: type
    meaning: str


Tree = dict[str, Union[Key, Field, "Tree"]]

# Model fields a config may override (bert_jax.config.bert.BertConfig and
# bert_jax.config.modernbert.ModernBertConfig say what each means; a field the family has not is
# refused).
MODEL_KEYS: dict[str, Field] = {
    "vocab_size": Field(int, "embedding rows (None: the tokenizer's size); token ids must be "
                        "below it"),
    "hidden_size": Field(int, "width of every layer"),
    "num_hidden_layers": Field(int, "encoder layers"),
    "num_attention_heads": Field(int, "heads per attention layer (divides hidden_size)"),
    "intermediate_size": Field(int, "width of the feed-forward layer"),
    "max_position_embeddings": Field(int, "the longest row the model takes (>= max_seq_len)"),
    "type_vocab_size": Field(int, "token types (segments A and B)"),
    "hidden_dropout_prob": Field(float, "dropout on embeddings and layer outputs"),
    "attention_probs_dropout_prob": Field(float, "dropout on attention weights"),
    "hidden_act": Field(str, "the feed-forward activation: gelu | gelu_new | relu | ..."),
    "initializer_range": Field(float, "std of the random initial weights"),
    "layer_norm_eps": Field(float, "LayerNorm's epsilon"),
    "layer_norm_position": Field(str, "post (BERT as published) | pre"),
    "ffn_kind": Field(str, "the feed-forward layer: dense | geglu | swiglu"),
    "use_bias": Field(bool, "biases in the dense layers (False: none)"),
    "position_embedding_type": Field(str, "absolute (learned) | rotary"),
    "scan_layers": Field(bool, "one nn.scan over the layers (None: the init weights' layout, "
                         "else unrolled)"),
    "attention": Field(str, "how attention runs: auto | xla | splash | cudnn (None: auto, "
                       "whatever the init weights ran with; bert_jax.model.attention.choose)"),
    # ModernBERT only (family modernbert; bert_jax.config.modernbert.ModernBertConfig):
    "local_attention": Field(int, "the sliding window: query i sees key j where |i - j| <= "
                             "it // 2"),
    "global_attn_every_n_layers": Field(int, "layer i attends globally where i % this == 0"),
    "global_rope_theta": Field(float, "RoPE base of the global layers"),
    "local_rope_theta": Field(float, "RoPE base of the sliding-window layers"),
    "hidden_activation": Field(str, "the GeGLU's activation: gelu | gelu_new | ..."),
    "norm_eps": Field(float, "LayerNorm's epsilon"),
    "classifier_pooling": Field(str, "a classifier's pooling: cls | mean"),
}
MODEL_FIELDS = {name: field.kind for name, field in MODEL_KEYS.items()}  # name -> type

MODEL: Tree = {
    "preset": Key("tiny", "tiny | mini | small | medium | base | large "
                  "(bert_jax.config.bert.BertConfig.preset)"),
    "family": Key("bert", "bert | modernbert (model.families)"),
    **MODEL_KEYS,
}

# The training loop's keys (bert_jax.config.settings.LoopConfig takes its defaults from here).
LOOP: Tree = {
    "log_every_steps": Key(100, "a metrics line (metrics.jsonl, TensorBoard, the log) every N "
                           "steps"),
    "eval_every_steps": Key(0, "0: evaluate only at the end"),
    "checkpoint_every_steps": Key(1000, "0: only at the end (and on SIGTERM)"),
    "keep_checkpoints": Key(3, "the newest N checkpoints are kept"),
    "async_checkpoints": Key(True, "write checkpoints while training goes on"),
    "accumulation_steps": Key(1, "micro-batches per optimizer step"),
    "seed": Key(0, "parameters, dropout and data order"),
    "peak_flops_per_device": Key(0.0, "for MFU; 0: look it up by device kind "
                                 "(bert_jax.train.flops)"),
    "nonfinite": Key("stop", "A step with non-finite gradients changes nothing; \"stop\": the "
                     "run stops with an error at the next log step or save; \"skip\": it goes "
                     "on, and stops when, at a log step or save, the last "
                     "max_nonfinite_in_a_row steps were all such."),
    "max_nonfinite_in_a_row": Key(10, "\"skip\": the run stops after this many non-finite "
                                  "steps in a row"),
    "dropout_rng": Key("hash", "Dropout's random bits: \"hash\" (a counter hash: the cheapest, "
                       "the same on any mesh), \"threefry\" (JAX's generator, the same on any "
                       "mesh; what runs saved without this key used) or \"rbg\" (the same for "
                       "the same program; bert_jax.config.settings.DROPOUT_RNGS)."),
    "fsdp_collectives": Key("xla", "With mesh.fsdp > 1: \"xla\" leaves the fsdp collectives to "
                            "the SPMD partitioner; \"explicit\" writes them out "
                            "(bert_jax.train.fsdp: one all-gather of each fsdp-split parameter, "
                            "one reduce-scatter of its gradient; XLA:TPU's own choice moves up "
                            "to 2.8x those bytes)."),
}

# The optimizer (bert_jax.config.settings.OptimizerConfig): AdamW with BERT's settings.
OPTIMIZER: Tree = {
    "name": Key("adamw", "adamw | stable_adamw (AdamW whose step and weight decay of each "
                "parameter array are divided by max(1, RMS of g^2 / max(v_hat, eps^2)): update "
                "clipping, as ModernBERT trained; bert_jax.train.optimizer) | lamb"),
    "decay": Key("linear", "decay of the learning rate after the warm-up: linear | cosine | "
                 "constant | wsd (stable at the peak, then linear decay over the last "
                 "decay_fraction of the steps) | one_cycle (cosine up over the warm-up, cosine "
                 "down)"),
    "end_learning_rate_ratio": Key(0.0, "the last step's rate, as a fraction of the peak"),
    "decay_fraction": Key(0.2, "wsd only"),
    "b1": Key(0.9, "Adam's decay of the gradients' running mean"),
    "b2": Key(0.999, "Adam's decay of the squared gradients' running mean"),
    "eps": Key(1e-6, "added to the root of the squared gradients' mean"),
    "weight_decay": Key(0.01, "not on biases and LayerNorm parameters"),
    "clip_norm": Key(1.0, "global gradient norm; 0: no clipping"),
}


LEARNING_RATE = Key(1e-4, "the peak, after the warm-up")  # BERT pre-training's


def _base(recipe: str) -> Tree:
    """The keys every recipe reads (bert_jax.recipes.common)."""
    return {
        "recipe": Key(recipe, "pretrain | finetune: the bert_jax.recipes module that runs it"),
        "model": MODEL,
        "dtype": Key("float32", "compute dtype: float32 | bfloat16"),
        "remat": Key("none", "what each layer keeps for the backward pass: none | full | dots | "
                     "dots_no_batch"),
        # Where the weights start; neither: random init of config.model.preset.
        "init": {
            "hf_dir": Key("", "a Hugging Face BERT folder to start from"),
            "checkpoint": Key("", "our checkpoints folder (or one step of it) to start from"),
            "with_heads": Key(False, "keep the init weights' heads that fit (MLM, NSP, "
                              "classifier)"),
        },
        "tokenizer": {
            "path": Key("", "vocab.txt, tokenizer.json or a folder (default: init.hf_dir's; "
                        "pre-training on demo / text:GLOB: one trained on the corpus on first "
                        "use, under the data dir)"),
            "lowercase": Key(True, "lower-case and strip accents (a vocab.txt whose casing "
                             "nothing states)"),
        },
        "max_seq_len": Key(128, "tokens per row"),
        "batch_size": Key(32, "global, over all devices and processes"),
        "eval_batch_size": Key(64, "rows per held-out batch, over all devices"),
        "total_steps": Key(0, "optimizer steps"),
        "learning_rate": LEARNING_RATE,
        "warmup_fraction": Key(0.1, "of total_steps"),
        "warmup_steps": Key(0, "> 0: the warm-up in steps (an extended run keeps its warm-up)"),
        "optimizer": OPTIMIZER,
        # The device mesh (bert_jax.runtime.sharding).
        "mesh": {
            "data": Key(-1, "data-parallel replicas (-1: the devices fsdp and tensor leave)"),
            "fsdp": Key(1, "devices each parameter and its optimizer state are split over "
                        "(ZeRO-3)"),
            "tensor": Key(1, "devices each layer's matrices are split over (Megatron-style)"),
        },
        **LOOP,
        "allow_config_change": Key(False, "A rerun on a workdir must have the config the run "
                                   "started with (keys that change what it computes); true: the "
                                   "change is meant (the old config.json is kept beside the new "
                                   "one)."),
        "allow_changed_inputs": Key(False, "A resumed run whose inputs (corpus files, tokenizer "
                                    "files, data files: <workdir>/inputs.json, "
                                    "bert_jax.recipes.inputs) changed since it started stops; "
                                    "true: go on, the change recorded."),
    }


def _pretrain() -> Tree:
    """_base + the pre-training data block (bert_jax.recipes.pretrain)."""
    tree = _base("pretrain")
    tree["init"] = {**tree["init"], "with_heads": Key(
        True, "continuing pre-training keeps the MLM (and NSP) head")}
    tree["tokenizer"] = {**tree["tokenizer"], "vocab_size": Key(
        8192, "of the vocabulary trained for a demo or text: corpus")}
    tree["data"] = {
        "corpus": Key("demo", "demo | text:GLOB | a TFDS name | shards:DIR | synthetic (random "
                      "tokens)"),
        "document_delimiter": Key("blank_line", "text:GLOB documents: blank_line | line | file"),
        "data_dir": Key("", "default: <workdir>/data"),
        "max_predictions": Key(20, "masked positions per row (15% of 128, rounded up)"),
        "mask_rate": Key(0.15, "share of each row's tokens masked for the loss"),
        "eval_mask_rate": Key(0.15, "held-out rows: 15% whatever mask_rate is, comparable runs"),
        "whole_word_masking": Key(False, "mask every piece of a word together"),
        "sentence_pairs": Key(False, "True: NSP pairs and the NSP head, as in the paper"),
        "num_workers": Key(0, "grain worker processes"),
        "seconds_per_batch": Key(0.0, "synthetic corpus only: simulate a slow input pipeline"),
        # The batch-size warm-up (both > 0 to turn it on): the global batch rises from
        # batch_warmup_start rows to batch_size in a few steps of multiples of it
        "batch_warmup_tokens": Key(0, "the tokens the batch-size warm-up lasts (shards:DIR "
                                   "corpora; bert_jax.data.pretraining.batch_schedule); 0: off"),
        "batch_warmup_start": Key(0, "global rows of the warm-up's first steps (a multiple of "
                                  "the processes and of mesh.data x mesh.fsdp x "
                                  "accumulation_steps); 0: off"),
    }
    tree["eval_batches"] = Key(0, "0: the whole validation split")
    return tree


def _finetune(task: str) -> Tree:
    """_base + the fine-tuning keys (bert_jax.recipes.finetune)."""
    tree = _base("finetune")
    tree["task"] = Key(task, "classification | regression | multi_label | "
                       "token_classification | span_qa | contrastive")
    tree["data"] = {
        "train_path": Key("", "the training file (csv, tsv, jsonl, fasttext, CoNLL, SQuAD JSON)"),
        "eval_path": Key("", "the held-out file (or heldout_fraction, or tfds_name)"),
        "format": Key("auto", "csv | tsv | jsonl | fasttext (by extension when auto) | "
                      "csv_no_header | tsv_no_header (columns named by position: \"0\", \"1\", "
                      "...)"),
        "encoding": Key("utf-8", "the files' text encoding (e.g. utf-8, cp1252, latin-1)"),
        "tsv_quoting": Key(False, "TSV fields are taken as they are (GLUE); True: CSV-style "
                           "quotes"),
        "text_column": Key("text", "the text's column (JSONL key)"),
        "text_pair_column": Key("", "the second text's column, for pairs (empty: single texts)"),
        "label_column": Key("label", "the label's column"),
        "label_separator": Key("|", "multi_label: labels joined in one string"),
        "conll_tag_column": Key(-1, "CoNLL: the column of the tag (-1: the last)"),
        "heldout_fraction": Key(0.0, "> 0: hold this part of train_path out for evaluation"),
        "split_seed": Key(0, "which rows heldout_fraction holds out"),
        "tfds_name": Key("", "glue/sst2 | glue/mrpc | glue/stsb | glue/mnli | conll2003 | "
                         "squad ..."),
        "tfds_train_split": Key("train", "tfds_name's split to train on"),
        "tfds_eval_split": Key("validation", "tfds_name's split to evaluate on"),
        "tfds_data_dir": Key("", "where TFDS keeps its datasets (default: TFDS's own)"),
        "tfds_download": Key(True, "let TFDS download and prepare tfds_name"),
        "bucket_lengths": Key("auto", "Each batch cut to the smallest of these lengths that "
                              "holds its longest row: auto (32, 64, ... max_seq_len), none "
                              "(always max_seq_len), or e.g. \"16,32,48\"."),
        "group_by_length": Key(0, "G > 1: rows of similar length batched together, G-batch "
                               "windows"),
        "pack_examples": Key(0, "K >= 2: training packs up to K examples into one row "
                             "(classification, regression, multi_label): the same batches of "
                             "examples, almost no padding; 0: off"),
        "long_inputs": Key("truncate", "Inputs longer than a row, in evaluation and prediction: "
                           "truncate (cut at max_seq_len) | slide (windows window_stride apart; "
                           "classification, regression, multi_label: the mean of the windows' "
                           "logits, single texts only; token_classification: each word from "
                           "the window whose centre is nearest to it). Training always "
                           "truncates; span_qa always slides (squad.doc_stride)."),
        "window_stride": Key(0, "slide: tokens between window starts; 0: (max_seq_len - 2) // 2"),
    }
    # span_qa only: windows over long contexts, and how answers are read from the logits
    tree["squad"] = {
        "doc_stride": Key(128, "tokens between the starts of a long context's windows"),
        "max_query_len": Key(64, "question tokens kept"),
        "n_best": Key(20, "start and end candidates read per window"),
        "max_answer_length": Key(30, "the longest answer, in tokens"),
        "version_2": Key(False, "SQuAD 2.0: questions may have no answer"),
        "no_answer_threshold": Key(0.0, "version_2: no answer when its score beats the best by "
                                   "this"),
    }
    # contrastive only: sentence embeddings from (anchor, positive[, hard negative]) rows, the
    # anchor in data.text_column, the positive in data.text_pair_column
    tree["contrastive"] = {
        "scale": Key(20.0, "scores are scale x cosine (sentence-transformers' default, "
                     "1/temperature)"),
        "symmetric": Key(False, "also each positive against all anchors, the two losses "
                         "averaged"),
        "pooling": Key("mean", "mean | cls: as bert_jax.embeddings.encode.pool, then "
                       "L2-normalised"),
        "negative_column": Key("", "the hard negative's column (empty: none, in-batch "
                               "negatives only)"),
    }
    tree["epochs"] = Key(3.0, "passes over the training rows (when total_steps is 0)")
    # BERT's fine-tuning: 2-3 epochs, lr 2e-5..5e-5, 10% warm-up
    tree["total_steps"] = Key(0, "optimizer steps; 0: from epochs")
    tree["learning_rate"] = tree["learning_rate"]._replace(default=3e-5)
    for key, default in (("log_every_steps", 10), ("checkpoint_every_steps", 0),
                         ("keep_checkpoints", 1)):
        tree[key] = tree[key]._replace(default=default)
    return tree


def _defaults(tree: Tree) -> dict[str, Any]:
    """{key: default} of a tree (a model field's default is a typed placeholder: None)."""
    from ml_collections import config_dict
    out: dict[str, Any] = {}
    for key, entry in tree.items():
        if isinstance(entry, Key):
            out[key] = copy.deepcopy(entry.default)
        elif isinstance(entry, Field):
            out[key] = config_dict.placeholder(entry.kind)
        else:
            out[key] = _defaults(entry)
    return out


def _config(tree: Tree) -> ml_collections.ConfigDict:
    import ml_collections
    return ml_collections.ConfigDict(_defaults(tree))


def _meanings(tree: Tree, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, entry in tree.items():
        if isinstance(entry, (Key, Field)):
            out[prefix + key] = entry.meaning
        else:
            out.update(_meanings(entry, f"{prefix}{key}."))
    return out


LOOP_DEFAULTS: dict[str, Any] = {key: entry.default for key, entry in LOOP.items()}


def meanings(recipe: str) -> dict[str, str]:
    """{dotted key: its meaning} for every key of `recipe`'s schema (pretrain | finetune)."""
    return _meanings(_pretrain() if recipe == "pretrain" else _finetune("classification"))


def model_block(preset: str = "tiny", family: str = "bert", **overrides
                ) -> ml_collections.ConfigDict:
    """A preset (tiny | mini | small | medium | base | large) of a model family (bert |
    modernbert) plus any field of MODEL_FIELDS overridden (None: the preset's)."""
    unknown = sorted(set(overrides) - set(MODEL_FIELDS))
    if unknown:
        raise ValueError(f"model_block: unknown model fields {unknown}")
    block = _config(MODEL)
    block.preset, block.family = preset, family
    block.update(overrides)
    return block


def optimizer_block(**overrides) -> ml_collections.ConfigDict:
    """The optimizer (bert_jax.config.settings.OptimizerConfig): AdamW with BERT's settings."""
    block = _config(OPTIMIZER)
    block.update(overrides)
    return block


def base_config(recipe: str) -> ml_collections.ConfigDict:
    """The keys every recipe reads (bert_jax.recipes.common), with their usual values."""
    return _config(_base(recipe))


def pretrain_config() -> ml_collections.ConfigDict:
    """base_config + the pre-training data block (bert_jax.recipes.pretrain)."""
    return _config(_pretrain())


def finetune_config(task: str) -> ml_collections.ConfigDict:
    """base_config + the fine-tuning keys (bert_jax.recipes.finetune): 2-3 epochs, lr 2e-5..5e-5,
    10% warm-up, as usual for BERT."""
    return _config(_finetune(task))


def defaults_for(saved: Mapping[str, Any]) -> ml_collections.ConfigDict:
    """The schema's config for the recipe (and fine-tuning task) a saved config names."""
    recipe = saved.get("recipe", "pretrain")
    if recipe == "finetune":
        return finetune_config(saved.get("task", "classification"))
    return pretrain_config()


# Keys whose default changed after runs were saved without them: such a run ran with this value,
# not with today's default.
RAN_WITH_WHEN_ABSENT = {"dropout_rng": "threefry"}


def complete(saved: Mapping[str, Any]) -> dict[str, Any]:
    """A saved config (a plain dict, as config.json holds it) with every key of the schema that it
    lacks set to the behaviour it ran with: the default, or RAN_WITH_WHEN_ABSENT's value for a key
    whose default changed since; its own keys, known or not, kept."""
    merged = plain(defaults_for(saved).to_dict())
    merged.update({key: value for key, value in RAN_WITH_WHEN_ABSENT.items()
                   if key in merged and key not in saved})

    def overlay(into: dict, values: Mapping[str, Any]) -> None:
        for key, value in values.items():
            if isinstance(value, Mapping) and isinstance(into.get(key), dict):
                overlay(into[key], value)
            else:
                into[key] = copy.deepcopy(value)

    overlay(merged, saved)
    return merged


def plain(tree: Any) -> Any:
    """A ConfigDict's to_dict() with placeholders as None (what config.json holds for them)."""
    from ml_collections import config_dict
    if isinstance(tree, dict):
        return {key: plain(value) for key, value in tree.items()}
    if isinstance(tree, config_dict.FieldReference):
        return tree.get()
    return tree


LONG_INPUTS = ("truncate", "slide")  # the values of data.long_inputs
