"""Packing fine-tuning examples into shared rows (bert_jax.data.example_packing,
data.pack_examples).

What must hold: every example of a batch lands in exactly one packed row, whole, with its
targets beside it (examples in == examples out); per-token targets sit under the example's own
tokens, the fill value everywhere else, and each token weighs what its example weighs; no row
holds more than K examples or more than L tokens; the row count is a multiple of row_multiple;
processes' shares form the global packed batch. The model computes each packed example as if it
were alone: a token classifier's logits, loss and gradients on a packed batch equal the
unpacked batch's (no dropout), BERT and ModernBERT (local attention windows) alike; a training
run's losses and held-out metrics (accuracy, entity F1) equal an unpacked run's. Kinds that
cannot be packed are refused in one line.
"""

import json
import os

import flax.linen as nn
import jax
import numpy as np
import pytest

from bert_jax.config import settings
from bert_jax.data import batches, example_packing, row_layout
from bert_jax.data.finetuning import encoding
from bert_jax.model import families
from bert_jax.recipes.finetune import kinds, recipe, task_data

from bucket_runs import CompileCounter, read_losses, task_config
from finetune_runs import finetune_settings

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


def tagged_batch(rng, count, max_len=L):
    """random_batch with per-token labels instead: (example, position) coded as
    100 * example + position on about half the real positions past [CLS], IGNORE elsewhere;
    and an example id per example."""
    batch = random_batch(rng, count, max_len)
    positions = np.arange(max_len)[None, :]
    tagged = (batch["attention_mask"] == 1) & (positions > 0) & (rng.random(
        (count, max_len)) < 0.5)
    batch["labels"] = np.where(tagged, 100 * np.arange(count)[:, None] + positions,
                               encoding.IGNORE).astype(np.int32)
    batch["example_id"] = np.arange(count, dtype=np.int32)
    return batch


def test_token_targets_sit_under_their_own_tokens():
    rng = np.random.default_rng(7)
    batch = tagged_batch(rng, 24)
    batch["example_weights"] = np.where(np.arange(24) == 5, 0.0, 1.0).astype(np.float32)
    batch["tag_weights"] = (rng.random((24, L)) * batch["attention_mask"]).astype(np.float32)
    packer = example_packing.Packer(4, 2, ("example_id",),
                                    {"labels": encoding.IGNORE, "tag_weights": 0.0})
    packed = packer.pack(batch)
    rows = len(packed["input_ids"])
    assert rows < 24 and packed["labels"].shape == packed["token_weights"].shape == (rows, L)
    assert packed["labels"].dtype == np.int32 and packed["tag_weights"].dtype == np.float32
    lengths = row_layout.row_lengths(batch["attention_mask"])
    segments, seen = packed["segment_ids"], []
    for r in range(rows):
        for slot in range(int(segments[r].max(initial=0))):  # example 5 (weight 0) too
            example = packed["example_id"][r, slot]
            start = packed["example_positions"][r, slot]
            span = slice(start, start + lengths[example])
            assert (segments[r, span] == slot + 1).all()
            # the example's positions 0..n-1, targets and weights alike, at start..start+n-1
            np.testing.assert_array_equal(packed["labels"][r, span],
                                          batch["labels"][example, :lengths[example]])
            np.testing.assert_array_equal(packed["tag_weights"][r, span],
                                          batch["tag_weights"][example, :lengths[example]])
            assert (packed["token_weights"][r, span] == (example != 5)).all()
            seen.append(example)
    assert sorted(seen) == list(range(24))
    # every tag once, each under the token it was on: label 100 e + p sits on e's token p
    where = np.nonzero(packed["labels"] != encoding.IGNORE)
    codes = packed["labels"][where]
    assert sorted(codes) == sorted(batch["labels"][batch["labels"] != encoding.IGNORE])
    np.testing.assert_array_equal(packed["input_ids"][where],
                                  batch["input_ids"][codes // 100, codes % 100])
    # outside every example: the fill values and no weight
    outside = segments == 0
    assert (packed["labels"][outside] == encoding.IGNORE).all()
    assert not packed["tag_weights"][outside].any() and not packed["token_weights"][outside].any()
    # a packer without token keys packs as before: no token_weights
    assert "token_weights" not in example_packing.Packer(4, 2, ("example_id",)).pack(batch)


def token_classifier(family):
    """A tiny token classifier of 5 tags without dropout, and random weights. ModernBERT's
    local attention windows (8 positions) are narrower than its rows."""
    if family == "bert":
        cfg = families.get("bert").preset(
            "tiny", vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
            intermediate_size=64, max_position_embeddings=L, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0, initializer_range=0.2)
    else:
        cfg = families.get("modernbert").preset(
            "tiny", vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=64, max_position_embeddings=L, global_attn_every_n_layers=2,
            local_attention=8, initializer_range=0.2)
    kind = kinds.get("token_classification")
    model = kind.make_model(cfg, {"label_map": list("abcde")})
    # any weights serve: random ones of the model's shapes (no init program to compile)
    shapes = nn.meta.unbox(jax.eval_shape(recipe.make_init_fn(model, L), jax.random.PRNGKey(0)))
    rng = np.random.default_rng(0)
    params = jax.tree.map(lambda s: rng.normal(0.0, 0.2, s.shape).astype(s.dtype), shapes)
    return kind, model, params


@pytest.mark.parametrize("family", ["bert", "modernbert"])
def test_packed_token_classification_logits_loss_and_gradients_equal_unpacked(family):
    kind, model, params = token_classifier(family)
    rng = np.random.default_rng(8)
    batch = tagged_batch(rng, 16)
    batch["labels"] = np.where(batch["labels"] == encoding.IGNORE, encoding.IGNORE,
                               rng.integers(0, 5, batch["labels"].shape)).astype(np.int32)
    del batch["example_id"]
    # two padding examples weigh nothing: a real-looking row and an empty one (as pad_rows)
    batch["example_weights"] = np.ones(16, np.float32)
    batch["example_weights"][[3, 15]] = 0.0
    for key in ("input_ids", "token_type_ids", "attention_mask"):
        batch[key][15] = 0
    batch["labels"][15] = encoding.IGNORE
    packer = task_data.train_packer(
        finetune_settings("token_classification", **{"data.pack_examples": 4}), kind, 2)
    packed = packer.pack(batch)
    assert len(packed["input_ids"]) < 16 and packed["labels"].shape[1] == L

    loss_fn = recipe.make_loss_fn(kind, model)

    def objective(params, batch):
        terms, metrics = loss_fn(params, batch, jax.random.PRNGKey(1), True)
        total, weight = terms["cross_entropy"]
        return total / weight, (terms, metrics)

    @jax.jit  # one program per batch shape: the loss, its gradients and the logits
    def run(params, batch):
        logits = model.apply({"params": params}, batch["input_ids"], batch["token_type_ids"],
                             batch["attention_mask"], True,
                             **{k: batch[k] for k in kind.packed_inputs if k in batch})
        return jax.value_and_grad(objective, has_aux=True)(params, batch), logits

    ((loss, (terms, metrics)), grads), unpacked_logits = run(params, batch)
    ((packed_loss, (packed_terms, packed_metrics)), packed_grads), packed_logits = run(
        params, packed)

    # each token's logits are those it has alone in its row
    unpacked_logits, packed_logits = np.asarray(unpacked_logits), np.asarray(packed_logits)
    lengths = row_layout.row_lengths(batch["attention_mask"])
    for r, row in enumerate(packed["segment_ids"]):
        for slot in range(int(row.max(initial=0))):
            start = packed["example_positions"][r, slot]
            n = int((row == slot + 1).sum())
            matches = [e for e in range(16) if lengths[e] == n and (
                batch["input_ids"][e, :n] == packed["input_ids"][r, start:start + n]).all()]
            np.testing.assert_allclose(packed_logits[r, start:start + n],
                                       unpacked_logits[matches[0], :n], atol=1e-5, rtol=0)

    real = (batch["labels"] != encoding.IGNORE) & (batch["example_weights"][:, None] > 0)
    assert float(terms["cross_entropy"][1]) == float(packed_terms["cross_entropy"][1]) == \
        real.sum()  # tagged tokens of weighted examples, the zero-weight one not among them
    np.testing.assert_allclose(packed_loss, loss, rtol=1e-5)
    np.testing.assert_allclose(packed_terms["cross_entropy"][0], terms["cross_entropy"][0],
                               rtol=1e-5)
    np.testing.assert_allclose(packed_metrics["token_accuracy"], metrics["token_accuracy"])
    for (path, g), packed_g in zip(jax.tree_util.tree_leaves_with_path(grads),
                                   jax.tree_util.tree_leaves(packed_grads)):
        np.testing.assert_allclose(packed_g, g, atol=1e-5, rtol=1e-4,
                                   err_msg=jax.tree_util.keystr(path))


def test_kinds_that_cannot_be_packed_are_refused(tmp_path):
    assert kinds.get("token_classification").packable
    config = task_config(tmp_path, "span_qa", **{"data.pack_examples": 4})
    for name in ("span_qa", "contrastive"):
        with pytest.raises(ValueError, match=f"task '{name}' cannot be packed \\(only "
                           "classification, multi_label, regression, token_classification\\)"):
            task_data.check_batching(settings.read(config, "finetune"), task_data.kinds.get(name))
    config.data.pack_examples = -1
    with pytest.raises(ValueError, match="pack_examples=-1 must be an integer >= 0"):
        task_data.check_batching(settings.typed(config))  # no schema check: the batcher's own


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
    run = finetune_settings("classification", batch_size=32, seed=0, max_seq_len=L, **{
        "data.pack_examples": 4, "data.group_by_length": 0, "data.bucket_lengths": "none"})
    data = task_data.TaskData(task_data.kinds.get("classification"), {}, [], [], features, {})
    counts = {len(next(task_data.training_batches(run, data))["input_ids"])}
    iterator = task_data.training_batches(run, data)
    counts |= {len(next(iterator)["input_ids"]) for _ in range(60)}
    assert all(c % (32 // task_data.PACKED_ROW_COUNTS) == 0 for c in counts)
    assert 1 < len(counts) <= task_data.PACKED_ROW_COUNTS


@pytest.mark.parametrize("task", ["classification", "token_classification"])
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
    score = "accuracy" if task == "classification" else "entity_f1"
    assert 0 <= metrics[score] <= 1 and np.isfinite(losses).all()  # scored on held-out data
