"""Checkpoint faults: a newest step that cannot be read (a truncated data file or manifest, a
deleted metadata folder) must not block a resume, nor end evaluation in a traceback; a leftover
Orbax temporary folder is not a step; a failed save names its folder and stops the run.

A tiny pre-training (hidden 32, 1 layer, 16 tokens) on random-token batches that are a function of
their index (resumable), so that a resumed run must reproduce the uninterrupted one's losses.
"""

import errno
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zlib

import jax
import jax.numpy as jnp
import optax
import pytest
from etils import epath

from bert_jax import BertConfig, cli
from bert_jax.config import settings
from bert_jax.data.pretraining.synthetic import RandomTokenBatches
from bert_jax.model import BertForPreTraining
from bert_jax.recipes import pretrain
from bert_jax.runtime import sharding
from bert_jax.train import loop, optimizer
from bert_jax.train.checkpoint import checksums
from bert_jax.train.checkpoint import params as params_loading
from bert_jax.train.checkpoint import store as checkpointing
from bert_jax.train.checkpoint import verification as checkpoint_verification
from faults.inject import as_saved_before_checksums

from repo_root import ROOT

TOTAL_STEPS = 8  # checkpoints every 2 steps, the newest 3 kept: 4, 6, 8


def train(workdir, async_checkpoints=False, tx=None, total_steps=TOTAL_STEPS):
    cfg = BertConfig.preset("tiny", vocab_size=100, hidden_size=32, num_hidden_layers=1,
                            num_attention_heads=2, intermediate_size=64,
                            max_position_embeddings=16, hidden_dropout_prob=0.1)
    model = BertForPreTraining(cfg, with_nsp=False)
    ids, positions = jnp.zeros((1, 16), jnp.int32), jnp.zeros((1, 2), jnp.int32)
    task = loop.Task(cfg, lambda rng: model.init(rng, ids, positions)["params"],
                     pretrain.make_loss(model))
    tx = tx or optimizer.make_optimizer(settings.OptimizerConfig(
        learning_rate=1e-3, total_steps=TOTAL_STEPS, warmup_steps=1))
    config = settings.LoopConfig(total_steps=total_steps, global_batch_size=4, log_every_steps=1,
                                 checkpoint_every_steps=2, keep_checkpoints=3,
                                 async_checkpoints=async_checkpoints)
    return loop.train(task, tx, RandomTokenBatches(4, 16, 2, 100, seed=0), str(workdir), config,
                      sharding.make_mesh())


def losses(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [(r["step"], r["loss"]) for r in map(json.loads, f)]


def steps_in(directory):
    return sorted(int(p) for p in os.listdir(directory) if p.isdigit())


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """An uninterrupted run: its workdir (checkpoints 4, 6, 8) and its losses."""
    workdir = tmp_path_factory.mktemp("uninterrupted")
    train(workdir)
    assert steps_in(workdir / "checkpoints") == [4, 6, 8]
    assert [step for step, _ in losses(workdir)] == list(range(1, TOTAL_STEPS + 1))
    return workdir, losses(workdir)


@pytest.fixture
def run_copy(uninterrupted, tmp_path):
    """A copy of the uninterrupted run, to damage."""
    workdir = tmp_path / "run"
    shutil.copytree(uninterrupted[0], workdir)
    return workdir


@pytest.fixture
def restored_steps(monkeypatch):
    """The steps that checkpointing.restore returned a state for, in order."""
    restored, real_restore = [], checkpointing.restore

    def spy(manager, step, *args, **kwargs):
        state = real_restore(manager, step, *args, **kwargs)
        restored.append(step)
        return state

    monkeypatch.setattr(checkpointing, "restore", spy)
    return restored


def truncate(path):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def truncate_largest_data_file(step_dir):
    files = [os.path.join(root, name) for root, _, names in os.walk(step_dir / "state")
             for name in names]
    truncate(max(files, key=os.path.getsize))  # an array chunk under ocdbt.process_0/d/ or d/


def truncate_manifest(step_dir):
    truncate(step_dir / "state" / "manifest.ocdbt")


def largest_array_file(step_dir):
    files = [os.path.join(root, name) for root, _, names in os.walk(step_dir / "state")
             for name in names]
    return max(files, key=os.path.getsize)  # an array chunk under ocdbt.process_0/d/


def flip_bytes(step_dir):
    """Bit rot: 3 x 64 bytes inverted, spread over the largest array file (its size unchanged)."""
    path = largest_array_file(step_dir)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        for start in (size // 4, size // 2, 3 * size // 4):
            f.seek(start)
            chunk = f.read(64)
            f.seek(start)
            f.write(bytes(b ^ 0xFF for b in chunk))


def zero_largest_file(step_dir):
    path = largest_array_file(step_dir)
    with open(path, "r+b") as f:
        f.write(bytes(os.path.getsize(path)))


def delete_metadata(step_dir):
    shutil.rmtree(step_dir / "metadata")


# ----- resume falls back past an unreadable newest step -----------------------------------------

@pytest.mark.parametrize("damage, set_aside_before", [
    (truncate_largest_data_file, []), (truncate_manifest, []),
    (flip_bytes, []), (zero_largest_file, []),
    (delete_metadata, ["8"]),  # an earlier unreadable step 8 is there already: "8.1"
])
def test_an_unreadable_newest_step_is_set_aside_and_the_run_resumes_from_the_previous_one(
        damage, set_aside_before, uninterrupted, run_copy, restored_steps):
    for name in set_aside_before:
        (run_copy / "checkpoints_unreadable" / name).mkdir(parents=True)
    damage(run_copy / "checkpoints" / "8")
    result = train(run_copy)
    assert restored_steps == [6] and result.step == TOTAL_STEPS
    assert losses(run_copy) == uninterrupted[1]  # steps 7 and 8 again, exactly
    moved = "8.1" if set_aside_before else "8"
    assert sorted(os.listdir(run_copy / "checkpoints_unreadable")) == sorted(
        set_aside_before + [moved])
    assert os.path.isdir(run_copy / "checkpoints_unreadable" / moved / "state")  # not deleted
    assert steps_in(run_copy / "checkpoints") == [4, 6, 8]  # step 8 saved anew


def test_when_no_step_can_be_read_the_run_stops_and_nothing_is_moved(run_copy):
    for step in (4, 6, 8):
        delete_metadata(run_copy / "checkpoints" / str(step))
    with pytest.raises(checkpointing.CheckpointUnreadableError) as error:
        train(run_copy)
    message = str(error.value)
    assert message.startswith(f"no checkpoint in {run_copy}/checkpoints can be read")
    for step in (8, 6, 4):
        assert f"checkpoint {run_copy}/checkpoints/{step} cannot be read: metadata is missing" \
            in message
    assert "Nothing was moved or deleted" in message and "\n" not in message
    assert steps_in(run_copy / "checkpoints") == [4, 6, 8]
    assert not (run_copy / "checkpoints_unreadable").exists()


def test_a_config_that_does_not_fit_still_stops_the_run(run_copy, monkeypatch):
    """A CheckpointMismatchError is not an unreadable step: no fallback, nothing moved."""
    real = checkpointing.check_compatible

    def another_shape(manager, step, abstract_state, model_config):
        import dataclasses
        real(manager, step, abstract_state, dataclasses.replace(model_config, hidden_size=64))

    monkeypatch.setattr(checkpointing, "check_compatible", another_shape)
    with pytest.raises(checkpointing.CheckpointMismatchError,
                       match=r"checkpoints/8 holds a model of another shape"):
        train(run_copy)
    assert steps_in(run_copy / "checkpoints") == [4, 6, 8]
    assert not (run_copy / "checkpoints_unreadable").exists()


# ----- load_params / evaluate.py name the unreadable step ---------------------------------------

def test_load_params_names_an_unreadable_step(run_copy):
    directory = run_copy / "checkpoints"
    delete_metadata(directory / "8")
    with pytest.raises(checkpointing.CheckpointUnreadableError,
                       match=rf"^checkpoint {directory}/8 cannot be read: metadata is missing "
                             rf"\(no folder {directory}/8/metadata\)"):
        params_loading.load_params(directory)
    with pytest.raises(checkpointing.CheckpointUnreadableError, match=r"checkpoints/8 cannot"):
        params_loading.load_model_config(directory)
    assert params_loading.resolve_step(directory) == 8  # listing only: reading says the rest
    truncate_manifest(directory / "6")
    with pytest.raises(checkpointing.CheckpointUnreadableError,
                       match=rf"^checkpoint {directory}/6 cannot be read: state/manifest.ocdbt has "
                             r"\d+ bytes, and \d+ were saved"):
        params_loading.load_params(directory, step=6)
    as_saved_before_checksums(directory / "6")  # Orbax finds it
    with pytest.raises(checkpointing.CheckpointUnreadableError,
                       match=rf"^checkpoint {directory}/6 cannot be read: state: ValueError: "
                             r"DATA_LOSS: "):
        params_loading.load_params(directory, step=6)
    config, params = params_loading.load_params(directory, step=4)  # the others still load
    assert config.hidden_size == 32 and "bert" in params


def test_evaluate_py_names_the_unreadable_step_in_one_line(tmp_path):
    from pretrain_runs import env, train_here
    workdir = tmp_path / "pretrain"
    # pretrain.py's run, in this process (the recipe on the script's parsed flags), then
    # evaluate.py in its own process: its stderr is what is checked
    train_here(workdir, "--config.model.num_hidden_layers=1", "--config.eval_batches=1",
               "--config.total_steps=4", "--config.checkpoint_every_steps=2",
               "--config.async_checkpoints=False")
    assert steps_in(workdir / "checkpoints") == [2, 4]
    shutil.rmtree(workdir / "checkpoints" / "4" / "metadata")
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "experiments", "evaluate.py"), f"--workdir={workdir}"],
        env=env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("evaluate.py: error:")]
    assert errors == [f"evaluate.py: error: checkpoint {workdir}/checkpoints/4 cannot be read: "
                      f"metadata is missing (no folder {workdir}/checkpoints/4/metadata)"]


# ----- leftover temporary folders and failed saves ----------------------------------------------

def test_a_leftover_orbax_temporary_folder_is_not_a_step(uninterrupted, run_copy,
                                                         restored_steps):
    """A save of step 8 killed before Orbax renamed its folder: the run resumes from step 6."""
    checkpoints = run_copy / "checkpoints"
    os.rename(checkpoints / "8", checkpoints / "8.orbax-checkpoint-tmp-1234")
    shutil.copytree(checkpoints / "6", checkpoints / "10.orbax-checkpoint-tmp-99")
    train(run_copy)
    assert restored_steps == [6]
    assert losses(run_copy) == uninterrupted[1]
    assert steps_in(checkpoints) == [4, 6, 8]
    assert not (run_copy / "checkpoints_unreadable").exists()


def test_a_failed_save_names_its_folder_and_stops_the_run(uninterrupted, tmp_path, monkeypatch,
                                                          restored_steps):
    from grain import checkpoint as grain_checkpoint
    real_save = grain_checkpoint.CheckpointHandler.save

    def disk_full_at_step_4(self, directory, *args, **kwargs):
        if directory.parent.name.startswith("4."):  # <dir>/4.orbax-checkpoint-tmp*/data_iterator
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_save(self, directory, *args, **kwargs)

    monkeypatch.setattr(grain_checkpoint.CheckpointHandler, "save", disk_full_at_step_4)
    workdir = tmp_path / "run"
    with pytest.raises(checkpointing.CheckpointWriteError) as error:
        train(workdir)
    assert str(error.value) == (f"could not write the checkpoint {workdir}/checkpoints/4: "
                                "OSError: [Errno 28] No space left on device")
    with pytest.raises(SystemExit) as exit_:  # what the scripts make of it: one line, status 1
        cli.run_or_exit("pretrain.py", lambda: (_ for _ in ()).throw(error.value))
    assert exit_.value.code == f"pretrain.py: error: {error.value}"
    assert steps_in(workdir / "checkpoints") == [2]
    assert [p for p in os.listdir(workdir / "checkpoints") if p.startswith("4.")]  # the partial

    monkeypatch.setattr(grain_checkpoint.CheckpointHandler, "save", real_save)
    train(workdir)  # the disk has room again: the same command resumes past the partial save
    assert restored_steps == [2]
    assert losses(workdir) == uninterrupted[1]


def test_a_failed_background_save_names_its_step(tmp_path, monkeypatch):
    """An asynchronous save fails after the step went on: the next wait names that save's step."""
    from orbax.checkpoint._src.handlers import json_checkpoint_handler
    handler = json_checkpoint_handler.JsonCheckpointHandler
    real_save_fn, calls = handler._save_fn, []

    async def disk_full_at_step_4(self, item, directory):
        calls.append(directory)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return await real_save_fn(self, item, directory)

    monkeypatch.setattr(handler, "_save_fn", disk_full_at_step_4)
    workdir = tmp_path / "run"
    with pytest.raises(checkpointing.CheckpointWriteError,
                       match=rf"^could not write the checkpoint {workdir}/checkpoints/4 \(saved "
                             r"in the background\): OSError: \[Errno 28\] No space left"):
        train(workdir, async_checkpoints=True)


# ----- checksums: recorded when a step is finalized, verified before its arrays are read --------

def step_files(step_dir):
    """Every file of a step but its checksum records, relative to the step folder."""
    return sorted(os.path.relpath(os.path.join(root, name), step_dir)
                  for root, _, names in os.walk(step_dir) for name in names
                  if os.path.relpath(root, step_dir).split(os.sep)[0] != "checksums")


def test_every_saved_step_records_the_checksum_of_each_of_its_files(uninterrupted):
    for step in (4, 6, 8):
        step_dir = uninterrupted[0] / "checkpoints" / str(step)
        assert os.listdir(step_dir / "checksums") == ["process_0.json"]
        with open(step_dir / "checksums" / "process_0.json") as f:
            record = json.load(f)
        assert (record["algorithm"], record["process_index"], record["process_count"]) == (
            "crc32", 0, 1)
        assert sorted(record["files"]) == step_files(step_dir)
        assert any(name.startswith("state/ocdbt.process_0/d/") for name in record["files"])
        for name, entry in record["files"].items():
            with open(step_dir / name, "rb") as f:
                data = f.read()
            assert entry == {"size": len(data), "digest": f"{zlib.crc32(data):08x}"}
        assert checksums.verify(epath.Path(step_dir), "here") is True


def test_a_record_of_blake2b_digests_is_verified_as_such(run_copy):
    step_dir = run_copy / "checkpoints" / "8"
    record_file = step_dir / "checksums" / "process_0.json"
    record = json.loads(record_file.read_text())
    record["algorithm"] = "blake2b-128"
    for name, entry in record["files"].items():
        entry["digest"] = hashlib.blake2b((step_dir / name).read_bytes(),
                                          digest_size=16).hexdigest()
    record_file.write_text(json.dumps(record))
    assert checksums.verify(epath.Path(step_dir), "here") is True
    flip_bytes(step_dir)
    with pytest.raises(checkpointing.CheckpointUnreadableError, match="does not match"):
        checksums.verify(epath.Path(step_dir), "here")


def test_asynchronous_saves_record_their_checksums_too(tmp_path):
    """Recorded in Orbax's finalize thread; the run's last save is waited for at its end."""
    train(tmp_path, async_checkpoints=True)
    for step in (4, 6, 8):
        assert checksums.verify(epath.Path(tmp_path / "checkpoints" / str(step)), "here")


def _remove(step_dir, name):
    os.remove(step_dir / name)


@pytest.mark.parametrize("damage, problem", [
    (flip_bytes, "{file} does not match its checksum (its bytes changed after it was saved: "
                 "bit rot, or a damaged copy)"),
    (zero_largest_file, "{file} does not match its checksum"),
    (truncate_largest_data_file, "{file} has {half} bytes, and {size} were saved (a truncated "
                                 "or partly copied file)"),
    (lambda d: _remove(d, largest_array_file(d)), "{file} is missing (recorded in "
                                                  "checksums/process_0.json)"),
    (lambda d: shutil.copy(d / "state" / "array_metadatas" / "process_0",
                           d / "state" / "array_metadatas" / "process_1"),
     "state/array_metadatas/process_1 is in none of the step's checksum records (checksums/), "
     "and a restore would read it: a file added or replaced after the step was saved"),
    (lambda d: _remove(d, "checksums/process_0.json"), None),  # as a step saved before them
])
def test_verify_names_the_damaged_file(run_copy, damage, problem):
    step_dir = run_copy / "checkpoints" / "8"
    file = os.path.relpath(largest_array_file(step_dir), step_dir)
    size = os.path.getsize(step_dir / file)
    damage(step_dir)
    if problem is None:
        assert checksums.verify(epath.Path(step_dir), "the step") is False
        return
    with pytest.raises(checkpointing.CheckpointUnreadableError) as error:
        checksums.verify(epath.Path(step_dir), "the step")
    assert str(error.value).startswith(
        "checkpoint the step cannot be read: " + problem.format(file=file, half=size // 2,
                                                                 size=size))


def test_a_record_of_another_process_that_is_missing_makes_the_step_unreadable(run_copy):
    step_dir = run_copy / "checkpoints" / "8"
    record_file = step_dir / "checksums" / "process_0.json"
    with open(record_file) as f:
        record = json.load(f)
    record["process_count"] = 2
    with open(record_file, "w") as f:
        json.dump(record, f)
    with pytest.raises(checkpointing.CheckpointUnreadableError,
                       match=r"checksums/process_1.json is missing \(the step's files were "
                             r"recorded by 2 processes\)"):
        checksums.verify(epath.Path(step_dir), "the step")


def test_two_damaged_steps_are_set_aside_and_the_run_resumes_from_the_third(
        uninterrupted, run_copy, restored_steps):
    flip_bytes(run_copy / "checkpoints" / "8")
    zero_largest_file(run_copy / "checkpoints" / "6")
    result = train(run_copy)
    assert restored_steps == [4] and result.step == TOTAL_STEPS
    assert losses(run_copy) == uninterrupted[1]
    assert sorted(os.listdir(run_copy / "checkpoints_unreadable")) == ["6", "8"]
    assert steps_in(run_copy / "checkpoints") == [4, 6, 8]
    for step in (4, 6, 8):  # the steps saved anew carry checksums again
        assert checksums.verify(epath.Path(run_copy / "checkpoints" / str(step)), "here")


def test_steps_saved_before_checksums_restore_as_before_with_one_log_line(
        uninterrupted, run_copy, restored_steps, caplog):
    for step in (4, 6, 8):
        as_saved_before_checksums(run_copy / "checkpoints" / str(step))
    with caplog.at_level("WARNING"):
        checkpointing.verify_checksums(epath.Path(run_copy / "checkpoints" / "8"), "step 8")
    assert [r.getMessage() for r in caplog.records] == [
        "checkpoint step 8 has no checksums (saved before they were recorded): its files are "
        "read unverified"]
    train(run_copy)
    assert restored_steps == [8]  # nothing set aside
    assert not (run_copy / "checkpoints_unreadable").exists()


def test_load_params_refuses_a_step_whose_bytes_changed(run_copy):
    directory = run_copy / "checkpoints"
    flip_bytes(directory / "8")
    with pytest.raises(checkpointing.CheckpointUnreadableError,
                       match=rf"^checkpoint {directory}/8 cannot be read: state/ocdbt.process_0/"
                             r"d/\w+ does not match its checksum"):
        params_loading.load_params(directory)
    assert params_loading.load_params(directory, step=6)[0].hidden_size == 32


def test_verify_checkpoints_lists_each_step_and_fails_on_a_damaged_one(run_copy):
    checks = checkpoint_verification.check_run(run_copy)
    assert [(c.step, c.problem, c.verified) for c in checks] == [
        (4, None, True), (6, None, True), (8, None, True)]
    flip_bytes(run_copy / "checkpoints" / "6")
    as_saved_before_checksums(run_copy / "checkpoints" / "4")
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "experiments", "verify_checkpoints.py"),
         f"--workdir={run_copy}"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    directory = run_copy / "checkpoints"
    assert lines[0].startswith(f"{directory}/4: readable, not verified (")
    assert re.fullmatch(rf"{directory}/6: damaged: state/ocdbt.process_0/d/\w+ does not match "
                        r"its checksum \(its bytes changed after it was saved: bit rot, or a "
                        r"damaged copy\)", lines[1]), lines[1]
    assert re.fullmatch(rf"{directory}/8: ok \(\d+ files, [\d.]+ MB match their checksums\)",
                        lines[2]), lines[2]
    assert len(lines) == 3 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "verify_checkpoints.py: error: 1 of 3 checkpoint steps are damaged: [6]")


# ----- the diverged message names a step whose parameters are finite -----------------------------

def overflowing(from_update):
    """Adam whose step turns infinite from update `from_update` on (counted from 0): the loss and
    gradients of that step are finite, the parameters after it are not (as with an infinite
    learning rate)."""
    step_size = lambda count: jnp.where(count >= from_update, -jnp.inf, -1e-3)
    return optax.apply_if_finite(optax.chain(optax.scale_by_adam(),
                                             optax.scale_by_schedule(step_size)), 10**9)


def params_are_finite(directory, step):
    _, params = params_loading.load_params(directory, step)
    return all(bool(jnp.isfinite(leaf).all()) for leaf in jax.tree.leaves(params))


OVERFLOW = 3  # update 3 gives step 4, a checkpoint step; the same program in both tests


def test_parameters_that_overflow_are_not_saved_and_the_message_names_a_finite_step(tmp_path):
    with pytest.raises(loop.NonFiniteError) as error:
        train(tmp_path, tx=overflowing(OVERFLOW))
    assert str(error.value).startswith(
        "training diverged: the parameters after step 4 are not finite (the update overflowed "
        "although the loss and gradients were finite) and were not saved; the newest "
        "checkpoint, step 2, holds finite parameters. Lower the learning rate")
    directory = tmp_path / "checkpoints"
    assert steps_in(directory) == [2] and params_are_finite(directory, 2)


def test_after_a_resume_the_claim_is_read_from_the_checkpoint(tmp_path):
    """Step 2 was saved by an earlier invocation: its metadata says its parameters are finite."""
    train(tmp_path, tx=overflowing(OVERFLOW), total_steps=2)
    metadata = checkpointing.read_step_metadata(tmp_path / "checkpoints", 2)
    assert metadata["params_finite"] is True
    with pytest.raises(loop.NonFiniteError,
                       match=r"^training diverged: the parameters after step 4 are not finite .*; "
                             r"the newest checkpoint, step 2, holds finite parameters\. "):
        train(tmp_path, tx=overflowing(OVERFLOW))
    assert params_are_finite(tmp_path / "checkpoints", 2)


# ----- checkpoint folders with something unexpected in them (issue 40, class 3) ------------------

def test_a_step_whose_checksum_record_is_gone_and_whose_array_file_is_damaged_is_not_restored(
        uninterrupted, run_copy, restored_steps, caplog):
    """A kill between Orbax's finalisation and the record leaves a step without checksums/; its
    array file is damaged afterwards. It was saved to have a record, so it is unverifiable: the
    run falls back to step 6 (one line says why, no read error, no divergence), and
    load_params (evaluate.py, predict.py) refuses it in one line."""
    directory = run_copy / "checkpoints"
    shutil.rmtree(directory / "8" / "checksums")
    zero_largest_file(directory / "8")
    with pytest.raises(checkpointing.CheckpointUnreadableError, match=(
            rf"^checkpoint {directory}/8 cannot be read: its checksum record \(checksums/\) is "
            r"gone, and the step was saved to have one .*its files cannot be verified, so it is "
            "not read$")):
        params_loading.load_params(directory)
    with caplog.at_level("WARNING"):
        train(run_copy)
    assert restored_steps == [6]
    assert losses(run_copy)[-2:] == uninterrupted[1][-2:]  # steps 7 and 8 trained again, the same
    messages = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("its checksum record (checksums/) is gone" in m and "trying step 6" in m
               for m in messages), messages
    assert not any("diverg" in m or "DATA_LOSS" in m or "ZSTD" in m for m in messages), messages
    assert os.listdir(run_copy / "checkpoints_unreadable") == ["8"]


def test_a_harmless_stray_file_in_a_step_folder_is_named_and_ignored(
        run_copy, restored_steps, caplog):
    step_dir = run_copy / "checkpoints" / "8"
    (step_dir / "notes.txt").write_text("copied from the cluster on Monday")
    (step_dir / "state" / ".DS_Store").write_bytes(b"\0\1")
    (step_dir / "state" / "d" / "0123456789abcdef").write_bytes(b"not referenced")
    with caplog.at_level("WARNING"):
        train(run_copy, total_steps=10)
    assert restored_steps == [8]
    assert not (run_copy / "checkpoints_unreadable").exists()
    stray = [r.getMessage() for r in caplog.records if "none of its checksum records" in
             r.getMessage()]
    assert stray and stray[0] == (
        f"checkpoint {step_dir} holds notes.txt, state/.DS_Store, state/d/0123456789abcdef that "
        "none of its checksum records lists (added after it was saved): ignored, as a restore "
        "reads only recorded files")
    checks = {c.step: c for c in checkpoint_verification.check_run(run_copy)}
    assert checks[8].problem is None and checks[8].verified


def test_a_stray_file_that_a_restore_would_read_makes_the_step_damaged(run_copy):
    step_dir = run_copy / "checkpoints" / "8"
    (step_dir / "state" / "array_metadatas" / "process_1").write_text("{}")
    with pytest.raises(checkpointing.CheckpointUnreadableError,
                       match=r"state/array_metadatas/process_1 is in none of the step's checksum "
                             r"records \(checksums/\), and a restore would read it"):
        checksums.verify(epath.Path(step_dir), str(step_dir))


def test_a_step_folder_replaced_by_a_dangling_symlink_is_moved_aside_in_one_line(
        uninterrupted, run_copy, restored_steps, caplog):
    directory = run_copy / "checkpoints"
    shutil.rmtree(directory / "8")
    os.symlink(run_copy / "moved_away" / "8", directory / "8")
    assert params_loading.load_params(directory)[0].hidden_size == 32  # step 6, and says so
    with caplog.at_level("WARNING"):
        train(run_copy)
    assert restored_steps == [6]
    assert losses(run_copy)[-2:] == uninterrupted[1][-2:]
    lines = [r.getMessage() for r in caplog.records if "not a checkpoint step;" in r.getMessage()]
    assert lines == [
        f"{directory}/8 is a symbolic link to {run_copy}/moved_away/8, which does not exist: not "
        f"a checkpoint step; moved to {run_copy}/checkpoints_unreadable/8, and the run goes on "
        "from its newest step folder"]
    assert os.path.islink(run_copy / "checkpoints_unreadable" / "8")
    assert steps_in(directory) == [4, 6, 8] and not os.path.islink(directory / "8")
    assert checksums.verify(epath.Path(directory / "8"), "8")  # step 8 saved anew, whole


def test_load_params_and_verify_checkpoints_name_a_dangling_step_link(run_copy, caplog):
    directory = run_copy / "checkpoints"
    shutil.rmtree(directory / "8")
    os.symlink("/nonexistent/8", directory / "8")
    with caplog.at_level("WARNING"):
        assert params_loading.resolve_step(directory) == 6
    assert f"{directory}/8 is a symbolic link to /nonexistent/8, which does not exist: not a " \
           "checkpoint step, so the newest step read is 6" in caplog.text
    with pytest.raises(FileNotFoundError, match=r"8 is a symbolic link to /nonexistent/8, which "
                                                r"does not exist: not a checkpoint step"):
        params_loading.load_params(directory, step=8)
    checks = checkpoint_verification.check_run(run_copy)
    assert [(c.step, c.problem) for c in checks][-1] == (
        8, "a symbolic link to /nonexistent/8, which does not exist: not a checkpoint step")


def test_a_step_linked_to_a_folder_elsewhere_is_a_step_and_a_file_named_as_a_step_is_not(
        uninterrupted, run_copy, restored_steps, caplog):
    """New case: a run's newest step moved to another disk and linked back is restored as it
    is; a file named as a newer step (`touch checkpoints/10`) is moved aside in one line, and
    does not stop the save of step 10."""
    directory = run_copy / "checkpoints"
    shutil.move(directory / "8", run_copy / "other_disk_8")
    os.symlink(run_copy / "other_disk_8", directory / "8")
    (directory / "10").write_text("")
    with caplog.at_level("WARNING"):
        train(run_copy, total_steps=10)
    assert restored_steps == [8]
    assert f"{directory}/10 is a file, not a step folder: not a checkpoint step; moved to " \
           f"{run_copy}/checkpoints_unreadable/10" in caplog.text
    assert os.path.isfile(run_copy / "checkpoints_unreadable" / "10")
    assert 10 in steps_in(directory) and os.path.isdir(directory / "10")


def test_a_step_folder_named_with_a_leading_zero_is_named_and_ignored(uninterrupted, run_copy,
                                                                      restored_steps, caplog):
    """New case: a copy of step 8 named `010` (as a zero-padded listing names it). Orbax skips
    it and the resume went on from 8 without a word, while evaluate.py took it for step 10 and
    said `checkpoint .../checkpoints/10 cannot be read: metadata is missing`, a folder that is
    not there. Now every reader names it in one line and ignores it."""
    directory = run_copy / "checkpoints"
    shutil.copytree(directory / "8", directory / "010")
    with caplog.at_level("WARNING"):
        assert params_loading.resolve_step(directory) == 8
        config, _ = params_loading.load_params(directory)
    line = (f"{directory}/010 is not a checkpoint step (a step's folder is named by its number "
            "alone, e.g. 10): ignored")
    assert line in caplog.text and config.hidden_size == 32
    assert [c.step for c in checkpoint_verification.check_run(run_copy)] == [4, 6, 8]
    caplog.clear()
    with caplog.at_level("WARNING"):
        train(run_copy, total_steps=10)
    assert restored_steps == [8] and line in caplog.text
    assert os.path.isdir(directory / "010")
