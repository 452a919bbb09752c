"""A fine-tuning speed peer: keras-hub's BertTextClassifier on the JAX backend, trained with
keras' own `model.fit`, to compare our fine-tuning step per computed position against.

It runs in a virtual environment of its own, outside the repository (keras is no dependency of
ours), with the same jax as ours and no TensorFlow or torch:

    python3 -m venv .keras_venv
    .keras_venv/bin/pip install jax==0.10.2 jaxlib==0.10.2 "keras==3.15.*"
    .keras_venv/bin/pip install --no-deps keras-hub==0.32.0
    .keras_venv/bin/pip install absl-py numpy packaging regex rich "kagglehub!=1.0.1" \
        kagglesdk==0.1.28 sentencepiece tokenizers grain
    # (keras-hub's declared requirements less tensorflow-text; grain for keras' data adapters)

    KERAS_BACKEND=jax .keras_venv/bin/python benchmarks/peers/keras_hub_classifier.py
    KERAS_BACKEND=jax .keras_venv/bin/python benchmarks/peers/keras_hub_classifier.py \
        --dtype=bfloat16
    KERAS_BACKEND=jax .keras_venv/bin/python benchmarks/peers/keras_hub_classifier.py \
        --num_layers=12 --hidden_dim=768 --num_heads=12 --intermediate_dim=3072 --max_length=128

What it measures: the seconds of one training step of `model.fit` (forward, backward, AdamW
update, the input pipeline and keras' per-step loop) for
`keras_hub.models.BertTextClassifier(BertBackbone(...), num_classes=3, preprocessor=None)`,
dropout 0.1 (keras-hub's default), AdamW (learning rate 2e-5, weight decay 0.01, keras' default
of decaying every variable) and sparse categorical cross-entropy from logits, no metrics (pass
--accuracy to add keras-hub's default SparseCategoricalAccuracy). The backbone is MiniLM's shape
by default (vocabulary 30522, 6 layers, 12 heads, hidden 384, intermediate 1536, 512 positions)
with random weights: the speed does not depend on them.

Data: --num_examples rows of random token ids in [1000, 30000), each a [CLS] ... [SEP] row of a
real length drawn uniformly in [8, --max_length] and padded with 0 to --max_length, with the
padding_mask (1 on real tokens) and segment_ids (all 0) that keras-hub's backbone takes; random
labels of 3 classes. Every batch has the same shape, so it compiles once: keras-hub computes
every padded position, and computed positions/s = batch * max_length / seconds per step is the
figure to set beside ours (real tokens/s, the positions that were not padding, is given too).
The input pipeline is keras-hub's: its `fit` (PipelineModel.fit) batches the numpy arrays into a
grain MapDataset, repeated for the epochs and read ahead 8 batches by grain's threads, and hands
that to keras' grain adapter (without grain, and with no TensorFlow, it raises ImportError);
grain's batches come in order, so shuffle=False holds.

Timing: a keras Callback records time.perf_counter() at each train batch end. Because the
callback overrides on_train_batch_end, keras calls it synchronously with the logs made Python
floats, so each stamp comes after the step's loss reached the host: one stamp per finished step.
A step's seconds are the gap between its stamp and the previous one (the gap across an epoch
boundary holds keras' epoch end and the next epoch's start, as in a real fit). The first
--warmup_steps steps (compilation among them) are left out; the first step's seconds, from the
start of its batch to its end (mostly XLA compilation), are reported apart. Throughputs come from
the mean (the timed window's total time over its steps); the median is given too. The first epoch
end also compiles, once, a few small eager ops (the loss tracker's result: equal, where, divide):
at the defaults (10 steps an epoch, 10 warm-up steps) that lands in the first timed step, so the
record also gives the mean over the timed steps that start no epoch
(seconds_per_step_mean_within_epochs) and how many timed steps do (epoch_starts_timed).

Output: one JSON line on stdout with the processor, the versions, the shape, the figures and the
load average at the start and the end: on a shared machine, compare only figures measured in a
quiet window.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time

from absl import app, flags

CLS_ID, SEP_ID, PAD_ID = 101, 102, 0  # bert-base-uncased's special tokens
TOKEN_LOW, TOKEN_HIGH = 1000, 30000
MIN_LENGTH = 8
NUM_CLASSES = 3

FLAGS = flags.FLAGS
flags.DEFINE_integer("vocabulary_size", 30522, "Vocabulary size of the backbone.")
flags.DEFINE_integer("num_layers", 6, "Transformer layers (BERT-base: 12).")
flags.DEFINE_integer("num_heads", 12, "Attention heads (BERT-base: 12).")
flags.DEFINE_integer("hidden_dim", 384, "Hidden size (BERT-base: 768).")
flags.DEFINE_integer("intermediate_dim", 1536, "Feed-forward size (BERT-base: 3072).")
flags.DEFINE_integer("max_sequence_length", 512, "Position embeddings of the backbone.")
flags.DEFINE_integer("num_examples", 320, "Rows of random data (a multiple of --batch_size).")
flags.DEFINE_integer("max_length", 64, "Every row is padded to this length.")
flags.DEFINE_integer("batch_size", 32, "Rows per training step.")
flags.DEFINE_integer("steps", 50, "Training steps in all, the warm-up included.")
flags.DEFINE_integer("warmup_steps", 10, "First steps left out of the timing (compilation).")
flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"],
                  "float32, or bfloat16 as keras' mixed_bfloat16 policy (fp32 variables).")
flags.DEFINE_float("learning_rate", 2e-5, "AdamW's learning rate.")
flags.DEFINE_float("weight_decay", 0.01, "AdamW's weight decay.")
flags.DEFINE_bool("accuracy", False, "Also compute keras-hub's default accuracy metric.")
flags.DEFINE_integer("seed", 0, "Seed of the data and of keras' initialisation.")


def processor() -> str:
    """The processor's model name from /proc/cpuinfo ('unknown' where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def load_average() -> list:
    return [round(x, 2) for x in os.getloadavg()]


def make_data(num_examples: int, max_length: int, seed: int):
    """Random rows as keras-hub's BertBackbone takes them, their real lengths and labels."""
    import numpy as np

    rng = np.random.default_rng(seed)
    lengths = rng.integers(MIN_LENGTH, max_length + 1, size=num_examples)
    token_ids = np.full((num_examples, max_length), PAD_ID, dtype=np.int32)
    padding_mask = np.zeros((num_examples, max_length), dtype=np.int32)
    for i, n in enumerate(lengths):
        token_ids[i, 0] = CLS_ID
        token_ids[i, 1:n - 1] = rng.integers(TOKEN_LOW, TOKEN_HIGH, size=n - 2)
        token_ids[i, n - 1] = SEP_ID
        padding_mask[i, :n] = 1
    x = {"token_ids": token_ids,
         "segment_ids": np.zeros((num_examples, max_length), dtype=np.int32),
         "padding_mask": padding_mask}
    y = rng.integers(0, NUM_CLASSES, size=num_examples).astype(np.int32)
    return x, y, lengths


def main(argv):
    del argv
    load_start = load_average()
    if FLAGS.max_length < MIN_LENGTH:
        raise app.UsageError(f"--max_length must be at least {MIN_LENGTH}.")
    if FLAGS.max_length > FLAGS.max_sequence_length:
        raise app.UsageError("--max_length must not exceed --max_sequence_length.")
    if FLAGS.num_examples < FLAGS.batch_size or FLAGS.num_examples % FLAGS.batch_size:
        raise app.UsageError("--num_examples must be a positive multiple of --batch_size "
                             "(one batch shape, one compilation).")
    if not 0 < FLAGS.warmup_steps < FLAGS.steps:
        raise app.UsageError("Need 0 < --warmup_steps < --steps.")

    os.environ.setdefault("KERAS_BACKEND", "jax")
    try:
        import jax
        import jaxlib
        import keras
        import keras_hub
    except ImportError as e:
        raise SystemExit(f"{e}: run this with the python of a venv holding keras and keras-hub "
                         "(see the module docstring), not the project's venv.") from e
    if keras.backend.backend() != "jax":
        raise SystemExit(f"keras' backend is {keras.backend.backend()!r}: set KERAS_BACKEND=jax.")

    keras.utils.set_random_seed(FLAGS.seed)
    if FLAGS.dtype == "bfloat16":
        keras.mixed_precision.set_global_policy("mixed_bfloat16")

    batch, length = FLAGS.batch_size, FLAGS.max_length
    x, y, lengths = make_data(FLAGS.num_examples, length, FLAGS.seed)

    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=FLAGS.vocabulary_size, num_layers=FLAGS.num_layers,
        num_heads=FLAGS.num_heads, hidden_dim=FLAGS.hidden_dim,
        intermediate_dim=FLAGS.intermediate_dim, max_sequence_length=FLAGS.max_sequence_length)
    model = keras_hub.models.BertTextClassifier(backbone, num_classes=NUM_CLASSES,
                                                preprocessor=None)
    model.compile(
        optimizer=keras.optimizers.AdamW(learning_rate=FLAGS.learning_rate,
                                         weight_decay=FLAGS.weight_decay),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy()] if FLAGS.accuracy else None)

    steps_per_epoch = FLAGS.num_examples // batch
    epochs = math.ceil(FLAGS.steps * batch / FLAGS.num_examples)

    class StepClock(keras.callbacks.Callback):
        """perf_counter at each train batch end (and at the first batch's start); stops
        training after --steps steps."""

        def __init__(self, steps: int):
            super().__init__()
            self.steps = steps
            self.first_begin = None
            self.ends = []
            self.last_loss = None

        def on_train_batch_begin(self, batch, logs=None):
            if self.first_begin is None:
                self.first_begin = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            self.ends.append(time.perf_counter())
            self.last_loss = (logs or {}).get("loss")
            if len(self.ends) >= self.steps:
                self.model.stop_training = True

    clock = StepClock(FLAGS.steps)
    fit_start = time.perf_counter()
    model.fit(x, y, batch_size=batch, epochs=epochs, shuffle=False, verbose=0,
              callbacks=[clock])
    fit_seconds = time.perf_counter() - fit_start
    if len(clock.ends) != FLAGS.steps:
        raise SystemExit(f"fit ran {len(clock.ends)} steps, not {FLAGS.steps}.")

    # step s (0-based) trains on rows [b * batch, (b + 1) * batch), b = s % steps_per_epoch
    # (shuffle=False); its seconds are ends[s] - ends[s - 1].
    timed = range(FLAGS.warmup_steps, FLAGS.steps)
    seconds = [clock.ends[s] - clock.ends[s - 1] for s in timed]
    real_tokens = sum(int(lengths[(s % steps_per_epoch) * batch:
                                  (s % steps_per_epoch + 1) * batch].sum()) for s in timed)
    total = sum(seconds)
    mean = total / len(seconds)
    # the timed steps that are no epoch's first: their gaps hold no epoch end
    within = [t for s, t in zip(timed, seconds) if s % steps_per_epoch]
    median = statistics.median(seconds)
    record = {
        "benchmark": "keras_hub_bert_text_classifier_fit",
        "processor": processor(), "cpus": os.cpu_count(),
        "keras": keras.__version__, "keras_hub": keras_hub.__version__,
        "jax": jax.__version__, "jaxlib": jaxlib.__version__,
        "backend": keras.backend.backend(), "device": str(jax.devices()[0].platform),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "model": {"vocabulary_size": FLAGS.vocabulary_size, "num_layers": FLAGS.num_layers,
                  "num_heads": FLAGS.num_heads, "hidden_dim": FLAGS.hidden_dim,
                  "intermediate_dim": FLAGS.intermediate_dim,
                  "max_sequence_length": FLAGS.max_sequence_length,
                  "parameters": int(model.count_params())},
        "batch": batch, "length": length, "dtype": FLAGS.dtype,
        "dtype_policy": keras.mixed_precision.global_policy().name,
        "num_examples": FLAGS.num_examples, "epochs": epochs,
        "steps": FLAGS.steps, "warmup_steps": FLAGS.warmup_steps, "steps_timed": len(seconds),
        "seconds_per_step_median": round(median, 6),
        "seconds_per_step_mean": round(mean, 6),
        "epoch_starts_timed": len(seconds) - len(within),
        "seconds_per_step_mean_within_epochs": (round(sum(within) / len(within), 6)
                                                if within else None),
        "examples_per_s": round(batch / mean, 2),
        "computed_positions_per_s": round(batch * length / mean, 1),
        "computed_positions_per_s_median": round(batch * length / median, 1),
        "real_tokens_per_s": round(real_tokens / total, 1),
        "real_token_fraction": round(real_tokens / (len(seconds) * batch * length), 4),
        "compile_and_first_step_s": round(clock.ends[0] - clock.first_begin, 3),
        "fit_seconds": round(fit_seconds, 3),
        "final_loss": clock.last_loss,
        "load_average_start": load_start, "load_average_end": load_average(),
    }
    print(json.dumps(record), flush=True)


if __name__ == "__main__":
    app.run(main)
