"""A scaling report of the pre-training step, read from the program XLA compiles for a mesh.

    python experiments/scaling_report.py --preset=base --devices=64 \
        --mesh=64,1,1 --mesh=8,8,1 --mesh=4,8,2 --dtype=bfloat16 --json=/tmp/scaling/base_64.json

For each --mesh (data,fsdp,tensor; one -1 takes the remaining devices) the real train step of
bert_jax.recipes.pretrain is compiled ahead of time for --devices fake CPU devices (nothing runs,
nothing of the model's size is allocated), and the report prints: per-device memory, FLOPs,
the bytes every collective moves per step by mesh axis, and the projected step time on each
--targets machine, with the assumptions. --batch_size is global (default: 32 rows per device).
The last lines are a markdown table; --json writes every figure, --hlo_dir the programs.

The device count must be set before jax starts, so the script runs itself again with
XLA_FLAGS=--xla_force_host_platform_device_count=N (and JAX_PLATFORMS=cpu) when it is not.
Exit status: 0 done, 1 bad input (one line `scaling_report.py: error: ...`).
The library: bert_jax/scaling/.
"""

import json
import os
import re
import sys

from absl import app, flags

from bert_jax import cli

FLAGS = flags.FLAGS
SCRIPT = "scaling_report.py"
_DEVICE_FLAG = "--xla_force_host_platform_device_count"


def _run_with_devices(devices: int) -> None:
    """Re-execute this script with the device count in XLA_FLAGS, unless it is already there."""
    wanted = f"{_DEVICE_FLAG}={devices}"
    current = os.environ.get("XLA_FLAGS", "")
    if wanted in current.split() and os.environ.get("JAX_PLATFORMS") == "cpu":
        return
    others = re.sub(rf"{_DEVICE_FLAG}=\S*", "", current).split()
    env = dict(os.environ, XLA_FLAGS=" ".join(others + [wanted]), JAX_PLATFORMS="cpu")
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def _config(mesh_shape: tuple[int, int, int], batch_size: int):
    """The pre-training config of the flags (experiments/configs/common.py)."""
    from experiments.configs import common as configs
    config = configs.pretrain_config()
    config.model.preset = FLAGS.preset
    config.tokenizer.vocab_size = FLAGS.vocab_size
    config.dtype, config.remat = FLAGS.dtype, FLAGS.remat
    config.max_seq_len, config.batch_size = FLAGS.max_seq_len, batch_size
    config.eval_batch_size = batch_size  # checked against the mesh; no eval step is compiled
    config.accumulation_steps = FLAGS.accumulation_steps
    config.data.max_predictions = FLAGS.max_predictions
    config.total_steps = 1000
    config.mesh.data, config.mesh.fsdp, config.mesh.tensor = mesh_shape
    return config


def _mesh_shapes(devices: int) -> list[tuple[int, int, int]]:
    from bert_jax import sharding
    shapes = []
    for text in FLAGS.mesh:
        try:
            data, fsdp, tensor = (int(x) for x in text.split(","))
        except ValueError:
            sys.exit(f"{SCRIPT}: error: --mesh={text!r} is not data,fsdp,tensor")
        shapes.append(cli.run_or_exit(
            SCRIPT, lambda d=data, f=fsdp, t=tensor: sharding.mesh_shape(d, f, t, devices)))
    return shapes


def main(argv):
    if len(argv) > 1:
        sys.exit(f"{SCRIPT}: error: unexpected arguments {argv[1:]}")
    if FLAGS.devices < 1:
        sys.exit(f"{SCRIPT}: error: --devices={FLAGS.devices} must be positive")
    _run_with_devices(FLAGS.devices)
    import jax
    from bert_jax.scaling import program, report, targets
    from bert_jax.sharding import make_mesh

    for name in FLAGS.targets:
        cli.run_or_exit(SCRIPT, lambda n=name: targets.get(n))
    if not 0 < FLAGS.mfu <= 1:
        sys.exit(f"{SCRIPT}: error: --mfu={FLAGS.mfu} must be in (0, 1]")
    batch_size = FLAGS.batch_size or 32 * FLAGS.devices
    records = []
    for shape in _mesh_shapes(jax.device_count()):
        config = _config(shape, batch_size)
        step = cli.run_or_exit(
            SCRIPT, lambda c=config, s=shape: program.compile_pretrain_step(c, make_mesh(*s)))
        records.append(report.analyse(step, FLAGS.targets, FLAGS.mfu))
        print(report.format_record(records[-1]), flush=True)
        if FLAGS.hlo_dir:
            _write(os.path.join(FLAGS.hlo_dir, "{}_{}.hlo.txt".format(
                FLAGS.preset, "x".join(map(str, shape)))), step.compiled.as_text())
        del step
    print(report.ASSUMPTIONS)
    print(report.markdown_table(records))
    if FLAGS.json:
        _write(FLAGS.json, json.dumps(
            {"preset": FLAGS.preset, "assumptions": report.ASSUMPTIONS,
             "targets": {n: vars(targets.get(n)) for n in FLAGS.targets}, "mfu": FLAGS.mfu,
             "records": records}, indent=1))


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


if __name__ == "__main__":
    flags.DEFINE_string("preset", "base", "BertConfig preset: tiny, mini, small, medium, base, "
                        "large.")
    flags.DEFINE_integer("vocab_size", 30522, "Vocabulary size (BERT's WordPiece: 30522).")
    flags.DEFINE_integer("devices", 8, "Fake CPU devices to compile for.")
    flags.DEFINE_multi_string("mesh", ["-1,1,1"], "data,fsdp,tensor (one may be -1); repeat "
                              "the flag for several meshes.")
    flags.DEFINE_integer("batch_size", None, "Global rows per step (default 32 per device).")
    flags.DEFINE_integer("max_seq_len", 128, "Tokens per row.")
    flags.DEFINE_integer("max_predictions", 20, "Masked positions per row.")
    flags.DEFINE_enum("dtype", "bfloat16", ["float32", "bfloat16"], "Compute dtype (parameters "
                      "and optimizer state stay float32).")
    flags.DEFINE_enum("remat", "none", ["none", "full", "dots", "dots_no_batch"],
                      "Remat policy of each encoder layer.")
    flags.DEFINE_integer("accumulation_steps", 1, "Micro-batches per optimizer step.")
    flags.DEFINE_list("targets", ["tpu_v5e", "tpu_v5p", "h100"], "Machines to project onto.")
    flags.DEFINE_float("mfu", 0.5, "Assumed model FLOPs utilisation of the compute.")
    flags.DEFINE_string("json", None, "Write every figure to this JSON file.")
    flags.DEFINE_string("hlo_dir", None, "Also write each compiled program's HLO text here.")
    app.run(main, flags_parser=cli.parse_flags)
