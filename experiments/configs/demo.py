"""Tiny BERT pre-trained with masked-LM on the demo corpus, with its own 1024-piece vocabulary.

The README Quickstart. On a fresh machine it prepares the demo corpus (real English text shipped
with gensim), trains a WordPiece vocabulary on it, trains a 2-layer, 128-wide BERT for 2000 steps
of 32 x 128 tokens and evaluates it on the held-out documents:

    python experiments/pretrain.py --config=experiments/configs/demo.py --workdir=/tmp/bert_demo
    python experiments/evaluate.py --workdir=/tmp/bert_demo

Expected runtime: 5 minutes on 2 CPU cores, corpus and vocabulary preparation included (measured
4 min 52 s, ~35k tokens/s while the machine was lightly shared; 3-4x longer when 4 jobs share
the 2 cores). Expected result: held-out masked-LM accuracy 12.7% (loss 5.33) at step 2000, from
chance (0.1%) at step 0 and 2.8% at step 50; predicting the most frequent piece scores 3.1%.
`evaluate.py` in a new process prints the same figure as the last line of eval_metrics.jsonl.

What is learned, and what is not (measured): the model learns the piece frequencies and to copy the
input at the 10% of masked positions whose token is kept (BERT's 80/10/10 rule); it does not yet
use the context: accuracy is the same with every unmasked token replaced at random. This plateau
is the same with Hugging Face's BertForMaskedLM (torch) on the same batches (11.7% at step 400).
It lasted through 4000 steps with this config (12.7%) and through 500-1000 steps for every other
setting we tried in the time we had (hidden 256, vocabularies of 512-4096 pieces, learning rates
1e-3..6e-3, sequences of 32-128 tokens, init 0.02-0.1): 11-13% everywhere. A run long enough to
leave the plateau (and reach the 30% we aimed for) is future work.
"""

import ml_collections
from ml_collections import config_dict


def model_overrides(**values) -> ml_collections.ConfigDict:
    """The model block: a BertConfig preset plus any field overridden (None: the preset's)."""
    fields = {"vocab_size": int, "hidden_size": int, "num_hidden_layers": int,
              "num_attention_heads": int, "intermediate_size": int,
              "max_position_embeddings": int, "hidden_dropout_prob": float,
              "attention_probs_dropout_prob": float, "hidden_act": str,
              "initializer_range": float}
    block = {name: config_dict.placeholder(kind) for name, kind in fields.items()}
    block.update(values)
    return ml_collections.ConfigDict(block)


def get_config() -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict()
    config.experiment = "pretrain"

    # No dropout (a short run underfits) and a wider initialisation (0.1: attention patterns
    # form sooner in a 2-layer post-LN BERT; 0.02 learned a toy copy task 3x slower).
    config.model = model_overrides(preset="tiny", max_position_embeddings=128,
                                   hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                   initializer_range=0.1)
    config.dtype = "float32"  # compute dtype: float32 | bfloat16
    config.remat = "none"  # none | full | dots | dots_no_batch

    config.data = ml_collections.ConfigDict(dict(
        corpus="demo",  # demo | synthetic | a corpus name of bert_jax.data
        data_dir="",  # default: <workdir>/data
        vocab_path="",  # default for demo: trained on the corpus into data_dir
        vocab_size=1024,  # of the vocabulary trained for the demo corpus
        lowercase=True,
        max_predictions=20,
        mask_rate=0.15,
        whole_word_masking=False,
        sentence_pairs=False,  # True: NSP pairs and the NSP head, as in the paper
        num_workers=0,
        seconds_per_batch=0.0,  # synthetic corpus only: simulate a slow input pipeline
    ))
    config.seq_len = 128
    config.batch_size = 32  # global, over all devices and processes
    config.eval_batch_size = 32
    config.eval_batches = 0  # 0: the whole validation split
    config.accumulation_steps = 1

    config.total_steps = 2000
    config.learning_rate = 1e-3  # 3e-3 and above stall or diverge at this size (post-LN)
    config.warmup_steps = 100
    config.optimizer = ml_collections.ConfigDict(dict(
        name="adamw", decay="cosine", end_learning_rate_ratio=0.1, b1=0.9, b2=0.999, eps=1e-6,
        weight_decay=0.01, clip_norm=1.0))

    config.seed = 0
    config.log_every_steps = 50
    config.eval_every_steps = 500
    config.checkpoint_every_steps = 500
    config.keep_checkpoints = 2
    config.async_checkpoints = True
    config.mesh = ml_collections.ConfigDict(dict(data=-1, fsdp=1, tensor=1))
    config.peak_flops_per_device = 0.0  # 0: look up by device kind
    config.init_from = ""  # a checkpoint directory whose params start this run
    return config
