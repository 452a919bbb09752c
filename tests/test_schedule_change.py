"""Extending a run with allow_config_change: a schedule restart is one warning line naming the
old and new total_steps and the rates before and after; config.warmup_steps keeps the warm-up,
and the decay then runs to the new total_steps without a warning."""

import json

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
                    "to extend the schedule instead, keep the warm-up with "
                    "--config.warmup_steps=30 (the decay then runs to total_steps=600)")
    kept = _config(600, warmup_steps=30).to_dict()
    assert run_record.restart_line(old, kept, 50) is None
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
