"""The pre-training pipeline from prepared token shards (bert_jax.data.pretraining.shard_*,
batch_masking): the global batch sequence is independent of the process count and resumes
exactly under any; rows hold every document once per epoch; masking has the asked statistics."""

import itertools
import os

import numpy as np
import pytest
import token_shard_fixture

from bert_jax.data.pretraining import batch_masking, shard_iterator, shard_rows, shard_source
from bert_jax.data.pretraining.masking import MaskingSpec
from bert_jax.data.tokenizers import load
from bert_jax.recipes.inputs import schema_data_config


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return token_shard_fixture.prepare(str(tmp_path_factory.mktemp("shards")))


@pytest.fixture(scope="module")
def tokenizer():
    return load.load_tokenizer(token_shard_fixture.minilm_vocab())


def config(shards, **changes):
    return schema_data_config(**{**dict(corpus=f"shards:{shards}", seq_len=32,
                                           max_predictions=6, seed=3), **changes})


def global_batches(cfg, batch_size, process_count, first_batch, count, num_epochs=None):
    """`count` global batches from `first_batch` on: each process's shares concatenated."""
    iterators = [shard_iterator.make_shard_iterator(cfg, "train" if num_epochs is None
                                                    else "validation", batch_size, p,
                                                    process_count, num_epochs)
                 for p in range(process_count)]
    out = []
    for it in iterators:
        it.set_state({**it.get_state(), "batch": first_batch})
    for _ in range(count):
        shares = [next(it, None) for it in iterators]
        if shares[0] is None:
            assert all(s is None for s in shares)
            break
        out.append({k: np.concatenate([s[k] for s in shares]) for k in shares[0]})
    return out


assert_same = token_shard_fixture.assert_same


@pytest.mark.parametrize("whole_word", [False, True])
def test_the_global_batches_are_the_same_for_1_2_and_4_processes(shards, whole_word):
    cfg = config(shards, whole_word_masking=whole_word)
    rows = shard_iterator.make_shard_iterator(cfg, global_batch_size=8).rows
    first = rows.rows_per_epoch // 8 - 2  # the batches cross the end of epoch 0
    one = global_batches(cfg, 8, 1, first, 5)
    assert_same(one, global_batches(cfg, 8, 2, first, 5))
    assert_same(one, global_batches(cfg, 8, 4, first, 5))
    # and they are the global rows themselves, masked by their global index
    start = first * 8
    expected = rows.rows(start, start + 40)
    for key in ("segment_ids", "position_ids", "token_type_ids"):
        np.testing.assert_array_equal(np.concatenate([b[key] for b in one]), expected[key])


def test_a_saved_state_resumes_exactly_under_any_process_count(shards):
    cfg = config(shards)
    straight = global_batches(cfg, 8, 1, 0, 9)
    for saved_at in (0, 4, 7):
        run = shard_iterator.make_shard_iterator(cfg, global_batch_size=8)
        for _ in range(saved_at):
            next(run)
        state = run.get_state()
        assert state["batch"] == saved_at
        token_shard_fixture.assert_resumes_as(cfg, state, straight[saved_at:], 8, (1, 2, 4))


def test_a_state_of_other_data_or_settings_is_refused(shards):
    state = shard_iterator.make_shard_iterator(config(shards), global_batch_size=8).get_state()
    other = shard_iterator.make_shard_iterator(config(shards, seed=4), global_batch_size=8)
    with pytest.raises(ValueError, match="other shards, seed"):
        other.set_state(state)
    with pytest.raises(ValueError, match="not a token-shard state"):
        other.set_state({"version": 2, "rows_read": 0})


def test_every_document_once_per_epoch_in_order_with_segment_and_position_ids(shards, tokenizer):
    documents = shard_source.ShardDocuments(shards, "train")
    rows = shard_rows.ShardRows(documents, 32, tokenizer.cls_id, tokenizer.sep_id,
                                tokenizer.pad_id, seed=5)
    for epoch in (0, 1):
        got = rows.rows(epoch * rows.rows_per_epoch, (epoch + 1) * rows.rows_per_epoch)
        ids, segments, positions = (got[k] for k in ("input_ids", "segment_ids",
                                                     "position_ids"))
        real = segments > 0
        stream = ids[real]
        order = rows.plan(epoch).order
        expected = np.concatenate([np.concatenate([[tokenizer.cls_id], documents[i],
                                                   [tokenizer.sep_id]]) for i in order])
        np.testing.assert_array_equal(stream, expected)
        assert real[:-1].all()  # only the last row is padded
        assert (ids[~real] == tokenizer.pad_id).all() and (positions[~real] == 0).all()
        assert (got["token_type_ids"] == 0).all()
        for row_ids, row_segments, row_positions in zip(ids, segments, positions):
            n = int((row_segments > 0).sum())
            piece_start = np.flatnonzero(np.diff(row_segments[:n], prepend=0) != 0)
            assert row_segments[0] == 1 and np.all(np.diff(row_segments[:n]) >= 0)
            assert list(row_segments[piece_start]) == list(range(1, len(piece_start) + 1))
            # a piece after the first begins with [CLS]; positions restart at each piece
            assert all(row_ids[s] == tokenizer.cls_id for s in piece_start[1:])
            bounds = list(piece_start) + [n]
            for a, b in itertools.pairwise(bounds):
                np.testing.assert_array_equal(row_positions[a:b], np.arange(b - a))
    assert not np.array_equal(rows.plan(0).order, rows.plan(1).order)


def test_the_evaluation_pass_covers_every_row_once_whatever_the_process_count(shards):
    cfg = config(shards)
    one = global_batches(cfg, 8, 1, 0, 10_000, num_epochs=1)
    assert_same(one, global_batches(cfg, 8, 2, 0, 10_000, num_epochs=1))
    rows = shard_iterator.make_shard_iterator(cfg, "validation", 8, num_epochs=1)
    weights = np.concatenate([b["example_weights"] for b in one])
    assert len(one) == -(-rows.rows.rows_per_epoch // 8)
    real_rows = rows.rows.rows_per_epoch
    assert weights.sum() == real_rows and (weights[:real_rows] == 1).all()
    last = one[-1]
    padded = last["example_weights"] == 0
    assert (last["masked_weights"][padded] == 0).all() and (last["segment_ids"][padded] == 0).all()
    # the held-out rows and masks do not depend on the run's seed
    assert_same(one, global_batches(config(shards, seed=11), 8, 1, 0, 10_000, num_epochs=1))
    assert sorted(rows.shape_examples(1)[0]) == sorted(one[0])


def test_sentence_pairs_and_another_vocabulary_are_refused(shards, tmp_path):
    with pytest.raises(ValueError, match="sentence_pairs is not available for token shards"):
        shard_iterator.make_shard_iterator(config(shards, sentence_pairs=True))
    small = tmp_path / "vocab.txt"
    small.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]) + "\n")
    with pytest.raises(ValueError, match="has 7 ids and the shards"):
        shard_iterator.make_shard_iterator(config(shards, vocab_path=str(small)))


def test_token_counts_are_cached_beside_the_manifest_and_checked(shards):
    documents = shard_source.ShardDocuments(shards, "train")
    counted = documents.document_tokens()
    assert os.path.exists(documents.lengths_path)
    assert np.array_equal(counted, [len(documents[i]) for i in range(len(documents))])
    np.save(documents.lengths_path, counted[:-1])  # disagrees with the manifest: counted again
    assert np.array_equal(shard_source.ShardDocuments(shards, "train").document_tokens(),
                          counted)
    assert np.array_equal(np.load(documents.lengths_path), counted)


# ----- masking -------------------------------------------------------------------------------

def masking_run(tokenizer, shards, whole_word, mask_rate=0.15, max_predictions=32, rows=2000):
    cfg = config(shards, seq_len=128, max_predictions=max_predictions, mask_rate=mask_rate)
    it = shard_iterator.make_shard_iterator(cfg, global_batch_size=rows, tokenizer=tokenizer)
    original = it.rows.rows(0, rows)["input_ids"]
    spec = MaskingSpec.from_tokenizer(tokenizer, mask_rate, max_predictions, whole_word)
    masked = batch_masking.BatchMasker(spec, seed=9)(original, np.arange(rows))
    return original, masked, spec


@pytest.mark.parametrize("whole_word", [False, True])
def test_masking_statistics(shards, tokenizer, whole_word):
    original, masked, spec = masking_run(tokenizer, shards, whole_word)
    weights = masked["masked_weights"] > 0
    positions = masked["masked_positions"]
    maskable = ~np.isin(original, spec.special_ids)
    # the rate: stochastic rounding of 15% of the maskable tokens (whole words: at most that)
    rate = weights.sum() / maskable.sum()
    assert (0.14 if whole_word else 0.147) < rate < 0.153, rate
    r, c = np.nonzero(weights)
    chosen = positions[r, c]
    assert maskable[r, chosen].all()  # no special token is masked
    np.testing.assert_array_equal(masked["masked_ids"][r, c], original[r, chosen])
    assert (masked["masked_ids"][~weights] == 0).all() and (positions[~weights] == 0).all()
    # positions ascending in a row, each once
    assert all(np.all(np.diff(p[w]) > 0) for p, w in zip(positions, weights))
    now = masked["input_ids"][r, chosen]
    shares = [np.mean(now == spec.mask_id), np.mean((now != spec.mask_id) & (now != original[
        r, chosen])), np.mean(now == original[r, chosen])]
    assert abs(shares[0] - 0.8) < 0.02 and abs(shares[1] - 0.1) < 0.015, shares
    assert abs(shares[2] - 0.1) < 0.015, shares  # (a random draw may equal the token: rare)
    untouched = np.ones(original.shape, bool)
    untouched[r, chosen] = False
    np.testing.assert_array_equal(masked["input_ids"][untouched], original[untouched])
    if whole_word:  # every word is masked whole or not at all
        is_cont = spec.is_continuation
        chosen_mask = ~untouched
        for row in range(len(original)):
            for i in range(1, original.shape[1]):
                if maskable[row, i] and maskable[row, i - 1] and is_cont[original[row, i]]:
                    assert chosen_mask[row, i] == chosen_mask[row, i - 1]
    # the masks of a row depend on its global index only: half the batch, the same rows
    again = batch_masking.BatchMasker(spec, seed=9)(original[1000:1500], np.arange(1000, 1500))
    for key in again:
        np.testing.assert_array_equal(again[key], masked[key][1000:1500])


def test_the_count_per_row_is_capped_at_max_predictions(shards, tokenizer):
    _, masked, _ = masking_run(tokenizer, shards, False, mask_rate=0.5,
                               max_predictions=10, rows=200)
    assert (masked["masked_weights"].sum(axis=1) == 10).all()



def test_pretrain_py_refuses_sentence_pairs_on_shards_in_one_line(shards, tmp_path):
    import pretrain_runs
    line = pretrain_runs.refusal(str(tmp_path / "run"), f"--config.data.corpus=shards:{shards}",
                                 "--config.data.sentence_pairs=true")
    assert "sentence_pairs is not available for token shards" in line
