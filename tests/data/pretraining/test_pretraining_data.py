"""The pre-training pipeline: masking statistics, packing, sentence pairs, determinism, resume,
and the pre-training recipe's data (held-out rows mask at eval_mask_rate)."""

import dataclasses
import json
import os
import subprocess
import sys

import grain
import numpy as np
import pytest

from bert_jax.data.corpora import catalog as corpora
from bert_jax.data.pretraining import masking
from bert_jax.data.pretraining import pipeline as pretraining
from bert_jax.data.pretraining import rows as pretraining_rows
from bert_jax.data.pretraining import vocab as pretraining_vocab
from bert_jax.data.tokenizers import load as tok
from bert_jax.data.tokenizers import wordpiece_training
from bert_jax.recipes.inputs import schema_data_config

from repo_root import ROOT as REPO


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """(data_dir, vocab_path) of the demo corpus with a 4096-token vocabulary, built once."""
    data_dir = str(tmp_path_factory.mktemp("demo_data"))
    vocab_path = pretraining_vocab.prepare_demo(data_dir, vocab_size=4096)
    assert pretraining_vocab.prepare_demo(data_dir, vocab_size=4096) == vocab_path  # idempotent
    return data_dir, vocab_path


@pytest.fixture(scope="module")
def demo_vocab(demo):
    return tok.load_tokenizer(demo[1])


def demo_config(demo, **overrides):
    return schema_data_config(
        **{"corpus": "demo", "data_dir": demo[0], "vocab_path": demo[1], **overrides})


def unmasked_rows(cfg, vocab, split="train", process_index=0, process_count=1, limit=None):
    source = corpora.load_source(cfg.corpus, split, cfg.data_dir)
    rows = pretraining_rows.build_rows(cfg, source, vocab, process_index, process_count,
                                       num_epochs=1)
    out = []
    for row in rows:
        out.append(row)
        if limit is not None and len(out) == limit:
            break
    return out


def segment_pieces(row, vocab):
    """The tokens between [CLS] and [SEP] of each segment of a packed row, in order."""
    pieces = []
    for segment in range(1, row["segment_ids"].max() + 1):
        ids = row["input_ids"][row["segment_ids"] == segment]
        assert ids[0] == vocab.cls_id and ids[-1] == vocab.sep_id
        assert list(row["position_ids"][row["segment_ids"] == segment]) == list(range(len(ids)))
        pieces.append(ids[1:-1])
    return pieces


# ------------------------------------------------------------------------------------------------
# Masking.


@pytest.fixture(scope="module")
def rows_for_masking(demo, demo_vocab):
    rows = unmasked_rows(demo_config(demo), demo_vocab, limit=1000)
    return np.stack([row["input_ids"] for row in rows])  # 128k tokens


def mask_all(rows, spec):
    results = [masking.mask_row(row, spec, np.random.default_rng([7, i]))
               for i, row in enumerate(rows)]
    return [np.stack(parts) for parts in zip(*results)]


@pytest.mark.parametrize("rate", [0.15, 0.3])
def test_masking_statistics(rows_for_masking, demo_vocab, rate):
    rows = rows_for_masking
    assert rows.size >= 100_000
    spec = masking.MaskingSpec.from_tokenizer(demo_vocab, rate, max_predictions=64,
                                                  whole_word=False)
    corrupted, positions, ids, weights = mask_all(rows, spec)
    special = np.isin(rows, spec.special_ids)
    real = weights > 0
    n_masked = int(real.sum())
    print(f"rate {rate}: masked {n_masked} of {int((~special).sum())} maskable tokens")
    assert abs(n_masked / (~special).sum() - rate) < 0.005
    row_index = np.broadcast_to(np.arange(len(rows))[:, None], positions.shape)
    chosen_original = rows[row_index[real], positions[real]]
    chosen_now = corrupted[row_index[real], positions[real]]
    assert np.array_equal(ids[real], chosen_original)
    assert not np.isin(chosen_original, spec.special_ids).any()
    became_mask = np.mean(chosen_now == demo_vocab.mask_id)
    unchanged = np.mean(chosen_now == chosen_original)
    replaced = np.mean((chosen_now != chosen_original) & (chosen_now != demo_vocab.mask_id))
    print(f"[MASK] {became_mask:.4f} random {replaced:.4f} unchanged {unchanged:.4f}")
    assert abs(became_mask - 0.8) < 0.01 and abs(replaced - 0.1) < 0.01
    assert abs(unchanged - 0.1) < 0.01
    assert not np.isin(chosen_now[chosen_now != chosen_original], spec.special_ids[
        spec.special_ids != demo_vocab.mask_id]).any()
    # Only chosen positions change; pad slots are (position 0, id 0, weight 0).
    changed = corrupted != rows
    chosen = np.zeros_like(changed)
    chosen[row_index[real], positions[real]] = True
    assert not (changed & ~chosen).any()
    assert (positions[~real] == 0).all() and (ids[~real] == 0).all()
    assert len(np.unique(positions[0][real[0]])) == real[0].sum()


def test_whole_word_masking_masks_whole_words(rows_for_masking, demo_vocab):
    rows = rows_for_masking
    spec = masking.MaskingSpec.from_tokenizer(demo_vocab, 0.15, max_predictions=20,
                                                  whole_word=True)
    _, positions, _, weights = mask_all(rows, spec)
    special = np.isin(rows, spec.special_ids)
    n_masked = int((weights > 0).sum())
    print(f"whole-word: masked fraction {n_masked / (~special).sum():.4f}")
    assert abs(n_masked / (~special).sum() - 0.15) < 0.005
    words_checked = 0
    for row, pos, w in zip(rows, positions, weights):
        chosen = np.zeros(len(row), bool)
        chosen[pos[w > 0]] = True
        maskable = ~np.isin(row, spec.special_ids)
        starts = masking.word_starts(row, maskable, demo_vocab.is_continuation)
        word_id = np.cumsum(starts)
        for word in np.unique(word_id[maskable]):
            members = chosen[maskable & (word_id == word)]
            assert members.all() or not members.any(), "part of a word was masked"
            words_checked += int(members.all() and len(members) > 1)
    assert words_checked > 100  # many multi-piece words were masked whole


# ------------------------------------------------------------------------------------------------
# Packing.


def test_packing_demo_corpus_loses_nothing_and_pads_little(demo, demo_vocab):
    cfg = demo_config(demo)
    rows = unmasked_rows(cfg, demo_vocab)
    segment_ids = np.stack([row["segment_ids"] for row in rows])
    padding = float(np.mean(segment_ids == 0))
    print(f"demo corpus, seq_len 128: {len(rows)} rows, padding fraction {padding:.4%}, "
          f"{segment_ids.max(axis=1).mean():.2f} segments per row")
    assert padding < 0.02
    source = corpora.load_source("demo", "train", demo[0])
    order = list(grain.MapDataset.source(source).shuffle(seed=cfg.seed))
    expected = np.concatenate([demo_vocab.encode(corpora.document_text(r)) for r in order])
    packed = np.concatenate([p for row in rows for p in segment_pieces(row, demo_vocab)])
    assert np.array_equal(packed, expected)  # every token, in document order, none dropped
    for row in rows[:200]:
        real = row["segment_ids"] > 0
        assert real[:real.sum()].all()  # padding only at the end
        assert (row["token_type_ids"] == 0).all()


def test_long_document_is_split_at_word_starts(tmp_path):
    words = [f"w{i}x" if i % 3 else "unbelievably" for i in range(600)]
    (tmp_path / "docs.txt").write_text(" ".join(words) + "\n\nshort one\n\nshort two")
    vocab_path = wordpiece_training.train_wordpiece([" ".join(words)], 120, str(tmp_path / "vocab"))
    vocab = tok.load_tokenizer(vocab_path)
    cfg = schema_data_config(corpus=f"text:{tmp_path}/*.txt", data_dir=str(tmp_path / "data"),
                             vocab_path=vocab_path, seq_len=32, validation_fraction=0.0)
    source = corpora.load_source(cfg.corpus, "train", cfg.data_dir, **cfg.text_options())
    order = list(grain.MapDataset.source(source).shuffle(seed=cfg.seed))
    expected = [vocab.encode(corpora.document_text(r)) for r in order]
    assert max(map(len, expected)) > 10 * cfg.seq_len
    rows = unmasked_rows(cfg, vocab)
    pieces = [p for row in rows for p in segment_pieces(row, vocab)]
    assert np.array_equal(np.concatenate(pieces), np.concatenate(expected))
    assert all(row["input_ids"].shape == (32,) for row in rows)
    assert sum(not vocab.is_continuation[p[0]] for p in pieces) == len(pieces)


def test_packed_segments_do_not_attend_to_each_other(demo, demo_vocab):
    import jax
    import jax.numpy as jnp
    from flax import linen as nn

    from bert_jax import BertConfig, BertModel

    rows = unmasked_rows(demo_config(demo), demo_vocab, limit=400)
    row = max(rows, key=lambda r: r["segment_ids"].max())
    assert row["segment_ids"].max() >= 2
    model = BertModel(BertConfig.preset("tiny", vocab_size=demo_vocab.vocab_size,
                                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    params = nn.meta.unbox(
        model.init(jax.random.PRNGKey(0), jnp.zeros([1, 8], jnp.int32))["params"])
    apply = jax.jit(model.apply)
    # Row 0: the packed row. Row s: segment s alone at the start of a padded row.
    n_segments = int(row["segment_ids"].max())
    input_ids = np.zeros([1 + n_segments, 128], np.int32)
    attention_mask = np.zeros([1 + n_segments, 128], np.int32)
    input_ids[0], attention_mask[0] = row["input_ids"], 1
    for segment in range(1, n_segments + 1):
        ids = row["input_ids"][row["segment_ids"] == segment]
        input_ids[segment, :len(ids)], attention_mask[segment, :len(ids)] = ids, 1
    packed = apply({"params": params}, jnp.asarray(input_ids[:1]),
                   segment_ids=jnp.asarray(row["segment_ids"])[None],
                   position_ids=jnp.asarray(row["position_ids"])[None]).sequence_output
    alone = apply({"params": params}, jnp.asarray(input_ids[1:]),
                  attention_mask=jnp.asarray(attention_mask[1:])).sequence_output
    for segment in range(1, n_segments + 1):
        where = row["segment_ids"] == segment
        np.testing.assert_allclose(np.asarray(packed[0])[where],
                                   np.asarray(alone[segment - 1, :where.sum()]),
                                   atol=2e-5, rtol=1e-4)
    # Perturbing one segment changes nothing in the others.
    perturbed = row["input_ids"].copy()
    first = row["segment_ids"] == 1
    perturbed[first & (perturbed > 4)] = 5
    changed = apply({"params": params}, jnp.asarray(perturbed)[None],
                    segment_ids=jnp.asarray(row["segment_ids"])[None],
                    position_ids=jnp.asarray(row["position_ids"])[None]).sequence_output
    others = row["segment_ids"] > 1
    np.testing.assert_array_equal(np.asarray(changed[0])[others], np.asarray(packed[0])[others])
    assert not np.allclose(np.asarray(changed[0])[first], np.asarray(packed[0])[first])


# ------------------------------------------------------------------------------------------------
# Sentence pairs.


def test_sentence_pairs_follow_or_are_random(demo, demo_vocab):
    cfg = demo_config(demo, sentence_pairs=True)
    rows = unmasked_rows(cfg, demo_vocab, limit=300)
    source = corpora.load_source("demo", "train", demo[0])
    documents = [np.concatenate(demo_vocab.encode_batch(
        corpora.document_text(source[i]).split("\n"))).astype(np.int32).tobytes()
        for i in range(len(source))]

    def contiguous(tokens):
        needle = np.asarray(tokens, np.int32).tobytes()
        return any(doc.find(needle) % 4 == 0 for doc in documents if needle in doc)

    labels = np.array([row["nsp_labels"] for row in rows])
    assert 0.4 < labels.mean() < 0.6
    for row in rows[:120]:
        n = int(row["segment_ids"].sum())
        ids, types = row["input_ids"][:n], row["token_type_ids"][:n]
        seps = np.flatnonzero(ids == demo_vocab.sep_id)
        assert ids[0] == demo_vocab.cls_id and len(seps) == 2 and seps[1] == n - 1
        assert (types[:seps[0] + 1] == 0).all() and (types[seps[0] + 1:] == 1).all()
        assert list(row["position_ids"][:n]) == list(range(n))
        assert (row["segment_ids"][n:] == 0).all()
        a, b = ids[1:seps[0]], ids[seps[0] + 1:seps[1]]
        assert contiguous(a)
        if len(b):
            assert contiguous(b)
            assert contiguous(np.concatenate([a, b])) == (row["nsp_labels"] == 0)


# ------------------------------------------------------------------------------------------------
# The pre-training recipe's data (bert_jax.recipes.pretrain): training and held-out rows mask at
# their own rates.


def masked_fraction(batch):
    """Masked positions over maskable (non-special, non-padding) tokens of a batch."""
    real = batch["segment_ids"] > 0
    maskable = real.sum() - 2 * (batch["segment_ids"].max(axis=1) > 0).sum()
    return batch["masked_weights"].sum() / maskable


def test_held_out_rows_mask_at_eval_mask_rate(demo, tmp_path):
    """Training at 30% keeps the held-out rows at 15% (eval_mask_rate), so runs that train at
    different rates are compared on the same kind of rows. (The demo corpus and vocabulary of
    this module, given as tokenizer.path: the recipe reads them as it would its own.)"""
    from bert_jax.config import run as run_config
    from bert_jax.config import settings
    from bert_jax.recipes import pretrain
    config = run_config.pretrain_config()
    config.data.data_dir = demo[0]
    config.tokenizer.path = demo[1]
    config.max_seq_len = 128
    config.data.mask_rate = 0.3
    config.data.max_predictions = 40
    config.batch_size = config.eval_batch_size = 16
    run = settings.typed(config)  # no step count: the data alone
    vocab_size = pretrain.vocab_size_of(run, str(tmp_path))
    assert vocab_size == 4096
    train, make_eval = pretrain.make_data(run, str(tmp_path), vocab_size)
    train_rates = [masked_fraction(next(train)) for _ in range(4)]
    eval_rates = [masked_fraction(batch) for batch, _ in zip(make_eval(), range(4))]
    assert 0.27 < np.mean(train_rates) < 0.33, train_rates
    assert 0.13 < np.mean(eval_rates) < 0.17, eval_rates


def test_the_step_compiles_before_the_first_step(demo, tmp_path):
    """A pre-training run's step is compiled while its state is made (program.build, from the
    iterator's shape_examples): the first step itself compiles nothing."""
    import jax

    from bert_jax.config import run as run_config
    from bert_jax.recipes import pretrain
    from bert_jax.runtime import sharding

    from bucket_runs import CompileCounter
    config = run_config.pretrain_config()
    config.data.data_dir = demo[0]
    config.tokenizer.path = demo[1]
    config.max_seq_len, config.data.max_predictions = 32, 5
    config.batch_size = config.eval_batch_size = 4
    config.total_steps = 3
    for key, value in dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=32, max_position_embeddings=32).items():
        config.model[key] = value
    pieces = pretrain.pieces(config, str(tmp_path))
    with CompileCounter() as compiled:
        built = pieces.build()
    assert built.compiled_shapes == ((4, 32),) and compiled.count("train_step") == 1
    state = built.state
    with CompileCounter() as compiled:
        for _ in range(2):
            batch = sharding.device_put_batch(next(pieces.train_iterator), pieces.mesh)
            state, metrics = built.train_step(state, batch)
        jax.block_until_ready(metrics)
    assert compiled.count("train_step") == 0 and np.isfinite(float(metrics["loss"]))


# ------------------------------------------------------------------------------------------------
# Batches, determinism, resume.


def test_batches_have_the_contract_shapes(demo):
    it = pretraining.make_iterator(demo_config(demo, max_predictions=20), "train",
                                   global_batch_size=8)
    batch = next(it)
    expected = {"input_ids": ((8, 128), np.int32), "token_type_ids": ((8, 128), np.int32),
                "segment_ids": ((8, 128), np.int32), "position_ids": ((8, 128), np.int32),
                "masked_positions": ((8, 20), np.int32), "masked_ids": ((8, 20), np.int32),
                "masked_weights": ((8, 20), np.float32)}
    assert {k: (v.shape, v.dtype) for k, v in batch.items()} == expected
    pairs_iterator = pretraining.make_iterator(demo_config(demo, sentence_pairs=True), "train", 8)
    pairs = next(pairs_iterator)
    assert pairs["nsp_labels"].shape == (8,) and pairs["nsp_labels"].dtype == np.int32
    # shape_examples: one batch of those shapes and dtypes, the stream left where it was
    for iterator, first in ((it, batch), (pairs_iterator, pairs)):
        state = iterator.get_state()
        (example,) = iterator.shape_examples(100)
        assert ({k: (v.shape, v.dtype) for k, v in example.items()}
                == {k: (v.shape, v.dtype) for k, v in first.items()})
        assert iterator.get_state() == state


def test_same_seed_same_batches(demo):
    first = pretraining.make_iterator(demo_config(demo, seed=3), "train", 8)
    second = pretraining.make_iterator(demo_config(demo, seed=3), "train", 8)
    other = pretraining.make_iterator(demo_config(demo, seed=4), "train", 8)
    for _ in range(3):
        a, b, c = next(first), next(second), next(other)
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])
        assert not np.array_equal(a["input_ids"], c["input_ids"])


RESUME_SCRIPT = """
import json, sys
import numpy as np
from bert_jax.data.pretraining import pipeline as pretraining
cases = json.load(open(sys.argv[1]))
for i, case in enumerate(cases):
    it = pretraining.make_iterator(pretraining.PretrainingDataConfig(**case["config"]),
                                   case["split"], case["batch"])
    it.set_state(case["state"])
    np.savez(sys.argv[2] + f"/batch{i}.npz", **next(it))
"""


def test_state_restored_in_a_new_process_gives_the_next_batch(demo, tmp_path):
    cases, expected = [], []
    for overrides, steps in [({"whole_word_masking": True}, 5), ({"sentence_pairs": True}, 4)]:
        cfg = demo_config(demo, seed=11, **overrides)
        it = pretraining.make_iterator(cfg, "train", global_batch_size=16)
        for _ in range(steps):
            next(it)
        state = json.loads(json.dumps(it.get_state()))
        expected.append(next(it))
        cases.append({"config": dataclasses.asdict(cfg), "split": "train", "batch": 16,
                      "state": state})
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    env = dict(os.environ, PYTHONPATH=REPO)
    subprocess.run([sys.executable, "-c", RESUME_SCRIPT, str(tmp_path / "cases.json"),
                    str(tmp_path)], check=True, env=env, cwd=REPO, timeout=300)
    for i, batch in enumerate(expected):
        restored = np.load(tmp_path / f"batch{i}.npz")
        assert sorted(restored.files) == sorted(batch)
        for key in batch:
            np.testing.assert_array_equal(restored[key], batch[key])


def test_state_of_another_pipeline_is_refused(demo):
    it = pretraining.make_iterator(demo_config(demo, seed=1), "train", 8)
    next(it)
    other = pretraining.make_iterator(demo_config(demo, seed=2), "train", 8)
    with pytest.raises(ValueError, match="cannot resume"):
        other.set_state(it.get_state())


def test_one_pass_pads_the_last_batch(demo, demo_vocab):
    cfg = demo_config(demo)
    expected_rows = len(unmasked_rows(cfg, demo_vocab, split="validation"))
    batches = list(pretraining.make_iterator(cfg, "validation", global_batch_size=16,
                                             num_epochs=1))
    real_rows = sum(int((b["segment_ids"].sum(axis=1) > 0).sum()) for b in batches)
    assert real_rows == expected_rows and len(batches) == -(-expected_rows // 16)
    last = batches[-1]
    empty = last["segment_ids"].sum(axis=1) == 0
    assert empty.sum() == 16 * len(batches) - expected_rows
    assert (last["masked_weights"][empty] == 0).all() and (last["input_ids"][empty] == 0).all()


def test_training_hosts_read_disjoint_halves(demo, demo_vocab):
    cfg = demo_config(demo)
    count = lambda rows: sum(len(p) for row in rows for p in segment_pieces(row, demo_vocab))
    whole = count(unmasked_rows(cfg, demo_vocab, "validation"))
    halves = [count(unmasked_rows(cfg, demo_vocab, "validation", i, 2)) for i in range(2)]
    assert min(halves) > 0 and sum(halves) == whole
    batches = [next(pretraining.make_iterator(cfg, "train", global_batch_size=8, process_index=i,
                                              process_count=2)) for i in range(2)]
    assert batches[0]["input_ids"].shape == (4, 128)
    assert not np.array_equal(batches[0]["input_ids"], batches[1]["input_ids"])


def test_finite_pass_gives_every_host_the_same_number_of_batches(demo):
    cfg = demo_config(demo)
    single = list(pretraining.make_iterator(cfg, "validation", 8, num_epochs=1))
    hosts = [list(pretraining.make_iterator(cfg, "validation", 8, process_index=i,
                                            process_count=2, num_epochs=1)) for i in range(2)]
    assert len(hosts[0]) == len(hosts[1]) == len(single)
    for whole, first, second in zip(single, *hosts):
        for key in whole:  # host i holds rows i, i + 2, ... of the single-host batch
            real = whole["segment_ids"].sum(axis=1) > 0
            np.testing.assert_array_equal(first[key][:real[0::2].sum()],
                                          whole[key][0::2][real[0::2]])
            np.testing.assert_array_equal(second[key][:real[1::2].sum()],
                                          whole[key][1::2][real[1::2]])


@pytest.fixture
def parsed_absl_flags():
    """Parsed absl flags (what absl.app.run gives a script), unparsed again afterwards."""
    from absl import flags

    parsed_here = not flags.FLAGS.is_parsed()
    if parsed_here:
        flags.FLAGS(["test"], known_only=True)
    yield
    if parsed_here:
        flags.FLAGS.unparse_flags()


def test_worker_processes_resume_exactly(demo, parsed_absl_flags):
    cfg = demo_config(demo, num_workers=1)
    it = pretraining.make_iterator(cfg, "train", 8)
    for _ in range(3):
        next(it)
    state = it.get_state()
    expected = next(it)
    it.close()
    resumed = pretraining.make_iterator(cfg, "train", 8)
    resumed.set_state(json.loads(json.dumps(state)))
    batch = next(resumed)
    resumed.close()
    for key in expected:
        np.testing.assert_array_equal(batch[key], expected[key])


def test_library_parses_no_absl_flags(demo):
    from absl import flags

    if flags.FLAGS.is_parsed():
        pytest.skip("absl flags were parsed by an earlier test of this process")
    batch = next(pretraining.make_iterator(demo_config(demo), "train", 8))
    assert batch["input_ids"].shape == (8, 128) and not flags.FLAGS.is_parsed()
    with pytest.raises(ValueError, match=r"num_workers=1 .*absl\.app\.run"):
        pretraining.make_iterator(demo_config(demo, num_workers=1), "train", 8)
    assert not flags.FLAGS.is_parsed()


def test_bad_configs(demo, tmp_path):
    with pytest.raises(ValueError, match="seq_len=4"):
        schema_data_config(seq_len=4)
    with pytest.raises(ValueError, match="mask_rate"):
        schema_data_config(mask_rate=1.5)
    with pytest.raises(ValueError, match="not divisible"):
        pretraining.make_iterator(demo_config(demo), "train", 10, process_count=4)
    bad_vocab = tmp_path / "vocab.txt"
    bad_vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\n")
    with pytest.raises(ValueError, match=r"vocab\.txt lacks.*\[MASK\]"):
        pretraining.make_iterator(demo_config(demo, vocab_path=str(bad_vocab)), "train", 8)
    with pytest.raises(ValueError, match="vocab_path is empty"):  # a text: corpus trains one
        pretraining.make_iterator(schema_data_config(
            corpus="wikipedia/20230601.en", data_dir=str(tmp_path)), "train", 8)


def test_corpus_without_tokens_fails_instead_of_hanging(demo, tmp_path):
    (tmp_path / "junk.txt").write_text("\x00\x01\n\n\x02\x03\n\n\x04\x05\n")
    cfg = schema_data_config(corpus=f"text:{tmp_path}/*.txt",
                             data_dir=str(tmp_path / "data"), vocab_path=demo[1])
    for sentence_pairs in (False, True):
        it = pretraining.make_iterator(dataclasses.replace(cfg, sentence_pairs=sentence_pairs),
                                       "train", 4)
        with pytest.raises(ValueError, match="gave no tokens"):
            next(it)


def test_too_few_masks_for_the_rate_warned_once_a_process(caplog):
    """max_predictions below what mask_rate asks of a full row is said once, however often a run
    builds its data config (the inputs record builds one beside the pipeline's)."""
    import logging

    from bert_jax.data.pretraining import data_config
    data_config._warn_few_masks.cache_clear()
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            schema_data_config(seq_len=128, max_predictions=5, mask_rate=0.15)
    warned = [r for r in caplog.records if "max_predictions=5 < ceil" in r.getMessage()]
    assert len(warned) == 1 and "=19" in warned[0].getMessage()
