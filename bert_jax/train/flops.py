"""Model FLOPs of a BERT or ModernBERT training step, tokens per second and MFU.

Counting multiply-adds as 2 FLOPs, the forward pass of one sequence of length L costs, with
hidden size d, feed-forward size f, n layers, vocabulary V, P masked positions per sequence:

    per layer, per token:  8 d^2          Q, K, V and output projections (4 matmuls d x d)
                         + 4 d f          a dense feed-forward: two matmuls (d x f and f x d);
                           6 d f          a gated one (GeGLU, SwiGLU; ModernBERT's): three
                                          (gate and input d x f each, output f x d)
                         + 4 K d          attention scores Q K^T and the weighted sum of V over
                                          the K keys a query sees: K = L in a global layer,
                                          K = min(L, w + 1) in a sliding-window layer of window w
                                          (query i sees key j where |i - j| <= w // 2)
    masked-LM head, per masked position:  2 d^2 (transform) + 2 d V (tied decoder)
    pooler + NSP head, per sequence:      2 d^2 + 4 d               (only with NSP)

    forward(sequence) = L sum over layers (8 d^2 + c d f + 4 K d) + P (2 d^2 + 2 d V)
                        [+ 2 d^2 + 4 d]

and a training step costs 3 x forward per sequence (the backward pass is twice the forward):

    flops_per_step = 3 * batch_size * forward(sequence)

The window is what the model needs, not what a kernel computes: an implementation that scores a
window's band as a full L x L matrix and masks it spends more (its MFU counts only the band).
Embedding look-ups, LayerNorm, softmax, GELU and the optimizer are left out (they are not
matmuls and are small next to them); recomputation by remat is left out too, as is usual for
*model* FLOPs utilisation: MFU = (flops_per_step / seconds_per_step) / (peak FLOP/s of all devices).
"""

from __future__ import annotations

import jax

from bert_jax.config.bert import BertConfig
from bert_jax.config.modernbert import ModernBertConfig

# Dense peak FLOP/s per device by jax `device_kind` (bf16 unless said otherwise). The CPU figure is
# not a vendor peak: it is a measured bf16 x bf16 -> fp32 matmul rate of XLA:CPU's YNNPACK kernel
# on a 2-core AVX-512 BF16 CPU (docs/results.md). Other CPUs: benchmark.py --peak_flops, or
# peak_flops_per_device in a training config.
PEAK_FLOPS_BY_DEVICE_KIND: dict[str, float] = {
    "TPU v2": 45e12,
    "TPU v3": 123e12,
    "TPU v4": 275e12,
    "TPU v5 lite": 197e12,
    "TPU v5e": 197e12,
    "TPU v5p": 459e12,
    "TPU v5": 459e12,
    "TPU v6 lite": 918e12,
    "TPU v6e": 918e12,
    "NVIDIA A100": 312e12,
    "NVIDIA H100": 989e12,
    "NVIDIA H200": 989e12,
    "NVIDIA B200": 2250e12,
    "NVIDIA L4": 121e12,
    "NVIDIA A10G": 125e12,
    "cpu": 960e9,
}


def _ffn_matrices(cfg: BertConfig | ModernBertConfig) -> int:
    """Matmuls of a layer's feed-forward block: 2 (dense) or 3 (gated: ModernBERT's GeGLU, or
    BertConfig.ffn_kind "geglu"/"swiglu")."""
    if isinstance(cfg, ModernBertConfig):
        return 3
    return 2 if cfg.ffn_kind == "dense" else 3


def _keys_per_query(cfg: BertConfig | ModernBertConfig, layer: int, seq_len: int) -> int:
    """How many keys a query of layer `layer` attends to: all seq_len, or a sliding window's."""
    window = cfg.window_of(layer) if isinstance(cfg, ModernBertConfig) else None
    return seq_len if window is None else min(seq_len, 2 * (window // 2) + 1)


def forward_flops_per_sequence(cfg: BertConfig | ModernBertConfig, seq_len: int,
                               max_predictions: int, with_nsp: bool = False) -> float:
    """FLOPs of one forward pass over one sequence (see the module docstring)."""
    d, f, n, vocab = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers, cfg.vocab_size
    dense = 8 * d * d + 2 * _ffn_matrices(cfg) * d * f
    encoder = seq_len * sum(dense + 4 * _keys_per_query(cfg, layer, seq_len) * d
                            for layer in range(n))
    mlm_head = max_predictions * (2 * d * d + 2 * d * vocab)
    nsp_head = (2 * d * d + 4 * d) if with_nsp else 0
    return float(encoder + mlm_head + nsp_head)


def pretraining_flops_per_step(cfg: BertConfig, batch_size: int, seq_len: int,
                               max_predictions: int, with_nsp: bool = False) -> float:
    """Model FLOPs of one pre-training step on a global batch: 3 x forward x batch_size."""
    return 3.0 * batch_size * forward_flops_per_sequence(cfg, seq_len, max_predictions, with_nsp)


def encoder_flops_per_step(cfg: BertConfig, batch_size: int, seq_len: int,
                           num_outputs_per_sequence: int = 0, training: bool = True) -> float:
    """Model FLOPs of a step of a fine-tuning model: encoder + a small head (2 d x outputs).

    Without the MLM head; `num_outputs_per_sequence` counts head outputs (labels x positions).
    """
    per_sequence = forward_flops_per_sequence(cfg, seq_len, 0)
    per_sequence += 2 * cfg.hidden_size * num_outputs_per_sequence
    return (3.0 if training else 1.0) * batch_size * per_sequence


def peak_flops_per_device(device: jax.Device | None = None) -> float:
    """Peak FLOP/s of one device, looked up by its device_kind (0.0 when unknown)."""
    device = device or jax.devices()[0]
    if device.platform == "cpu":
        return PEAK_FLOPS_BY_DEVICE_KIND["cpu"]
    kind = device.device_kind
    for name in sorted(PEAK_FLOPS_BY_DEVICE_KIND, key=len, reverse=True):
        if kind.lower().startswith(name.lower()):
            return PEAK_FLOPS_BY_DEVICE_KIND[name]
    return 0.0


def mfu(flops_per_step: float, seconds_per_step: float, num_devices: int,
        peak_per_device: float) -> float:
    """Model FLOPs utilisation: achieved FLOP/s over the peak of all devices (0 if unknown)."""
    if seconds_per_step <= 0 or peak_per_device <= 0 or num_devices <= 0:
        return 0.0
    return flops_per_step / seconds_per_step / (num_devices * peak_per_device)
