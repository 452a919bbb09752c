"""The reference implementations that benchmarks/ measures ours against, and the pre-training
race of benchmarks/compare_pretraining.py.

    recipe.py       the reference training recipe, once per framework (torch, optax): every peer
                    and benchmarks/compare_polarity.py train with it
    finetune.py     hf_torch and hf_flax fine-tuning steps (benchmarks/benchmark.py
                    --mode=finetune)
    inputs.py       the race's shared inputs, made once: vocabulary, held-out rows, peers' blocks
    heldout.py      the held-out rows (.npz) and the Hugging Face view of them
    mlm_blocks.py   the race peers' data, as transformers' run_mlm examples make it
    race.py         the race's parent: worker processes (benchmarks/harness/worker.py) per run,
                    one run after another; the results
    clocked.py      one run against the clock (the workers' jobs): calibration, training,
                    evaluation points
    ours_mlm.py     ours_classic, ours_efficient and ours_modern: bert_jax's pre-training recipe
    hf_flax_mlm.py  hf_flax: transformers' FlaxBertForMaskedLM, run_mlm_flax style
    torch_mlm.py    hf_torch: transformers' BertForMaskedLM in torch, the same recipe
    report.py       time to target, the seed-to-seed spread, the PNG
    keras_hub_classifier.py
                    keras-hub's BertTextClassifier trained by keras' `fit` on the JAX backend:
                    a script of its own, run in a venv with keras (not a dependency of ours)

Every race implementation has the calls of `clocked.Implementation`. `make` imports only the one
asked for, so that the torch worker never imports JAX.
"""

from __future__ import annotations

import importlib
import importlib.metadata

HF_FLAX = "hf_flax"


def flax_peer_fault() -> str | None:
    """Why the hf_flax peer cannot run with the installed transformers, or None where it can:
    transformers 5 removed the Flax classes (4.57 is the last release with them: the floor
    stack's, tests/run_suite.sh floor)."""
    try:
        version = importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return "hf_flax needs transformers 4.57 (the last release with Flax classes): not installed"
    if int(version.split(".")[0]) >= 5:
        return (f"hf_flax needs transformers 4.57, the last release with Flax classes; "
                f"transformers {version} is installed (run it on the floor stack: "
                "tests/run_suite.sh floor installs 4.57)")
    return None


# name -> (module, class)
IMPLEMENTATIONS = {
    "ours_classic": ("benchmarks.peers.ours_mlm", "OursClassic"),
    "ours_efficient": ("benchmarks.peers.ours_mlm", "OursEfficient"),
    "ours_modern": ("benchmarks.peers.ours_mlm", "OursModern"),
    "hf_flax": ("benchmarks.peers.hf_flax_mlm", "HFFlaxMLM"),
    "hf_torch": ("benchmarks.peers.torch_mlm", "TorchMLM"),
}


def make(name: str, spec: dict):
    """The implementation `name` for the run described by `spec` (benchmarks/peers/race.py)."""
    if name not in IMPLEMENTATIONS:
        raise ValueError(f"unknown implementation {name!r}; choose from {list(IMPLEMENTATIONS)}")
    module, cls = IMPLEMENTATIONS[name]
    return getattr(importlib.import_module(module), cls)(spec)
