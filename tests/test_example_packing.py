"""Packing fine-tuning examples into shared rows (bert_jax.data.example_packing,
data.pack_examples).

What must hold: every example of a batch lands in exactly one packed row, whole, with its
targets beside it (examples in == examples out); no row holds more than K examples or more than
L tokens; the row count is a multiple of row_multiple; processes' shares form the global packed
batch. The model computes each packed example as if it were alone: the loss and gradients of a
packed batch equal the unpacked batch's (no dropout); a training run's losses and held-out
metrics equal an unpacked run's. Kinds that cannot be packed are refused in one line.
"""

import json
import os

import ml_collections
import numpy as np
import pytest

from bert_jax.data import batches, example_packing, row_layout
from bert_jax.recipes.finetune import recipe, task_data

from test_bucketing import CompileCounter, read_losses, task_config

L = 32


def random_batch(rng, count, max_len=L):
    lengths = np.where(rng.random(count) < 0.8, rng.integers(3, 10, count),
                       rng.integers(3, max_len + 1, count))
    mask = (np.arange(max_len)[None, :] < lengths[:, None]).astype(np.int32)
    ids = rng.integers(5, 100, (count, max_len)).astype(np.int32) * mask
    types = (np.arange(max_len)[None, :] >= lengths[:, None] // 2).astype(np.int32) * mask
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask,
            "labels": np.arange(count, dtype=np.int32) + 1000}


@pytest.mark.parametrize("max_per_row,row_multiple", [(4, 1), (8, 4), (1, 2)])
def test_every_example_lands_whole_in_one_row(max_per_row, row_multiple):
    rng = np.random.default_rng(0)
    batch = random_batch(rng, 32)
    packer = example_packing.Packer(max_per_row, row_multiple, ("labels",))
    packed = packer.pack(batch)
    rows = len(packed["input_ids"])
    assert rows % row_multiple == 0
    assert packed["example_positions"].shape == (rows, max_per_row)
    assert packed["labels"].shape == (rows, max_per_row)
    lengths = row_layout.row_lengths(batch["attention_mask"])
    seen = []
    for r in range(rows):
        segments = packed["segment_ids"][r]
        count = int(packed["example_weights"][r].sum())
        assert count <= max_per_row and segments.max(initial=0) == count
        assert int(packed["attention_mask"][r].sum()) == int((segments > 0).sum()) <= L
        for slot in range(count):
            example = packed["labels"][r, slot] - 1000
            start = packed["example_positions"][r, slot]
            where = np.flatnonzero(segments == slot + 1)
            assert where[0] == start and len(where) == lengths[example]  # contiguous, whole
            assert (np.diff(where) == 1).all()
            for key in example_packing.TOKEN_INPUTS:
                np.testing.assert_array_equal(packed[key][r, where],
                                              batch[key][example, :lengths[example]])
            seen.append(example)
        assert not packed["example_weights"][r, count:].any()
    assert sorted(seen) == list(range(32))  # examples in == examples out, once each
    if max_per_row == 1:
        assert rows == 32
    else:
        assert rows < 32  # short texts share rows


def test_process_shares_form_the_global_packed_batch():
    rng = np.random.default_rng(1)
    features = {k: np.concatenate([v, v]) for k, v in random_batch(rng, 40).items()}
    packer = example_packing.Packer(4, 2, ("labels",))
    whole = next(batches.train_batches(features, 16, 3, packer=packer))
    shares = [next(batches.train_batches(features, 16, 3, p, 2, packer=packer)) for p in (0, 1)]
    for key, value in whole.items():
        np.testing.assert_array_equal(np.concatenate([s[key] for s in shares]), value)
    assert int(whole["example_weights"].sum()) == 16


def test_kinds_that_cannot_be_packed_are_refused(tmp_path):
    config = task_config(tmp_path, "token_classification", **{"data.pack_examples": 4})
    with pytest.raises(ValueError, match="token_classification.*cannot be packed"):
        task_data.check_batching(config, task_data.kinds.get("token_classification"))
    config.data.pack_examples = -1
    with pytest.raises(ValueError, match="pack_examples=-1 must be an integer >= 0"):
        task_data.check_batching(config)


def shapes_of(batch):
    return tuple(sorted((key, value.shape, value.dtype.str) for key, value in batch.items()))


@pytest.mark.parametrize("how", ["packed", "bucketed", "plain"])
def test_shape_examples_are_every_shape_the_batches_come_in(how):
    # What the train program compiles before the first step (TrainBatches.shape_examples) must
    # be every shape the steps then meet, found without consuming the iterator.
    rng = np.random.default_rng(5)
    features = random_batch(rng, 90)
    options = {"packed": {"packer": example_packing.Packer(4, 2, ("labels",))},
               "bucketed": {"buckets": batches.Buckets((8, 16, L), example_packing.TOKEN_INPUTS)},
               "plain": {}}[how]
    iterator = batches.train_batches(features, 16, 3, **options)
    examples = iterator.shape_examples(40)
    drawn = [shapes_of(next(iterator)) for _ in range(40)]  # from batch 0: nothing consumed
    assert [shapes_of(b) for b in examples] == list(dict.fromkeys(drawn))  # first-seen order
    assert len(examples) == (1 if how == "plain" else len(set(drawn))) and len(examples) < 40
    if how != "plain":
        assert len(examples) > 1  # the case has several shapes to find


def test_packed_row_counts_of_a_run_are_few():
    # batch_size / PACKED_ROW_COUNTS rows at a time: at most 8 row counts, whatever the data
    rng = np.random.default_rng(6)
    features = random_batch(rng, 640)
    config = ml_collections.ConfigDict({"batch_size": 32, "seed": 0, "data": {
        "pack_examples": 4, "group_by_length": 0, "bucket_lengths": "none"}, "max_seq_len": L})
    data = task_data.TaskData(task_data.kinds.get("classification"), {}, [], [], features, {})
    counts = {len(next(task_data.training_batches(config, data))["input_ids"])}
    iterator = task_data.training_batches(config, data)
    counts |= {len(next(iterator)["input_ids"]) for _ in range(60)}
    assert all(c % (32 // task_data.PACKED_ROW_COUNTS) == 0 for c in counts)
    assert 1 < len(counts) <= task_data.PACKED_ROW_COUNTS


@pytest.mark.parametrize("task", ["classification"])
def test_training_losses_and_metrics_equal_packed_and_unpacked(task, tmp_path):
    runs, tokens = {}, {}
    for pack in (4, 0):
        config = task_config(tmp_path, task, batch_size=8, total_steps=10, log_every_steps=1,
                             learning_rate=1e-3, **{"data.pack_examples": pack,
                                                    "data.bucket_lengths": "none"})
        workdir = str(tmp_path / f"pack{pack}")
        with CompileCounter() as compiled:
            result = recipe.train_and_evaluate(config, workdir)
        runs[pack] = read_losses(workdir), result.last_eval_metrics, compiled.count("train_step")
        with open(os.path.join(workdir, "metrics.jsonl")) as f:
            records = [json.loads(line) for line in f]
        tokens[pack] = [r["tokens_per_second"] * r["seconds_per_step"] for r in records]
        # every batch shape was compiled before the first step: past the first step (where the
        # loop's own small helpers compile once) no step compiled anything
        assert [r["compilations"] for r in records[1:]] == [0] * 9
    (losses, metrics, programs), (plain_losses, plain_metrics, _) = runs[4], runs[0]
    # The logged throughput counts real tokens: the same examples, the same count per step.
    np.testing.assert_allclose(tokens[4], tokens[0], rtol=1e-6)
    assert all(0 < t < 8 * 64 for t in tokens[0])  # under a full batch of padded rows
    assert len(losses) == len(plain_losses) == 10
    np.testing.assert_allclose(losses, plain_losses, atol=2e-5, rtol=0)
    assert metrics == pytest.approx(plain_metrics, abs=2e-5)
    assert 1 <= programs <= 8  # one per distinct row count, not one per batch
