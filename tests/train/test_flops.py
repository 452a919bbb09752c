"""bert_jax.train.flops against counts made by hand: a dense and a gated FFN, and ModernBERT-base
at 8,192 tokens with its sliding-window layers."""

import pytest

from bert_jax.config.bert import BertConfig
from bert_jax.config.modernbert import ModernBertConfig
from bert_jax.train import flops


def test_bert_base_dense_is_the_published_count():
    cfg = BertConfig.preset("base")  # d 768, f 3072, 12 layers, V 30522
    d, f, n, vocab, length, masked = 768, 3072, 12, 30522, 128, 20
    by_hand = n * length * (8 * d * d + 4 * d * f + 4 * length * d) + masked * (
        2 * d * d + 2 * d * vocab)
    assert flops.forward_flops_per_sequence(cfg, length, masked) == by_hand
    assert flops.pretraining_flops_per_step(cfg, 4, length, masked) == 3 * 4 * by_hand


def test_a_gated_ffn_counts_three_matrices():
    dense = BertConfig.preset("mini")
    gated = dense.replace(ffn_kind="geglu")
    d, f, n, length = dense.hidden_size, dense.intermediate_size, dense.num_hidden_layers, 64
    difference = (flops.forward_flops_per_sequence(gated, length, 0)
                  - flops.forward_flops_per_sequence(dense, length, 0))
    assert difference == n * length * 2 * d * f  # the third matmul, d x f, at every token


def test_modernbert_base_at_8192_tokens_counts_the_window_not_the_sequence():
    cfg = ModernBertConfig.preset("base")  # 22 layers, global every 3rd, window 128
    d, f, vocab, length = 768, 1152, 50368, 8192
    global_layers = len(range(0, 22, 3))  # layers 0, 3, ..., 21: 8
    local_layers = 22 - global_layers
    keys_local = 128 + 1  # |i - j| <= 64
    by_hand = length * (22 * (8 * d * d + 6 * d * f) + global_layers * 4 * length * d
                        + local_layers * 4 * keys_local * d)
    assert (global_layers, cfg.local_attention) == (8, 128)
    assert flops.forward_flops_per_sequence(cfg, length, 0) == by_hand
    # the full L x L attention in every layer (the old count) is 1.8x as much at this length
    full = length * 22 * (8 * d * d + 6 * d * f + 4 * length * d)
    assert full / by_hand == pytest.approx(1.81, abs=0.01)
    # with masked positions the MLM head (transform + tied decoder) is added per position
    assert flops.forward_flops_per_sequence(cfg, length, 10) == by_hand + 10 * (
        2 * d * d + 2 * d * vocab)
