"""Training: optimizer (optimizer.py), pure steps (steps.py), the one loop (loop.py), Orbax
checkpoints (checkpointing.py), model FLOPs and MFU (flops.py), task metrics (metrics.py).

Modules are imported by name (`from bert_jax.train import loop`), so importing this package stays
cheap and loads neither Orbax nor grain.
"""
