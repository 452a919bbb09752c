"""bert_jax.config.settings.read: a run's config read once into frozen, checked RunSettings."""

import dataclasses

import pytest

from bert_jax.config import run as run_config
from bert_jax.config import settings, specs


def test_read_types_every_block_and_keeps_the_config_as_config_json_holds_it():
    config = run_config.pretrain_config()
    config.total_steps, config.model.hidden_size, config.mesh.fsdp = 50, 64, 1
    run = settings.read(config, "pretrain")
    assert run.mesh == specs.MeshSpec(-1, 1, 1)
    assert (run.model.family, run.model.preset, dict(run.model.fields)) == (
        "bert", "tiny", {"hidden_size": 64})
    assert run.model.overrides == {"hidden_size": 64, "dtype": "float32", "remat_policy": "none",
                                   "attention": "auto"}
    assert run.init == specs.InitSpec("", "", True)
    assert run.tokenizer == specs.TokenizerSpec("", True, 8192)
    assert isinstance(run.data, specs.PretrainDataSpec) and run.data.corpus == "demo"
    assert run.optimizer == settings.optimizer_config(config, 50)
    assert run.loop == settings.loop_config(config, 50)
    assert run.record == config.to_dict()  # what config.json holds
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.batch_size = 8


def test_a_fine_tuning_run_counted_in_epochs_gets_its_steps_later():
    config = run_config.finetune_config("span_qa")
    run = settings.read(config, "finetune")
    assert run.total_steps == 0 and run.optimizer is None and run.loop is None
    assert (run.task, run.epochs, run.squad.doc_stride) == ("span_qa", 3.0, 128)
    assert isinstance(run.data, specs.FinetuneDataSpec)
    counted = run.for_steps(120)
    assert (counted.total_steps, counted.optimizer.warmup_steps, counted.loop.total_steps) == (
        120, 12, 120)


def test_the_checks_run_when_the_settings_are_read():
    config = run_config.pretrain_config()
    config.total_steps = 10
    with pytest.raises(ValueError, match="this is a 'finetune' run"):
        settings.read(config, "finetune")
    config.init.hf_dir, config.init.checkpoint = "a", "b"
    with pytest.raises(ValueError, match="init.hf_dir or config.init.checkpoint, not both"):
        settings.read(config, "pretrain")
    config = run_config.pretrain_config()
    with pytest.raises(ValueError, match="total_steps=0 must be positive"):
        settings.read(config, "pretrain")  # a pre-training run needs its step count
    config.total_steps, config.nonfinite = 10, "ignore"
    with pytest.raises(ValueError, match="config.nonfinite='ignore'"):
        settings.read(config, "pretrain")


def test_a_saved_config_reads_with_the_defaults_it_ran_with():
    saved = run_config.pretrain_config().to_dict()
    saved["total_steps"] = 10
    del saved["dropout_rng"]  # saved before the key existed
    run = settings.typed(saved)
    assert run.for_steps(10).loop.dropout_rng == "threefry"
    assert "dropout_rng" not in run.record  # config.json as it was
