"""Tiny BERT pre-trained on Bulgarian: the efficient recipe on prepared token shards.

The corpus is the Bulgarian Wikipedia sample that the gensim wheel ships
(gensim/test/test_data/bgwiki-latest-pages-articles-shortened.xml.bz2: one article and two
project pages, ~197,000 characters of plain text, ~32,000 words), cut into passages at paragraph
boundaries; the tokenizer is a 2,048-piece WordPiece vocabulary trained on it (lowercased,
accents kept: "й" is a letter of its own). experiments/non_english_demo.py does every step
(extract, tokenizer, shards on 2 workers, this run) and prints the held-out curve:

    python experiments/non_english_demo.py --output_dir=/tmp/bert_bulgarian

or, the shards prepared, the run alone:

    python experiments/pretrain.py --config=experiments/configs/bulgarian.py \
        --workdir=/tmp/bert_bulgarian/run --config.data.corpus=shards:/tmp/bert_bulgarian/shards

The settings are the Quickstart's (experiments/configs/efficient.py: 2 layers, 128 wide, rotary
positions, pre-LN, learning rate 2e-3, 32 rows of 128 tokens) for 1,000 steps, with dropout 0.1:
the corpus is ~60,000 tokens (254 passages), so 1,000 steps read it ~70 times. The held-out split
(10% of the passages: 25, 5,863 tokens) is evaluated every 100 steps (eval_metrics.jsonl), 15%
of it masked (~880 positions: one evaluation's accuracy is +-1.5 points).

Expected runtime: about 6 minutes on 2 CPU cores shared with other work (measured 5 min 55 s at
a load average of 6-10: 6 s for the corpus, tokenizer and shards, 0.33-0.36 s a step).
Expected result (measured): held-out masked-LM accuracy 12.0% at step 100, 21.7% at 500, 25.2%
(loss 4.30) at step 1000, still rising slowly (training batches 28.9%, loss 3.94); the unigram
baseline (always the most frequent piece; the training split's piece frequencies) is 4.3%
(loss 6.38), chance 1/2048 = 0.05%.
"""

from experiments.configs import efficient

DEFAULT_SHARDS = "/tmp/bert_bulgarian/shards"


def get_config():
    config = efficient.get_config()
    config.data.corpus = f"shards:{DEFAULT_SHARDS}"
    config.tokenizer.path = ""  # the shards folder holds its tokenizer
    config.model.hidden_dropout_prob = 0.1
    config.model.attention_probs_dropout_prob = 0.1
    config.total_steps = 1000
    config.eval_every_steps = 100
    config.checkpoint_every_steps = 500
    return config
