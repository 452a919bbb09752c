r"""Measures how fast the pre-training pipeline makes tokens, and (optionally) how fast a model
consumes them in training, on the machine it runs on.

  python benchmarks/data_throughput.py --data_dir=/tmp/bert_data
  python benchmarks/data_throughput.py --data_dir=/tmp/bert_data --model_preset=base \
      --model_batch=8 --model_steps=3

Prints one JSON object per setting: {"mode", "num_workers", "seq_len", "tokens_per_s",
"padding_fraction", ...} and, with --model_preset, {"model", "tokens_per_s"} for the
pre-training step that training runs (benchmarks/harness/pretrain_step.py) on random ids (the data
pipeline is not in that loop, so the two numbers are independent).
docs/history.md has its measured figures (the raw-text pipeline); token shards are measured by
benchmarks/input_pipeline.py (docs/results.md, "Your own corpus").
"""

import json
import time

from absl import app, flags

from bert_jax.data.pretraining import pipeline as pretraining
from bert_jax.recipes.inputs import schema_data_config

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
    cfg = schema_data_config(
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
    """Tokens/s of the pre-training step that training runs (benchmarks/harness/pretrain_step.py)
    on one device, one batch of the synthetic corpus over and over."""
    import jax

    from benchmarks.harness import pretrain_step
    from bert_jax.runtime import sharding

    config = pretrain_step.config(preset, FLAGS.model_batch, FLAGS.seq_len, max_predictions=20)
    mesh = sharding.make_mesh(devices=jax.devices()[:1])
    _, train = pretrain_step.build(config, mesh)
    batch = sharding.device_put_batch(next(pretrain_step.batches(config)), mesh)
    state, metrics = train.train_step(train.state, batch)  # compiles
    jax.block_until_ready(metrics)
    start = time.perf_counter()
    for _ in range(FLAGS.model_steps):
        state, metrics = train.train_step(state, batch)
    jax.block_until_ready(metrics)
    seconds = time.perf_counter() - start
    return {"model": preset, "batch": FLAGS.model_batch, "seq_len": FLAGS.seq_len,
            "tokens_per_s": round(FLAGS.model_steps * FLAGS.model_batch * FLAGS.seq_len
                                  / seconds, 1)}


def main(argv):
    del argv
    for mode in FLAGS.modes:
        for workers in FLAGS.num_workers:
            print(json.dumps(time_pipeline(mode, int(workers))), flush=True)
    if FLAGS.model_preset:
        print(json.dumps(time_model(FLAGS.model_preset)), flush=True)


if __name__ == "__main__":
    app.run(main)
