"""hf_torch: transformers' BertForMaskedLM in torch, with hf_flax's recipe.

    data       the shared blocks and masking of benchmarks/peers/mlm_blocks.py (as
               DataCollatorForLanguageModeling does it: 15%, 80/10/10, drawn anew each batch)
    model      BertForMaskedLM from a BertConfig (random init after torch.manual_seed(seed)),
               float32, dropout as configured; the loss of the model over the labelled positions
    optimizer  torch.optim.AdamW (weight decay off biases and LayerNorm weights),
               get_linear_schedule_with_warmup (linear warm-up, linear decay to 0), gradients
               clipped to global norm clip_norm first, as transformers' Trainer does
    step       eager, on the GPU if this torch build sees one, else on spec["torch_threads"] CPU
               threads (0: torch's default); the step ends when its loss is on the host

This module imports no JAX: torch and JAX in one process slow each other down.
"""

from __future__ import annotations

import numpy as np
import torch
import transformers

from benchmarks.peers import heldout as heldout_lib
from benchmarks.peers import mlm_blocks


def _tensors(batch: dict[str, np.ndarray], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(np.ascontiguousarray(v)).long().to(device)
            for k, v in batch.items()}


class TorchMLM(mlm_blocks.BlocksPeer):
    """The peer behind the harness's calls (benchmarks/peers/worker.py)."""

    def __init__(self, spec: dict):
        super().__init__(spec)
        self.total_steps = 0
        self.model = self.optimizer = self.schedule = self.batches = None
        if spec.get("torch_threads"):
            torch.set_num_threads(spec["torch_threads"])
        # A GPU where this torch build has one, as JAX takes one where it is installed for it.
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    def prepare(self, total_steps: int) -> None:
        self.batches = mlm_blocks.EpochBatches(self.blocks, self.train["batch_size"], self.vocab,
                                               self.spec["seed"])
        self.total_steps = total_steps

    def init(self) -> None:
        self.model = self.optimizer = self.schedule = None
        torch.manual_seed(self.spec["seed"])
        self.model = transformers.BertForMaskedLM(self.hf_config).to(self.device).train()
        opt = self.train["optimizer"]
        named = list(self.model.named_parameters())
        no_decay = lambda name: name.endswith("bias") or "LayerNorm" in name  # noqa: E731
        groups = [{"params": [p for n, p in named if not no_decay(n)],
                   "weight_decay": opt["weight_decay"]},
                  {"params": [p for n, p in named if no_decay(n)], "weight_decay": 0.0}]
        self.optimizer = torch.optim.AdamW(groups, lr=self.train["learning_rate"],
                                           betas=(opt["b1"], opt["b2"]), eps=opt["eps"])
        warmup = int(round(self.train["warmup_fraction"] * self.total_steps))
        self.schedule = transformers.get_linear_schedule_with_warmup(
            self.optimizer, warmup, self.total_steps)

    def train_step(self) -> None:
        batch = _tensors(next(self.batches), self.device)
        loss = self.model(**batch).loss
        loss.backward()
        clip_norm = self.train["optimizer"]["clip_norm"]
        if clip_norm > 0:  # 0: no clipping, as in bert_jax's optimizer
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip_norm)
        self.optimizer.step()
        self.schedule.step()
        self.optimizer.zero_grad(set_to_none=True)
        loss.item()

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
                           "blocks": int(len(self.blocks)),
                           "torch_threads": torch.get_num_threads(),
                           "device": str(self.device)},
                "num_params": int(sum(p.numel() for p in self.model.parameters()))}
