"""Token shards: the same bytes whatever the number of workers, read back by global document
index, resumed after a kill or a full disk to an uninterrupted run's bytes, and checked at open."""

import errno
import filecmp
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from bert_jax.data.corpora import preparation as shard_preparation
from bert_jax.data.corpora import token_shards
from bert_jax.data.corpora.demo import LEE_CORPUS, gensim_test_data
from bert_jax.data.corpora.text_files import documents_in
from bert_jax.data.textfiles import DataError
from bert_jax.data.tokenizers import training as tokenizer_training
from bert_jax.data.tokenizers.load import load_tokenizer

from repo_root import ROOT

UNIT_BYTES = 40_000


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Lee stories as two JSONL files and a text file, a BPE tokenizer, and the shards of an
    uninterrupted one-worker preparation (the reference)."""
    folder = tmp_path_factory.mktemp("shards")
    with open(os.path.join(gensim_test_data(), LEE_CORPUS), encoding="utf-8") as f:
        stories = documents_in(f.read(), "line")
    (folder / "data").mkdir()
    for name, part in (("a", stories[:120]), ("b", stories[120:240])):
        (folder / "data" / f"{name}.jsonl").write_text(
            "".join(json.dumps({"text": s}) + "\n" for s in part))
    (folder / "data" / "c.txt").write_text("\n\n".join(stories[240:]))
    tokenizer_training.train_tokenizer(stories, "bpe", 1000, str(folder / "tok"))
    spec = f"mix:1*jsonl:{folder}/data/*.jsonl,1*text:{folder}/data/*.txt"
    reference = str(folder / "reference")
    manifest = shard_preparation.prepare_shards(spec, str(folder / "tok"), reference, workers=1,
                                                unit_bytes=UNIT_BYTES, validation_fraction=0.1)
    return dict(folder=folder, stories=stories, spec=spec, tok=str(folder / "tok"),
                reference=reference, manifest=manifest)


def shard_files(directory):
    return sorted(f for f in os.listdir(directory) if f.endswith(".array_record"))


def same_shards(a, b):
    names = shard_files(a)
    assert names == shard_files(b)
    return all(filecmp.cmp(os.path.join(a, n), os.path.join(b, n), shallow=False) for n in names)


def prepare(corpus, out, **kw):
    return shard_preparation.prepare_shards(corpus["spec"], corpus["tok"], str(out),
                                            unit_bytes=UNIT_BYTES, validation_fraction=0.1, **kw)


def test_manifest_and_reader(corpus):
    manifest = corpus["manifest"]
    assert manifest["dtype"] == "uint16" and manifest["tokenizer"]["vocab_size"] == 1000
    units = len(manifest["shards"]["train"])
    assert units > 6 and [s["source"] for s in manifest["shards"]["train"]][-1] == 1
    assert manifest["sources"][0]["documents"]["train"] + manifest["sources"][0]["documents"][
        "validation"] == 240
    splits = manifest["splits"]
    assert splits["train"]["documents"] + splits["validation"]["documents"] == 300
    assert 0 < splits["validation"]["documents"] < 60
    tokenizer = load_tokenizer(corpus["tok"])
    expected = sorted(tuple(tokenizer.encode(s)) for s in corpus["stories"])
    read = []
    for split in ("train", "validation"):
        shards = token_shards.TokenShards(corpus["reference"], split, verify="hash")
        assert len(shards) == splits[split]["documents"]
        assert shards[0].dtype == np.dtype("<u2")
        read += [tuple(ids.tolist()) for ids in shards.__getitems__(range(len(shards)))]
        assert sum(len(shards[i]) for i in range(len(shards))) == shards.tokens
    assert sorted(read) == expected
    with pytest.raises(DataError, match="no split 'test'"):
        token_shards.TokenShards(corpus["reference"], "test")


def test_two_workers_write_the_same_bytes(corpus, tmp_path):
    manifest = prepare(corpus, tmp_path / "two", workers=2)
    assert same_shards(corpus["reference"], tmp_path / "two")
    assert manifest["shards"] == corpus["manifest"]["shards"]


KILLED_RUN = textwrap.dedent("""
    import sys, time
    from bert_jax.data.corpora import preparation as sp
    tokenize_unit = sp.tokenize_unit

    def slowly(*args, **kwargs):
        record = tokenize_unit(*args, **kwargs)
        time.sleep(0.3)
        return record

    sp.tokenize_unit = slowly
    sp.prepare_shards(sys.argv[1], sys.argv[2], sys.argv[3], workers=1, unit_bytes=int(sys.argv[4]),
                      validation_fraction=0.1)
""")


def test_killed_run_resumes_to_the_same_bytes(corpus, tmp_path, caplog):
    out = tmp_path / "killed"
    env = dict(os.environ, PYTHONPATH=ROOT)
    process = subprocess.Popen([sys.executable, "-c", KILLED_RUN, corpus["spec"], corpus["tok"],
                                str(out), str(UNIT_BYTES)], env=env, cwd=ROOT,
                               stderr=subprocess.DEVNULL)
    done = out / ".units" / "unit-00001.json"
    deadline = time.time() + 60
    while not done.exists() and time.time() < deadline and process.poll() is None:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert done.exists() and not (out / "manifest.json").exists()
    # What a kill during a write leaves: a temporary shard.
    stale = out / "train-00003-of-00009.array_record.tmp-12345"
    stale.write_bytes(b"partial")
    caplog.set_level(logging.INFO)
    prepare(corpus, out, workers=2)
    assert not stale.exists()
    assert "removed 1 stale temporary file(s)" in caplog.text and stale.name in caplog.text
    assert "units already done" in caplog.text
    assert same_shards(corpus["reference"], out)
    assert json.loads((out / "manifest.json").read_text())["splits"] == corpus["manifest"][
        "splits"]


def test_cut_short_shard_named_at_open_and_redone(corpus, tmp_path, caplog):
    out = tmp_path / "copy"
    shutil.copytree(corpus["reference"], out)
    name = corpus["manifest"]["shards"]["train"][2]["file"]
    with open(out / name, "r+b") as f:
        f.truncate(os.path.getsize(out / name) - 100)
    with pytest.raises(DataError) as error:
        token_shards.TokenShards(str(out), "train")
    assert str(error.value).startswith(f"{out / name}: ") and "cut short" in str(error.value)
    assert "\n" not in str(error.value)
    caplog.set_level(logging.WARNING)
    prepare(corpus, out)
    assert "unit 2 is done again" in caplog.text
    assert same_shards(corpus["reference"], out)


def test_full_disk_names_the_folder_and_the_rerun_continues(corpus, tmp_path, monkeypatch):
    out = tmp_path / "full"
    tokenize_unit = shard_preparation.tokenize_unit

    def disk_fills_at_unit_3(unit, index, *args, **kwargs):
        if index == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return tokenize_unit(unit, index, *args, **kwargs)

    monkeypatch.setattr(shard_preparation, "tokenize_unit", disk_fills_at_unit_3)
    with pytest.raises(OSError) as error:
        prepare(corpus, out)
    assert error.value.errno == errno.ENOSPC and error.value.filename == str(out)
    assert "run the same command again" in error.value.strerror
    monkeypatch.setattr(shard_preparation, "tokenize_unit", tokenize_unit)
    prepare(corpus, out)
    assert same_shards(corpus["reference"], out)


def test_another_preparation_in_the_folder_is_refused(corpus, tmp_path):
    out = tmp_path / "other"
    prepare(corpus, out)
    with pytest.raises(ValueError, match="differs in: options"):
        shard_preparation.prepare_shards(corpus["spec"], corpus["tok"], str(out),
                                         unit_bytes=UNIT_BYTES, validation_fraction=0.2)


def test_script_errors_are_one_line(corpus, tmp_path):
    script = os.path.join(ROOT, "experiments", "prepare_shards.py")
    result = subprocess.run(
        [sys.executable, script, f"--corpus=jsonl:{tmp_path}/none*.jsonl",
         f"--tokenizer={corpus['tok']}", f"--output_dir={tmp_path}/out"],
        env=dict(os.environ, PYTHONPATH=ROOT), cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"prepare_shards.py: error: jsonl[text_key=text]:{tmp_path}/none*.jsonl: the glob "
        f"'{tmp_path}/none*.jsonl' matches no file")


def test_the_folder_is_self_contained(corpus, monkeypatch):
    """The tokenizer and the per-document token counts are in the folder: training opens it
    without tokenizer.path and without reading a record."""
    import hashlib

    from bert_jax.data.pretraining import shard_iterator
    from bert_jax.recipes.inputs import schema_data_config
    reference, manifest = corpus["reference"], corpus["manifest"]
    assert manifest["tokenizer"]["path"] == "tokenizer.json"
    assert manifest["tokenizer"]["files"] == ["tokenizer.json"]
    with open(os.path.join(reference, "tokenizer.json"), "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == manifest["tokenizer"]["fingerprint"]
    copied = load_tokenizer(os.path.join(reference, "tokenizer.json"))
    original = load_tokenizer(corpus["tok"])
    assert copied.encode(corpus["stories"][0]) == original.encode(corpus["stories"][0])
    assert manifest["document_tokens"] == {s: f"document_tokens.{s}.npy"
                                           for s in ("train", "validation")}

    def no_counting(self):
        raise AssertionError("counted by reading the records")

    monkeypatch.setattr(token_shards.TokenShards, "_count_lengths", no_counting)
    for split in ("train", "validation"):
        shards = token_shards.TokenShards(reference, split)
        lengths = shards.document_tokens()
        assert lengths.dtype == np.int32 and lengths.sum() == shards.tokens
        assert lengths.tolist() == [len(ids) for ids in shards.read(range(len(shards)))]
    cfg = schema_data_config(corpus=f"shards:{reference}", seq_len=32, max_predictions=5)
    batch = next(shard_iterator.make_shard_iterator(cfg, global_batch_size=4))
    assert batch["input_ids"].shape == (4, 32)
    assert batch["input_ids"][0, 0] == original.cls_id


def test_a_unit_without_its_counts_is_done_again(corpus, tmp_path, caplog):
    out = tmp_path / "counts"
    shutil.copytree(corpus["reference"], out)
    os.remove(out / ".units" / "unit-00004.validation.npy")
    os.remove(out / "document_tokens.train.npy")
    os.remove(out / "manifest.json")
    caplog.set_level(logging.WARNING)
    prepare(corpus, out)
    assert "unit 4 is done again" in caplog.text and "unit 3 is done again" not in caplog.text
    assert same_shards(corpus["reference"], out)
    for name in ("document_tokens.train.npy", "document_tokens.validation.npy",
                 "tokenizer.json", "manifest.json"):
        assert filecmp.cmp(out / name, os.path.join(corpus["reference"], name), shallow=False)


def test_beam_pipeline_writes_the_local_preparations_bytes(corpus, tmp_path):
    """One small pipeline on Beam's DirectRunner (2 worker processes): the same folder, byte
    for byte, read by the training pipeline."""
    try:
        import apache_beam  # noqa: F401
    except ImportError:
        # the newest stack's test extra installs it; the floor leg keeps its pins lean
        pytest.skip("apache_beam is not installed (pip install 'bert_jax[beam]'; the newest "
                    "stack's test extra has it): the Beam preparation is tested on that leg")
    from bert_jax.data.corpora.beam_preparation import prepare_shards_beam
    from bert_jax.data.pretraining import shard_iterator
    from bert_jax.recipes.inputs import schema_data_config
    out = tmp_path / "beam"
    manifest = prepare_shards_beam(
        corpus["spec"], corpus["tok"], str(out),
        ["--runner=DirectRunner", "--direct_num_workers=2",
         "--direct_running_mode=multi_processing"], validation_fraction=0.1,
        unit_bytes=UNIT_BYTES)
    assert manifest == corpus["manifest"]
    assert same_shards(corpus["reference"], out)
    for name in ("document_tokens.train.npy", "document_tokens.validation.npy",
                 "tokenizer.json", "manifest.json", "plan.json"):
        assert filecmp.cmp(out / name, os.path.join(corpus["reference"], name), shallow=False)
    assert not [p for p in out.rglob("*") if ".tmp-" in p.name]
    # a rerun (in-process runner) keeps the units that are there and redoes a missing one
    name = corpus["manifest"]["shards"]["train"][1]["file"]
    os.remove(out / name)
    os.remove(out / "manifest.json")
    prepare_shards_beam(corpus["spec"], corpus["tok"], str(out), ["--runner=DirectRunner"],
                        validation_fraction=0.1, unit_bytes=UNIT_BYTES)
    assert same_shards(corpus["reference"], out)
    cfg = schema_data_config(corpus=f"shards:{out}", seq_len=32, max_predictions=5)
    reference = schema_data_config(corpus=f"shards:{corpus['reference']}", seq_len=32,
                                   max_predictions=5)
    ours = next(shard_iterator.make_shard_iterator(cfg, global_batch_size=4))
    local = next(shard_iterator.make_shard_iterator(reference, global_batch_size=4))
    assert sorted(ours) == sorted(local)
    for key in ours:
        np.testing.assert_array_equal(ours[key], local[key], err_msg=key)


TERMINATED_IN_TRAINING = textwrap.dedent("""
    import runpy, sys, time
    from bert_jax.data.tokenizers import training

    marker = sys.argv.pop(1)

    def slow_training(*args, **kwargs):  # the trainer at work when the SIGTERM comes
        open(marker, "w").close()
        time.sleep(120)

    training.train_tokenizer = slow_training
    sys.argv[0] = "experiments/prepare_shards.py"
    runpy.run_path("experiments/prepare_shards.py", run_name="__main__")
""")


def test_sigterm_during_vocabulary_training_rerun_reads_the_kept_sample(corpus, tmp_path):
    """The kill comes while the tokenizer trains: the sample stays in the tokenizer's folder and
    the rerun trains from it without reading the corpus again; the result is an uninterrupted
    run's, and nothing of the first run is left."""
    def flags(name):
        return [f"--corpus={corpus['spec']}", "--train_tokenizer=wordpiece", "--vocab_size=600",
                "--sample_bytes=200000", f"--tokenizer={tmp_path / name / 'tok'}",
                f"--output_dir={tmp_path / name / 'shards'}", "--workers=1"]
    env = dict(os.environ, PYTHONPATH=ROOT)
    script = os.path.join(ROOT, "experiments", "prepare_shards.py")
    reference = subprocess.run([sys.executable, script, *flags("reference")], env=env, cwd=ROOT,
                               capture_output=True, text=True)
    assert reference.returncode == 0, reference.stderr[-2000:]
    marker = tmp_path / "training"
    process = subprocess.Popen([sys.executable, "-c", TERMINATED_IN_TRAINING, str(marker),
                                *flags("killed")], env=env, cwd=ROOT,
                               stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not marker.exists() and time.time() < deadline and process.poll() is None:
        time.sleep(0.05)
    assert marker.exists(), "the child never reached the tokenizer's training"
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) != 0
    tok = tmp_path / "killed" / "tok"
    kept = [p.name for p in tok.iterdir()]
    assert len(kept) == 1 and kept[0].startswith(".sample-") and kept[0].endswith(".parquet")
    rerun = subprocess.run([sys.executable, script, *flags("killed")], env=env, cwd=ROOT,
                           capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert "not drawn again from the corpus" in rerun.stderr
    assert sorted(p.name for p in tok.iterdir()) == ["tokenizer.json", "vocab.txt"]
    for name in ("tokenizer.json", "vocab.txt"):
        assert (tok / name).read_bytes() == (tmp_path / "reference" / "tok" / name).read_bytes()
    assert same_shards(str(tmp_path / "reference" / "shards"), str(tmp_path / "killed" / "shards"))
