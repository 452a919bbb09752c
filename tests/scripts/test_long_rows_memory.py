"""benchmarks/long_rows_memory.py at tiny sizes: its layer stack is ModernBERT's Encoder, its
worker job on the CPU (run, timed, the kernels each mode runs, full attention's temporaries
above the local layers'), the same job compiled for a TPU chip (splash, or xla and the blocked
local kernel), its tables and its flags."""

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks import long_rows_memory as bench
from bert_jax.config.modernbert import ModernBertConfig
from bert_jax.model import modernbert
from bert_jax.model.attention import Mask
from bert_jax.model.encoder import positions_from_segments
from bert_jax.model.layers import rotary_angles

from repo_root import ROOT

TINY = {"batch": 1, "seq_len": 256, "hidden": 32, "heads": 2, "intermediate": 48, "layers": 3,
        "window": 32, "steps": 2, "max_temp_gib": 1.0}


def test_windows_follow_modernberts_pattern():
    assert bench.windows("alternating", 7, 128) == [None, 128, 128, None, 128, 128, None]
    assert bench.windows("full", 3, 128) == [None, None, None]
    assert bench.windows("local", 2, 64) == [64, 64]


def test_the_alternating_stack_is_the_encoder():
    """Same parameters, same output as modernbert.Encoder (which takes its windows from the
    config): the benchmark measures the model's own layers."""
    cfg = ModernBertConfig.preset("tiny", num_hidden_layers=3, local_attention=8)
    stack = bench.layer_stack(cfg, bench.windows("alternating", 3, 8))
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(2, 40, cfg.hidden_size)), jnp.float32)
    segment_ids = jnp.asarray(np.where(np.arange(40) < 17, 1, 2)[None].repeat(2, 0), jnp.int32)
    params = stack.init(jax.random.key(0), x, segment_ids)
    positions = positions_from_segments(segment_ids)
    rotary = {kind: rotary_angles(positions, cfg.head_dim, theta)
              for kind, theta in (("global", cfg.global_rope_theta),
                                  ("local", cfg.local_rope_theta))}
    expected = modernbert.Encoder(cfg).apply(params, x, Mask(segment_ids=segment_ids), True,
                                             rotary)
    np.testing.assert_array_equal(stack.apply(params, x, segment_ids), expected)
    # the local layers see their window: all-global layers give another output
    full = bench.layer_stack(cfg, bench.windows("full", 3, 8))
    assert not np.allclose(full.apply(params, x, segment_ids), expected, atol=1e-3)


def test_cpu_step_runs_times_and_tables():
    """The worker job in this process: each mode's kernels, a timed run, and XLA's temporaries
    ordered local < alternating < full at a row 8 windows long."""
    results = [{**bench.step({**TINY, "mode": mode, "target": "cpu"}), "peak_rss_mb": 1000.0}
               for mode in bench.MODES]
    by_mode = {r["mode"]: r for r in results}
    assert by_mode["alternating"]["kernels"] == {"global": "xla", "local": "local"}
    assert by_mode["full"]["kernels"] == {"global": "xla"}
    assert by_mode["local"]["kernels"] == {"local": "local"}
    for r in results:
        assert r["ran"] and np.isfinite(r["loss"]) and r["step_s"] > 0
        assert len(r["step_times_s"]) == 1 + TINY["steps"] and len(r["load_average"]) == 2
        assert r["step_s"] == pytest.approx(float(np.median(r["step_times_s"][1:])), abs=1e-3)
    assert by_mode["local"]["temp_mb"] < by_mode["alternating"]["temp_mb"] \
        < by_mode["full"]["temp_mb"]
    lines = bench.cpu_table(results).splitlines()
    assert len(lines) == 5 and all(line.count("|") == 10 for line in lines)
    assert lines[2].startswith("| 256 | alternating | global xla, local local | 1,000 |")
    # a step over --max_temp_gib is compiled, not run
    skipped = bench.step({**TINY, "mode": "full", "target": "cpu", "max_temp_gib": 1e-4})
    assert not skipped["ran"] and "max_temp_gib" in skipped["not_run"]
    row = bench.cpu_table([{**skipped, "peak_rss_mb": 1.0}]).splitlines()[2]
    assert row.count("not run") == 2


def test_tpu_step_compiles_for_one_v5e_chip():
    """Compiled for one chip of v5e:2x2, not run: splash on global and local layers with auto;
    with xla, the xla composition on the global layer and the blocked kernel on local ones. The
    bytes per chip are the compiled program's (bert_jax.tools.scaling.memory); a program XLA:TPU
    refuses is reported with its error."""
    tpu = {**TINY, "seq_len": 512, "target": "tpu:v5e:2x2", "mode": "alternating"}
    auto, xla = (bench.step({**tpu, "attention": attention}) for attention in ("auto", "xla"))
    assert auto["kernels"] == {"global": "splash", "local": "splash"}
    assert xla["kernels"] == {"global": "xla", "local": "local"}
    for r in (auto, xla):
        assert not r["ran"] and r["device_kind"].startswith("TPU v5")
        assert r["argument_mb"] > 0 and r["output_mb"] > 0 and r["temp_mb"] >= 0
        assert r["program_mb"] == pytest.approx(r["argument_mb"] + r["output_mb"] - r["alias_mb"]
                                                + r["temp_mb"] + r["generated_code_mb"])
    # A program over the chip's 16 GiB of HBM is refused: the error is the result, not a crash.
    refused = bench.step({**tpu, "seq_len": 65536, "layers": 1, "mode": "full",
                          "attention": "xla"})
    assert not refused["ran"] and "temp_mb" not in refused
    assert "exceeds available HBM" in refused["compile_error"]
    lines = bench.tpu_table([xla, auto, refused]).splitlines()
    assert len(lines) == 5 and all(line.count("|") == 10 for line in lines)
    assert lines[2].startswith("| tpu:v5e:2x2 | 512 | alternating | global splash, local splash |")
    assert lines[4].startswith("| tpu:v5e:2x2 | 65,536 | full | global xla | refused by XLA: ")


@pytest.mark.parametrize("flag", ["--modes=local,fast", "--seq_lens=1k", "--heads=5",
                                  "--targets=tpu:v5e", "--tpu_attention=cudnn", "--steps=0"])
def test_bad_flags_are_one_line(flag):
    root = ROOT
    done = subprocess.run([sys.executable, "benchmarks/long_rows_memory.py", flag], cwd=root,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert done.stderr.startswith("long_rows_memory.py: error: " + flag.split("=")[0])
