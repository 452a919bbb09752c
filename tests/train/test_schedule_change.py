"""Extending a run with allow_config_change: whenever the rate at the restored step changes, one
warning line before the first resumed step names the old and new total_steps, the rates before
and after and the new tail; config.warmup_steps keeps the warm-up and stretches the decay, which
moves the rate too and is said the same way (issue 40, class 6). After the line, the resumed
run's rate is the rate an uninterrupted run of the new config has at every step."""

import json

import numpy as np
import pytest
from absl import logging as absl_logging

from bert_jax.config import run as run_config
from bert_jax.config import settings
from bert_jax.recipes import run_record
from bert_jax.train import optimizer


def _config(total_steps, **changes):
    config = run_config.finetune_config("classification")
    config.total_steps, config.learning_rate = total_steps, 4e-4
    for key, value in changes.items():
        config[key] = value
    return config


def test_restart_line_names_totals_and_rates():
    old, new = _config(300).to_dict(), _config(600).to_dict()
    line = run_record.restart_line(old, new, 50)
    # old: warm-up 30, then linear decay over 270 steps; new: warm-up 60 (step 50 in warm-up)
    before, after = 4e-4 * (1 - 20 / 270), 4e-4 * 50 / 60
    assert line == (f"the learning-rate schedule restarts at step 50: total_steps 300 -> 600 "
                    f"moves the rate from {before:.3g} to {after:.3g} (warm-up 30 -> 60 steps); "
                    "from step 50 the rate follows the new schedule, as a run of "
                    "total_steps=600 started anew would, down to 0 at step 600; to keep the "
                    "warm-up instead, --config.warmup_steps=30 (the decay is then stretched to "
                    "total_steps=600, which moves the rate too)")
    kept = _config(600, warmup_steps=30).to_dict()
    stretched = 4e-4 * (1 - 20 / 570)
    assert run_record.restart_line(old, kept, 50) == (
        f"the learning-rate schedule is stretched at step 50: total_steps 300 -> 600 with the "
        f"warm-up kept at 30 steps moves the rate from {before:.3g} to {stretched:.3g}; from "
        "step 50 the rate follows the new schedule, as a run of total_steps=600 started anew "
        "would, down to 0 at step 600")
    assert run_record.restart_line(old, kept, 20) is None  # in the warm-up: the same rate
    assert run_record.restart_line(old, old, 50) is None
    assert run_record.restart_line(old, _config(0).to_dict(), 50) is None  # epochs


def test_warmup_steps_key_sets_the_optimizer_warmup():
    assert settings.optimizer_config(_config(600), 600).warmup_steps == 60
    extended = settings.optimizer_config(_config(600, warmup_steps=30), 600)
    assert extended.warmup_steps == 30
    rate = optimizer.learning_rate_schedule(extended)
    assert float(rate(30)) == pytest.approx(4e-4) and float(rate(600)) == pytest.approx(0.0)


def test_record_config_warns_once_when_an_extension_restarts_the_schedule(tmp_path,
                                                                          monkeypatch):
    workdir = tmp_path / "run"
    (workdir / "checkpoints" / "300").mkdir(parents=True)
    (workdir / "config.json").write_text(json.dumps(_config(300).to_dict()))
    warnings = []
    monkeypatch.setattr(absl_logging, "warning", lambda fmt, *a: warnings.append(fmt % a))
    run_record.record_config(_config(600, allow_config_change=True), str(workdir))
    restarts = [w for w in warnings if "schedule restarts" in w]
    assert len(restarts) == 1 and "total_steps 300 -> 600" in restarts[0]
    assert "--config.warmup_steps=30" in restarts[0]
    warnings.clear()
    (workdir / "config.json").write_text(json.dumps(_config(300).to_dict()))
    run_record.record_config(_config(600, allow_config_change=True, warmup_steps=30),
                             str(workdir))
    assert not [w for w in warnings if "schedule restarts" in w]
    (stretched,) = [w for w in warnings if "schedule is stretched at step 300" in w]
    assert "moves the rate from 0 to 0.000211" in stretched


def test_the_issue_case_a_finished_200_step_run_extended_to_300_says_the_jump():
    """The walkthrough's case: --config.warmup_steps=<old> silenced the warning while the rate
    at the resumed step jumped from the old run's end to the middle of the stretched decay."""
    old = _config(200, warmup_steps=20).to_dict()
    new = _config(300, warmup_steps=20).to_dict()
    line = run_record.restart_line(old, new, 200)
    assert line.startswith("the learning-rate schedule is stretched at step 200: total_steps "
                           "200 -> 300 with the warm-up kept at 20 steps moves the rate from 0 "
                           f"to {4e-4 * (1 - 180 / 280):.3g}")


@pytest.mark.parametrize("warmup", [0, 20])
def test_the_resumed_rate_is_the_uninterrupted_longer_runs_rate(warmup):
    """The optimizer a resumed run builds from the new config, its step counts restored to
    200, applies at each later step the rate that an uninterrupted 300-step run's schedule has
    there (measured: its update of a gradient over Adam's direction for that gradient)."""
    import jax.numpy as jnp
    import optax

    new = _config(300, warmup_steps=warmup)
    opt_config = settings.optimizer_config(new, 300)
    resumed = optimizer.make_optimizer(opt_config)
    uninterrupted = optimizer.learning_rate_schedule(opt_config)
    params = {"w": jnp.zeros((2,))}  # zero weights: no weight-decay term in the update
    grads = {"w": jnp.asarray([0.1, -0.2])}  # under the clipping norm
    adam = optax.scale_by_adam(b1=opt_config.b1, b2=opt_config.b2, eps=opt_config.eps)
    for step in (200, 201, 250, 299):
        updates, _ = resumed.update(grads, with_count(resumed.init(params), step), params)
        direction, _ = adam.update(grads, with_count(adam.init(params), step))
        applied = -np.asarray(updates["w"]) / np.asarray(direction["w"])
        assert applied == pytest.approx([float(uninterrupted(step))] * 2, rel=1e-5)
        assert float(uninterrupted(step)) == pytest.approx(
            run_record.rate_at(new.to_dict(), 300, step))


def with_count(state, step):
    """`state` with every optax step count set to `step` (what a restored checkpoint holds)."""
    import jax
    import jax.numpy as jnp

    def set_count(path, leaf):
        name = jax.tree_util.keystr(path)
        return jnp.asarray(step, leaf.dtype) if name.endswith(".count") else leaf
    return jax.tree_util.tree_map_with_path(set_count, state)


# ----- new cases, as an adversarial user would try -----------------------------------------------

def test_a_cosine_run_extended_with_its_warmup_kept_says_the_jump():
    old = _config(200, warmup_steps=20).to_dict()
    old["optimizer"]["decay"] = "cosine"
    new = _config(400, warmup_steps=20).to_dict()
    new["optimizer"]["decay"] = "cosine"
    line = run_record.restart_line(old, new, 150)
    assert line is not None and line.startswith(
        "the learning-rate schedule is stretched at step 150: total_steps 200 -> 400")


def test_a_run_shortened_on_resume_says_the_rate_it_jumps_to():
    """total_steps 300 -> 250 at step 200: the decay is squeezed, the rate drops at once."""
    line = run_record.restart_line(_config(300, warmup_steps=30).to_dict(),
                                   _config(250, warmup_steps=30).to_dict(), 200)
    before, after = 4e-4 * (1 - 170 / 270), 4e-4 * (1 - 170 / 220)
    assert f"moves the rate from {before:.3g} to {after:.3g}" in line
    assert "down to 0 at step 250" in line
