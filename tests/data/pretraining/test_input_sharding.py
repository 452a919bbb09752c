"""Input at scale: each host reads only its own shard of the corpus, and a run resumes on another
number of hosts (bert_jax.data.pretraining.host_shards).

The corpus: eight text files prepared into eight array_record files per split, so that which
files a host opens can be seen. Four separate processes read it as hosts 0..3 of 4, each counting
the records it reads through its data source and listing the corpus files it holds open. Then the
change of the process count on resume: at the iterator level (2 -> 1 -> 4 processes), at the
checkpoint level (another iterator is refused as before), and through the real recipe and loop: a
run checkpointed by two jax.distributed processes goes on with one.
"""

import dataclasses
import json
import logging
import math
import os
import random
import shutil
import subprocess
import sys

import grain
import numpy as np
import pytest
import tensorflow_datasets as tfds
import xla_flags
from faults.inject import as_saved_before_checksums

from bert_jax.data.corpora import catalog as corpora
from bert_jax.data.pretraining import host_shards
from bert_jax.data.pretraining import pipeline as pretraining
from bert_jax.data.tokenizers import wordpiece_training
from bert_jax.recipes.inputs import schema_data_config

from repo_root import ROOT

NUM_FILES = 8  # array_record files of the train split
WORDS = ("the cat sat on a mat while dogs ran far away from home and then came back again to "
         "sleep under warm old trees by one quiet river").split()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """{"glob", "data_dir", "vocab", "shard_lengths"}: 480 documents of a few sentences in eight
    text files (472 train, 8 held out: TFDS needs a record per file in each split), prepared into
    NUM_FILES array_record files per split, and a vocabulary trained on them."""
    root = tmp_path_factory.mktemp("sharded_corpus")
    rng = random.Random(0)
    for f in range(8):
        documents = []
        for _ in range(60):
            lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 14))) + "."
                     for _ in range(rng.randint(2, 5))]
            documents.append("\n".join(lines))
        (root / f"part{f}.txt").write_text("\n\n".join(documents) + "\n")
    glob, data_dir = f"text:{root}/*.txt", str(root / "data")
    builder = corpora.builder_for(glob, data_dir)
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(num_shards=NUM_FILES))
    source = corpora.load_source(glob, "train", data_dir)  # the prepared copy, as training reads
    vocab = wordpiece_training.train_wordpiece(corpora.SourceTexts(source), 200,
                                               str(root / "vocab"))
    shard_lengths = list(corpora.prepare(glob, data_dir).info.splits["train"].shard_lengths)
    assert len(shard_lengths) == NUM_FILES and sum(shard_lengths) == len(source)
    return {"glob": glob, "data_dir": data_dir, "vocab": vocab, "shard_lengths": shard_lengths}


def data_config(corpus, **overrides):
    return schema_data_config(**{
        "corpus": corpus["glob"], "data_dir": corpus["data_dir"], "vocab_path": corpus["vocab"],
        "seq_len": 32, "max_predictions": 5, **overrides})


def file_name(index: int) -> str:
    return f"text_files-train.array_record-{index:05d}-of-{NUM_FILES:05d}"


# ------------------------------------------------------------------------------------------------
# (a) Each host reads only its own shard.

READ_SCRIPT = """
import json, os, sys
from bert_jax.data.corpora import catalog as corpora
from bert_jax.data.pretraining import pipeline as pretraining

config, index, count, out = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]


class CountingSource:
    '''The corpus source, recording the index of every record read through it.'''

    def __init__(self, source):
        self.source, self.indices = source, []

    def __len__(self):
        return len(self.source)

    def __getitem__(self, i):
        self.indices.append(int(i))
        return self.source[i]


sources, load_source = [], corpora.load_source


def counting_load_source(*args, **kwargs):
    sources.append(CountingSource(load_source(*args, **kwargs)))
    return sources[-1]


corpora.load_source = counting_load_source  # what make_iterator calls
result = {}
for mode in ("packed", "sentence_pairs"):
    pairs = mode == "sentence_pairs"
    cfg = pretraining.PretrainingDataConfig(**{**config, "sentence_pairs": pairs})
    it = pretraining.make_iterator(cfg, "train", 8, process_index=index, process_count=count)
    source = sources[-1]
    while len(source.indices) < 2 * len(source):  # several passes over a quarter of the corpus
        next(it)
    it.close()
    result[mode], result["records"] = sorted(set(source.indices)), len(source)
opened = []
for fd in os.listdir("/proc/self/fd"):
    try:
        opened.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
    except OSError:
        pass
result["open_files"] = sorted({name for name in opened if ".array_record-" in name})
json.dump(result, open(out, "w"))
"""


def read_as_four_hosts(corpus, tmp_path) -> list[dict]:
    config = json.dumps(dataclasses.asdict(data_config(corpus)))  # every field: none defaults
    env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
    processes = [subprocess.Popen([sys.executable, "-c", READ_SCRIPT, config, str(i), "4",
                                   str(tmp_path / f"host{i}.json")], env=env, cwd=ROOT,
                                  stderr=subprocess.PIPE, text=True) for i in range(4)]
    for p in processes:
        _, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, stderr[-3000:]
    return [json.loads((tmp_path / f"host{i}.json").read_text()) for i in range(4)]


def test_four_processes_read_disjoint_quarters_of_the_records_and_of_the_files(corpus, tmp_path):
    hosts = read_as_four_hosts(corpus, tmp_path)
    records = hosts[0]["records"]
    file_of = np.repeat(np.arange(NUM_FILES), corpus["shard_lengths"])
    most_files = math.ceil(NUM_FILES / 4) + 1  # a host's range may start inside a file
    for mode in ("packed", "sentence_pairs"):
        shards = [set(host[mode]) for host in hosts]
        assert sum(map(len, shards)) == records == len(set().union(*shards))  # disjoint, all
        assert all(records // 4 <= len(shard) <= -(-records // 4) for shard in shards)
        for shard in shards:
            assert len({int(file_of[i]) for i in shard}) <= most_files
    for host in hosts:  # the files a host holds open are those of its own records, ~1/4 of them
        own_files = sorted({file_name(int(file_of[i])) for i in host["packed"]})
        assert host["open_files"] == own_files and len(own_files) <= most_files
    assert sorted(set().union(*(h["open_files"] for h in hosts))) == [
        file_name(i) for i in range(NUM_FILES)]


@pytest.mark.parametrize("records,hosts", [(231, 4), (8, 8), (10, 3), (1000, 7)])
def test_shard_ranges_are_contiguous_disjoint_and_even(records, hosts):
    ranges = [host_shards.shard_range(records, i, hosts) for i in range(hosts)]
    assert [i for r in ranges for i in r] == list(range(records))  # in order: contiguous, all
    assert max(map(len, ranges)) - min(map(len, ranges)) <= 1
    assert host_shards.shard_range(records, 0, 1) == range(records)
    with pytest.raises(ValueError, match="process_index=3 not in"):
        host_shards.shard_range(records, 3, 3)


# ------------------------------------------------------------------------------------------------
# (b) The process count changes on resume.


def batches(iterator, n):
    return [next(iterator) for _ in range(n)]


def assert_same(first, second):
    assert len(first) == len(second)
    for a, b in zip(first, second):
        assert sorted(a) == sorted(b)
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])


def test_iterator_goes_on_with_another_process_count_in_a_new_pass(corpus, caplog):
    cfg = data_config(corpus, seed=3)
    old = [pretraining.make_iterator(cfg, "train", 8, i, 2) for i in range(2)]
    for it in old:
        batches(it, 5)
    saved = json.loads(json.dumps(old[0].get_state()))

    # 2 -> 1: a new pass, said in one warning; the same every time; not the first pass again.
    one = pretraining.make_iterator(cfg, "train", 8)
    with caplog.at_level(logging.WARNING):
        one.set_state_of_other_layout(saved)
    warned = [r.getMessage() for r in caplog.records if "data iterator" in r.getMessage()]
    assert len(warned) == 1 and "saved by 2 process(es) and this run has 1" in warned[0]
    assert "new pass" in warned[0] and "resume with 2 processes" in warned[0]
    after_change = batches(one, 4)
    again = pretraining.make_iterator(cfg, "train", 8)
    again.set_state_of_other_layout(saved)
    assert_same(batches(again, 4), after_change)
    fresh = batches(pretraining.make_iterator(cfg, "train", 8), 4)
    assert not np.array_equal(after_change[0]["input_ids"], fresh[0]["input_ids"])

    # A later resume on the new layout is exact: its state names the pass.
    state = json.loads(json.dumps(again.get_state()))
    assert state["layout_changes"] == 1 and state["process_count"] == 1
    expected = batches(again, 3)
    resumed = pretraining.make_iterator(cfg, "train", 8)
    resumed.set_state(state)
    assert_same(batches(resumed, 3), expected)

    # 1 -> 4: another new pass, in yet another order.
    four = [pretraining.make_iterator(cfg, "train", 8, i, 4) for i in range(4)]
    for it in four:
        it.set_state_of_other_layout(state)
    assert four[0].get_state()["layout_changes"] == 2
    host0 = next(four[0])
    assert host0["input_ids"].shape == (2, 32)
    restarted = pretraining.make_iterator(cfg, "train", 8, 0, 4)
    restarted.set_state_of_other_layout(saved)  # pass 1 on this layout, not pass 2
    assert not np.array_equal(next(restarted)["input_ids"], host0["input_ids"])


def test_state_of_another_pipeline_does_not_start_a_new_pass(corpus):
    it = pretraining.make_iterator(data_config(corpus, seed=1), "train", 8, 0, 2)
    next(it)
    state = it.get_state()
    other = pretraining.make_iterator(data_config(corpus, seed=2), "train", 8)
    with pytest.raises(ValueError, match="another corpus.*resume with 2 processes"):
        other.set_state_of_other_layout(state)
    old_version = {k: v for k, v in state.items()
                   if k not in ("data_fingerprint", "process_count", "layout_changes")}
    same = pretraining.make_iterator(data_config(corpus, seed=1), "train", 8)
    with pytest.raises(ValueError, match="resume with as many processes as saved it"):
        same.set_state_of_other_layout({**old_version, "version": 1})
    twin = pretraining.make_iterator(data_config(corpus, seed=1), "train", 8, 0, 2)
    twin.set_state({**old_version, "version": 1})  # a state of the first version still resumes
    np.testing.assert_array_equal(next(twin)["input_ids"], next(it)["input_ids"])


def test_checkpoint_of_two_processes_starts_a_new_pass_or_is_refused(corpus, tmp_path):
    """One process reads a step whose data_iterator folder holds the files two processes write
    (`process_<i>-of-2.json`, the states of hosts 0 and 1 of 2)."""
    import jax.numpy as jnp

    from bert_jax.config.bert import BertConfig
    from bert_jax.train.checkpoint import store as checkpointing

    cfg = data_config(corpus, seed=5)
    hosts = [pretraining.make_iterator(cfg, "train", 8, i, 2) for i in range(2)]
    for it in hosts:
        batches(it, 2)
    model_config = BertConfig.preset("tiny", vocab_size=200)
    state = {"w": jnp.arange(3.0)}
    manager = checkpointing.make_manager(tmp_path / "checkpoints", async_saves=False)
    checkpointing.save(manager, 2, state, model_config=model_config, data_iterator=hosts[0])
    folder = tmp_path / "checkpoints" / "2" / checkpointing.DATA
    (folder / "process_0-of-1.json").rename(folder / "process_0-of-2.json")
    (folder / "process_1-of-2.json").write_text(json.dumps(hosts[1].get_state()))
    # The files were changed after the save, which the step's checksums rightly refuse: drop
    # them, so the step reads as one saved before checksums (restored unverified).
    as_saved_before_checksums(tmp_path / "checkpoints" / "2")

    one = pretraining.make_iterator(cfg, "train", 8)
    restored = checkpointing.restore(manager, 2, {"w": jnp.zeros(3)}, model_config=model_config,
                                     data_iterator=one)
    np.testing.assert_array_equal(restored["w"], state["w"])
    assert one.get_state()["layout_changes"] == 1
    expected = pretraining.make_iterator(cfg, "train", 8)
    expected.set_state_of_other_layout(hosts[0].get_state())
    assert_same(batches(one, 2), batches(expected, 2))

    plain = iter(grain.MapDataset.range(10).to_iter_dataset())  # an iterator of no such kind
    with pytest.raises(checkpointing.CheckpointMismatchError,
                       match="state of 2 process.*this run has 1: resume with as many"):
        checkpointing.restore(manager, 2, {"w": jnp.zeros(3)}, model_config=model_config,
                              data_iterator=plain)
    manager.close()


# ------------------------------------------------------------------------------------------------
# Through the recipe and the loop: two jax.distributed processes, then one.


def pretrain_command(corpus, workdir, total_steps):
    return [f"--workdir={workdir}", "--config=experiments/configs/demo.py",
            f"--config.data.corpus={corpus['glob']}",
            f"--config.data.data_dir={corpus['data_dir']}",
            f"--config.tokenizer.path={corpus['vocab']}", "--config.model.num_hidden_layers=1",
            "--config.model.hidden_size=32",
            "--config.model.num_attention_heads=2", "--config.model.intermediate_size=64",
            "--config.max_seq_len=32", "--config.data.max_predictions=5",
            "--config.batch_size=8", "--config.eval_batch_size=8", "--config.eval_batches=1",
            f"--config.total_steps={total_steps}", "--config.warmup_fraction=0.1",
            "--config.log_every_steps=1", "--config.eval_every_steps=0",
            "--config.checkpoint_every_steps=2", "--config.keep_checkpoints=4",
            "--config.async_checkpoints=False", "--config.allow_config_change=true"]


def pretrain_on_two_processes(corpus, workdir, total_steps, logdir):
    os.makedirs(logdir, exist_ok=True)
    done = subprocess.run(
        ["bash", os.path.join(ROOT, "launch", "multihost_local.sh"), "2", "1",
         "experiments/pretrain.py", *pretrain_command(corpus, workdir, total_steps)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHON": sys.executable, "LOGDIR": str(logdir)})
    logs = "".join((logdir / f"process_{i}.log").read_text()[-2000:] for i in range(2))
    assert done.returncode == 0, done.stderr[-2000:] + logs


def pretrain_on_one_process(corpus, workdir, total_steps) -> str:
    env = dict(os.environ, XLA_FLAGS=xla_flags.with_devices())
    done = subprocess.run(
        [sys.executable, "experiments/pretrain.py", *pretrain_command(corpus, workdir,
                                                                      total_steps)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**env, "JAX_PLATFORMS": "cpu", "PYTHONPATH": ROOT})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


def logged_losses(workdir) -> dict[int, float]:
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return {record["step"]: record["loss"] for record in map(json.loads, f)}


def state_files(workdir, step) -> list[str]:
    folder = workdir / "checkpoints" / str(step) / "data_iterator"
    return sorted(name for name in os.listdir(folder) if name.endswith(".json"))


def test_run_of_two_processes_goes_on_with_one(corpus, tmp_path):
    # Checkpoints every 2 steps: two processes train 2 steps, one goes on to step 6.
    workdir = tmp_path / "run"
    pretrain_on_two_processes(corpus, workdir, 2, tmp_path / "logs")
    first = logged_losses(workdir)
    assert sorted(first) == [1, 2]
    assert state_files(workdir, 2) == ["process_0-of-2.json", "process_1-of-2.json"]

    # One process resumes the model state at step 2; the data starts a new pass, said in one
    # line before the first step it trains.
    log = pretrain_on_one_process(corpus, workdir, 6)
    lines = log.splitlines()
    said = [i for i, line in enumerate(lines) if "data iterator: the checkpoint's data position "
            "was saved by 2 process(es) and this run has 1" in line]
    first_step = next(i for i, line in enumerate(lines) if "step 3/6" in line)
    assert len(said) == 1 and said[0] < first_step
    losses = logged_losses(workdir)
    assert sorted(losses) == list(range(1, 7)) and all(losses[s] == first[s] for s in first)
    assert all(np.isfinite(list(losses.values())))
    assert state_files(workdir, 6) == ["process_0-of-1.json"]

    # Within the new pass, resuming on one process is exact: from step 4, steps 5 and 6 again.
    again = tmp_path / "again"
    shutil.copytree(workdir, again)
    shutil.rmtree(again / "checkpoints" / "6")
    log = pretrain_on_one_process(corpus, again, 6)
    assert "resuming from" in log and "data iterator:" not in log
    assert logged_losses(again) == losses
