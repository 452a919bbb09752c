"""BERT-large pre-training, the paper's recipe (Devlin et al. 2019, section A.2).

Same recipe as bert_base.py (see there for the corpus and vocabulary flags): 24 layers, hidden
1024, 16 heads; batch 256, lr 1e-4 with 10k warm-up steps and linear decay, 900k steps at 128
tokens then 100k at 512, masked LM + NSP:

    python experiments/pretrain.py --config=experiments/configs/bert_large.py:seq128 \
        --workdir=$W/phase1 --config.data.corpus='text:/data/books_wiki/*.txt' \
        --config.tokenizer.path=/data/vocab.txt --config.dtype=bfloat16 --config.mesh.fsdp=4
    python experiments/pretrain.py --config=experiments/configs/bert_large.py:seq512 \
        --workdir=$W/phase2 --config.init.checkpoint=$W/phase1/checkpoints  (same data flags)

Large models are where FSDP (`mesh.fsdp`) and remat (`--config.remat=dots_no_batch`) pay off; for
the paper's batch on few chips use `--config.accumulation_steps`, or LAMB
(`--config.optimizer.name=lamb`) with a larger batch as in You et al. 2020.

Expected runtime (estimated from bert_jax.train.flops, not measured): 62 TFLOP per step at
128 tokens (x 900k) plus 261 TFLOP at 512 (x 100k) = 8.2e19 FLOP: about 2 days on a TPU v4-8 at
40% MFU. Expected result: roughly 73-74% held-out masked-LM accuracy on Wikipedia text, as
published for BERT-large (not yet run to the end).
"""

from experiments.configs.bert_base import paper_config


def get_config(phase: str = "seq128"):
    return paper_config("large", phase)
