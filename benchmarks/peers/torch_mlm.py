"""hf_torch: transformers' BertForMaskedLM in torch, with hf_flax's recipe.

    data       the shared blocks and masking of benchmarks/peers/mlm_blocks.py (as
               DataCollatorForLanguageModeling does it: 15%, 80/10/10, drawn anew each batch)
    model      BertForMaskedLM from a BertConfig (random init after torch.manual_seed(seed)),
               float32, dropout as configured; the loss of the model over the labelled positions
    optimizer  the reference recipe in torch (benchmarks/peers/recipe.py: AdamW without decay on
               biases and LayerNorm, linear warm-up and decay to 0, clipping at clip_norm first,
               as transformers' Trainer does)
    step       eager, on the GPU if this torch build sees one, else on spec["torch_threads"] CPU
               threads (0: torch's default); the step ends when its loss is on the host

This module imports no JAX: torch and JAX in one process slow each other down.
"""

from __future__ import annotations

import numpy as np
import torch
import transformers

from benchmarks.peers import heldout as heldout_lib
from benchmarks.peers import mlm_blocks, recipe


def _tensors(batch: dict[str, np.ndarray], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(np.ascontiguousarray(v)).long().to(device)
            for k, v in batch.items()}


class TorchMLM(mlm_blocks.BlocksPeer):
    """The peer behind the harness's calls (benchmarks/peers/clocked.py)."""

    def __init__(self, spec: dict):
        super().__init__(spec)
        self.total_steps = 0
        self.model = self.trainer = self.batches = None
        if spec.get("torch_threads"):
            torch.set_num_threads(spec["torch_threads"])
        # A GPU where this torch build has one, as JAX takes one where it is installed for it.
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    def prepare(self, total_steps: int) -> None:
        self.batches = mlm_blocks.EpochBatches(self.blocks, self.train["batch_size"], self.vocab,
                                               self.spec["seed"])
        self.total_steps = total_steps

    def init(self) -> None:
        self.model = self.trainer = None
        torch.manual_seed(self.spec["seed"])
        self.model = transformers.BertForMaskedLM(self.hf_config).to(self.device).train()
        self.trainer = recipe.TorchTrainer(self.model, recipe.Recipe.of(
            self.train["learning_rate"], self.train["warmup_fraction"], self.total_steps,
            self.train["optimizer"]))

    def train_step(self) -> None:
        self.trainer.step(_tensors(next(self.batches), self.device)).item()  # on the host

    def sync(self) -> None:
        """Nothing runs after train_step returns (torch on the CPU is eager)."""

    def evaluate(self, rows: heldout_lib.Heldout) -> dict[str, float]:
        total = correct = count = 0.0
        self.model.eval()
        with torch.no_grad():
            for batch in rows.batches():
                inputs = _tensors(heldout_lib.hf_inputs(batch), self.device)
                labels = inputs.pop("labels")
                logits = self.model(**inputs).logits.float()  # [B, L, V]
                labelled = labels != heldout_lib.IGNORED_LABEL
                total += float(torch.nn.functional.cross_entropy(
                    logits[labelled], labels[labelled], reduction="sum"))
                correct += float((logits[labelled].argmax(-1) == labels[labelled]).sum())
                count += float(labelled.sum())
        self.model.train()
        return {"accuracy": correct / count, "loss": total / count, "masked_tokens": int(count)}

    def describe(self) -> dict:
        return {"config_source": "transformers.BertForMaskedLM (torch), the same recipe",
                "model": self.hf_config.to_dict(),
                "recipe": {"max_seq_len": int(self.blocks.shape[1]), **self.train,
                           "blocks": len(self.blocks),
                           "torch_threads": torch.get_num_threads(),
                           "device": str(self.device)},
                "num_params": int(sum(p.numel() for p in self.model.parameters()))}
