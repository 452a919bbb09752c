"""Tiny BERT pre-trained with masked LM on the demo corpus, with its own 1024-piece vocabulary.

The README Quickstart: prepares the demo corpus (real English text shipped with gensim), trains
a WordPiece vocabulary on it, trains a 2-layer, 128-wide BERT for 10000 steps of 32 x 16 tokens
and evaluates it on the held-out documents:

    python experiments/pretrain.py --config=experiments/configs/demo.py --workdir=/tmp/bert_demo
    python experiments/evaluate.py --workdir=/tmp/bert_demo

Expected runtime: about 2.5 minutes on 2 CPU cores, corpus and vocabulary included.
Expected result: held-out masked-LM accuracy about 35% (loss about 3.15) at step 10000, from
0.1% at chance (docs/results.md has the measured curves and seeds).

Why short rows, a small learning rate and b2 = 0.98: with the classic post-LN recipe at 64-128
token rows the model sits on the unigram/copy plateau (predicting piece frequencies, and copying
the input where a masked position keeps its token) for thousands of steps: leaving it needs
attention that picks out nearby tokens, which learned absolute positions find slowly. In a
16-token row even position-blind attention sees mostly neighbours, so context pays off at once.
Learning rates of 2e-3 and above stall at the most frequent piece (post-LN). No dropout (a short
run underfits) and a wider initialisation (0.1: attention patterns form sooner).
"""

from experiments.configs import common


def get_config():
    config = common.pretrain_config()
    config.model = common.model_block(
        "tiny", max_position_embeddings=128, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, initializer_range=0.1)
    config.tokenizer.vocab_size = 1024
    config.data.max_predictions = 3  # 15% of the 14 tokens of a 16-token row, rounded up
    config.max_seq_len = 16  # short rows: see the docstring
    config.batch_size = 32
    config.eval_batch_size = 32
    config.total_steps = 10000
    config.learning_rate = 1e-3
    config.warmup_fraction = 0.02  # 200 steps
    config.optimizer = common.optimizer_block(decay="cosine", end_learning_rate_ratio=0.1,
                                              b2=0.98)
    config.log_every_steps = 50
    config.eval_every_steps = 2000
    config.checkpoint_every_steps = 2000
    config.keep_checkpoints = 2
    return config
