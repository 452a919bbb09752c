"""A ModernBERT-style pre-training recipe: ModernBERT-tiny on the demo corpus at 1,024-token rows.

    python experiments/pretrain.py --config=experiments/configs/modern.py \
        --workdir=/tmp/bert_modern
    python experiments/evaluate.py --workdir=/tmp/bert_modern

Expected runtime: about 20 minutes on 2 shared CPU cores (load average about 4), corpus and
vocabulary included.
Expected result: held-out masked-LM accuracy (15% of the held-out tokens masked) well above the
demo's unigram/copy plateau of 12-13% at step 600 (docs/results.md; the measured figure is in
this task's report and the commit that adds the run).

The model is the ModernBERT family (bert_jax.model.families, model.family="modernbert"):
3 layers, 128 wide, rotary positions, GeGLU, no biases, pre-norm; layer 0 attends globally and
layers 1 and 2 see a window of 128 tokens (global every 3 layers), so the 1,024-token rows cost
the local layers linear memory (bert_jax.model.local_attention). The training follows
ModernBERT's (Warner et al., 2024) at this scale: 30% of the tokens masked (held-out rows stay
at 15%, comparable to the demo's other runs), no dropout, a warm-up-stable-decay ("trapezoidal")
schedule with its short warm-up and a linear decay over the last 20% of the steps, AdamW with
b2 = 0.98 and a small weight decay. The learning rate is the demo's efficient recipe's (2e-3,
measured there at this width); ModernBERT's own 8e-4 is for its base size.
"""

from bert_jax import run_config

ROW = 1024


def get_config():
    config = run_config.pretrain_config()
    config.model = run_config.model_block("tiny", family="modernbert",
                                          initializer_range=0.02)
    config.tokenizer.vocab_size = 1024
    config.max_seq_len = ROW
    config.data.mask_rate = 0.3
    config.data.max_predictions = int(0.3 * ROW) + 1  # 30% of each row, rounded up
    config.batch_size = 4  # 4,096 tokens a step, as the Quickstart's 32 x 128
    config.eval_batch_size = 4
    config.total_steps = 600
    config.warmup_fraction = 0.05
    config.learning_rate = 2e-3
    config.optimizer = run_config.optimizer_block(decay="wsd", decay_fraction=0.2, b2=0.98,
                                                  weight_decay=1e-5)
    config.log_every_steps = 25
    config.eval_every_steps = 300
    config.checkpoint_every_steps = 100
    config.keep_checkpoints = 2
    return config
