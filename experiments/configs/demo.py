"""The README Quickstart: tiny BERT pre-trained with masked LM on the demo corpus, 128-token rows.

Prepares the demo corpus (real English text shipped with gensim), trains a 1024-piece WordPiece
vocabulary on it, trains a 2-layer, 128-wide BERT with the efficient recipe
(experiments/configs/efficient.py: rotary positions, pre-LN, learning rate 2e-3) for 1500 steps of
32 rows of 128 tokens and evaluates it on the held-out documents:

    python experiments/pretrain.py --config=experiments/configs/demo.py --workdir=/tmp/bert_demo
    python experiments/evaluate.py --workdir=/tmp/bert_demo

Expected runtime: about 4 minutes on 2 CPU cores, corpus and vocabulary included.
Expected result: held-out masked-LM accuracy about 34% (loss about 3.3) at step 1500, where the
unigram/copy plateau (predicting piece frequencies, copying unmasked tokens) is about 12-13%:
the classic post-LN recipe with learned positions stays there at these rows for the whole run
(docs/results.md has the measured curves).
"""

from experiments.configs import efficient


def get_config():
    config = efficient.get_config()
    config.total_steps = 1500
    config.eval_every_steps = 500
    config.checkpoint_every_steps = 500
    return config
