"""The workdir's config check: which differences between a rerun and config.json count."""

import errno
import json
import os

import ml_collections
import pytest

from bert_jax.recipes import run_record
from bert_jax.train.checkpoint import workdir


def config(**data):
    return ml_collections.ConfigDict({"learning_rate": 1e-3, "log_every_steps": 10,
                                      "data": {"mask_rate": 0.15, **data}})


def test_differences_name_the_keys_that_change_the_run():
    saved = config().to_dict()
    assert run_record.config_differences(saved, config()) == []
    changed = config(mask_rate=0.3)
    assert run_record.config_differences(saved, changed) == ["data.mask_rate: 0.15 -> 0.3"]
    neutral = config()
    neutral.log_every_steps = 50
    neutral.data.eval_mask_rate = 0.2
    assert run_record.config_differences(saved, neutral) == []


def test_a_key_added_after_the_run_started_counts_only_when_switched_on():
    """config.json of an older run lacks keys added since; their off values are how it ran."""
    saved = config().to_dict()
    assert run_record.config_differences(saved, config(group_by_length=0, scan="")) == []
    assert run_record.config_differences(saved, config(group_by_length=8)) == [
        "data.group_by_length: '(absent)' -> 8"]
    removed = config().to_dict()
    removed["data"]["old_key"] = 0
    assert run_record.config_differences(removed, config()) == ["data.old_key: 0 -> '(absent)'"]


# ----- a run whose config.json is gone, a workdir that cannot be written --------------------------

def _checkpoint_with(workdir, step, metadata):
    """A step folder holding only the metadata item (what the config check reads)."""
    folder = workdir / "checkpoints" / str(step) / "metadata"
    folder.mkdir(parents=True)
    (folder / "metadata").write_text(json.dumps(metadata))


def _allowing(config_dict, allow=False):
    config_dict.allow_config_change = allow
    return config_dict


def test_a_lost_config_json_is_checked_against_the_newest_checkpoint(tmp_path):
    _checkpoint_with(tmp_path, 10, {"run_config": {"learning_rate": 1e-3}})
    _checkpoint_with(tmp_path, 20, {"run_config": config().to_dict(), "params_finite": True})
    changed = _allowing(config())
    changed.learning_rate = 0.5
    with pytest.raises(run_record.ConfigChangedError) as error:
        run_record.record_config(changed, str(tmp_path))
    assert str(error.value) == (
        f"{tmp_path}/config.json is missing, and the newest checkpoint (step 20) was saved with "
        "another config (learning_rate: 0.001 -> 0.5): rerun with the config it was saved with, "
        "or --config.allow_config_change=true if the change is meant")
    assert not (tmp_path / "config.json").exists()
    run_record.record_config(_allowing(config()), str(tmp_path))  # the same config: written anew
    assert json.loads((tmp_path / "config.json").read_text())["learning_rate"] == 1e-3


def test_a_lost_config_json_with_a_change_that_is_meant_or_an_older_checkpoint(tmp_path):
    _checkpoint_with(tmp_path, 10, {"model_config": {}})  # saved before configs were kept
    changed = _allowing(config())
    changed.learning_rate = 0.5
    run_record.record_config(changed, str(tmp_path))  # nothing to compare with: a warning
    (tmp_path / "config.json").unlink()
    _checkpoint_with(tmp_path, 20, {"run_config": config().to_dict()})
    run_record.record_config(_allowing(changed, allow=True), str(tmp_path))
    assert json.loads((tmp_path / "config.json").read_text())["learning_rate"] == 0.5


def test_a_workdir_that_cannot_be_written_is_one_error_naming_the_file(tmp_path, monkeypatch):
    def read_only(file, text):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), f"{file}.tmp-1")

    monkeypatch.setattr(workdir, "create_exclusively", read_only)
    with pytest.raises(workdir.WorkdirNotWritableError) as error:
        with workdir.lock(str(tmp_path)):
            pass
    assert str(error.value) == (
        f"cannot write into {tmp_path} (OSError: [Errno 30] Read-only file system: "
        f"'{tmp_path}/run.lock.tmp-1'): a run needs a writable --workdir (free some space, or "
        "use another folder)")


# ----- a new case, as an adversarial user would try ----------------------------------------------

def test_bucket_lengths_count_when_the_run_has_dropout():
    """data.bucket_lengths changes no result of a run without dropout (padding weighs 0), but
    dropout masks are drawn at the batch's shape, which the buckets set."""
    saved = config(bucket_lengths="auto")
    saved.model = {"hidden_dropout_prob": 0.0}
    changed = config(bucket_lengths="none")
    changed.model = {"hidden_dropout_prob": 0.0}
    assert run_record.config_differences(saved.to_dict(), changed) == []
    saved.model.hidden_dropout_prob = changed.model.hidden_dropout_prob = 0.1
    assert run_record.config_differences(saved.to_dict(), changed) == [
        "data.bucket_lengths: 'auto' -> 'none'"]


def test_a_resume_with_other_buckets_and_dropout_is_refused(tmp_path):
    """New case (tried on a tiny classification run with hidden dropout 0.3, max_seq_len 64):
    2 steps, then the same command with --config.data.bucket_lengths=none resumed without a
    word, and steps 3-4 logged other losses than the uninterrupted run's (cross-entropy 0.69496
    vs 0.69363 at step 3): the masks are drawn at the bucket's shape. Now refused in one line
    naming the key, as any key that changes the run."""
    from bert_jax.recipes.finetune import recipe as finetune_recipe

    from finetune_runs import set_keys, tiny_finetune_config
    from script_errors import one_line

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad",
                                "film"]) + "\n")
    train = tmp_path / "train.tsv"
    train.write_text("text\tlabel\n" + "good film\tpos\nbad film\tneg\n" * 8)
    config_ = tiny_finetune_config("classification", str(vocab), hidden_size=16,
                                   num_hidden_layers=1, **{
                                       "data.train_path": str(train), "data.eval_path": str(train),
                                       "max_seq_len": 64,
                                       "total_steps": 2, "model.hidden_dropout_prob": 0.3})
    workdir = str(tmp_path / "run")
    finetune_recipe.train_and_evaluate(config_, workdir)
    other = set_keys(config_.copy_and_resolve_references(), {"data.bucket_lengths": "none"})
    message = one_line(lambda: finetune_recipe.train_and_evaluate(other, workdir), "finetune.py")
    assert "(data.bucket_lengths: 'auto' -> 'none')" in message, message
