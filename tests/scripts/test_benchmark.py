"""benchmarks/benchmark.py runs every implementation in its own process and reports comparable
figures (the speed itself is measured by running the script, never asserted in tests)."""

import json
import os
import subprocess
import sys

import pytest
from absl import app, flags

from benchmarks import benchmark, benchmark_finetune_cli, peers

from repo_root import ROOT

SCRIPT = os.path.join(ROOT, "benchmarks", "benchmark.py")
TINY = ["--preset=tiny", "--batch_size=2", "--seq_len=32", "--steps=2", "--warmup=1", "--json"]


def run_benchmark(*flags: str) -> list[dict]:
    proc = subprocess.run([sys.executable, SCRIPT, *TINY, *flags], capture_output=True, text=True,
                          timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


# transformers 5 has no Flax classes: the hf_flax peer runs on the floor stack (4.57) only.
FLAX_PEER = peers.flax_peer_fault() is None


def test_train_step_against_both_peers_prints_results_and_ratios():
    # ours in bf16 with full remat; one peer at its own dtype (fp32), labelled so in the ratio
    if not FLAX_PEER:
        proc = subprocess.run([sys.executable, SCRIPT, *TINY, "--peer=hf_flax@float32"],
                              capture_output=True, text=True, timeout=900, cwd=ROOT)
        assert proc.returncode != 0 and "hf_flax needs transformers 4.57" in proc.stderr
    records = run_benchmark("--mode=train", "--dtype=bfloat16", "--remat=full",
                            "--peer=hf_flax@float32,hf_torch" if FLAX_PEER else
                            "--peer=hf_torch@float32")
    results = {r["impl"]: r for r in records if "impl" in r}
    assert set(results) == ({"ours", "hf_flax", "hf_torch"} if FLAX_PEER else {"ours", "hf_torch"})
    assert results["ours"]["dtype"] == "bfloat16"
    assert results["hf_flax" if FLAX_PEER else "hf_torch"]["dtype"] == "float32"
    if FLAX_PEER:
        assert results["hf_torch"]["dtype"] == "bfloat16"
    for r in results.values():
        assert r["tokens_per_second"] > 0 and r["peak_rss_mb"] > 0 and 0 < r["mfu"] < 1
        assert (r["batch_size"], r["seq_len"], r["max_predictions"]) == (2, 32, 5)
        # tokens/s is derived from the measured median step time, not from anything else
        # (rounded to 0.1 in the report)
        assert r["tokens_per_second"] == pytest.approx(2 * 32 / r["median_step_s"], rel=1e-3,
                                                       abs=0.05)
    ratios = {r["ratio"]: r for r in records if "ratio" in r}
    expected_ratios = ((("ours/hf_flax@float32", "hf_flax"), ("ours/hf_torch", "hf_torch"))
                       if FLAX_PEER else (("ours/hf_torch@float32", "hf_torch"),))
    assert set(ratios) == {ratio for ratio, _ in expected_ratios}
    for ratio, peer in expected_ratios:
        expected = results["ours"]["tokens_per_second"] / results[peer]["tokens_per_second"]
        assert ratios[ratio]["tokens_per_second"] == pytest.approx(expected, rel=1e-2)


def test_our_inference_step():
    # ours runs its step once under jax.transfer_guard("disallow") before timing: a hidden
    # host<->device copy inside the step would fail the run.
    (result,) = run_benchmark("--mode=infer", "--dtype=float32", "--remat=none")
    assert result["impl"] == "ours" and result["mode"] == "infer" and result["dtype"] == "float32"
    assert result["tokens_per_second"] > 0


def _usage_error(*argv: str) -> str:
    """The script's flags parsed and checked in this process, as its main does before any worker
    starts: the message of the app.UsageError (absl's app.run prints it, exit status 1)."""
    values = flags.FlagValues()
    benchmark.define_flags(values)
    values([SCRIPT, *argv])
    with pytest.raises(app.UsageError) as error:
        benchmark.check(values)
    return str(error.value)


def test_bad_peer_flags_are_usage_errors():
    for argv, named in ((["--peer=hf_pytorch"], "hf_pytorch"),                # unknown peer
                        (["--peer=hf_flax@float16"], "float16"),              # unknown dtype
                        (["--dtype=float32", "--peer=hf_torch,hf_torch@float32"], "twice")):
        assert named in _usage_error(*TINY, *argv)
    # The script itself, once: a usage error exits non-zero with the message on stderr.
    proc = subprocess.run([sys.executable, SCRIPT, *TINY, "--peer=hf_pytorch"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode != 0 and "hf_pytorch" in proc.stderr


# ----- --mode=finetune -------------------------------------------------------------------------

FINETUNE = ["--mode=finetune", "--preset=tiny", "--batch_size=4", "--max_seq_len=32", "--steps=3",
            "--warmup_steps=1", "--json"]


def run_finetune(*flags: str) -> list[dict]:
    proc = subprocess.run([sys.executable, SCRIPT, *FINETUNE, *flags], capture_output=True,
                          text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def test_finetune_ours_and_torch_train_on_the_same_tokens_of_the_polarity_texts():
    records = run_finetune("--peer=hf_torch", "--bucket_lengths=16,32")
    results = {r["impl"]: r for r in records if "impl" in r}
    assert set(results) == {"ours", "hf_torch"}
    for r in results.values():
        assert (r["task"], r["batch_size"], r["max_seq_len"], r["steps"]) == (
            "classification", 4, 32, 3)
        # the figures come from the measured seconds and the tokens of the timed batches
        assert r["examples_per_second"] == pytest.approx(4 * 3 / r["seconds"], rel=1e-3,
                                                         abs=0.005)  # rounded to 0.01
        assert r["tokens_per_second"] == pytest.approx(r["real_tokens"] / r["seconds"],
                                                       rel=1e-3, abs=0.05)  # rounded to 0.1
        assert 0 <= r["padding_fraction"] < 1 and r["peak_rss_mb"] > 0
    ours, torch = results["ours"], results["hf_torch"]
    assert ours["real_tokens"] == torch["real_tokens"] > 0  # the same batches on both sides
    # torch pads each batch to its longest row; ours to that row's bucket (16 or 32): never less
    assert torch["computed_positions"] <= ours["computed_positions"] <= 3 * 4 * 32
    assert ours["bucket_lengths"] == "16,32" and ours["programs"] == 2  # compiled before timing
    assert ours["compile_seconds"] > 0 and torch["compile_seconds"] is None
    (ratio,) = [r for r in records if "ratio" in r]
    assert ratio["ratio"] == "ours/hf_torch" and ratio["examples_per_second"] == pytest.approx(
        ours["examples_per_second"] / torch["examples_per_second"], rel=1e-2)


def test_finetune_span_qa_on_a_file_of_texts_without_buckets(tmp_path):
    texts = tmp_path / "texts.txt"  # .txt: one text per line (fastText labels optional)
    texts.write_text("".join(f"Paris is where the {'old ' * (i % 9)}book lies today .\n"
                             for i in range(12)), encoding="utf-8")
    (result,) = run_finetune("--task=span_qa", f"--texts={texts}", "--bucket_lengths=none")
    assert result["impl"] == "ours" and result["task"] == "span_qa"
    assert result["programs"] == 1  # every batch at max_seq_len
    assert result["computed_positions"] == 3 * 4 * 32
    assert result["padding_fraction"] == pytest.approx(
        1 - result["real_tokens"] / (3 * 4 * 32), abs=1e-4)


def test_finetune_user_mistakes_are_usage_errors():
    for argv, named in ((["--texts=/no/such/texts.txt"], "/no/such/texts.txt"),
                        (["--hf_dir=/no/such/folder"], "config.json"),
                        (["--all", "--peer=hf_torch"], "--all")):
        assert named in _usage_error(*FINETUNE, *argv)
    # The script itself, once: exit status non-zero, the message, no traceback.
    proc = subprocess.run([sys.executable, SCRIPT, *FINETUNE, "--hf_dir=/no/such/folder"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode != 0 and "config.json" in proc.stderr
    assert "Traceback" not in proc.stderr


# ----- benchmarks/benchmark_finetune_cli.py: experiments/finetune.py against torch ------------

CLI_SCRIPT = os.path.join(ROOT, "benchmarks", "benchmark_finetune_cli.py")


@pytest.mark.slow
def test_finetune_cli_runs_our_command_and_torch_on_the_same_rows(tmp_path):
    proc = subprocess.run([sys.executable, CLI_SCRIPT, "--cases=tiny", "--steps=2", "--warmup=1",
                           "--json", f"--workdir={tmp_path}"], capture_output=True, text=True,
                          timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = {r["impl"]: r for r in map(json.loads, proc.stdout.splitlines())}
    assert set(results) == {"ours", "hf_torch"}
    for r in results.values():
        assert (r["case"], r["batch_size"], r["max_seq_len"], r["steps"]) == ("tiny", 8, 32, 2)
        assert r["examples_per_second"] == pytest.approx(8 * 2 / r["seconds"], rel=1e-3,
                                                         abs=0.005)
        assert r["computed_positions_per_second"] == pytest.approx(
            r["computed_positions"] / r["seconds"], rel=1e-3, abs=0.05)
        assert r["machine"]["processor"] and len(r["load_average_after"]) == 3
    ours, torch = results["ours"], results["hf_torch"]
    # the same examples in the same batches: ours read them back from the file it was given
    assert ours["real_tokens"] == torch["real_tokens"] > 0
    # finetune.py's own run: its metrics.jsonl, its compiled shapes, nothing compiled in between
    assert os.path.isfile(tmp_path / "tiny_ours" / "run" / "metrics.jsonl")
    assert ours["compiled_shapes"].startswith("[(") and ours["compilations_in_timed_steps"] == 0
    assert ours["pack_examples"] == 4 and ours["computed_positions"] <= 2 * 8 * 32


def test_finetune_cli_user_mistakes_are_one_line():
    cases = ((["--cases=tiny,huge"], "huge"), (["--impls=ours,hf_jax"], "hf_jax"),
             (["--texts=/no/such/texts.txt"], "/no/such/texts.txt"), (["--steps=0"], "--steps=0"))
    for argv, named in cases:
        values = flags.FlagValues()
        benchmark_finetune_cli.define_flags(values)
        values([CLI_SCRIPT, *argv])
        with pytest.raises(SystemExit) as exited:  # cli.fail: sys.exit(line), exit status 1
            benchmark_finetune_cli.check_flags(values)
        line = exited.value.code
        assert isinstance(line, str) and named in line and "\n" not in line, line
        assert line.startswith("benchmark_finetune_cli.py: error:"), line
    # The script itself, once: exit status 1 and that one line on stderr.
    proc = subprocess.run([sys.executable, CLI_SCRIPT, "--cases=tiny,huge"], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 1 and "huge" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
