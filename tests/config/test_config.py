"""BertConfig: presets, the parameter-count formula, validation, Hugging Face config.json both
ways."""

import json

import pytest

from bert_jax import BertConfig, ConfigError
from bert_jax.config.bert import PRESETS


def test_presets_have_the_published_sizes():
    sizes = {name: (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.intermediate_size)
             for name in PRESETS for c in [BertConfig.preset(name)]}
    assert sizes == {
        "tiny": (2, 128, 2, 512), "mini": (4, 256, 4, 1024), "small": (4, 512, 8, 2048),
        "medium": (8, 512, 8, 2048), "base": (12, 768, 12, 3072), "large": (24, 1024, 16, 4096)}
    base = BertConfig.preset("base")
    assert (base.vocab_size, base.max_position_embeddings, base.type_vocab_size) == (30522, 512, 2)
    assert (base.hidden_act, base.layer_norm_eps, base.hidden_dropout_prob) == ("gelu", 1e-12, 0.1)
    assert base.attention_probs_dropout_prob == 0.1
    assert BertConfig.preset("tiny", hidden_dropout_prob=0.0).hidden_dropout_prob == 0.0


def test_num_params_matches_the_published_counts():
    assert BertConfig.preset("base").num_params() == 109_482_240
    assert BertConfig.preset("large").num_params() == 335_141_888
    base = BertConfig.preset("base")
    assert base.num_params() - base.num_params(with_pooler=False) == 768 * 768 + 768


@pytest.mark.parametrize("changes, message", [
    (dict(hidden_size=100, num_attention_heads=12), "not divisible"),
    (dict(hidden_act="swishy"), "hidden_act='swishy' is unknown"),
    (dict(num_hidden_layers=0), "num_hidden_layers must be a positive integer"),
    (dict(vocab_size=-5), "vocab_size must be a positive integer"),
    (dict(intermediate_size=2.5), "intermediate_size must be a positive integer"),
    (dict(hidden_dropout_prob=1.0), "hidden_dropout_prob must be in [0, 1)"),
    (dict(dtype="float8"), "dtype='float8'"),
    (dict(remat_policy="sometimes"), "remat_policy='sometimes'"),
    (dict(pad_token_id=30522), "pad_token_id=30522"),
])
def test_invalid_configs_are_refused_with_the_field_named(changes, message):
    with pytest.raises(ConfigError) as error:
        BertConfig.preset("tiny", **changes)
    assert message in str(error.value)


def test_unknown_preset_is_refused():
    with pytest.raises(ConfigError, match="unknown BERT preset 'huge'"):
        BertConfig.preset("huge")


def test_hf_dict_round_trip():
    cfg = BertConfig.preset("mini", vocab_size=1000, hidden_act="relu", layer_norm_eps=1e-6,
                            type_vocab_size=4, max_position_embeddings=128)
    hf = cfg.to_hf_dict()
    assert hf["model_type"] == "bert" and hf["architectures"] == ["BertModel"]
    assert "dtype" not in hf and "remat_policy" not in hf  # our run-time options stay ours
    assert BertConfig.from_hf_dict(json.loads(json.dumps(hf))) == cfg
    # Run-time options are given as overrides, not read from the file.
    assert BertConfig.from_hf_dict(hf, dtype="bfloat16") == cfg.replace(dtype="bfloat16")


def test_hf_dict_with_extra_keys_and_nulls():
    hf = BertConfig.preset("tiny").to_hf_dict()
    hf.update(use_cache=True, gradient_checkpointing=False, classifier_dropout=None,
              transformers_version="4.8.2")
    assert BertConfig.from_hf_dict(hf) == BertConfig.preset("tiny")


def test_config_json_errors_name_the_file(tmp_path):
    path = tmp_path / "config.json"
    hf = BertConfig.preset("tiny").to_hf_dict()
    path.write_text(json.dumps({**hf, "hidden_act": "mish"}))
    with pytest.raises(ConfigError) as error:
        BertConfig.from_json_file(path)
    assert str(path) in str(error.value) and "hidden_act='mish'" in str(error.value)

    path.write_text(json.dumps({**hf, "model_type": "gpt2"}))
    with pytest.raises(ConfigError, match="model_type='gpt2'"):
        BertConfig.from_json_file(path)

    path.write_text(json.dumps({**hf, "position_embedding_type": "relative_key"}))
    with pytest.raises(ConfigError, match="relative_key"):
        BertConfig.from_json_file(path)

    path.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        BertConfig.from_json_file(path)

    with pytest.raises(FileNotFoundError, match="missing.json"):
        BertConfig.from_json_file(tmp_path / "missing.json")
