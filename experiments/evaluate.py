"""Evaluate a saved checkpoint of a training run in a new process.

    python experiments/evaluate.py --workdir=/tmp/bert_demo [--step=2500]

Reads `<workdir>/config.json` (written by the training script), reloads the newest (or the named)
checkpoint of `<workdir>/checkpoints` and evaluates it on the held-out data of that config. The
metrics are printed as one JSON line and written to `<workdir>/evaluation/step_<N>.json` (or
--output). For a pre-training run they are the held-out masked-LM loss and accuracy (plus NSP),
the same figures the run logged at that step in eval_metrics.jsonl.

Which script trained the run is read from config.json's `experiment` key ("pretrain",
"finetune", ...): the module experiments/<experiment>.py provides
`evaluate_checkpoint(config, workdir, step) -> (step, metrics: dict[str, float])` and, like
pretrain.py, defines its absl flags only under `__main__` so that it can be imported here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import ml_collections
from absl import app, flags, logging

from bert_jax import distributed  # defines --distributed, --coordinator_address, ...
from bert_jax.train import workdir as workdir_lib

FLAGS = flags.FLAGS
flags.DEFINE_string("workdir", None, "The workdir of a training run (holds config.json).")
flags.DEFINE_integer("step", None, "Checkpoint step to evaluate (default: the newest).")
flags.DEFINE_string("output", None, "Where to write the metrics JSON "
                    "(default: <workdir>/evaluation/step_<N>.json).")

EXPERIMENTS_DIR = os.path.dirname(os.path.abspath(__file__))


def fit_mesh_to_devices(config: ml_collections.ConfigDict) -> None:
    """Keep the run's mesh if it fits the devices here; else evaluate data-parallel on all of them.

    Checkpoints restore onto any mesh, and the held-out figures do not depend on the layout.
    """
    import jax

    from bert_jax import sharding
    mesh = config.get("mesh")
    if mesh is None:
        return
    try:
        sharding.mesh_shape(mesh.data, mesh.fsdp, mesh.tensor)
    except ValueError as e:
        logging.warning("%s; evaluating on mesh (%d, 1, 1) instead", e, jax.device_count())
        mesh.data, mesh.fsdp, mesh.tensor = -1, 1, 1


def experiment_module(name: str):
    path = os.path.join(EXPERIMENTS_DIR, f"{name}.py")
    if not os.path.exists(path):
        raise ValueError(f"config.json names experiment {name!r}, but there is no {path}")
    spec = importlib.util.spec_from_file_location(f"experiments_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "evaluate_checkpoint"):
        raise ValueError(f"{path} has no evaluate_checkpoint(config, workdir, step)")
    return module


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    distributed.initialize_from_flags()
    if not FLAGS.workdir:
        raise app.UsageError("--workdir is required")
    from bert_jax.train import loop
    loop.quiet_orbax_logs()
    try:
        config = workdir_lib.load_config(FLAGS.workdir)
        fit_mesh_to_devices(config)
        module = experiment_module(config.get("experiment", "pretrain"))
        step, metrics = module.evaluate_checkpoint(config, FLAGS.workdir, FLAGS.step)
    except (ValueError, FileNotFoundError) as e:
        sys.exit(f"evaluate.py: error: {e}")
    output = FLAGS.output or os.path.join(FLAGS.workdir, "evaluation", f"step_{step}.json")
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    record = {"workdir": os.path.abspath(FLAGS.workdir), "step": step, "metrics": metrics}
    with open(output, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2)
    logging.info("wrote %s", output)
    print(json.dumps(record))


if __name__ == "__main__":
    app.run(main)
