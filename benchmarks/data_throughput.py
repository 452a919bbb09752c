r"""Measures how fast the pre-training pipeline makes tokens, and (optionally) how fast a model
consumes them in training, on the machine it runs on.

  python benchmarks/data_throughput.py --data_dir=/tmp/bert_data
  python benchmarks/data_throughput.py --data_dir=/tmp/bert_data --model_preset=base \
      --model_batch=8 --model_steps=3

Prints one JSON object per setting: {"mode", "num_workers", "seq_len", "tokens_per_s",
"padding_fraction", ...} and, with --model_preset, {"model", "tokens_per_s"} for a jitted
BertForPreTraining forward + backward + AdamW update on random ids (the data pipeline is not in
that loop, so the two numbers are independent).
docs/results.md has the measured figures.
"""

import json
import time

from absl import app, flags

from bert_jax.data import pretraining

FLAGS = flags.FLAGS
flags.DEFINE_string("corpus", "demo", "Corpus to read.")
flags.DEFINE_string("data_dir", "~/bert_jax_data", "Where corpora are prepared.")
flags.DEFINE_string("vocab_path", "", "Vocabulary (empty: the demo's own).")
flags.DEFINE_integer("seq_len", 128, "Tokens per row.")
flags.DEFINE_integer("batch_size", 32, "Rows per batch.")
flags.DEFINE_integer("batches", 200, "Batches timed per setting (after one warm-up batch).")
flags.DEFINE_list("modes", ["mlm", "mlm_whole_word", "sentence_pairs"], "Settings to time.")
flags.DEFINE_list("num_workers", ["0"], "Worker process counts to time.")
flags.DEFINE_string("model_preset", "", "If set (e.g. base), also time training of this preset.")
flags.DEFINE_integer("model_batch", 8, "Rows per training step when timing the model.")
flags.DEFINE_integer("model_steps", 3, "Timed training steps (after one compile step).")


def time_pipeline(mode: str, num_workers: int) -> dict:
    cfg = pretraining.PretrainingDataConfig(
        corpus=FLAGS.corpus, data_dir=FLAGS.data_dir, vocab_path=FLAGS.vocab_path,
        seq_len=FLAGS.seq_len, max_predictions=max(20, round(FLAGS.seq_len * 0.15) + 1),
        whole_word_masking=mode == "mlm_whole_word", sentence_pairs=mode == "sentence_pairs",
        num_workers=num_workers)
    it = pretraining.make_iterator(cfg, "train", FLAGS.batch_size)
    start = time.perf_counter()
    next(it)
    first_batch_s = time.perf_counter() - start
    real = 0
    start = time.perf_counter()
    for _ in range(FLAGS.batches):
        real += int((next(it)["segment_ids"] > 0).sum())
    seconds = time.perf_counter() - start
    it.close()
    total = FLAGS.batches * FLAGS.batch_size * FLAGS.seq_len
    return {"mode": mode, "num_workers": num_workers, "seq_len": FLAGS.seq_len,
            "tokens_per_s": round(total / seconds), "real_tokens_per_s": round(real / seconds),
            "padding_fraction": round(1 - real / total, 5),
            "first_batch_s": round(first_batch_s, 2)}


def time_model(preset: str) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from flax import linen as nn

    from bert_jax import BertConfig, BertForPreTraining

    cfg = BertConfig.preset(preset)
    model = BertForPreTraining(cfg, with_nsp=False)
    rows, length, predictions = FLAGS.model_batch, FLAGS.seq_len, 20
    rng = np.random.default_rng(0)
    batch = {"input_ids": jnp.asarray(rng.integers(5, cfg.vocab_size, (rows, length)), jnp.int32),
             "masked_positions": jnp.asarray(rng.integers(0, length, (rows, predictions)),
                                             jnp.int32),
             "masked_ids": jnp.asarray(rng.integers(5, cfg.vocab_size, (rows, predictions)),
                                       jnp.int32)}
    params = nn.meta.unbox(model.init(jax.random.PRNGKey(0), batch["input_ids"],
                                      batch["masked_positions"])["params"])
    optimizer = optax.adamw(1e-4)
    opt_state = optimizer.init(params)

    def loss_fn(params, batch, dropout_rng):
        out = model.apply({"params": params}, batch["input_ids"], batch["masked_positions"],
                          deterministic=False, rngs={"dropout": dropout_rng})
        return optax.softmax_cross_entropy_with_integer_labels(out.mlm_logits,
                                                               batch["masked_ids"]).mean()

    @jax.jit
    def step(params, opt_state, batch, dropout_rng):
        loss, grads = jax.value_and_grad(loss_fn)(params, batch, dropout_rng)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    step = jax.jit(step.__wrapped__, donate_argnums=(0, 1))
    key = jax.random.PRNGKey(1)
    params, opt_state, loss = step(params, opt_state, batch, key)
    loss.block_until_ready()
    start = time.perf_counter()
    for i in range(FLAGS.model_steps):
        params, opt_state, loss = step(params, opt_state, batch, jax.random.fold_in(key, i))
    loss.block_until_ready()
    seconds = time.perf_counter() - start
    return {"model": preset, "batch": rows, "seq_len": length,
            "tokens_per_s": round(FLAGS.model_steps * rows * length / seconds, 1)}


def main(argv):
    del argv
    for mode in FLAGS.modes:
        for workers in FLAGS.num_workers:
            print(json.dumps(time_pipeline(mode, int(workers))), flush=True)
    if FLAGS.model_preset:
        print(json.dumps(time_model(FLAGS.model_preset)), flush=True)


if __name__ == "__main__":
    app.run(main)
