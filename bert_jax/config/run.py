"""The run config's schema: every key a recipe reads, with its default and its meaning, once.

    config = run_config.pretrain_config()           # or run_config.finetune_config(task)
    config.model = run_config.model_block("base", vocab_size=30522)
    config.total_steps = 10_000

A run's config is an `ml_collections.ConfigDict` built from these functions (the files under
experiments/configs/ start from them, and every `--config.<key>=...` flag names one of these keys).
The loop's settings (`LOOP_DEFAULTS`) are also the defaults of
`bert_jax.config.settings.LoopConfig`.
A key added later must default to the behaviour runs had before it existed: a saved config.json
that lacks it is read with the default (`complete`), so old workdirs resume and evaluate as they
ran.

Every key has a comment here, on its line or the lines just above it: `--help` shows it as the
key's meaning (bert_jax.config.run_keys.describe reads this file's source, so the schema is
written once: keys are set as `config.<key> = ...`, `dict(<key>=...)` or `{"<key>": ...}` in the
functions and module-level dicts it names), and bert_jax.config.run_keys.check holds a new run's
config to the schema before anything of the run is written.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:  # ml_collections loads where a config is built: the train loop imports
    import ml_collections  # LOOP_DEFAULTS on images without it

# Model fields a config may override, with their types (bert_jax.config.bert.BertConfig and
# bert_jax.config.modernbert.ModernBertConfig say what each means; placeholders keep them typed,
# None keeps the preset's or the init weights' value; a field the family has not is refused).
MODEL_FIELDS = {
    "vocab_size": int,  # embedding rows (None: the tokenizer's size); token ids must be below it
    "hidden_size": int,  # width of every layer
    "num_hidden_layers": int,  # encoder layers
    "num_attention_heads": int,  # heads per attention layer (divides hidden_size)
    "intermediate_size": int,  # width of the feed-forward layer
    "max_position_embeddings": int,  # the longest row the model takes (>= max_seq_len)
    "type_vocab_size": int,  # token types (segments A and B)
    "hidden_dropout_prob": float,  # dropout on embeddings and layer outputs
    "attention_probs_dropout_prob": float,  # dropout on attention weights
    "hidden_act": str,  # the feed-forward activation: gelu | gelu_new | relu | ...
    "initializer_range": float,  # std of the random initial weights
    "layer_norm_eps": float,  # LayerNorm's epsilon
    "layer_norm_position": str,  # post (BERT as published) | pre
    "ffn_kind": str,  # the feed-forward layer: dense | geglu | swiglu
    "use_bias": bool,  # biases in the dense layers (False: none)
    "position_embedding_type": str,  # absolute (learned) | rotary
    # one nn.scan over the layers (None: the init weights' layout, else unrolled)
    "scan_layers": bool,
    # how attention runs: auto | xla | splash | cudnn (None: auto, whatever the init
    # weights ran with; bert_jax.model.attention.choose)
    "attention": str,
    # ModernBERT only (family modernbert; bert_jax.config.modernbert.ModernBertConfig):
    "local_attention": int,  # the sliding window: query i sees key j where |i - j| <= it // 2
    "global_attn_every_n_layers": int,  # layer i attends globally where i % this == 0
    "global_rope_theta": float,  # RoPE base of the global layers
    "local_rope_theta": float,  # RoPE base of the sliding-window layers
    "hidden_activation": str,  # the GeGLU's activation: gelu | gelu_new | ...
    "norm_eps": float,  # LayerNorm's epsilon
    "classifier_pooling": str,  # a classifier's pooling: cls | mean
}

# The training loop's keys (bert_jax.config.settings.LoopConfig takes its defaults from here).
LOOP_DEFAULTS: dict[str, Any] = dict(
    log_every_steps=100,  # a metrics line (metrics.jsonl, TensorBoard, the log) every N steps
    eval_every_steps=0,  # 0: evaluate only at the end
    checkpoint_every_steps=1000,  # 0: only at the end (and on SIGTERM)
    keep_checkpoints=3,  # the newest N checkpoints are kept
    async_checkpoints=True,  # write checkpoints while training goes on
    accumulation_steps=1,  # micro-batches per optimizer step
    seed=0,  # parameters, dropout and data order
    peak_flops_per_device=0.0,  # for MFU; 0: look it up by device kind (bert_jax.train.flops)
    # A step with non-finite gradients changes nothing; "stop": the run stops with an error at
    # the next log step or save; "skip": it goes on, and stops when, at a log step or save, the
    # last max_nonfinite_in_a_row steps were all such.
    nonfinite="stop",
    max_nonfinite_in_a_row=10,  # "skip": the run stops after this many non-finite steps in a row
    # Dropout's random bits: "hash" (a counter hash: the cheapest, the same on any mesh),
    # "threefry" (JAX's generator, the same on any mesh; what runs saved without this key used)
    # or "rbg" (the same for the same program; bert_jax.config.settings.DROPOUT_RNGS).
    dropout_rng="hash",
    # With mesh.fsdp > 1: "xla" leaves the fsdp collectives to the SPMD partitioner; "explicit"
    # writes them out (bert_jax.train.fsdp: one all-gather of each fsdp-split parameter, one
    # reduce-scatter of its gradient; XLA:TPU's own choice moves up to 2.8x those bytes).
    fsdp_collectives="xla",
)


def model_block(preset: str = "tiny", family: str = "bert", **overrides
                ) -> ml_collections.ConfigDict:
    """A preset (tiny | mini | small | medium | base | large) of a model family (bert |
    modernbert) plus any field of MODEL_FIELDS overridden (None: the preset's)."""
    import ml_collections
    from ml_collections import config_dict
    unknown = sorted(set(overrides) - set(MODEL_FIELDS))
    if unknown:
        raise ValueError(f"model_block: unknown model fields {unknown}")
    block = {name: config_dict.placeholder(kind) for name, kind in MODEL_FIELDS.items()}
    block.update(overrides)
    # preset: tiny | mini | small | medium | base | large (bert_jax.config.bert.BertConfig.preset)
    return ml_collections.ConfigDict({"preset": preset,
                                      "family": family,  # bert | modernbert (model.families)
                                      **block})


def optimizer_block(**overrides) -> ml_collections.ConfigDict:
    """The optimizer (bert_jax.config.settings.OptimizerConfig): AdamW with BERT's settings."""
    import ml_collections
    block = dict(
        # adamw | stable_adamw (AdamW whose step and weight decay of each parameter array are
        # divided by max(1, RMS of g^2 / max(v_hat, eps^2)): update clipping, as ModernBERT
        # trained; bert_jax.train.optimizer) | lamb
        name="adamw",
        # decay of the learning rate after the warm-up: linear | cosine | constant | wsd (stable
        # at the peak, then linear decay over the last decay_fraction of the steps) | one_cycle
        # (cosine up over the warm-up, cosine down)
        decay="linear",
        end_learning_rate_ratio=0.0,  # the last step's rate, as a fraction of the peak
        decay_fraction=0.2,  # wsd only
        b1=0.9,  # Adam's decay of the gradients' running mean
        b2=0.999,  # Adam's decay of the squared gradients' running mean
        eps=1e-6,  # added to the root of the squared gradients' mean
        weight_decay=0.01,  # not on biases and LayerNorm parameters
        clip_norm=1.0,  # global gradient norm; 0: no clipping
    )
    block.update(overrides)
    return ml_collections.ConfigDict(block)


def base_config(recipe: str) -> ml_collections.ConfigDict:
    """The keys every recipe reads (bert_jax.recipes.common), with their usual values."""
    import ml_collections
    config = ml_collections.ConfigDict()
    config.recipe = recipe  # pretrain | finetune: the bert_jax.recipes module that runs it
    config.model = model_block()
    config.dtype = "float32"  # compute dtype: float32 | bfloat16
    # what each layer keeps for the backward pass: none | full | dots | dots_no_batch
    config.remat = "none"
    # Where the weights start: a Hugging Face BERT folder, or our checkpoints folder (or one step
    # of it); neither: random init of config.model.preset. with_heads keeps the heads that fit.
    config.init = ml_collections.ConfigDict(dict(
        hf_dir="",  # a Hugging Face BERT folder to start from
        checkpoint="",  # our checkpoints folder (or one step of it) to start from
        with_heads=False,  # keep the init weights' heads that fit (MLM, NSP, classifier)
    ))
    config.tokenizer = ml_collections.ConfigDict(dict(
        path="",  # vocab.txt, tokenizer.json or a folder (default: init.hf_dir's; pre-training
        # on demo / text:GLOB: one trained on the corpus on first use, under the data dir)
        lowercase=True,  # lower-case and strip accents (a vocab.txt whose casing nothing states)
    ))
    config.max_seq_len = 128  # tokens per row
    config.batch_size = 32  # global, over all devices and processes
    config.eval_batch_size = 64  # rows per held-out batch, over all devices
    config.total_steps = 0  # optimizer steps
    config.learning_rate = 1e-4  # the peak, after the warm-up
    config.warmup_fraction = 0.1  # of total_steps
    config.warmup_steps = 0  # > 0: the warm-up in steps (an extended run keeps its warm-up)
    config.optimizer = optimizer_block()
    # The device mesh (bert_jax.runtime.sharding): -1 takes the devices the other two leave.
    config.mesh = ml_collections.ConfigDict(dict(
        data=-1,  # data-parallel replicas (-1: the devices fsdp and tensor leave)
        fsdp=1,  # devices each parameter and its optimizer state are split over (ZeRO-3)
        tensor=1,  # devices each layer's matrices are split over (Megatron-style)
    ))
    config.update(LOOP_DEFAULTS)
    # A rerun on a workdir must have the config the run started with (keys that change what it
    # computes); true: the change is meant (the old config.json is kept beside the new one).
    config.allow_config_change = False
    # A resumed run whose inputs (corpus files, tokenizer files, data files: <workdir>/inputs.json,
    # bert_jax.recipes.inputs) changed since it started stops; true: go on, the change recorded.
    config.allow_changed_inputs = False
    return config


def pretrain_config() -> ml_collections.ConfigDict:
    """base_config + the pre-training data block (bert_jax.recipes.pretrain)."""
    import ml_collections
    config = base_config("pretrain")
    config.init.with_heads = True  # continuing pre-training keeps the MLM (and NSP) head
    config.tokenizer.vocab_size = 8192  # of the vocabulary trained for a demo or text: corpus
    config.data = ml_collections.ConfigDict(dict(
        corpus="demo",  # demo | text:GLOB | a TFDS name | shards:DIR | synthetic (random tokens)
        document_delimiter="blank_line",  # text:GLOB documents: blank_line | line | file
        data_dir="",  # default: <workdir>/data
        max_predictions=20,  # masked positions per row (15% of 128, rounded up)
        mask_rate=0.15,  # share of each row's tokens masked for the loss
        eval_mask_rate=0.15,  # held-out rows: 15% whatever mask_rate is, comparable runs
        whole_word_masking=False,  # mask every piece of a word together
        sentence_pairs=False,  # True: NSP pairs and the NSP head, as in the paper
        num_workers=0,  # grain worker processes
        seconds_per_batch=0.0,  # synthetic corpus only: simulate a slow input pipeline
        # Batch-size warm-up (shards:DIR corpora only; both > 0 to turn it on): the global batch
        # rises from batch_warmup_start rows (a multiple of the processes and of mesh.data x
        # mesh.fsdp x accumulation_steps) to batch_size in a few steps of multiples of it, over
        # batch_warmup_tokens tokens (rows x max_seq_len); bert_jax.data.pretraining.batch_schedule
        batch_warmup_tokens=0,  # the tokens the warm-up lasts; 0: off
        batch_warmup_start=0,  # global rows of the first steps; 0: off
    ))
    config.eval_batches = 0  # 0: the whole validation split
    return config


def finetune_config(task: str) -> ml_collections.ConfigDict:
    """base_config + the fine-tuning keys (bert_jax.recipes.finetune): 2-3 epochs, lr 2e-5..5e-5,
    10% warm-up, as usual for BERT."""
    import ml_collections
    config = base_config("finetune")
    # classification | regression | multi_label | token_classification | span_qa | contrastive
    config.task = task
    config.data = ml_collections.ConfigDict(dict(
        train_path="",  # the training file (csv, tsv, jsonl, fasttext, CoNLL, SQuAD JSON)
        eval_path="",  # the held-out file (or heldout_fraction, or tfds_name)
        # csv | tsv | jsonl | fasttext (by extension when auto) | csv_no_header | tsv_no_header
        # (columns named by position: "0", "1", ...)
        format="auto",
        encoding="utf-8",  # the files' text encoding (e.g. utf-8, cp1252, latin-1)
        tsv_quoting=False,  # TSV fields are taken as they are (GLUE); True: CSV-style quotes
        text_column="text",  # the text's column (JSONL key)
        text_pair_column="",  # the second text's column, for pairs (empty: single texts)
        label_column="label",  # the label's column
        label_separator="|",  # multi_label: labels joined in one string
        conll_tag_column=-1,  # CoNLL: the column of the tag (-1: the last)
        heldout_fraction=0.0,  # > 0: hold this part of train_path out for evaluation
        split_seed=0,  # which rows heldout_fraction holds out
        tfds_name="",  # glue/sst2 | glue/mrpc | glue/stsb | glue/mnli | conll2003 | squad ...
        tfds_train_split="train",  # tfds_name's split to train on
        tfds_eval_split="validation",  # tfds_name's split to evaluate on
        tfds_data_dir="",  # where TFDS keeps its datasets (default: TFDS's own)
        tfds_download=True,  # let TFDS download and prepare tfds_name
        # Each batch cut to the smallest of these lengths that holds its longest row: auto
        # (32, 64, ... max_seq_len), none (always max_seq_len), or e.g. "16,32,48".
        bucket_lengths="auto",
        group_by_length=0,  # G > 1: rows of similar length batched together, G-batch windows
        # K >= 2: training packs up to K examples into one row (classification, regression,
        # multi_label): the same batches of examples, almost no padding; 0: off
        pack_examples=0,
        # Inputs longer than a row, in evaluation and prediction: truncate (cut at max_seq_len)
        # | slide (windows window_stride apart; classification, regression, multi_label: the
        # mean of the windows' logits, single texts only; token_classification: each word from
        # the window whose centre is nearest to it). Training always truncates; span_qa always
        # slides (squad.doc_stride).
        long_inputs="truncate",
        window_stride=0,  # slide: tokens between window starts; 0: (max_seq_len - 2) // 2
    ))
    # span_qa only: windows over long contexts, and how answers are read from the logits
    config.squad = ml_collections.ConfigDict(dict(
        doc_stride=128,  # tokens between the starts of a long context's windows
        max_query_len=64,  # question tokens kept
        n_best=20,  # start and end candidates read per window
        max_answer_length=30,  # the longest answer, in tokens
        version_2=False,  # SQuAD 2.0: questions may have no answer
        no_answer_threshold=0.0,  # version_2: no answer when its score beats the best by this
    ))
    # contrastive only: sentence embeddings from (anchor, positive[, hard negative]) rows, the
    # anchor in data.text_column, the positive in data.text_pair_column
    config.contrastive = ml_collections.ConfigDict(dict(
        scale=20.0,  # scores are scale x cosine (sentence-transformers' default, 1/temperature)
        symmetric=False,  # also each positive against all anchors, the two losses averaged
        pooling="mean",  # mean | cls: as bert_jax.embeddings.encode.pool, then L2-normalised
        negative_column="",  # the hard negative's column (empty: none, in-batch negatives only)
    ))
    config.epochs = 3.0  # passes over the training rows (when total_steps is 0)
    config.total_steps = 0  # optimizer steps; 0: from epochs
    config.learning_rate = 3e-5
    config.log_every_steps = 10
    config.checkpoint_every_steps = 0
    config.keep_checkpoints = 1
    return config


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
