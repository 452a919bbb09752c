"""The pre-training implementations that benchmarks/compare_pretraining.py races, and the harness
that drives them alike.

    inputs.py       made once, shared by all: the vocabulary, the held-out rows, the peers' blocks
    heldout.py      the held-out rows (.npz) and the Hugging Face view of them
    mlm_blocks.py   the peers' data, as transformers' run_mlm examples make it
    race.py         the parent: one worker process per run, one after another; the results
    worker.py       one run against the clock: calibration, training, evaluation points
    ours_mlm.py     ours_classic and ours_efficient: bert_jax's pre-training recipe
    hf_flax_mlm.py  hf_flax: transformers' FlaxBertForMaskedLM, run_mlm_flax style
    torch_mlm.py    hf_torch: transformers' BertForMaskedLM in torch, the same recipe
    report.py       time to target, the seed-to-seed spread, the PNG

Every implementation has the calls of `worker.Implementation`. `make` imports only the one asked
for, so that the torch worker never imports JAX.
"""

from __future__ import annotations

import importlib

# name -> (module, class)
IMPLEMENTATIONS = {
    "ours_classic": ("benchmarks.peers.ours_mlm", "OursClassic"),
    "ours_efficient": ("benchmarks.peers.ours_mlm", "OursEfficient"),
    "hf_flax": ("benchmarks.peers.hf_flax_mlm", "HFFlaxMLM"),
    "hf_torch": ("benchmarks.peers.torch_mlm", "TorchMLM"),
}


def make(name: str, spec: dict):
    """The implementation `name` for the run described by `spec` (benchmarks/peers/race.py)."""
    if name not in IMPLEMENTATIONS:
        raise ValueError(f"unknown implementation {name!r}; choose from {list(IMPLEMENTATIONS)}")
    module, cls = IMPLEMENTATIONS[name]
    return getattr(importlib.import_module(module), cls)(spec)
