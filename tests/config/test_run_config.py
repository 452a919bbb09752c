"""The run config's schema (bert_jax/config/run.py): the loop's defaults come from it, and a saved
config that predates a key reads as the schema's default."""

import json

import ml_collections
import pytest

from bert_jax.config import run as run_config
from bert_jax.config import settings
from bert_jax.recipes import run_record


def test_the_loop_defaults_are_the_schema_defaults():
    plain = settings.LoopConfig(total_steps=5, global_batch_size=32)
    assert {key: getattr(plain, key) for key in run_config.LOOP_DEFAULTS} == \
        run_config.LOOP_DEFAULTS
    config = run_config.pretrain_config()
    assert settings.loop_config(config, total_steps=5) == plain
    config.nonfinite, config.seed = "skip", 3
    built = settings.loop_config(config, total_steps=5)
    assert (built.nonfinite, built.seed, built.global_batch_size) == ("skip", 3, 32)


def test_every_recipe_config_holds_every_loop_key():
    for config in (run_config.pretrain_config(), run_config.finetune_config("span_qa")):
        assert set(run_config.LOOP_DEFAULTS) <= set(config.keys())
    assert run_config.finetune_config("regression").log_every_steps == 10  # its own default


def test_a_saved_config_older_than_a_key_reads_as_the_default(tmp_path):
    config = run_config.finetune_config("classification")
    config.learning_rate = 5e-5
    saved = json.loads(json.dumps(config.to_dict()))
    del saved["dropout_rng"], saved["fsdp_collectives"], saved["data"]["pack_examples"]
    saved["data"]["a_key_of_its_own"] = 7
    (tmp_path / "config.json").write_text(json.dumps(saved))
    loaded = run_record.load_config(str(tmp_path))
    assert loaded.dropout_rng == "threefry" and loaded.fsdp_collectives == "xla"
    assert loaded.data.pack_examples == 0 and loaded.data.a_key_of_its_own == 7
    assert loaded.learning_rate == 5e-5 and loaded.task == "classification"
    # a rerun with the current config is the same run, but for a key whose default changed
    # since: named, not switched silently (that run drew threefry's dropout bits) ...
    del saved["data"]["a_key_of_its_own"]
    assert run_record.config_differences(saved, config) == ["dropout_rng: 'threefry' -> 'hash'"]
    config.dropout_rng = "threefry"
    assert run_record.config_differences(saved, config) == []
    # ... unless it switches the new key on
    config.fsdp_collectives = "explicit"
    assert run_record.config_differences(saved, config) == [
        "fsdp_collectives: 'xla' -> 'explicit'"]


def test_model_block_refuses_unknown_fields():
    with pytest.raises(ValueError, match="unknown model fields"):
        run_config.model_block("tiny", hidden=3)
    assert isinstance(run_config.model_block("base"), ml_collections.ConfigDict)


def test_modernbert_hyper_parameters_are_set_from_the_run_config():
    """--config.model.local_attention and the other ModernBERT fields reach the model config
    (they had no key: MODEL_FIELDS listed BERT's alone); a field of the other family is one
    line naming it."""
    from bert_jax.config import settings
    from bert_jax.config.modernbert import ModernBertConfig
    from bert_jax.recipes import common
    from experiments.configs import modern

    config = modern.get_config()
    config.model.local_attention = 16
    config.model.global_attn_every_n_layers = 2
    config.model.local_rope_theta = 5000.0
    config.model.classifier_pooling = "mean"
    cfg = common.model_config(settings.read(config, "pretrain"), vocab_size=1024)
    assert isinstance(cfg, ModernBertConfig)
    assert (cfg.local_attention, cfg.global_attn_every_n_layers, cfg.local_rope_theta,
            cfg.classifier_pooling) == (16, 2, 5000.0, "mean")
    assert [cfg.window_of(i) for i in range(4)] == [None, 16, None, 16]

    bert = run_config.model_block("tiny")
    config.model = bert
    config.model.local_attention = 16
    with pytest.raises(ValueError, match="local_attention"):
        common.model_config(settings.read(config, "pretrain"), vocab_size=1024)


def test_every_key_has_its_meaning_beside_its_default():
    """The schema is data: each key's default and meaning together (run.Key), --help's text."""
    from bert_jax.config import run_keys
    for recipe, config in (("pretrain", run_config.pretrain_config()),
                           ("finetune", run_config.finetune_config("span_qa"))):
        meanings = run_config.meanings(recipe)
        assert set(run_keys.flat(config)) == set(meanings)
        assert all(meanings.values())
    finetune = run_config.meanings("finetune")
    assert finetune["total_steps"] == "optimizer steps; 0: from epochs"  # the recipe's own
    assert run_config.meanings("pretrain")["tokenizer.path"].endswith(  # longer than a line
        "one trained on the corpus on first use, under the data dir)")
    assert "  model.preset = 'tiny'  # tiny | mini | small | medium | base | large" in "\n".join(
        run_keys.help_lines("pretrain"))
