"""The workdir's config check: which differences between a rerun and config.json count."""

import ml_collections

from bert_jax.train import workdir


def config(**data):
    return ml_collections.ConfigDict({"learning_rate": 1e-3, "log_every_steps": 10,
                                      "data": {"mask_rate": 0.15, **data}})


def test_differences_name_the_keys_that_change_the_run():
    saved = config().to_dict()
    assert workdir.config_differences(saved, config()) == []
    changed = config(mask_rate=0.3)
    assert workdir.config_differences(saved, changed) == ["data.mask_rate: 0.15 -> 0.3"]
    neutral = config()
    neutral.log_every_steps = 50
    neutral.data.eval_mask_rate = 0.2
    assert workdir.config_differences(saved, neutral) == []


def test_a_key_added_after_the_run_started_counts_only_when_switched_on():
    """config.json of an older run lacks keys added since; their off values are how it ran."""
    saved = config().to_dict()
    assert workdir.config_differences(saved, config(group_by_length=0, scan="")) == []
    assert workdir.config_differences(saved, config(group_by_length=8)) == [
        "data.group_by_length: '(absent)' -> 8"]
    removed = config().to_dict()
    removed["data"]["old_key"] = 0
    assert workdir.config_differences(removed, config()) == ["data.old_key: 0 -> '(absent)'"]
