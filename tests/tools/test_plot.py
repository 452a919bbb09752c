"""experiments/plot.py and bert_jax/tools/plotting.py (curves of runs into a PNG), and the progress
bars of bert_jax/runtime/progress.py (shown only when asked for, never changing a result)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from bert_jax.runtime import progress
from bert_jax.tools import plotting

from repo_root import ROOT

SCRIPT = os.path.join(ROOT, "experiments", "plot.py")


def write_run(workdir, scale=1.0, seconds_per_step=0.5, torn=False):
    """A fake workdir: 5 training records (every 10 steps) and 2 held-out ones."""
    os.makedirs(workdir)
    with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
        for step in range(10, 60, 10):
            f.write(json.dumps({"step": step, "loss": scale * 5.0 / step ** 0.3,
                                "mlm_accuracy": 0.01 * step, "learning_rate": 1e-3,
                                "seconds_per_step": seconds_per_step}) + "\n")
        if torn:
            f.write('{"step": 60, "loss": 1.')  # a run killed while writing its last line
    with open(os.path.join(workdir, "eval_metrics.jsonl"), "w") as f:
        for step in (25, 50):
            f.write(json.dumps({"step": step, "loss": scale * 4.0 / step ** 0.3,
                                "mlm_accuracy": 0.009 * step}) + "\n")
    return workdir


def run_script(*args):
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_plot_script_draws_two_runs_into_a_png(tmp_path):
    import matplotlib.image

    base = write_run(str(tmp_path / "base"))
    other = write_run(str(tmp_path / "bf16"), scale=1.1, seconds_per_step=0.25, torn=True)
    output = tmp_path / "figures" / "curves.png"
    done = run_script(f"--workdir={base}", other, f"--output={output}", "--x=seconds",
                      "--metrics=loss,mlm_accuracy")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary == {"output": str(output), "runs": ["base", "bf16"],
                       "metrics": ["loss", "mlm_accuracy"], "x": "seconds"}
    with open(output, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    image = matplotlib.image.imread(str(output))
    height, width = image.shape[:2]
    assert 400 <= width <= 2000 and 400 <= height <= 2000, image.shape  # two subplots, 8 in wide
    assert image[..., :3].std() > 0.05  # not a blank canvas


def test_plot_script_missing_workdir_is_one_line_error(tmp_path):
    base = write_run(str(tmp_path / "base"))
    missing = str(tmp_path / "nowhere")
    done = run_script(f"--workdir={base}", f"--workdir={missing}",
                      f"--output={tmp_path / 'x.png'}")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("plot.py: error:")]
    assert errors == [lines[-1]] == [f"plot.py: error: workdir {missing!r} does not exist"]
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "x.png").exists()


def test_runs_without_metrics_or_with_unknown_metric_are_errors(tmp_path):
    os.makedirs(tmp_path / "empty")
    with pytest.raises(ValueError, match="holds no metrics"):
        plotting.load_run(str(tmp_path / "empty"))
    runs = plotting.load_runs([write_run(str(tmp_path / "a" / "run")),
                               write_run(str(tmp_path / "b" / "run"))])
    assert [run.name for run in runs] == ["run", "run (2)"]
    with pytest.raises(ValueError, match=r"no run logged the metric\(s\) \['f1'\]"):
        plotting.plot_runs(runs, str(tmp_path / "x.png"), metrics=["loss", "f1"])
    assert plotting.choose_metrics(runs, None) == ["loss", "mlm_accuracy"]


def test_seconds_axis_accumulates_seconds_per_step(tmp_path):
    run = plotting.load_run(write_run(str(tmp_path / "r"), seconds_per_step=0.5))
    train_x = plotting.x_values(run, run.train, "seconds")
    np.testing.assert_allclose(train_x, [5.0, 10.0, 15.0, 20.0, 25.0])  # 10 steps x 0.5 s each
    held_out_x = plotting.x_values(run, run.held_out, "seconds")
    np.testing.assert_allclose(held_out_x, [12.5, 25.0])  # steps 25 and 50, interpolated
    np.testing.assert_allclose(plotting.x_values(run, run.held_out, "step"), [25, 50])
    del run.train[2]["seconds_per_step"]
    with pytest.raises(ValueError, match="no seconds_per_step"):
        plotting.x_values(run, run.train, "seconds")


# ----- progress bars ---------------------------------------------------------------------------

def test_progress_bar_hidden_when_not_a_terminal_and_forced_by_env(monkeypatch, capsys):
    monkeypatch.delenv(progress.ENV_VAR, raising=False)
    assert list(progress.bar(range(5), desc="counting")) == [0, 1, 2, 3, 4]
    assert capsys.readouterr().err == ""  # pytest's stderr is no terminal

    monkeypatch.setenv(progress.ENV_VAR, "1")
    assert list(progress.bar(range(5), desc="counting", unit="doc")) == [0, 1, 2, 3, 4]
    err = capsys.readouterr().err
    assert "counting" in err and "doc" in err, err

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    monkeypatch.delenv(progress.ENV_VAR)
    assert progress.enabled()  # a terminal, process 0
    monkeypatch.setenv(progress.ENV_VAR, "0")
    assert not progress.enabled()  # turned off on a terminal too


def test_progress_bars_change_no_vocabulary(tmp_path, monkeypatch, capsys):
    from bert_jax.data.tokenizers import wordpiece_training

    texts = [f"the cat number {i} sat on the mat, said the dog {i % 7}." for i in range(40)]
    monkeypatch.setenv(progress.ENV_VAR, "1")
    shown = wordpiece_training.train_wordpiece(texts, 60, str(tmp_path / "shown"))
    assert "vocabulary: words" in capsys.readouterr().err
    monkeypatch.setenv(progress.ENV_VAR, "0")
    quiet = wordpiece_training.train_wordpiece(texts, 60, str(tmp_path / "quiet"))
    assert capsys.readouterr().err == ""
    with open(shown) as a, open(quiet) as b:
        assert a.read() == b.read()


def test_progress_bars_change_no_evaluation_result(monkeypatch, capsys):
    import jax
    import jax.numpy as jnp

    from bert_jax.runtime import sharding
    from bert_jax.train import evaluation

    def loss_fn(params, batch, rng, deterministic):
        errors = (batch["x"] @ params["w"] - batch["y"]) ** 2
        return ({"squared_error": (errors.sum(), jnp.float32(errors.size))},
                {"mean_x": (batch["x"].sum(), jnp.float32(batch["x"].size))})

    data = np.random.default_rng(0)
    batches = [{"x": data.normal(size=(4, 3)).astype(np.float32),
                "y": data.normal(size=(4,)).astype(np.float32)} for _ in range(3)]
    params = {"w": jnp.asarray([0.5, -1.0, 2.0], jnp.float32)}
    mesh = sharding.make_mesh()
    evaluate = evaluation.LossEvaluator(loss_fn, lambda: iter(batches), mesh)

    monkeypatch.setenv(progress.ENV_VAR, "0")
    quiet = evaluate(params)
    assert capsys.readouterr().err == ""
    monkeypatch.setenv(progress.ENV_VAR, "1")
    shown = evaluate(params)
    assert "evaluation" in capsys.readouterr().err
    assert shown == quiet and set(quiet) == {"loss", "squared_error", "mean_x"}

    features = {"x": np.concatenate([b["x"] for b in batches])[:10]}
    predict = jax.jit(lambda p, b: {"y": b["x"] @ p["w"]},
                                 out_shardings=sharding.replicated(mesh))
    with_bar = evaluation.predict_rows(predict, params, features, 4, mesh)
    assert "evaluation" in capsys.readouterr().err
    monkeypatch.setenv(progress.ENV_VAR, "0")
    without = evaluation.predict_rows(predict, params, features, 4, mesh)
    np.testing.assert_array_equal(with_bar["y"], without["y"])
    assert with_bar["y"].shape == (10,)
