"""A scaling report of the train step, read from the program XLA compiles for a mesh.

    python experiments/scaling_report.py --preset=base --devices=64 \
        --mesh=64,1,1 --mesh=8,8,1 --mesh=4,8,2 --dtype=bfloat16 --json=/tmp/scaling/base_64.json

    # the real TPU program, compiled on this (CPU) host for a v5e slice of 8 chips
    # (pip install -e '.[tpu]'; about 1-2 minutes per mesh for BERT-base on 2 CPU cores)
    python experiments/scaling_report.py --target=tpu:v5e:2x4 --preset=base --mesh=1,8,1 \
        --batch_size=256 --max_seq_len=512 --max_batch

--target=cpu (the default) compiles for --devices fake CPU devices and projects the step onto
--targets machines. --target=tpu:<topology> (any name jax.experimental.topologies accepts:
v5e:2x4, v4:4x4x4, v5p:2x2x1, v6e:2x2, ...) compiles for that slice's chips instead and also
reports, per chip, memory against the chip's HBM (fits, headroom), XLA's cost analysis, the
roofline bound on step time and MFU (bert_jax/tools/scaling/roofline.py, chips.py), and the fsdp
traffic against its all-gather + reduce-scatter ideal. --max_batch finds the largest global
batch that fits in HBM (in steps of the data-parallel size; about four compilations).
--recipe=finetune compiles the fine-tuning step of a sequence classifier instead of pre-training.

--config=experiments/configs/<run>.py (with --config.<key>=<value> overrides, as pretrain.py and
finetune.py take them) plans the run that config describes: its recipe, model, dtype, remat,
lengths, global batch, accumulation and mesh; a flag of this script given on the command line
(--preset, --dtype, --batch_size, --mesh, ...) overrides the config's value.

    python experiments/scaling_report.py --config=experiments/configs/bert_large.py \
        --config.mesh.fsdp=8 --devices=8

For each --mesh (data,fsdp,tensor; one -1 takes the remaining devices) the real train step of
bert_jax.recipes.pretrain is compiled ahead of time for --devices fake CPU devices (nothing runs,
nothing of the model's size is allocated), and the report prints: per-device memory, FLOPs,
the bytes every collective moves per step by mesh axis, and the projected step time on each
--targets machine, with the assumptions. --batch_size is global (default: 32 rows per device).
The last lines are a markdown table; --json writes every figure, --hlo_dir the programs.

The device count must be set before jax starts, so the script runs itself again with
XLA_FLAGS=--xla_force_host_platform_device_count=N (and JAX_PLATFORMS=cpu) when it is not.
Exit status: 0 done, 1 bad input (one line `scaling_report.py: error: ...`).
The library: bert_jax/tools/scaling/.
"""

import copy
import json
import math
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


def _run_for_tpu() -> None:
    """Re-execute this script so that JAX runs on the CPU host and libtpu asks no metadata
    server (the programs are compiled for the TPU devices of a described topology)."""
    if os.environ.get("JAX_PLATFORMS") == "cpu" and os.environ.get("TPU_SKIP_MDS_QUERY"):
        return
    env = dict(os.environ, JAX_PLATFORMS="cpu", TPU_SKIP_MDS_QUERY="1")
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def _given(name: str) -> bool:
    """Whether --name decides: always without --config, else only where it was given."""
    return FLAGS.config is None or FLAGS[name].present


def _recipe() -> str:
    return FLAGS.config.recipe if FLAGS.config is not None and not _given("recipe") \
        else FLAGS.recipe


def _preset() -> str:
    return FLAGS.preset if _given("preset") else FLAGS.config.model.preset


def _config(mesh_shape: tuple[int, int, int], batch_size: int):
    """The run config planned: --config's (a copy) with the flags given applied, or the schema's
    defaults (bert_jax/config/run.py) with every flag applied."""
    from bert_jax.config import run as run_config
    if FLAGS.config is not None:
        config = copy.deepcopy(FLAGS.config)
    else:
        config = (run_config.pretrain_config() if FLAGS.recipe == "pretrain"
                  else run_config.finetune_config("classification"))
    config.model.preset = _preset()
    if _given("scan_layers"):
        config.model.scan_layers = FLAGS.scan_layers
    if _given("attention") and FLAGS.attention != "auto":
        config.model.attention = FLAGS.attention
    if _given("vocab_size"):
        config.tokenizer.vocab_size = FLAGS.vocab_size
    for name in ("dtype", "remat", "max_seq_len", "accumulation_steps", "fsdp_collectives"):
        if _given(name):
            setattr(config, name, FLAGS[name].value)
    config.batch_size = batch_size
    config.eval_batch_size = batch_size  # checked against the mesh; no eval step is compiled
    if _recipe() == "pretrain" and _given("max_predictions"):
        config.data.max_predictions = FLAGS.max_predictions
    config.total_steps = 1000
    config.mesh.data, config.mesh.fsdp, config.mesh.tensor = mesh_shape
    return config


def _mesh_shapes(devices: int) -> list[tuple[int, int, int]]:
    """The --mesh shapes for `devices` devices (one line and exit 1 for a bad one)."""
    from bert_jax.runtime import sharding
    shapes = []
    meshes = (FLAGS.mesh if _given("mesh") else
              [f"{FLAGS.config.mesh.data},{FLAGS.config.mesh.fsdp},{FLAGS.config.mesh.tensor}"])
    for text in meshes:
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
    on_tpu = FLAGS.target != "cpu"
    if on_tpu:
        from bert_jax.tools.scaling import topology
        cli.run_or_exit(SCRIPT, lambda: topology.parse(FLAGS.target))
        _run_for_tpu()
    else:
        if FLAGS.devices < 1:
            sys.exit(f"{SCRIPT}: error: --devices={FLAGS.devices} must be positive")
        _run_with_devices(FLAGS.devices)
    import jax

    from bert_jax.tools.scaling import chips, report, targets

    for name in FLAGS.targets:
        cli.run_or_exit(SCRIPT, lambda n=name: targets.get(n))
    if not 0 < FLAGS.mfu <= 1:
        sys.exit(f"{SCRIPT}: error: --mfu={FLAGS.mfu} must be in (0, 1]")
    devices = (cli.run_or_exit(SCRIPT, lambda: topology.devices(FLAGS.target)) if on_tpu
               else jax.devices())
    chip = chips.for_device_kind(devices[0].device_kind) if on_tpu else None
    if on_tpu and chip is None:
        sys.exit(f"{SCRIPT}: error: {FLAGS.target}: no figures for the chip "
                 f"{devices[0].device_kind!r} in bert_jax/tools/scaling/chips.py")
    batch_size = (FLAGS.batch_size if FLAGS.batch_size is not None
                  else 32 * len(devices) if FLAGS.config is None else FLAGS.config.batch_size)
    records = []
    for shape in _mesh_shapes(len(devices)):
        mesh = make_mesh_of(shape, devices)
        if FLAGS.max_batch:
            search = cli.run_or_exit(SCRIPT, lambda s=shape, m=mesh: largest_batch(s, m, chip))
            print(f"== largest global batch that fits, mesh {shape}: {search['largest']} "
                  f"(compiled: {search['tried']})", flush=True)
            step = search["step"]
        else:
            step = cli.run_or_exit(SCRIPT, lambda s=shape, m=mesh: compile_step(s, m, batch_size))
        records.append(report.analyse(step, FLAGS.targets, FLAGS.mfu, chip))
        if FLAGS.max_batch:
            records[-1]["max_batch"] = {k: v for k, v in search.items() if k != "step"}
        print(report.format_record(records[-1]), flush=True)
        if chip is not None:
            print(report.format_chip(records[-1]), flush=True)
        if FLAGS.hlo_dir:
            _write(os.path.join(FLAGS.hlo_dir, "{}_{}.hlo.txt".format(
                _preset(), "x".join(map(str, shape)))), step.compiled.as_text())
        del step
    print(report.ASSUMPTIONS)
    print(report.markdown_table(records))
    if chip is not None:
        print(report.chip_table(records))
    if FLAGS.json:
        _write(FLAGS.json, json.dumps(
            {"preset": _preset(), "recipe": _recipe(), "target": FLAGS.target,
             "chip": vars(chip) if chip else None, "assumptions": report.ASSUMPTIONS,
             "targets": {n: vars(targets.get(n)) for n in FLAGS.targets}, "mfu": FLAGS.mfu,
             "records": records}, indent=1, default=str))


def make_mesh_of(shape: tuple[int, int, int], devices):
    from bert_jax.runtime.sharding import make_mesh
    return make_mesh(*shape, devices=devices)


def compile_step(shape: tuple[int, int, int], mesh, batch_size: int):
    """The recipe's train step of the flags at `batch_size` global rows, compiled for `mesh`."""
    from bert_jax.tools.scaling import program
    config = _config(shape, batch_size)
    if _recipe() == "pretrain":
        return program.compile_pretrain_step(config, mesh)
    return program.compile_finetune_step(config, mesh, FLAGS.num_labels)


def largest_batch(shape: tuple[int, int, int], mesh, chip) -> dict:
    """The largest global batch (a multiple of the rows the mesh splits, data x fsdp) whose
    program fits in the chip's HBM.

    The peak memory per chip grows about linearly with the rows per chip (the state is fixed,
    the activations scale), so each step compiles where the line through the last two points
    crosses the HBM size (a secant step), falling back to bisection between the largest batch
    known to fit and the smallest known not to, until they are one row per device apart. Returns
    {largest, rows_per_device, tried: [[batch, peak GiB, fits], ...], step: the largest's
    CompiledStep}."""
    import jax

    from bert_jax.tools.scaling import memory
    if chip is None:
        raise ValueError("--max_batch needs --target=tpu:<topology> (a chip with known HBM)")
    unit = shape[0] * shape[1]
    tried, steps = [], {}

    def peak(rows: int) -> float:
        if rows not in steps:
            try:
                step = compile_step(shape, mesh, rows * unit)
                steps[rows] = (memory.memory_per_device(step.compiled).get("peak", 0), step)
            except jax.errors.JaxRuntimeError as error:
                # XLA:TPU refuses to compile a program that cannot fit in HBM; its message names
                # the temporaries' size, a lower bound of the peak (the secant step uses it).
                if "RESOURCE_EXHAUSTED" not in str(error):
                    raise
                needed = re.search(r"HLO temporaries \(([\d.]+)G\)", str(error))
                at_least = float(needed.group(1)) * 2**30 if needed else math.inf
                steps[rows] = (max(at_least, chip.hbm_bytes + 1), None)
            fits = steps[rows][0] <= chip.hbm_bytes
            tried.append([rows * unit, round(steps[rows][0] / 2**30, 2), fits])
            refused = " (XLA refused to compile it: out of HBM)" if steps[rows][1] is None else ""
            print(f"   batch {rows * unit}: {steps[rows][0] / 2**30:.2f} GiB per chip, "
                  + ("fits" if fits else "does not fit") + refused, flush=True)
            if not fits:  # keep only what may be returned
                steps[rows] = (steps[rows][0], None)
        return steps[rows][0]

    if peak(1) > chip.hbm_bytes:
        raise ValueError(f"mesh {shape}: not even {unit} rows (one per device) fit in "
                         f"{chip.hbm_bytes / 2**30:.1f} GiB of HBM")
    fit, over = 1, FLAGS.max_rows_per_device + 1  # the largest known to fit, smallest not to
    last = (1, 2)
    while True:
        for rows in last:
            if peak(rows) <= chip.hbm_bytes:
                fit = max(fit, rows)
            else:
                over = min(over, rows)
        if over - fit <= 1:
            break
        slope = (peak(last[1]) - peak(last[0])) / (last[1] - last[0])
        guess = fit + int((chip.hbm_bytes - peak(fit)) // slope) if slope > 0 else over - 1
        guess = min(guess, over - 1)
        if guess <= fit or guess in steps:
            guess = (fit + over) // 2
        last = (last[1], guess)
    rows = fit
    return {"largest": rows * unit, "rows_per_device": rows, "tried": tried,
            "step": steps[rows][1]}


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


if __name__ == "__main__":
    cli.define_config_file_flag("config", "A run's config file (get_config(); --config.<key> "
                                "overrides it): the run to plan. The flags below, where given, "
                                "override its values.")
    flags.DEFINE_string("preset", "base", "BertConfig preset: tiny, mini, small, medium, base, "
                        "large.")
    flags.DEFINE_integer("vocab_size", 30522, "Vocabulary size (BERT's WordPiece: 30522).",
                         lower_bound=1)
    flags.DEFINE_string("target", "cpu", "cpu (fake CPU devices, --devices) or "
                        "tpu:<topology>, e.g. tpu:v5e:2x4, tpu:v4:4x4x4 (needs libtpu).")
    flags.DEFINE_enum("recipe", "pretrain", ["pretrain", "finetune"], "The step compiled: "
                      "pre-training (MLM) or fine-tuning a sequence classifier.")
    flags.DEFINE_integer("num_labels", 2, "Classes of the fine-tuning classifier.", lower_bound=1)
    flags.DEFINE_bool("scan_layers", False, "Compile the layers as one nn.scan.")
    flags.DEFINE_enum("attention", "auto", ["auto", "xla", "splash", "cudnn"],
                      "model.attention: the attention kernel (auto: per platform).")
    flags.DEFINE_bool("max_batch", False, "Search the largest global batch that fits in the "
                      "chip's HBM (with --target=tpu:...).")
    flags.DEFINE_integer("max_rows_per_device", 512, "Upper end of the --max_batch search.",
                         lower_bound=1)
    flags.DEFINE_integer("devices", 8, "Fake CPU devices to compile for (--target=cpu).",
                         lower_bound=1)
    flags.DEFINE_multi_string("mesh", ["-1,1,1"], "data,fsdp,tensor (one may be -1); repeat "
                              "the flag for several meshes.")
    flags.DEFINE_integer("batch_size", None, "Global rows per step (default 32 per device).",
                         lower_bound=1)
    flags.DEFINE_integer("max_seq_len", 128, "Tokens per row.", lower_bound=1)
    flags.DEFINE_integer("max_predictions", 20, "Masked positions per row.", lower_bound=1)
    flags.DEFINE_enum("dtype", "bfloat16", ["float32", "bfloat16"], "Compute dtype (parameters "
                      "and optimizer state stay float32).")
    flags.DEFINE_enum("remat", "none", ["none", "full", "dots", "dots_no_batch"],
                      "Remat policy of each encoder layer.")
    flags.DEFINE_integer("accumulation_steps", 1, "Micro-batches per optimizer step.",
                         lower_bound=1)
    flags.DEFINE_enum("fsdp_collectives", "xla", ["xla", "explicit"], "With fsdp > 1: the "
                      "partitioner's collectives, or the explicit ones of bert_jax/train/fsdp.py.")
    flags.DEFINE_list("targets", ["tpu_v5e", "tpu_v5p", "h100"], "Machines to project onto.")
    flags.DEFINE_float("mfu", 0.5, "Assumed model FLOPs utilisation of the compute.")
    flags.DEFINE_string("json", None, "Write every figure to this JSON file.")
    flags.DEFINE_string("hlo_dir", None, "Also write each compiled program's HLO text here.")
    app.run(main, flags_parser=cli.parse_flags)
