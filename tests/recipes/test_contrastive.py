"""The contrastive fine-tuning kind (bert_jax/recipes/finetune/contrastive.py) and its loss
(in_batch_negatives.py).

- The loss of a fixed batch is sentence-transformers' MultipleNegativesRankingLoss (and its
  symmetric variant), written here in torch: with and without hard negatives; padding rows
  change nothing.
- One train step on 8 CPU devices (a subprocess: this file as a script), under the partitioner
  (data=8) and with explicit fsdp collectives (data=2, fsdp=4: the candidates all-gathered inside
  the shard_map), logs the loss, in-batch accuracy and gradient norm of the same global batch on
  one device, and leaves the same parameters.
- experiments/finetune.py trains a tiny model on a pairs file; its eval metrics hold recall@1,
  and experiments/embed.py's vectors of the run's workdir rank the held-out pairs the same way.
- Settings it cannot train with are refused naming the keys; the held-out ranking by hand.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import eight_devices

ROOT = eight_devices.ROOT
WORDS = [f"w{i}" for i in range(64)]


def _vectors(seed, batch, texts, hidden=8):
    return np.random.default_rng(seed).normal(size=(batch, texts, hidden)).astype(np.float32)


def _reference_loss(vectors, scale, symmetric):
    """sentence-transformers' MultipleNegativesRankingLoss (symmetric: the mean with positives
    scored against the anchors), in torch, on [B, K, H] anchor/positive(/negative) vectors."""
    import torch
    import torch.nn.functional as F
    v = F.normalize(torch.tensor(vectors), p=2, dim=-1)
    anchors, positives = v[:, 0], v[:, 1]
    candidates = torch.cat([v[:, k] for k in range(1, v.shape[1])])
    scores = scale * anchors @ candidates.T
    labels = torch.arange(len(anchors))
    loss = F.cross_entropy(scores, labels)
    if symmetric:
        loss = (loss + F.cross_entropy(scores[:, :len(positives)].T, labels)) / 2
    return float(loss)


@pytest.mark.parametrize("texts", [2, 3], ids=["pairs", "hard_negatives"])
@pytest.mark.parametrize("symmetric", [False, True], ids=["one_way", "symmetric"])
def test_loss_is_sentence_transformers_multiple_negatives_ranking_loss(texts, symmetric):
    import jax.numpy as jnp

    from bert_jax.recipes.finetune import in_batch_negatives
    from bert_jax.train import steps
    raw = _vectors(0, 6, texts)
    unit = raw / np.linalg.norm(raw, axis=-1, keepdims=True)
    terms, metrics = in_batch_negatives.in_batch_loss(jnp.asarray(unit), jnp.ones(6), 20.0,
                                                      symmetric)
    assert float(steps.combine(terms)) == pytest.approx(
        _reference_loss(raw, 20.0, symmetric), rel=1e-5)
    # padding rows (weight 0) are neither scored nor candidates
    padded = np.concatenate([unit, np.ones((2, texts, 8), np.float32) / np.sqrt(8)])
    terms_padded, _ = in_batch_negatives.in_batch_loss(
        jnp.asarray(padded), jnp.asarray([1.0] * 6 + [0.0] * 2), 20.0, symmetric)
    assert float(steps.combine(terms_padded)) == pytest.approx(float(steps.combine(terms)),
                                                               rel=1e-6)
    assert 0.0 <= float(steps.mean_of(metrics[in_batch_negatives.ACCURACY])) <= 1.0


def test_held_out_ranking_by_hand():
    from bert_jax.recipes.finetune import contrastive
    anchors = np.eye(3, dtype=np.float32)
    # example 2 shares example 0's positive text: one document, relevant to both anchors
    positives = np.asarray([[1, 0, 0], [0.6, 0.8, 0], [1, 0, 0]], np.float32)
    result, gold_rank, top = contrastive.retrieval_scores(anchors, positives, ["a", "b", "a"])
    # anchor 0 -> "a" first; anchor 1 -> "b" first; anchor 2 (e3) scores both 0: "a" (tie, ranked
    # in corpus order) first
    assert gold_rank.tolist() == [1, 1, 1] and top.tolist() == [0, 1, 0]
    assert result["recall@1"] == 1.0 and result["queries"] == 3
    result, gold_rank, _ = contrastive.retrieval_scores(anchors[[1, 0]], positives[:2],
                                                        ["a", "b"])
    assert gold_rank.tolist() == [2, 2] and result["recall@1"] == 0.0
    assert result["ndcg@10"] == pytest.approx(1 / np.log2(3))


def test_settings_it_cannot_train_with_are_refused_by_key():
    from bert_jax.config import run as run_config
    from bert_jax.config import settings
    from bert_jax.recipes.finetune import contrastive
    config = run_config.finetune_config("contrastive")
    with pytest.raises(ValueError, match="text_pair_column"):
        contrastive.check_config(settings.typed(config))
    config.data.text_pair_column = "positive"
    contrastive.check_config(settings.typed(config))
    for key, value, named in (("accumulation_steps", 2, "config.accumulation_steps=2"),
                              ("data.group_by_length", 4, "config.data.group_by_length=4"),
                              ("contrastive.pooling", "max", "config.contrastive.pooling"),
                              ("contrastive.scale", 0.0, "config.contrastive.scale")):
        changed = run_config.finetune_config("contrastive")
        changed.data.text_pair_column = "positive"
        *parents, leaf = key.split(".")
        target = changed
        for parent in parents:
            target = target[parent]
        target[leaf] = value
        with pytest.raises(ValueError, match=named.replace(".", r"\.")):
            contrastive.check_config(settings.typed(changed))


def test_rows_are_read_with_their_columns_and_bad_rows_named(tmp_path):
    from bert_jax.config import run as run_config
    from bert_jax.config import settings
    from bert_jax.data.textfiles import DataError
    from bert_jax.recipes.finetune import contrastive
    config = run_config.finetune_config("contrastive")
    config.data.text_column, config.data.text_pair_column = "query", "doc"
    config.contrastive.negative_column = "hard"
    run = settings.typed(config)
    good = tmp_path / "rows.jsonl"
    good.write_text(json.dumps({"query": "q", "doc": "d", "hard": "h"}) + "\n")
    assert contrastive.read_examples(str(good), run) == [
        contrastive.ContrastiveExample("q", "d", "h")]
    table = tmp_path / "rows.tsv"
    table.write_text("query\tdoc\thard\nq1\td1\th1\nq2\t\th2\n")
    with pytest.raises(DataError, match=r"rows\.tsv:3: .*non-empty"):
        contrastive.read_examples(str(table), run)


# ----- one step on 8 devices -------------------------------------------------------------------

BATCH, SEQ, TEXTS = 16, 12, 3
RUNS = {"one_device": (None, "xla"), "data8": ((8, 1, 1), "xla"),
        "data2_fsdp4_explicit": ((2, 4, 1), "explicit")}


def _worker(out_dir: str) -> None:
    import jax

    from bert_jax import BertConfig
    from bert_jax.config import settings
    from bert_jax.recipes.finetune import kinds, recipe
    from bert_jax.runtime import sharding
    from bert_jax.train import loop, optimizer, program

    cfg = BertConfig.preset("tiny", vocab_size=len(WORDS) + 5, hidden_size=32,
                            num_attention_heads=4, intermediate_size=64,
                            max_position_embeddings=SEQ, hidden_dropout_prob=0.0,
                            attention_probs_dropout_prob=0.0)
    kind = kinds.get("contrastive")
    model = kind.make_model(cfg, {"pooling": "mean", "scale": 20.0, "symmetric": True})
    task = loop.Task(model_config=cfg, init_fn=recipe.make_init_fn(model, SEQ),
                     loss_fn=recipe.make_loss_fn(kind, model))
    rng = np.random.default_rng(0)
    lengths = rng.integers(3, SEQ + 1, size=(BATCH, 1, TEXTS))
    mask = (np.arange(SEQ)[None, :, None] < lengths).astype(np.int32)
    batch = {"input_ids": rng.integers(5, cfg.vocab_size, (BATCH, SEQ, TEXTS)).astype(np.int32)
             * mask, "token_type_ids": np.zeros((BATCH, SEQ, TEXTS), np.int32),
             "attention_mask": mask}
    opt = optimizer.make_optimizer(settings.OptimizerConfig(
        learning_rate=1e-3, total_steps=1, warmup_steps=0, decay="constant"))
    results = {}
    for name, (shape, collectives) in RUNS.items():
        mesh = (sharding.make_mesh(1, 1, 1, devices=jax.devices()[:1]) if shape is None
                else sharding.make_mesh(*shape))
        config = settings.LoopConfig(total_steps=1, global_batch_size=BATCH,
                                     fsdp_collectives=collectives)
        built = program.build(task, opt, config, mesh)
        state, metrics = built.train_step(built.state, sharding.device_put_batch(batch, mesh))
        results[name] = {"metrics": {k: float(v) for k, v in jax.device_get(metrics).items()},
                         "params": [np.asarray(x).ravel().tolist()
                                    for x in jax.tree.leaves(jax.device_get(state.params))]}
    eight_devices.write(out_dir, results)


def test_one_step_on_8_devices_is_the_global_batch_step_on_one(tmp_path):
    results = eight_devices.run(__file__, str(tmp_path))
    reference = results["one_device"]
    assert reference["metrics"]["in_batch_cross_entropy"] > 0
    for name in RUNS:
        metrics = results[name]["metrics"]
        for key in ("loss", "in_batch_cross_entropy", "in_batch_accuracy", "grad_norm"):
            assert metrics[key] == pytest.approx(reference["metrics"][key], rel=1e-5), (name, key)
        for got, want in zip(results[name]["params"], reference["params"]):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)


# ----- end to end ------------------------------------------------------------------------------

CONFIG = """from bert_jax.config import run as run_config


def get_config():
    config = run_config.finetune_config("contrastive")
    config.data.text_column, config.data.text_pair_column = "anchor", "positive"
    config.model = run_config.model_block(
        "tiny", hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=16, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    config.max_seq_len = 16
    config.batch_size = 16
    config.eval_batch_size = 16
    config.total_steps = 12
    config.learning_rate = 1e-3
    config.log_every_steps = 4
    config.async_checkpoints = False
    return config
"""


def _pairs(rng, count, first):
    """Rows whose anchor and positive share two key words (row i: w{first+2i}, w{first+2i+1})
    among shuffled filler words."""
    rows = []
    for i in range(count):
        keys = [WORDS[first + 2 * i], WORDS[first + 2 * i + 1]]
        rows.append({"anchor": " ".join(keys + list(rng.choice(WORDS[:8], 3))),
                     "positive": " ".join(list(rng.choice(WORDS[:8], 2)) + keys[::-1])})
    return rows


def test_finetune_py_trains_contrastive_pairs_and_embed_py_reads_the_run(tmp_path):
    rng = np.random.default_rng(0)
    (tmp_path / "vocab.txt").write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS) + "\n")
    for name, rows in (("train.jsonl", _pairs(rng, 24, 8)), ("eval.jsonl", _pairs(rng, 12, 40))):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "config.py").write_text(CONFIG)
    workdir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "experiments", "finetune.py"),
         f"--config={tmp_path / 'config.py'}", f"--workdir={workdir}",
         f"--config.tokenizer.path={tmp_path / 'vocab.txt'}",
         f"--config.data.train_path={tmp_path / 'train.jsonl'}",
         f"--config.data.eval_path={tmp_path / 'eval.jsonl'}"],
        env={**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": ROOT}, cwd=ROOT,
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    with open(workdir / "predictions" / "step_12" / "metrics.json") as f:
        metrics = json.load(f)["metrics"]
    assert {"recall@1", "ndcg@10", "mrr@10"} <= set(metrics) and metrics["queries"] == 12
    with open(workdir / "predictions" / "step_12" / "predictions.jsonl") as f:
        assert len(f.readlines()) == 12

    from bert_jax.embeddings import encode as sentence_embeddings
    from bert_jax.recipes.finetune import contrastive
    from bert_jax.tools import saved_runs
    rows = [json.loads(line) for line in open(tmp_path / "eval.jsonl")]
    encoder = saved_runs.load_encoder(workdir=str(workdir))
    anchors, positives = (sentence_embeddings.embed(encoder, [r[key] for r in rows], "mean",
                                                    True, max_seq_len=16)
                          for key in ("anchor", "positive"))
    again, _, _ = contrastive.retrieval_scores(anchors, positives,
                                               [r["positive"] for r in rows])
    assert again["recall@1"] == pytest.approx(metrics["recall@1"])
    assert again["ndcg@10"] == pytest.approx(metrics["ndcg@10"], abs=1e-5)


if __name__ == "__main__":
    _worker(sys.argv[1])
