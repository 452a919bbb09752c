"""BERT-base pre-training, the paper's recipe (Devlin et al. 2019, section A.2).

Two phases, as in the paper: 90% of the steps on sequences of 128 tokens, then 10% on 512 (the
position embeddings learn the long positions in phase 2), batch 256 sequences, Adam (AdamW)
lr 1e-4, beta1 0.9, beta2 0.999, weight decay 0.01, 10k warm-up steps then linear decay, dropout
0.1, GELU, masked LM (15% of the tokens, 20 / 80 predictions per sequence) plus next-sentence
prediction. The corpus is yours: the paper used BooksCorpus + English Wikipedia; pass local
plain text as `text:GLOB` (documents separated by blank lines) and a 30,522-piece uncased
vocabulary (e.g. bert-base-uncased's vocab.txt):

    python experiments/pretrain.py --config=experiments/configs/bert_base.py:seq128 \
        --workdir=$W/phase1 --config.data.corpus='text:/data/books_wiki/*.txt' \
        --config.tokenizer.path=/data/vocab.txt
    python experiments/pretrain.py --config=experiments/configs/bert_base.py:seq512 \
        --workdir=$W/phase2 --config.init.checkpoint=$W/phase1/checkpoints  (same data flags)

Phase 2 starts from phase 1's parameters (heads included) with a fresh optimizer and schedule
(as the original run_pretraining.py does with --init_checkpoint).

Expected runtime (estimated from bert_jax.train.flops, not measured): phase 1 is 17.9 TFLOP per
step x 900k steps, phase 2 77 TFLOP x 100k: about 15 hours on a TPU v4-8 (1.1 PFLOP/s bf16 peak)
at 40% MFU with --config.dtype=bfloat16; mesh: data-parallel (the default), or
--config.mesh.fsdp=-1 --config.mesh.data=1 when memory is short.
Expected result: roughly 70% held-out masked-LM and ~98% next-sentence accuracy on Wikipedia
text, as published for BERT-base (not yet run to the end).
"""

from bert_jax.config import run as run_config

PHASES = {
    # phase: (max_seq_len, max_predictions, total_steps, warmup_steps)
    "seq128": (128, 20, 900_000, 10_000),
    "seq512": (512, 80, 100_000, 1_000),
}


def paper_config(preset: str, phase: str):
    """The paper's recipe for a preset (base or large) and a phase (seq128 or seq512)."""
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r} in --config=...:{phase}; choose one of "
                         f"{sorted(PHASES)}")
    max_seq_len, max_predictions, total_steps, warmup_steps = PHASES[phase]
    config = run_config.pretrain_config()
    config.model = run_config.model_block(preset, vocab_size=30522, max_position_embeddings=512)
    config.data.corpus = "text:REPLACE_ME/*.txt"
    config.data.max_predictions = max_predictions
    config.data.sentence_pairs = True
    config.data.num_workers = 8
    config.max_seq_len = max_seq_len
    config.batch_size = 256
    config.eval_batch_size = 256
    config.eval_batches = 100
    config.total_steps = total_steps
    config.learning_rate = 1e-4
    config.warmup_fraction = warmup_steps / total_steps
    config.log_every_steps = 100
    config.eval_every_steps = 10_000
    config.checkpoint_every_steps = 5_000
    return config


def get_config(phase: str = "seq128"):
    return paper_config("base", phase)
