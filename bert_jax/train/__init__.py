"""Training: optimizer (optimizer.py; its settings are bert_jax.config.settings.OptimizerConfig),
pure steps (steps.py), the train state on a mesh (state.py), the one loop (loop.py) and its stop
on SIGTERM or Ctrl-C (preemption.py), held-out evaluation (evaluation.py), Orbax checkpoints and
the workdir's lock (checkpoint/), what a run logs (metrics_writer.py), model FLOPs and MFU
(flops.py).

Modules are imported by name (`from bert_jax.train import loop`), so importing this package stays
cheap and loads neither Orbax nor grain.
"""
