"""Length buckets for fine-tuning batches (bert_jax.data.batches.Buckets, data.bucket_lengths).

A batch is cut to the smallest bucket that holds its longest row. What must hold: the bucket
choice; rows in == rows out, each row whole (only padding columns go); the same rows in the
same batches as without buckets (and resumable); held-out predictions and a training run's
losses equal to the unbucketed ones up to float rounding; and XLA compiles one program per
bucket at most, not one per batch. Length-grouped batching (an option, off by default) only
redistributes the rows of a window of batches.
"""

import itertools

import flax.linen as nn
import jax
import numpy as np
import pytest

from bert_jax.config import settings
from bert_jax.data import batches, row_layout
from bert_jax.recipes import common as recipe_common
from bert_jax.recipes.finetune import recipe, task_data
from bert_jax.train import evaluation

from bucket_runs import MAX_LEN, CompileCounter, read_losses, task_config
from finetune_runs import tiny_finetune_config

BUCKETS = (16, 32, 64)
BUCKETED = ",".join(map(str, BUCKETS))  # the data.bucket_lengths of the bucketed runs


# ----- the bucket choice -----------------------------------------------------------------------

def test_bucket_choice_and_row_lengths():
    buckets = batches.Buckets(BUCKETS, ("input_ids", "attention_mask"))
    assert [buckets.length_for(n, 64) for n in (0, 1, 16, 17, 32, 33, 64)] == [
        16, 16, 16, 32, 32, 64, 64]
    assert batches.Buckets((16, 32), ("attention_mask",)).length_for(40, 64) == 64  # fits none
    assert batches.Buckets((16, 128), ("attention_mask",)).length_for(40, 64) == 64  # > full
    mask = np.zeros((3, 8), np.int32)
    mask[0, :5], mask[2, :8] = 1, 1
    assert row_layout.row_lengths(mask).tolist() == [5, 0, 8]
    assert batches.power_of_two_lengths(64) == (16, 32, 64)
    assert batches.power_of_two_lengths(100) == (16, 32, 64, 100)
    assert batches.power_of_two_lengths(16) == (16,)
    with pytest.raises(ValueError, match="ascending"):
        batches.Buckets((32, 16), ("attention_mask",))
    with pytest.raises(ValueError, match="attention_mask"):
        batches.Buckets((16,), ("input_ids",))


def test_cut_keeps_rows_whole_and_leaves_other_arrays():
    mask = np.zeros((2, 64), np.int32)
    mask[0, :17], mask[1, :3] = 1, 1
    batch = {"attention_mask": mask, "input_ids": mask * 7, "labels": np.arange(2),
             "tags": np.zeros((2, 64, 3))}
    cut = batches.Buckets(BUCKETS, ("attention_mask", "input_ids")).cut(batch)
    assert cut["attention_mask"].shape == cut["input_ids"].shape == (2, 32)
    assert cut["attention_mask"].sum() == mask.sum()  # every real token kept
    assert cut["labels"] is batch["labels"] and cut["tags"].shape == (2, 64, 3)
    assert batches.Buckets(BUCKETS, ("attention_mask",)).cut(batch, longest=40)[
        "attention_mask"].shape == (2, 64)  # the global batch's longest row decides
    with pytest.raises(ValueError, match="labels"):
        batches.Buckets(BUCKETS, ("attention_mask", "labels")).cut(batch)


@pytest.mark.parametrize("spec,expected", [
    ("auto", (32, 64)), ("none", ()), ("", ()), ("48, 16", (16, 48, 64)), ("16,64", (16, 64)),
    ((8, 24), (8, 24, 64)), ((), ())])
def test_config_bucket_lengths(spec, expected):
    config = tiny_finetune_config("classification", "", max_seq_len=64)
    config.data.bucket_lengths = spec if isinstance(spec, str) else ",".join(map(str, spec))
    assert task_data.bucket_lengths(settings.typed(config)) == expected


def test_bad_bucket_configs_are_errors_and_none_pads_to_max_seq_len():
    config = tiny_finetune_config("classification", "", max_seq_len=64)
    for bad in ("16,x", "0,32", "128"):
        config.data.bucket_lengths = bad
        with pytest.raises(ValueError, match="bucket_lengths"):
            task_data.check_batching(settings.typed(config))
    config.data.bucket_lengths, config.data.group_by_length = "auto", -1
    with pytest.raises(ValueError, match="group_by_length"):
        task_data.check_batching(settings.typed(config))
    config.data.bucket_lengths = "none"
    assert task_data.bucket_lengths(settings.typed(config)) == ()


# ----- rows in == rows out -----------------------------------------------------------------------

def random_rows(rng, count, max_len=MAX_LEN):
    """input_ids / attention_mask [count, max_len] of rows of random lengths (mostly short), a
    per-token target, a row id."""
    lengths = np.where(rng.random(count) < 0.7, rng.integers(3, 15, count),
                       rng.integers(3, max_len + 1, count))
    mask = (np.arange(max_len)[None, :] < lengths[:, None]).astype(np.int32)
    ids = rng.integers(5, 100, (count, max_len)).astype(np.int32) * mask
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids),
            "tags": np.where(mask == 1, ids % 3, -100).astype(np.int32),
            "row": np.arange(count, dtype=np.int32)}


TOKEN_KEYS = ("input_ids", "attention_mask", "token_type_ids", "tags")


def check_whole_rows(batch, features):
    """Each row of the cut batch is its feature row with only padding columns removed."""
    length = batch["attention_mask"].shape[1]
    for key in TOKEN_KEYS:
        full = features[key][batch["row"]]
        np.testing.assert_array_equal(batch[key], full[:, :length])
    assert not features["attention_mask"][batch["row"], length:].any()  # nothing real cut


@pytest.mark.parametrize("group_by_length", [0, 4])
def test_train_batches_rows_in_equal_rows_out_and_resume(group_by_length):
    rng = np.random.default_rng(0)
    features = random_rows(rng, 50)
    buckets = batches.Buckets(BUCKETS, TOKEN_KEYS)
    plain = batches.train_batches(features, 5, seed=1)
    cut = batches.train_batches(features, 5, seed=1, buckets=buckets,
                                group_by_length=group_by_length)
    seen, shapes = [], set()
    for _ in range(40):  # 4 epochs of 10 batches
        a, b = next(plain), next(cut)
        check_whole_rows(b, features)
        shapes.add(b["input_ids"].shape)
        if not group_by_length:  # the same rows in the same batches as without buckets
            np.testing.assert_array_equal(a["row"], b["row"])
        seen.append(b["row"])
    rows = np.concatenate(seen)
    assert np.bincount(rows, minlength=50).tolist() == [4] * 50  # every row once an epoch
    assert shapes <= {(5, n) for n in BUCKETS} and len(shapes) >= 2
    state = cut.get_state()
    after = [next(cut) for _ in range(7)]
    resumed = batches.train_batches(features, 5, seed=1, buckets=buckets,
                                    group_by_length=group_by_length)
    resumed.set_state(state)
    for expected in after:
        got = next(resumed)
        assert all(np.array_equal(got[k], expected[k]) for k in expected)


def test_grouping_by_length_redistributes_rows_within_each_window():
    features = random_rows(np.random.default_rng(1), 64)
    lengths = row_layout.row_lengths(features["attention_mask"])
    plain = batches.train_batches(features, 8, seed=2)
    grouped = batches.train_batches(features, 8, seed=2, group_by_length=4)
    padded = {"plain": 0, "grouped": 0}
    for _ in range(3):  # windows of 4 batches: the same rows, other batches
        a = [next(plain)["row"] for _ in range(4)]
        b = [next(grouped)["row"] for _ in range(4)]
        assert sorted(np.concatenate(a).tolist()) == sorted(np.concatenate(b).tolist())
        padded["plain"] += sum(8 * lengths[r].max() for r in a)
        padded["grouped"] += sum(8 * lengths[r].max() for r in b)
        spans = sorted((lengths[r].min(), lengths[r].max()) for r in b)
        assert all(hi <= lo_next for (_, hi), (lo_next, _) in itertools.pairwise(spans))
    assert padded["grouped"] < padded["plain"]


def test_process_shares_form_the_global_batch_at_one_length():
    features = random_rows(np.random.default_rng(2), 40)
    buckets = batches.Buckets(BUCKETS, TOKEN_KEYS)
    whole = batches.train_batches(features, 8, seed=3, buckets=buckets)
    shares = [batches.train_batches(features, 8, seed=3, process_index=p, process_count=2,
                                    buckets=buckets) for p in range(2)]
    for _ in range(10):
        global_batch, parts = next(whole), [next(s) for s in shares]
        assert parts[0]["input_ids"].shape == parts[1]["input_ids"].shape == (
            4, global_batch["input_ids"].shape[1])
        assert sorted(np.concatenate([p["row"] for p in parts]).tolist()) == sorted(
            global_batch["row"].tolist())
    for p in range(2):
        evaluated = list(batches.eval_batches(features, 8, p, 2, buckets))
        for batch in evaluated:
            real = batch["example_weights"] > 0
            check_whole_rows({k: v[real] for k, v in batch.items()}, features)


def test_eval_batches_rows_in_equal_rows_out():
    features = random_rows(np.random.default_rng(3), 37)
    features["row"].sort()
    evaluated = list(batches.eval_batches(features, 8,
                                          buckets=batches.Buckets(BUCKETS, TOKEN_KEYS)))
    rows = np.concatenate([b["row"][b["example_weights"] > 0] for b in evaluated])
    assert rows.tolist() == list(range(37))  # each row once, in order
    for batch in evaluated:
        real = batch["example_weights"] > 0
        check_whole_rows({k: v[real] for k, v in batch.items()}, features)
    assert len({b["input_ids"].shape for b in evaluated}) >= 2


# ----- the same results with and without buckets ------------------------------------------------

@pytest.mark.parametrize("task", ["classification", "token_classification", "span_qa"])
def test_heldout_predictions_equal_with_and_without_buckets(task, tmp_path):
    config = task_config(tmp_path, task)
    run = settings.read(config, "finetune")
    tokenizer = recipe_common.finetuning_tokenizer(run)
    data = task_data.build_task_data(run, tokenizer)
    cfg = recipe_common.model_config(run, tokenizer.vocab_size)
    model = data.kind.make_model(cfg, data.labels)
    params = nn.meta.unbox(recipe.make_init_fn(model, MAX_LEN)(jax.random.PRNGKey(0)))
    mesh = run.mesh.make()
    inputs = {k: data.eval_features[k] for k in ("input_ids", "token_type_ids",
                                                  "attention_mask")}
    results = {}
    for spec in (BUCKETED, "none"):
        config.data.bucket_lengths = spec
        run = settings.read(config, "finetune")
        predict = jax.jit(recipe.make_predict_fn(data.kind, model, MAX_LEN))
        with CompileCounter() as compiled:
            outputs = evaluation.predict_rows(predict, params, inputs, 4, mesh,
                                              task_data.eval_buckets(run))
        evaluator = recipe.make_evaluator(run, cfg, data, mesh)
        results[spec] = outputs, evaluator(params), evaluator.last_records
        assert 1 <= compiled.count("predict") <= (len(BUCKETS) if spec == BUCKETED else 1)
    (bucketed, metrics, records), (plain, plain_metrics, plain_records) = (
        results[BUCKETED], results["none"])
    real = row_layout.row_lengths(inputs["attention_mask"])
    assert len({batches.Buckets(BUCKETS, ("attention_mask",)).length_for(
        real[i:i + 4].max(), MAX_LEN) for i in range(0, len(real), 4)}) == 3  # every bucket
    for name, value in plain.items():
        assert bucketed[name].shape == value.shape  # token outputs padded back to max_seq_len
        if name in data.kind.token_outputs:  # every real position agrees
            for row, length in enumerate(real):
                np.testing.assert_allclose(bucketed[name][row, :length], value[row, :length],
                                           atol=1e-5)
        else:
            np.testing.assert_allclose(bucketed[name], value, atol=1e-5)
    assert metrics == pytest.approx(plain_metrics, abs=1e-6)
    if task == "classification":
        assert [r["prediction"] for r in records] == [r["prediction"] for r in plain_records]
    elif task == "token_classification":
        assert [tags for _, tags in records] == [tags for _, tags in plain_records]
    else:
        assert {q: a.text for q, a in records.items()} == {
            q: a.text for q, a in plain_records.items()}

@pytest.mark.parametrize("task", ["classification", "token_classification"])
def test_training_losses_equal_with_and_without_buckets(task, tmp_path):
    runs = {}
    for spec in (BUCKETED, "none"):
        config = task_config(tmp_path, task, batch_size=4, total_steps=12, log_every_steps=1,
                             learning_rate=1e-3, **{"data.bucket_lengths": spec})
        workdir = str(tmp_path / spec)
        with CompileCounter() as compiled:
            result = recipe.train_and_evaluate(config, workdir)
        runs[spec] = read_losses(workdir), result.last_eval_metrics
        limit = len(BUCKETS) if spec == BUCKETED else 1
        assert 1 <= compiled.count("train_step") <= limit  # not one per batch
        if spec == BUCKETED:
            assert compiled.count("train_step") >= 2  # the batches really were cut
    (losses, metrics), (plain_losses, plain_metrics) = runs[BUCKETED], runs["none"]
    assert len(losses) == len(plain_losses) == 12
    np.testing.assert_allclose(losses, plain_losses, atol=1e-5, rtol=0)
    assert metrics == pytest.approx(plain_metrics, abs=1e-5)
