"""A run's checkpoints and workdir: store.py (Orbax: train state + data-iterator state +
metadata per step; save, restore, check_readable, set_aside), checksums.py (a CRC32 per file,
verified before a restore), errors.py (CheckpointMismatchError, CheckpointUnreadableError,
CheckpointWriteError), step_folders.py (which entries of a checkpoint folder are steps),
verification.py (every step of a run checked), fit.py (whether a saved
step fits the resuming run), params.py (another run's parameters: load_params,
load_model_config, resolve_step), workdir.py (run.lock, writability, the config saved with each
checkpoint).

Import the submodules directly (`from bert_jax.train.checkpoint import store`); this package
imports none of them, so importing it loads no Orbax.
"""
