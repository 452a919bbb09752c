"""Batch-size warm-up (data.batch_warmup_tokens, data.batch_warmup_start): the schedule
(bert_jax.data.pretraining.batch_schedule: sizes, multiples of the start, rising to the batch
size once the tokens are spent; the first row of a step the cumulative sum of the sizes), the
token-shard iterator that follows it (the same global batches for 1, 2 and 4 processes, an exact
resume at any step under any process count, one shape example per size, a state of another
schedule refused), the refusals (text corpora, a start the mesh cannot split), and a real run:
the loop takes batches whose size changes, each size compiled before the first step, and a
resumed run logs the same losses."""

import json
import os
import shutil

import numpy as np
import pytest
import token_shard_fixture

from bert_jax.data.pretraining import pipeline, shard_iterator
from bert_jax.data.pretraining.batch_schedule import MAX_STAGES, BatchSchedule
from bert_jax.recipes.inputs import schema_data_config

import pretrain_runs


@pytest.mark.parametrize("full, start, tokens, per_row", [
    (32, 8, 10_000, 128), (4608, 768, 50_000_000_000, 1024), (4096, 8, 10**9, 128),
    (20, 8, 1000, 10), (16, 8, 1, 16)])
def test_the_schedule_rises_in_multiples_of_the_start_over_the_tokens(full, start, tokens,
                                                                       per_row):
    schedule = BatchSchedule(full, start, tokens, per_row)
    sizes = schedule.sizes
    assert sizes[0] == start and sizes[-1] == full
    assert list(sizes) == sorted(set(sizes)) and len(sizes) <= MAX_STAGES + 1
    assert all(size % start == 0 for size in sizes[:-1])
    end = schedule.warmup_steps
    steps = [schedule.size(step) for step in range(end + 3)]
    assert steps[end:] == [full] * 3 and full not in steps[:end]
    # the warm-up's tokens: at least the budget, over by less than one step of each stage
    warm = sum(steps[:end]) * per_row
    assert tokens <= warm < tokens + sum(sizes[:-1]) * per_row
    # the first row of a step is the cumulative sum of the sizes before it
    assert [schedule.rows_before(s) for s in range(end + 3)] == list(
        np.cumsum([0] + steps[:-1]))
    assert schedule.sizes_before(0) == (start,) and schedule.sizes_before(end + 1) == sizes


def test_no_warmup_is_the_batch_size_every_step():
    for schedule in (BatchSchedule(32), BatchSchedule(32, 8, 0, 16), BatchSchedule(32, 0, 99)):
        assert schedule.sizes == (32,) and schedule.rows_before(5) == 160
        assert schedule.identity() == [] and schedule.warmup_steps == 0
    with pytest.raises(ValueError, match="batch_warmup_start=32 must be below"):
        BatchSchedule(32, 32, 100, 16)


# ----- the token-shard iterator ------------------------------------------------------------------

FULL, START, TOKENS, SEQ = 8, 2, 480, 32  # sizes 2 (3 steps), 4 (2), 6 (1), then 8


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return token_shard_fixture.prepare(str(tmp_path_factory.mktemp("shards")))


def config(shards, **changes):
    return schema_data_config(**{**dict(
        corpus=f"shards:{shards}", seq_len=SEQ, max_predictions=6, seed=3,
        batch_warmup_tokens=TOKENS, batch_warmup_start=START), **changes})


def global_batches(cfg, process_count, first_batch, count):
    iterators = [shard_iterator.make_shard_iterator(cfg, "train", FULL, p, process_count)
                 for p in range(process_count)]
    for it in iterators:
        it.set_state({**it.get_state(), "batch": first_batch})
    out = []
    for _ in range(count):
        shares = [next(it) for it in iterators]
        out.append({k: np.concatenate([s[k] for s in shares]) for k in shares[0]})
    return out


assert_same = token_shard_fixture.assert_same


def test_batches_follow_the_schedule_for_1_2_and_4_processes(shards):
    cfg = config(shards)
    iterator = shard_iterator.make_shard_iterator(cfg, "train", FULL)
    schedule = iterator.schedule
    assert schedule.sizes == (2, 4, 6, 8) and schedule.warmup_steps == 6
    one = global_batches(cfg, 1, 0, 8)
    assert [len(b["input_ids"]) for b in one] == [2, 2, 2, 4, 4, 6, 8, 8]
    assert_same(one, global_batches(cfg, 2, 0, 8))
    # 4 processes: 2 does not split over them; refused, naming the size
    with pytest.raises(ValueError, match="warm-up's batch size=2 is not divisible by "
                                         "process_count=4"):
        shard_iterator.make_shard_iterator(cfg, "train", FULL, 0, 4)
    cfg4 = config(shards, batch_warmup_start=4)  # sizes 4 then 8
    assert_same(global_batches(cfg4, 1, 0, 6), global_batches(cfg4, 4, 0, 6))
    # the rows are the global rows from the cumulative sum on
    expected = iterator.rows.rows(0, schedule.rows_before(8))
    for key in ("segment_ids", "position_ids"):
        np.testing.assert_array_equal(np.concatenate([b[key] for b in one]), expected[key])


def test_a_state_resumes_exactly_in_and_after_the_warmup_under_any_process_count(shards):
    cfg = config(shards)
    straight = global_batches(cfg, 1, 0, 9)
    for saved_at in (0, 2, 3, 5, 7):
        run = shard_iterator.make_shard_iterator(cfg, "train", FULL)
        for _ in range(saved_at):
            next(run)
        state = run.get_state()
        assert state["rows"] == run.schedule.rows_before(saved_at)
        token_shard_fixture.assert_resumes_as(cfg, state, straight[saved_at:], FULL, (1, 2))


def test_shape_examples_list_each_size_once_and_other_schedules_are_refused(shards):
    iterator = shard_iterator.make_shard_iterator(config(shards), "train", FULL, 0, 2)
    assert [len(b["input_ids"]) for b in iterator.shape_examples(4)] == [1, 2]
    assert [len(b["input_ids"]) for b in iterator.shape_examples(100)] == [1, 2, 3, 4]
    assert [b["masked_ids"].shape for b in iterator.shape_examples(1)] == [(1, 6)]
    plain = shard_iterator.make_shard_iterator(config(shards, batch_warmup_tokens=0), "train",
                                               FULL)
    assert [len(b["input_ids"]) for b in plain.shape_examples(100)] == [FULL]
    with pytest.raises(ValueError, match="batch-size warm-up"):
        iterator.set_state(plain.get_state())
    # evaluation passes have no warm-up
    evaluation = shard_iterator.make_shard_iterator(config(shards), "validation", FULL,
                                                    num_epochs=1)
    assert not evaluation.schedule.enabled


def test_text_corpora_and_unsplittable_starts_are_refused(tmp_path):
    cfg = schema_data_config(corpus="demo", data_dir=str(tmp_path), batch_warmup_tokens=100,
                             batch_warmup_start=4)
    with pytest.raises(ValueError, match="needs a token-shard corpus"):
        pipeline.make_iterator(cfg, global_batch_size=8)
    from bert_jax.config import run as run_config
    from bert_jax.config import settings
    from bert_jax.recipes import pretrain
    config = run_config.pretrain_config()
    config.batch_size, config.data.batch_warmup_start = 12, 4
    config.data.batch_warmup_tokens = 1000
    mesh = settings.typed(config).mesh.make()
    check = lambda: pretrain.check_batch_warmup(settings.typed(config), mesh)  # as changed
    with pytest.raises(ValueError, match="needs a token-shard corpus .* corpus 'demo' is not"):
        check()
    config.data.corpus = "shards:/nowhere"
    check()
    config.accumulation_steps = 3
    with pytest.raises(ValueError, match="batch_warmup_start=4 is not divisible by "
                                         "accumulation_steps=3"):
        check()
    config.accumulation_steps, config.data.batch_warmup_start = 1, 12
    with pytest.raises(ValueError, match="batch_warmup_start=12 must be below batch_size=12"):
        check()


# ----- a run through the loop --------------------------------------------------------------------

def test_a_run_with_a_warmup_compiles_each_size_first_and_resumes_the_same(tmp_path):
    shards = token_shard_fixture.prepare(str(tmp_path / "shards"), 120, 20)
    flags = [f"--config.data.corpus=shards:{shards}", "--config.tokenizer.path=",
             "--config.max_seq_len=16", "--config.total_steps=6",
             "--config.checkpoint_every_steps=3", "--config.eval_every_steps=0",
             "--config.async_checkpoints=False", "--config.data.batch_warmup_start=2",
             "--config.data.batch_warmup_tokens=192"]  # sizes 2 (2 steps), 4 (1), 6 (1), 8
    workdir = str(tmp_path / "run")
    done = pretrain_runs.run(workdir, *flags)
    assert "train step compiled for 4 batch shape(s) [(2, 16), (4, 16), (6, 16), (8, 16)]" in \
        done.stderr
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5, 6]
    # Nothing compiles when a new size comes (steps 3 and 5; step 4 follows the first save,
    # which compiles its finiteness check).
    assert [records[i]["compilations"] for i in (1, 2, 4, 5)] == [0, 0, 0, 0]
    assert all(np.isfinite(r["loss"]) for r in records)
    reference = pretrain_runs.losses(workdir)
    shutil.rmtree(os.path.join(workdir, "checkpoints", "6"))
    with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in records if r["step"] <= 3)
    pretrain_runs.run(workdir, *flags)
    for step, loss in pretrain_runs.losses(workdir).items():
        assert loss == pytest.approx(reference[step], rel=1e-6, abs=1e-7), step
