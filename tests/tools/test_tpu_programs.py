"""Programs compiled for a TPU slice on this CPU host (bert_jax/tools/scaling: topology, chips,
roofline; the `test` extra brings libtpu, so these run in CI).

- The real pre-training step of a tiny BERT compiled for v5e:2x2 (4 chips, fsdp=4): the report's
  chip fields (memory against the chip's HBM, XLA's cost analysis, the roofline bound, the fsdp
  traffic beside its ideal) hold consistent figures, and the parameters are gathered with
  all-gathers over fsdp.
- A step traced for TPU devices is the program a TPU host would trace: the platform-dependent
  choices follow the mesh (`bert_jax.runtime.platform`), not the CPU host. The bf16 matmuls'
  CPU-only row-major transposes (model/precision.py: a [a, b/2, 2] view) are in the host's program
  and not in the TPU one, which equals the program traced with the platform set to "tpu"; XLA:CPU's
  scheduler option is not passed.
"""

import os
import re

import jax
import pytest

from bert_jax.config import run as run_config
from bert_jax.config import settings
from bert_jax.runtime import platform, sharding, xla_options
from bert_jax.tools.scaling import chips, program, report, roofline, topology

from repo_root import ROOT


@pytest.fixture(scope="module")
def v5e_devices():
    return topology.devices("tpu:v5e:2x2")


def _config(mesh_shape, dtype="bfloat16"):
    config = run_config.pretrain_config()
    config.model.preset = "tiny"
    config.model.num_hidden_layers = 1  # the collectives of every layer are alike
    config.tokenizer.vocab_size = 1024
    config.dtype, config.remat = dtype, "none"
    config.max_seq_len, config.batch_size, config.eval_batch_size = 64, 16, 16
    config.data.max_predictions = 8
    config.total_steps = 100
    config.mesh.data, config.mesh.fsdp, config.mesh.tensor = mesh_shape
    return config


def test_topology_devices_and_their_chip(v5e_devices):
    assert len(v5e_devices) == 4 and platform.platform_of(v5e_devices) == "tpu"
    chip = chips.for_device_kind(v5e_devices[0].device_kind)
    assert chip is chips.CHIPS["TPU v5e"]
    assert chip.link_bandwidth == chip.bidirectional_ici / 2
    with pytest.raises(ValueError, match="expected <generation>:<shape>"):
        topology.parse("tpu:v5e")


def test_fsdp_step_for_v5e_report_fields(v5e_devices):
    mesh = sharding.make_mesh(1, 4, 1, devices=v5e_devices)
    step = program.compile_pretrain_step(_config((1, 4, 1)), mesh)
    chip = chips.for_device_kind(v5e_devices[0].device_kind)
    record = report.analyse(step, ["tpu_v5e"], 0.5, chip)
    c = record["chip_report"]
    mem = record["memory_per_device"]
    assert c["chip"] == "TPU v5e"
    assert c["memory"]["peak_bytes"] == mem["peak"] > 0 and c["memory"]["fits"]
    assert c["memory"]["headroom_bytes"] == pytest.approx(chip.hbm_bytes - mem["peak"])
    for key in ("arguments", "outputs", "temporaries", "generated_code"):
        assert mem[key] > 0, key
    assert c["cost_analysis"]["flops"] > 0 and c["cost_analysis"]["bytes_accessed"] > 0
    roof = c["roofline"]
    assert roof["compute_s"] == pytest.approx(record["flops"]["model_per_device"]
                                              / chip.peak_bf16_flops)
    assert roof["step_s"] == max(roof["compute_s"], roof["memory_s"], roof["network_s"])
    assert 0 < roof["mfu_bound"] <= 1
    kinds = {(row["kind"], row["axes"]) for row in record["collectives"]}
    assert ("all-gather", "fsdp") in kinds  # the weights are gathered, not all-reduced
    fsdp = c["fsdp_traffic"]
    n = 4
    expected_ideal = roofline.fsdp_ideal_bytes(n, step.fsdp_param_bytes,
                                               step.param_bytes - step.fsdp_param_bytes, n)
    assert fsdp["ideal_bytes"] == pytest.approx(expected_ideal) and fsdp["ideal_bytes"] > 0
    assert fsdp["ratio"] == pytest.approx(fsdp["measured_bytes"] / fsdp["ideal_bytes"])
    assert fsdp["flagged"] == (fsdp["ratio"] > roofline.FSDP_RATIO_LIMIT)
    # tiny's 128-wide LayerNorm vectors split 4 ways are 32 lanes: partial tiles, named
    assert any("layer_norm" in p for p in c["fsdp_untiled_params"])
    assert "TPU v5e" in report.chip_table([record])


def _lowered_text(mesh, dtype="bfloat16"):
    """The StableHLO of the pre-training step traced for `mesh` (lowered, not compiled)."""
    from bert_jax.recipes import common, pretrain
    run = settings.read(_config((1, len(mesh.devices.flat), 1), dtype), "pretrain")
    cfg = common.model_config(run, run.tokenizer.vocab_size)
    train = common.train_program(run, mesh, pretrain.make_task(run, cfg), 100, abstract=True)
    batch = program.abstract_batch(run, cfg.vocab_size, mesh)
    return train.train_step.lower(train.state, batch).as_text()


def _row_major_views(text: str) -> int:
    """Reshapes into the [a, b/2, 2] view of precision.transpose_row_major."""
    return len(re.findall(r"stablehlo\.reshape %\w+ : \(tensor<(\d+)x\d+x(\w+)>\) -> "
                          r"tensor<\1x\d+x2x\2>", text))


def test_the_tpu_program_is_what_a_tpu_host_traces(v5e_devices, monkeypatch):
    tpu_mesh = sharding.make_mesh(1, 4, 1, devices=v5e_devices)
    cpu_mesh = sharding.make_mesh(1, 1, 1, devices=jax.devices()[:1])
    on_host = _lowered_text(cpu_mesh)
    for_tpu = _lowered_text(tpu_mesh)
    assert _row_major_views(on_host) > 0  # XLA:CPU's fast dot kernel wants them
    assert _row_major_views(for_tpu) == 0
    # What a TPU host traces: there the mesh's devices are TPUs (stood in for by making this
    # host's device report "tpu"). The same operations, up to the sharding annotations.
    with monkeypatch.context() as patch:
        patch.setattr(platform, "platform_of", lambda devices: "tpu")
        as_tpu_host = _lowered_text(cpu_mesh)
    ops = lambda text: re.findall(r"= (stablehlo\.\w+)", text)
    assert _row_major_views(as_tpu_host) == 0
    for op in ("stablehlo.transpose", "stablehlo.dot_general"):
        assert ops(for_tpu).count(op) == ops(as_tpu_host).count(op), op
    # compiler options: XLA:CPU's scheduler only for CPU meshes, TPU's own for TPU meshes
    assert xla_options.compiler_options(platform.platform_of(tpu_mesh)) == xla_options.TPU_OPTIONS
    assert xla_options.compiler_options(platform.platform_of(cpu_mesh)) == xla_options.CPU_OPTIONS


def test_script_unknown_topology_is_one_line(tmp_path):
    import subprocess
    import sys
    root = ROOT
    done = subprocess.run([sys.executable, os.path.join(root, "experiments", "scaling_report.py"),
                           "--target=tpu:v5e:3", "--preset=tiny"],
                          env=dict(os.environ, PYTHONPATH=root), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("scaling_report.py: error:") and "v5e:3" in last, done.stderr[-2000:]


def test_explicit_fsdp_collectives_meet_the_ideal():
    """bert_jax/train/fsdp.py on v5e:2x4 with (data, fsdp) = (2, 4): the gradients leave by
    reduce-scatters over fsdp and the step's fsdp traffic is within FSDP_RATIO_LIMIT of the
    all-gather + reduce-scatter ideal (the partitioner's own program is not, on this libtpu)."""
    devices = topology.devices("tpu:v5e:2x4")
    config = _config((2, 4, 1))
    config.fsdp_collectives = "explicit"
    step = program.compile_pretrain_step(config, sharding.make_mesh(2, 4, 1, devices=devices))
    record = report.analyse(step, [], 0.5, chips.for_device_kind(devices[0].device_kind))
    kinds = {(row["kind"], row["axes"]) for row in record["collectives"]}
    assert ("reduce-scatter", "fsdp") in kinds and ("all-gather", "fsdp") in kinds
    fsdp = record["chip_report"]["fsdp_traffic"]
    assert fsdp["ratio"] <= roofline.FSDP_RATIO_LIMIT and not fsdp["flagged"], fsdp


def test_explicit_fsdp_over_a_whole_slice_in_two_levels():
    """fsdp over all 16 chips of v5e:4x4: one-level collectives over the whole torus become
    all-reduces in XLA:TPU; in two levels (groups of 4) the traffic is within the limit."""
    from bert_jax.train import fsdp
    devices = topology.devices("tpu:v5e:4x4")
    config = _config((1, 16, 1))
    config.batch_size = config.eval_batch_size = 32
    config.fsdp_collectives = "explicit"
    mesh = sharding.make_mesh(1, 16, 1, devices=devices)
    assert fsdp.two_level_mesh(mesh)[1] == ("fsdp_outer", "fsdp_inner")
    step = program.compile_pretrain_step(config, mesh)
    record = report.analyse(step, [], 0.5, chips.for_device_kind(devices[0].device_kind))
    fsdp_traffic = record["chip_report"]["fsdp_traffic"]
    assert fsdp_traffic["ratio"] <= roofline.FSDP_RATIO_LIMIT, fsdp_traffic
