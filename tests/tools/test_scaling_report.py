"""The scaling report (bert_jax/tools/scaling, experiments/scaling_report.py).

The HLO reader on hand-written programs (every spelling of device groups, while-loop trip
counts, async collectives, where a value comes from, the all-reduce patterns a GPU/TPU compiler
rewrites) and the projection's arithmetic; then the real pre-training step of a tiny BERT,
compiled for 8 fake CPU devices in a subprocess (XLA_FLAGS set before jax is imported), against
what its shardings imply:

- data parallelism (8,1,1): the all-reduced bytes per step are the gradient bytes (fp32, the
  parameters' dtype) plus the tied word embedding's once more: its two gradient contributions
  (the lookup's and the MLM decoder's) are all-reduced separately and added after, which the
  report flags as reassociable; without them, the gradient bytes within 5%. With 2 accumulation
  steps the all-reduce runs inside the micro-batch loop: twice the bytes;
- fsdp (1,8,1) and (2,4,1), fp32, no remat: what is counted is the first all-gather of each
  parameter (its forward gather; the backward pass reuses it, only the LayerNorm vectors are
  gathered again). Those bytes are the fsdp-sharded parameters' within 5%, and every
  fsdp-sharded parameter is gathered except possibly the position and token-type tables, whose
  lookups XLA may run on the local shard instead (max_position_embeddings=64 keeps that < 5%);
- per-device memory figures are positive and the arguments (train state) shrink with fsdp.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import xla_flags

from bert_jax.tools.scaling import collectives, groups, hlo, projection, targets, traffic

import eight_devices
from repo_root import ROOT

CASES = {"dp": ((8, 1, 1), 1), "dp_accumulation": ((8, 1, 1), 2), "fsdp": ((1, 8, 1), 1),
         "data_fsdp": ((2, 4, 1), 1)}
LOOKUP_TABLES = ("position_embeddings", "token_type_embeddings")

# ----- the HLO reader ----------------------------------------------------------------------------

PROGRAM = """\
HloModule test

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %sum = f32[] add(%x, %y)
}

%body (p: (s32[], f32[16,8])) -> (s32[], f32[16,8]) {
  %p = (s32[], f32[16,8]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %w = f32[16,8]{1,0} get-tuple-element(%p), index=1
  %ar = f32[16,8]{1,0} all-reduce(%w), channel_id=1, replica_groups=[2,4]<=[8], \
use_global_device_ids=true, to_apply=%add
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  ROOT %t = (s32[], /*index=1*/f32[16,8]{1,0}) tuple(%next, %ar)
}

%cond (p.1: (s32[], f32[16,8])) -> pred[] {
  %p.1 = (s32[], f32[16,8]{1,0}) parameter(0)
  %i.1 = s32[] get-tuple-element(%p.1), index=0
  %n = s32[] constant(3)
  ROOT %lt = pred[] compare(%i.1, %n), direction=LT
}

ENTRY %main (a: f32[16,8], b: bf16[4,8]) -> (s32[], f32[16,8]) {
  %a = f32[16,8]{1,0} parameter(0), metadata={op_name="state.params[\\'w\\']"}
  %b = bf16[4,8]{1,0} parameter(1), metadata={op_name="batch[\\'x\\']"}
  %zero = s32[] constant(0)
  %init = (s32[], f32[16,8]{1,0}) tuple(%zero, %a)
  %loop = (s32[], f32[16,8]{1,0}) while(%init), condition=%cond, body=%body{TRIPS}
  %copy = bf16[4,8]{0,1} copy(%b)
  %ag = bf16[16,8]{1,0} all-gather(%copy), channel_id=2, \
replica_groups=mesh['x'=2,'y'=4] {'y'}, dimensions={0}, use_global_device_ids=true
  %ags = (bf16[4,8]{1,0}, bf16[16,8]{1,0}) all-gather-start(%b), channel_id=3, \
replica_groups={{0,1,2,3},{4,5,6,7}}, dimensions={0}
  %agd = bf16[16,8]{1,0} all-gather-done(%ags)
  %cp = bf16[4,8]{1,0} collective-permute(%b), channel_id=4, source_target_pairs={{0,1},{1,0}}
  ROOT %out = (s32[], f32[16,8]{1,0}) copy(%loop)
}
"""
KNOWN_TRIPS = ', backend_config={"known_trip_count":{"n":"5"}}'


def _by_name(text: str) -> dict[str, collectives.Collective]:
    found, _ = collectives.collectives(text, num_devices=8)
    return {c.name: c for c in found}


def test_collectives_bytes_runs_groups_and_sources():
    found = _by_name(PROGRAM.replace("{TRIPS}", KNOWN_TRIPS))
    assert set(found) == {"ar", "ag", "ags", "cp"}
    halves = ((0, 1, 2, 3), (4, 5, 6, 7))
    ar = found["ar"]  # in the loop body: 5 runs (known_trip_count), 16 x 8 fp32 in and out
    assert (ar.kind, ar.executions, ar.operand_bytes, ar.result_bytes) == (
        "all-reduce", 5, 512, 512)
    assert ar.groups == halves and ar.dtypes == ("f32",)
    assert ar.source == "state.params['w']"  # through the while loop's tuple
    ag = found["ag"]  # gathers 4 of 4 x 8 bf16 rows
    assert (ag.kind, ag.executions, ag.operand_bytes, ag.result_bytes) == (
        "all-gather", 1, 64, 256)
    assert ag.groups == halves and ag.source == "batch['x']"  # through the copy
    ags = found["ags"]  # the async form: result bytes from the operand and the group size
    assert (ags.kind, ags.operand_bytes, ags.result_bytes, ags.groups) == (
        "all-gather", 64, 256, halves)
    cp = found["cp"]
    assert cp.kind == "collective-permute" and cp.groups == ((0, 1), (1, 0))
    assert cp.group_size == 2 and cp.moves_data


def test_trip_count_from_the_loop_condition():
    found = _by_name(PROGRAM.replace("{TRIPS}", ""))  # no known_trip_count: `i < 3`
    assert found["ar"].executions == 3


def test_every_spelling_of_device_groups():
    parse = groups.parse_groups
    # iota(8).reshape(2, 4).T = [[0,4],[1,5],[2,6],[3,7]], flattened, in groups of 2
    assert parse("replica_groups=[4,2]<=[2,4]T(1,0), dimensions={0}", 8) == (
        (0, 4), (1, 5), (2, 6), (3, 7))
    # the mesh a=2 x b=4 holds devices [[0,4,1,5],[2,6,3,7]]; groups along a
    assert parse("replica_groups=mesh['a'=2,'b'=4], device_ids=([2,4]T(1,0)) {'a'}", 8) == (
        (0, 2), (4, 6), (1, 3), (5, 7))
    # a sub-axis: a=8 split as [2, 2, 2], the middle piece (pre-size 2, size 2)
    assert parse("replica_groups=mesh['a'=8] {'a':(2)2}", 8) == ((0, 2), (1, 3), (4, 6), (5, 7))
    assert parse("replica_groups=mesh['a'=2,'b'=2] {'a','b'}", 4) == ((0, 1, 2, 3),)
    assert parse("replica_groups={}, to_apply=%add", 4) == ((0, 1, 2, 3),)
    assert parse("replica_groups={{0,2},{1,3}}, to_apply=%add", 4) == ((0, 2), (1, 3))
    with pytest.raises(hlo.HloParseError):
        parse("replica_groups=mesh['a'=8] {'c'}", 8)


SLICED = """\
HloModule sliced

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %sum = f32[] add(%x, %y)
}

%slice_rows (param_0: f32[8,4], param_1: s32[]) -> f32[2,4] {
  %param_0 = f32[8,4]{1,0} parameter(0)
  %param_1 = s32[] parameter(1)
  %c0 = s32[] constant(0)
  ROOT %ds = f32[2,4]{1,0} dynamic-slice(%param_0, %param_1, %c0), dynamic_slice_sizes={2,4}
}

ENTRY %main (g1: f32[8,4], g2: f32[8,4], g3: f32[8,4]) -> (f32[8,4], f32[2,4]) {
  %g1 = f32[8,4]{1,0} parameter(0)
  %g2 = f32[8,4]{1,0} parameter(1)
  %g3 = f32[8,4]{1,0} parameter(2)
  %ar = (f32[8,4]{1,0}, f32[8,4]{1,0}) all-reduce(%g1, %g2), replica_groups={{0,1,2,3}}, \
to_apply=%add
  %e0 = f32[8,4]{1,0} get-tuple-element(%ar), index=0
  %e1 = f32[8,4]{1,0} get-tuple-element(%ar), index=1
  %both = f32[8,4]{1,0} add(%e0, %e1)
  %scattered = f32[8,4]{1,0} all-reduce(%g3), replica_groups={{0,1,2,3}}, to_apply=%add
  %pid = u32[] partition-id()
  %row = s32[] convert(%pid)
  %mine = f32[2,4]{1,0} fusion(%scattered, %row), kind=kLoop, calls=%slice_rows
  ROOT %out = (f32[8,4]{1,0}, f32[2,4]{1,0}) tuple(%both, %mine)
}
"""


def test_reassociable_and_sliced_all_reduces():
    found = _by_name(SLICED)
    pair, scattered = found["ar"], found["scattered"]
    # add(all-reduce(g1), all-reduce(g2)): one all-reduce of g1 + g2 would do (128 bytes fewer)
    assert (pair.operand_bytes, pair.reassociable_bytes, pair.sliced_bytes) == (256, 128, 0)
    # every use keeps a quarter of it: a reduce-scatter
    assert (scattered.operand_bytes, scattered.sliced_bytes) == (128, 128)
    ring = 2 * 3 / 4
    assert traffic.wire_bytes(pair) == pytest.approx(ring * 256)
    assert traffic.effective_wire_bytes(pair) == pytest.approx(ring * 128)
    assert traffic.effective_wire_bytes(scattered) == pytest.approx(3 / 4 * 128)


REDUCE_SCATTER_FUSION = """\
HloModule rs

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %sum = f32[] add(%x, %y)
}

%all-reduce-scatter (input: f32[4,8,128]) -> f32[1,8,128] {
  %input = f32[4,8,128]{2,1,0} parameter(0)
  %ar = f32[4,8,128]{2,1,0} all-reduce(%input), channel_id=1, replica_groups={{0,1,2,3}}, \
to_apply=%add
  %pid = u32[] partition-id()
  %zero = u32[] constant(0)
  ROOT %mine = f32[1,8,128]{2,1,0} dynamic-slice(%ar, %pid, %zero, %zero), \
dynamic_slice_sizes={1,8,128}
}

ENTRY %main (g: f32[4,8,128]) -> f32[1,8,128] {
  %g = f32[4,8,128]{2,1,0} parameter(0)
  ROOT %rs = f32[1,8,128]{2,1,0} fusion(%g), kind=kCustom, calls=%all-reduce-scatter
}
"""


def test_tpu_all_reduce_scatter_fusion_is_a_reduce_scatter():
    # XLA:TPU's reduce-scatter: a custom fusion of all-reduce + slice, run as one reduce-scatter
    (rs,) = collectives.collectives(REDUCE_SCATTER_FUSION, num_devices=4)[0]
    assert (rs.kind, rs.operand_bytes, rs.result_bytes, rs.sliced_bytes) == (
        "reduce-scatter", 16384, 4096, 0)
    assert traffic.wire_bytes(rs) == pytest.approx(3 / 4 * 16384)


# ----- the projection --------------------------------------------------------------------------

def _all_reduce(members, payload):
    return collectives.Collective("x", "all-reduce", "main", 1, payload, payload, ("f32",),
                                  (tuple(members),))


def test_two_level_collective_time_on_h100():
    h100, payload = targets.get("h100"), 1e9
    # 16 GPUs over 2 nodes: 7/8 of the ring inside each node, 1/2 of it between them, each of
    # the 8 GPUs of a node carrying 1/8 of the payload over its own InfiniBand link
    fast, slow, latency = projection.collective_seconds(h100, _all_reduce(range(16), payload))
    assert fast == pytest.approx(2 * 7 / 8 * payload / 450e9)
    assert slow == pytest.approx(2 * 1 / 2 * payload / 8 / 50e9)
    assert latency == pytest.approx(2 * 3 * 1e-6 + 2 * 1 * 5e-6)
    # one GPU per node: the whole payload crosses InfiniBand
    fast, slow, _ = projection.collective_seconds(h100, _all_reduce((0, 8, 16, 24), payload))
    assert fast == 0 and slow == pytest.approx(2 * 3 / 4 * payload / 50e9)


def test_step_time_bounds():
    v5p = targets.get("tpu_v5p")
    found = [_all_reduce(range(8), 4e9)]
    p = projection.project(v5p, found, model_flops_per_device=459e12, tokens_per_step=1000,
                           memory_per_device=1e9, mfu=0.5)
    assert p.compute_s == pytest.approx(2.0)  # 459e12 FLOPs at half of 459e12 FLOP/s
    comm = 2 * 7 / 8 * 4e9 / 600e9 + 2 * 3 * 1e-6
    assert p.comm_s == pytest.approx(comm) and p.comm_slow_s == 0
    assert p.step_s_no_overlap == pytest.approx(2.0 + comm)
    assert p.step_s_full_overlap == pytest.approx(2.0)
    assert p.memory_fits
    with pytest.raises(ValueError, match="unknown target"):
        targets.get("tpu_v9")


# ----- the compiled pre-training step on 8 devices ---------------------------------------------

def _config(mesh_shape, accumulation_steps):
    from bert_jax.config import run as run_config
    config = run_config.pretrain_config()
    config.model.preset = "tiny"
    config.model.num_hidden_layers = 1  # what moves per layer is the same in every layer
    config.model.max_position_embeddings = 64
    config.tokenizer.vocab_size = 1024
    config.max_seq_len, config.batch_size = 64, 32
    config.eval_batch_size = 32
    config.data.max_predictions = 10
    config.accumulation_steps, config.total_steps = accumulation_steps, 10
    config.mesh.data, config.mesh.fsdp, config.mesh.tensor = mesh_shape
    return config


def _worker(out_dir: str) -> None:
    """Runs in the 8-device subprocess; writes what the tests compare into out_dir."""
    import jax

    from bert_jax.runtime.sharding import make_mesh
    from bert_jax.tools.scaling import program, report

    assert jax.device_count() == 8
    results = {}
    for name, (shape, accumulation) in CASES.items():
        step = program.compile_pretrain_step(_config(shape, accumulation), make_mesh(*shape))
        found, _ = collectives.collectives(step.compiled.as_text(), 8)
        results[name] = {
            "record": report.analyse(step, ["h100"], 0.5),
            "param_bytes": step.param_bytes, "fsdp_param_bytes": step.fsdp_param_bytes,
            "fsdp_params": list(step.fsdp_params),
            "word_embedding_bytes": step.word_embedding_bytes,
            "gathered_params": sorted({c.source for c in found if c.kind == "all-gather"
                                       and c.source.startswith("state.params")}),
        }
    eight_devices.write(out_dir, results)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    return eight_devices.run(__file__, str(tmp_path_factory.mktemp("scaling")), timeout=900)


def _rows(record, kind, axes):
    return [r for r in record["collectives"] if r["kind"] == kind and r["axes"] == axes]


def test_data_parallel_all_reduce_moves_the_gradients(compiled):
    case = compiled["dp"]
    rows = _rows(case["record"], "all-reduce", "data")
    assert len(rows) == 1 and rows[0]["group_size"] == 8
    assert [r["axes"] for r in case["record"]["collectives"]] == ["data"]  # nothing else moves
    all_reduced, reassociable = rows[0]["operand_bytes"], rows[0]["reassociable_bytes"]
    # gradient bytes = parameter bytes (fp32 gradients of fp32 parameters)
    np.testing.assert_allclose(all_reduced - reassociable, case["param_bytes"], rtol=0.05)
    np.testing.assert_allclose(reassociable, case["word_embedding_bytes"], rtol=0.05)
    np.testing.assert_allclose(all_reduced, case["param_bytes"] + case["word_embedding_bytes"],
                               rtol=0.05)
    assert case["record"]["parameter_gathers"]["parameters"] == 0  # replicated: no gathers


def test_accumulation_loop_repeats_the_gradient_all_reduce(compiled):
    once = _rows(compiled["dp"]["record"], "all-reduce", "data")[0]
    twice = _rows(compiled["dp_accumulation"]["record"], "all-reduce", "data")[0]
    np.testing.assert_allclose(twice["operand_bytes"], 2 * once["operand_bytes"], rtol=0.01)
    assert compiled["dp_accumulation"]["record"]["unknown_trip_counts"] == []


@pytest.mark.parametrize("case", ["fsdp", "data_fsdp"])
def test_fsdp_all_gathers_move_the_sharded_parameters(compiled, case):
    case = compiled[case]
    gathers = case["record"]["parameter_gathers"]
    np.testing.assert_allclose(gathers["parameters"], case["fsdp_param_bytes"], rtol=0.05)
    assert gathers["regathered"] < 0.05 * gathers["parameters"]  # the LayerNorm vectors only
    not_gathered = set(case["fsdp_params"]) - set(case["gathered_params"])
    assert all(any(t in path for t in LOOKUP_TABLES) for path in not_gathered), not_gathered
    fsdp_gathers = _rows(case["record"], "all-gather", "fsdp")
    assert fsdp_gathers and sum(r["result_bytes"] for r in fsdp_gathers) >= gathers["parameters"]


def test_memory_is_positive_and_arguments_shrink_with_fsdp(compiled):
    memory = {name: compiled[name]["record"]["memory_per_device"] for name in CASES}
    for figures in memory.values():
        for key in ("arguments", "outputs", "temporaries", "peak"):
            assert figures[key] > 0, (key, figures)
    arguments = {name: memory[name]["arguments"] for name in ("dp", "data_fsdp", "fsdp")}
    assert arguments["fsdp"] < arguments["data_fsdp"] < arguments["dp"]
    # the state (parameters + two Adam moments, fp32) dominates: 8-way fsdp is ~ 1/8 of it
    assert arguments["fsdp"] < arguments["dp"] / 4


# ----- the script --------------------------------------------------------------------------------

def _script(*args, devices_set: bool = False):
    # The tests' fast-compile flags; the script adds the device count to them and re-executes
    # itself, unless devices_set: already there, as in the re-executed process (no re-execution).
    env = dict(os.environ, PYTHONPATH=ROOT,
               XLA_FLAGS=xla_flags.with_devices(8 if devices_set else None))
    return subprocess.run([sys.executable, os.path.join(ROOT, "experiments", "scaling_report.py"),
                           *args], env=env, capture_output=True, text=True, timeout=600)


def test_script_reports_a_mesh_and_writes_json(tmp_path):
    out = tmp_path / "report.json"
    done = _script("--preset=tiny", "--vocab_size=1024", "--devices=8", "--mesh=2,-1,1",
                   "--batch_size=16", "--max_seq_len=32", "--max_predictions=5",
                   "--targets=tpu_v5e,h100", f"--json={out}")
    assert done.returncode == 0, done.stderr[-4000:]
    assert "Assumptions of the projections" in done.stdout
    assert "| 8 | (2,4,1) |" in done.stdout  # the markdown table's row
    report = json.loads(out.read_text())
    (record,) = report["records"]
    assert record["mesh"] == {"data": 2, "fsdp": 4, "tensor": 1} and record["devices"] == 8
    assert set(record["projections"]) == {"tpu_v5e", "h100"}
    assert record["effective_wire_bytes_per_device"] > 0


def test_script_plans_the_run_a_config_file_describes(tmp_path):
    """--config and --config.<key> as the training scripts take them (the script had no way to
    read a run's own config): its model, lengths, batch and mesh are planned; a flag given on
    the command line overrides the config."""
    out = tmp_path / "report.json"
    config = os.path.join(ROOT, "experiments", "configs", "demo.py")
    done = _script(f"--config={config}", "--config.mesh.data=2", "--config.mesh.fsdp=4",
                   "--config.batch_size=16", "--config.tokenizer.vocab_size=1024",
                   "--max_seq_len=32", "--devices=8", "--targets=h100", f"--json={out}")
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(out.read_text())
    (record,) = report["records"]
    assert record["mesh"] == {"data": 2, "fsdp": 4, "tensor": 1}
    assert report["recipe"] == "pretrain" and report["preset"] == "tiny"
    assert "| 8 | (2,4,1) |" in done.stdout
    bad = _script(f"--config={config}", "--config.no_such_key=1", "--devices=8",
                  devices_set=True)
    assert bad.returncode != 0 and "no_such_key" in bad.stderr


@pytest.mark.parametrize("args, message", [
    (["--devices=8", "--mesh=3,1,1"], "needs 3 devices"),
    (["--devices=8", "--targets=tpu_v9"], "unknown target"),
    (["--devices=8", "--mesh=2x4"], "is not data,fsdp,tensor"),
])
def test_script_bad_input_is_one_line(args, message):
    # --devices=8 with the 8 devices already set: the checks of the process that computes (the
    # re-execution that sets them is test_script_reports_a_mesh_and_writes_json's)
    done = _script("--preset=tiny", *args, devices_set=True)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("scaling_report.py: error:") and message in last, done.stderr[-2000:]


if __name__ == "__main__":
    _worker(sys.argv[1])
