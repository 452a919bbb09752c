"""benchmarks/compare_pretraining.py: every implementation is scored on the same held-out rows,
ours_modern is modern.py's recipe at the comparison's size, and a smoke run of all five writes a
complete report (speed is measured by running the script on a quiet machine, never asserted
here)."""

import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from absl import flags

from benchmarks import compare_pretraining, peers
from benchmarks.peers import IMPLEMENTATIONS, heldout, inputs, mlm_blocks, ours_mlm, race
from bert_jax import cli
from bert_jax.config import settings as run_settings
from bert_jax.config.bert import gated_intermediate_size
from bert_jax.config.modernbert import ModernBertConfig
from bert_jax.recipes import common
from experiments.configs import modern

from repo_root import ROOT

SCRIPT = os.path.join(ROOT, "benchmarks", "compare_pretraining.py")
TINY_MODEL = ["--preset=tiny", "--hidden_size=32", "--num_layers=1", "--num_heads=2",
              "--intermediate_size=64", "--vocab_size=256"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """(data_dir, vocab.txt) of the demo corpus with a 256-piece vocabulary."""
    data_dir = str(tmp_path_factory.mktemp("data"))
    return data_dir, inputs.prepare_vocabulary("demo", data_dir, 256)


def settings(tmp_path, data_dir, **overrides):
    values = dict(corpus="demo", data_dir=data_dir, output_dir=str(tmp_path), preset="tiny",
                  sizes={}, vocab_size=256, budget_seconds=10.0, batch_size=8,
                  learning_rate=1e-3, warmup_fraction=0.1, seeds=(0, 1),
                  implementations=tuple(IMPLEMENTATIONS), eval_points=4, eval_rows=128)
    return race.Settings(**{**values, **overrides})


def test_every_run_reads_the_same_heldout_rows_masked_at_15_percent(demo, tmp_path):
    data_dir, vocab_path = demo
    first = inputs.write_heldout("demo", data_dir, vocab_path, str(tmp_path / "a.npz"), 128)
    again = inputs.write_heldout("demo", data_dir, vocab_path, str(tmp_path / "b.npz"), 128)
    assert again["sha256"] == first["sha256"]  # a fixed seed: the same rows and masks each time
    rows = heldout.load(first["path"], first["sha256"])
    assert rows.num_rows == first["rows"] == 128
    assert len(rows.arrays["input_ids"]) % heldout.EVAL_BATCH_ROWS == 0
    assert rows.arrays["input_ids"].shape[1] == inputs.SEQ_LEN
    assert rows.num_masked == first["masked_tokens"] > 1000

    # Masked at 15% of the maskable tokens, 80% of them shown as [MASK].
    assert 0.14 < first["mask_fraction"] < 0.16, first["mask_fraction"]
    weights = rows.arrays["masked_weights"] > 0
    shown = np.take_along_axis(rows.arrays["input_ids"], rows.arrays["masked_positions"], 1)
    mask_id = mlm_blocks.Vocabulary(vocab_path).mask_id
    assert 0.75 < np.mean(shown[weights] == mask_id) < 0.85

    # Every run of every implementation is given this file and its digest.
    shared = {"vocab_path": vocab_path, "vocab_size": 300, "heldout": first, "blocks": {},
              "model": {}, "hf_config": {}}
    config = settings(tmp_path, data_dir)
    specs = [race.run_spec(config, shared, name, seed)
             for name in IMPLEMENTATIONS for seed in config.seeds]
    assert len(specs) == 2 * len(IMPLEMENTATIONS)
    assert {(s["heldout_path"], s["heldout_sha256"]) for s in specs} == {
        (first["path"], first["sha256"])}

    # The Hugging Face view of a batch predicts exactly ours' masked positions and targets.
    for batch in rows.batches():
        labels = heldout.hf_inputs(batch)["labels"]
        row, slot = np.nonzero(batch["masked_weights"] > 0)
        positions = batch["masked_positions"][row, slot]
        assert np.array_equal(labels[row, positions], batch["masked_ids"][row, slot])
        assert (labels != heldout.IGNORED_LABEL).sum() == batch["masked_weights"].sum()

    # A file that changed after the comparison wrote it is refused.
    changed = str(tmp_path / "changed.npz")
    shutil.copy(first["path"], changed)
    arrays = dict(rows.arrays)
    arrays["masked_ids"] = arrays["masked_ids"] + 1
    heldout.save(changed, arrays, rows.num_rows)
    with pytest.raises(ValueError, match="digest"):
        heldout.load(changed, first["sha256"])


def _settings_error(argv: list[str]) -> str:
    """The script's flags parsed and its comparison started in this process, as its main does
    (through cli.run_or_exit): the one line it exits 1 with."""
    values = flags.FlagValues()
    compare_pretraining.define_flags(values)
    cli.parse_flags([SCRIPT, *argv], values)
    with pytest.raises(SystemExit) as exited:
        cli.run_or_exit("compare_pretraining.py", lambda: compare_pretraining.compare(values))
    return exited.value.code  # sys.exit(message): printed as the last line, exit status 1


def test_bad_settings_are_one_line_errors(tmp_path):
    cases = (("--implementations=ours_classic,hf_jax", "hf_jax"),
             ("--targets=0.2,1.5", "(0, 1]"), ("--seeds=0,zero", "--seeds"),
             ("--budget_seconds=0", "budget_seconds"),
             ("--hidden_size=30", "divisible"),  # by the preset's 4 heads
             ("--hidden_size=36", "even head_dim"),  # 9 per head: ours_modern's rotary refuses
             (f"--corpus=text:{tmp_path}/none/*.txt", "matches no file"))
    for flag, named in cases:
        last = _settings_error([f"--output_dir={tmp_path}", flag])
        assert isinstance(last, str) and "\n" not in last, last
        assert last.startswith("compare_pretraining.py: error:") and named in last, last
    # The script itself, once: exit status 1, that line last on stderr, no traceback.
    flag, named = cases[-1]
    done = subprocess.run([sys.executable, SCRIPT, f"--output_dir={tmp_path}", flag],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 1, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("compare_pretraining.py: error:") and named in last, last
    assert "Traceback" not in done.stderr


def test_ours_modern_is_modern_py_at_the_comparisons_size(demo, tmp_path):
    data_dir, vocab_path = demo
    shared = {"vocab_path": vocab_path, "vocab_size": 300, "heldout": {"path": "", "sha256": ""},
              "blocks": {}, "hf_config": {},
              "model": {"hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 2,
                        "intermediate_size": 96}}
    recipe = modern.get_config(ours_mlm.MODERN_PHASE)
    assert recipe.max_seq_len == inputs.SEQ_LEN  # the phase of the comparison's rows
    for explicit in ((), ("batch_size", "learning_rate", "warmup_fraction")):
        config_ = settings(tmp_path, data_dir, batch_size=8, learning_rate=1e-4,
                           warmup_fraction=0.5, explicit=explicit)
        spec = race.run_spec(config_, shared, "ours_modern", 3)
        config, source = ours_mlm.modern_config(spec)
        assert source == modern.__file__ and config.model.family == "modernbert"
        # The comparison's size, the dense FFN's parameters in the GeGLU width.
        assert config.model.hidden_size == 64 and config.model.num_hidden_layers == 4
        assert config.model.num_attention_heads == 2
        assert config.model.intermediate_size == gated_intermediate_size(64, 96)
        # The comparison's vocabulary, corpus, rows and seed; random initialisation.
        assert config.model.vocab_size == 300 and config.tokenizer.path == vocab_path
        assert config.data.corpus == "demo" and config.max_seq_len == inputs.SEQ_LEN
        assert config.seed == 3 and not config.init.hf_dir and not config.init.checkpoint
        # modern.py's own masking in training (the held-out rows are the shared 15% ones).
        assert config.data.mask_rate == recipe.data.mask_rate > inputs.MASK_RATE
        assert config.data.max_predictions == recipe.data.max_predictions
        assert config.optimizer.to_dict() == recipe.optimizer.to_dict()
        assert config.model.initializer_range == recipe.model.initializer_range
        for key in ("batch_size", "learning_rate", "warmup_fraction"):
            assert config[key] == (spec["train"][key] if key in explicit else recipe[key]), key
        # The model the run builds: modern.py's attention pattern at that size.
        cfg = common.model_config(run_settings.read(config, "pretrain"), 300)
        assert isinstance(cfg, ModernBertConfig) and cfg.num_hidden_layers == 4
        window = ModernBertConfig.local_attention  # modern.py's: the family's default
        assert [cfg.window_of(i) for i in range(4)] == [None, window, window, None]
        assert cfg.hidden_size == 64 and cfg.vocab_size == 300
        assert cfg.intermediate_size == config.model.intermediate_size


@pytest.mark.slow
def test_smoke_run_of_all_five_implementations(demo, tmp_path):
    data_dir, _ = demo
    # A budget of a second: on this CPU the first step (its compilation) alone takes about that,
    # so each run plans a step or two; the bookkeeping is what is checked here.
    budget, points, targets = 1.0, 2, (0.01, 0.99)
    done = subprocess.run(
        [sys.executable, SCRIPT, f"--output_dir={tmp_path}", f"--data_dir={data_dir}",
         *TINY_MODEL, f"--budget_seconds={budget}", f"--eval_points={points}", "--batch_size=8",
         "--eval_rows=64", "--seeds=0", "--torch_threads=1",
         "--smoke_one_process",  # every run, calibration and clocked run, in one process
         f"--targets={','.join(map(str, targets))}"],
        capture_output=True, text=True, timeout=2400, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    paths = json.loads(done.stdout.strip().splitlines()[-1])
    with open(paths["json"], encoding="utf-8") as f:
        report = json.load(f)

    assert set(report) == {"settings", "shared", "runs", "summary"}
    masked = report["shared"]["heldout"]["masked_tokens"]
    runs = {run["implementation"]: run for run in report["runs"]}
    # every implementation but hf_flax where transformers has no Flax classes (5)
    expected = [name for name in IMPLEMENTATIONS
                if name != peers.HF_FLAX or peers.flax_peer_fault() is None]
    assert list(runs) == expected and set(report["summary"]) == set(runs)
    expected_points = [budget * k / points for k in range(1, points + 1)]
    for name, run in runs.items():
        assert run["seed"] == 0 and run["num_params"] > 0
        # It trained (the calibration's timed steps); the clocked run may spend a small budget
        # on a busy machine in initialisation and compilation alone, so its count may be 0.
        assert run["calibration"]["timed_steps"] >= 1 and run["calibration"]["planned_steps"] >= 1
        evaluations = run["evaluations"]
        assert [e["point_seconds"] for e in evaluations] == pytest.approx(expected_points)
        steps = [e["steps"] for e in evaluations]
        assert steps == sorted(steps) and steps[-1] <= run["calibration"]["planned_steps"]
        for e in evaluations:
            assert e["masked_tokens"] == masked, name  # each scored every held-out masked token
            assert 0.0 <= e["accuracy"] <= 1.0 and math.isfinite(e["loss"]) and e["loss"] > 0
            assert e["examples"] == e["steps"] * run["recipe"]["batch_size"]
            assert e["seconds"] > 0
        assert set(run["time_to_target"]) == {f"{t:g}" for t in targets}
        # Nothing reaches 99% in seconds; a time recorded for 1% is that of an evaluation.
        assert run["time_to_target"]["0.99"] is None
        hit = run["time_to_target"]["0.01"]
        assert hit is None or hit in [e["seconds"] for e in evaluations]
        summary = report["summary"][name]
        assert summary["final_accuracy"]["mean"] == evaluations[-1]["accuracy"]
        assert summary["final_accuracy"]["runs"] == 1
    assert "placeholder" in runs["ours_efficient"]["config_source"] or os.path.exists(
        os.path.join(ROOT, "experiments", "configs", "efficient.py"))
    # ours_modern trained a ModernBERT of the comparison's size with modern.py's masking, and
    # was scored on the shared 15%-masked rows (masked_tokens above).
    ours_modern = runs["ours_modern"]
    assert ours_modern["config_source"] == modern.__file__
    size = report["shared"]["model"]
    assert ours_modern["model"]["local_attention"] == ModernBertConfig.local_attention
    assert ours_modern["model"]["hidden_size"] == size["hidden_size"]
    assert ours_modern["model"]["intermediate_size"] == gated_intermediate_size(
        size["hidden_size"], size["intermediate_size"])
    assert ours_modern["recipe"]["data"]["mask_rate"] == modern.get_config(
        ours_mlm.MODERN_PHASE).data.mask_rate > report["shared"]["heldout"]["mask_fraction"]
    with open(paths["png"], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert "time to reach held-out masked-LM accuracy 0.01" in done.stdout
