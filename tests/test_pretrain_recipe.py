"""The pre-training recipe's data: training and held-out rows mask at their own rates."""

import numpy as np

from bert_jax import run_config
from bert_jax.data import pretraining
from bert_jax.recipes import pretrain


def masked_fraction(batch):
    """Masked positions over maskable (non-special, non-padding) tokens of a batch."""
    real = batch["segment_ids"] > 0
    maskable = real.sum() - 2 * (batch["segment_ids"].max(axis=1) > 0).sum()
    return batch["masked_weights"].sum() / maskable


def test_held_out_rows_mask_at_eval_mask_rate(tmp_path):
    """Training at 30% keeps the held-out rows at 15% (eval_mask_rate), so runs that train at
    different rates are compared on the same kind of rows."""
    data_dir = str(tmp_path / "data")
    pretraining.prepare_demo(data_dir, vocab_size=1024)
    config = run_config.pretrain_config()
    config.data.data_dir = data_dir
    config.tokenizer.vocab_size = 1024
    config.max_seq_len = 128
    config.data.mask_rate = 0.3
    config.data.max_predictions = 40
    config.batch_size = config.eval_batch_size = 16
    vocab_size = pretrain.vocab_size_of(config, str(tmp_path))
    train, make_eval = pretrain.make_data(config, str(tmp_path), vocab_size)
    train_rates = [masked_fraction(next(train)) for _ in range(4)]
    eval_rates = [masked_fraction(batch) for batch, _ in zip(make_eval(), range(4))]
    assert 0.27 < np.mean(train_rates) < 0.33, train_rates
    assert 0.13 < np.mean(eval_rates) < 0.17, eval_rates
