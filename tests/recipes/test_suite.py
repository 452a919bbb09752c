"""Suites (bert_jax/recipes/suite, experiments/suite.py): the score as GLUE computes it, metrics
from prediction records, the GLUE config's reading of the release's own files, bad input as one
line, and the whole GLUE suite end to end on tiny fixture folders in the GLUE layout, killed in
the middle of a task and resumed."""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import types

import numpy as np
import pytest

from bert_jax.config import settings
from bert_jax.data.finetuning import readers
from bert_jax.recipes import run_record
from bert_jax.recipes.finetune import kinds
from bert_jax.recipes.suite import runner, scores, spec

from repo_root import ROOT as REPO

WORDS = ["the", "a", "cat", "dog", "sat", "ran", "on", "mat", "big", "small", "red", "is",
         "was", "not", "good", "bad", "who", "what", "where", "why", "?", ".", "house", "car"]


def test_suite_score_of_a_hand_made_table():
    """Two-metric tasks count as the mean of their metrics' medians; the score is the mean over
    tasks; WNLI is shown but not scored; per-seed scores give the spread."""
    specs = [spec.task_spec("cola", {"kind": "classification", "metrics": "mcc"}),
             spec.task_spec("mrpc", {"kind": "classification", "metrics": "f1,accuracy"}),
             spec.task_spec("mnli", {"kind": "classification",
                                     "metrics": "accuracy,mismatched/accuracy",
                                     "evals": "mismatched=dev_mismatched.tsv"}),
             spec.task_spec("wnli", {"kind": "classification", "metrics": "accuracy"})]
    runs = [
        {"task": "cola", "seed": 0, "status": "done", "metrics": {"mcc": 0.50}},
        {"task": "cola", "seed": 1, "status": "done", "metrics": {"mcc": 0.40}},
        {"task": "cola", "seed": 2, "status": "done", "metrics": {"mcc": 0.60}},
        {"task": "mrpc", "seed": 0, "status": "done", "metrics": {"f1": 0.90, "accuracy": 0.80}},
        {"task": "mrpc", "seed": 1, "status": "done", "metrics": {"f1": 0.86, "accuracy": 0.84}},
        {"task": "mrpc", "seed": 2, "status": "failed", "error": "ValueError: bad"},
        {"task": "mnli", "seed": 0, "status": "done",
         "metrics": {"accuracy": 0.80, "mismatched/accuracy": 0.82}},
        {"task": "mnli", "seed": 1, "status": "done",
         "metrics": {"accuracy": 0.84, "mismatched/accuracy": 0.80}},
        {"task": "mnli", "seed": 2, "status": "done",
         "metrics": {"accuracy": 0.82, "mismatched/accuracy": 0.81}},
        {"task": "wnli", "seed": 0, "status": "done", "metrics": {"accuracy": 0.10}},
    ]
    table = scores.suite_table(specs, runs, excluded=["wnli"])
    rows = {row["task"]: row for row in table["rows"]}
    assert rows["cola"]["metrics"][0] == {"key": "mcc", "label": "MCC", "median": 0.50,
                                          "min": 0.40, "max": 0.60,
                                          "values": [0.50, 0.40, 0.60]}
    # MRPC: medians of two seeds, F1 0.88 and accuracy 0.82 -> 0.85; seed 2 listed as failed
    assert rows["mrpc"]["number"] == pytest.approx(0.85)
    assert rows["mrpc"]["failed"] == [{"seed": 2, "error": "ValueError: bad"}]
    # MNLI: matched median 0.82, mismatched median 0.81 -> 0.815
    assert rows["mnli"]["number"] == pytest.approx(0.815)
    assert [m["label"] for m in rows["mnli"]["metrics"]] == ["acc", "mismatched acc"]
    score = table["score"]
    assert score["value"] == pytest.approx((0.50 + 0.85 + 0.815) / 3)
    assert score["excluded"] == ["wnli"] and score["missing"] == []
    # per-seed scores only for the seeds done on every scored task (0 and 1)
    assert score["per_seed"] == {0: pytest.approx((0.50 + 0.85 + 0.81) / 3),
                                 1: pytest.approx((0.40 + 0.85 + 0.82) / 3)}
    text = scores.markdown(table, "glue suite")
    assert "FAILED seed 2" in text and "**Score: 72.2**" in text and "not scored: wnli" in text


def test_a_scored_task_without_results_is_named_missing():
    specs = [spec.task_spec(n, {"kind": "classification", "metrics": "accuracy"})
             for n in ("rte", "sst2")]
    runs = [{"task": "rte", "seed": 0, "status": "failed", "error": "DataError: x"},
            {"task": "sst2", "seed": 0, "status": "done", "metrics": {"accuracy": 0.9}}]
    score = scores.suite_table(specs, runs)["score"]
    assert score["value"] == pytest.approx(0.9)
    assert score["missing"] == ["rte"] and score["per_seed"] == {}


def test_metrics_from_prediction_records():
    records = [{"label": g, "prediction": p} for g, p in
               [("1", "1"), ("1", "0"), ("0", "0"), ("0", "1"), ("1", "1"), ("0", "0")]]
    assert scores.metric_value("accuracy", records) == pytest.approx(4 / 6)
    # F1 of class "1": tp 2, fp 1, fn 1
    assert scores.metric_value("f1", records, positive_label="1") == pytest.approx(2 / 3)
    # F1 of the other class is another number: the positive class is the task's choice
    assert scores.metric_value("f1", records, positive_label="0") == pytest.approx(2 / 3)
    gold = np.array([1, 1, 0, 0, 1, 0])
    predicted = np.array([1, 0, 0, 1, 1, 0])
    expected = np.corrcoef(gold, predicted)[0, 1]  # binary MCC = Pearson of the 0/1 vectors
    assert scores.metric_value("mcc", records) == pytest.approx(expected)
    with pytest.raises(ValueError, match="no gold label is that class"):
        scores.metric_value("f1", records, positive_label="equivalent")
    pairs = [{"label": 1.0, "prediction": 0.5}, {"label": 2.0, "prediction": 0.7},
             {"label": 3.0, "prediction": 2.0}]
    assert scores.metric_value("spearman", pairs) == pytest.approx(1.0)
    assert scores.metric_value("pearson", pairs) < 1.0


def test_headerless_tsv_columns_by_position(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_text("gj04\t1\t\tthe cat sat .\ngj04\t0\t*\tcat the sat .\n", encoding="utf-8")
    examples = readers.read_text_examples(str(path), "tsv_no_header", text_column="3",
                                          label_column="1")
    assert [(e.text, e.label) for e in examples] == [("the cat sat .", "1"),
                                                     ("cat the sat .", "0")]
    with pytest.raises(readers.DataError, match="no column.*'4'.*named by position 0..3"):
        readers.read_text_examples(str(path), "tsv_no_header", text_column="4",
                                   label_column="1")


# ----- fixture folders in the GLUE layout --------------------------------------------------------

def _sentence(rng, n=5):
    return " ".join(WORDS[i] for i in rng.integers(len(WORDS), size=n))


def _write(path, header, rows, bom=False):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    lines = (["\t".join(header)] if header else []) + ["\t".join(map(str, r)) for r in rows]
    with open(path, "w", encoding="utf-8-sig" if bom else "utf-8") as f:
        f.write("\n".join(lines) + "\n")


def write_glue(root, rows=8, seed=0):
    """Each task's files with the GLUE release's names, headers and columns (a few rows)."""
    rng = np.random.default_rng(seed)
    s = lambda: _sentence(rng)
    two = lambda i: i % 2
    nli = ["entailment", "not_entailment"]
    mnli = ["entailment", "neutral", "contradiction"]
    for split in ("train", "dev"):
        _write(f"{root}/CoLA/{split}.tsv", None,
               [["gj04", two(i), "" if two(i) else "*", s()] for i in range(rows)])
        _write(f"{root}/SST-2/{split}.tsv", ["sentence", "label"],
               [[s(), two(i)] for i in range(rows)])
        _write(f"{root}/MRPC/{split}.tsv", ["Quality", "#1 ID", "#2 ID", "#1 String",
                                           "#2 String"],
               [[two(i), 100 + i, 200 + i, s(), s()] for i in range(rows)], bom=True)
        _write(f"{root}/QQP/{split}.tsv", ["id", "qid1", "qid2", "question1", "question2",
                                          "is_duplicate"],
               [[i, 2 * i, 2 * i + 1, s() + " ?", s() + " ?", two(i)] for i in range(rows)])
        _write(f"{root}/STS-B/{split}.tsv",
               ["index", "genre", "filename", "year", "old_index", "source1", "source2",
                "sentence1", "sentence2", "score"],
               [[i, "main-captions", "MSRvid", "2012test", i, "none", "none", s(), s(),
                 f"{(i % 6) * 0.8:.3f}"] for i in range(rows)])
        _write(f"{root}/QNLI/{split}.tsv", ["index", "question", "sentence", "label"],
               [[i, s() + " ?", s(), nli[two(i)]] for i in range(rows)])
        for task, labels in (("RTE", nli), ("WNLI", [0, 1])):
            _write(f"{root}/{task}/{split}.tsv", ["index", "sentence1", "sentence2", "label"],
                   [[i, s(), s(), labels[two(i)]] for i in range(rows)])
    parses = ["sentence1_binary_parse", "sentence2_binary_parse", "sentence1_parse",
              "sentence2_parse"]
    head = ["index", "promptID", "pairID", "genre"] + parses + ["sentence1", "sentence2"]
    _write(f"{root}/MNLI/train.tsv", head + ["label1", "gold_label"],
           [[i, i, f"{i}e", "fiction", "( x )", "( y )", "(ROOT x)", "(ROOT y)", s(), s(),
             mnli[i % 3], mnli[i % 3]] for i in range(rows)])
    for split in ("dev_matched", "dev_mismatched"):
        _write(f"{root}/MNLI/{split}.tsv",
               head + [f"label{k}" for k in range(1, 6)] + ["gold_label"],
               [[i, i, f"{i}n", "slate", "( x )", "( y )", "(ROOT x)", "(ROOT y)", s(), s()]
                + [mnli[i % 3]] * 6 for i in range(rows)])


def write_vocab(path):
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    path.write_text("\n".join(specials + sorted(set(WORDS))) + "\n", encoding="utf-8")
    return str(path)


TINY_SUITE = """
from bert_jax.config import run as run_config
from experiments.configs import glue


def get_config():
    suite = glue.get_config()
    suite.tasks = "cola,sst2,mrpc,qqp,stsb,mnli,qnli,rte,wnli"
    suite.seeds = 1
    suite.init = ""
    suite.tokenizer = {vocab!r}
    suite.data_dir = {glue!r}
    run = suite.run
    run.model = run_config.model_block(
        "tiny", hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=32, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0)
    run.max_seq_len = 32
    run.data.bucket_lengths = "none"
    run.total_steps = 2
    run.eval_batch_size = 8
    run.log_every_steps = 1
    run.async_checkpoints = False
    for name in suite.specs:  # one program for every two-class task: compiled once
        suite.specs[name].run.batch_size = 4
        suite.specs[name].run.learning_rate = 1e-3
    return suite
"""


def _suite_command(config, workdir, *extra):
    return [sys.executable, os.path.join(REPO, "experiments", "suite.py"),
            f"--suite={config}", f"--workdir={workdir}", *extra]


def _env():
    return dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=REPO, BERT_JAX_PROGRESS="0")


def _tiny_suite(tmp_path):
    glue = tmp_path / "glue"
    write_glue(str(glue))
    config = tmp_path / "tiny_glue.py"
    config.write_text(TINY_SUITE.format(vocab=write_vocab(tmp_path / "vocab.txt"),
                                        glue=str(glue)), encoding="utf-8")
    return glue, config


def test_bad_input_is_one_line_naming_the_fault(tmp_path):
    from bert_jax import cli

    glue, config = _tiny_suite(tmp_path)
    # suite.py's --tasks=cola,sts, in-process: its main's run_or_exit around make_plan
    with pytest.raises(SystemExit) as exit_:
        cli.run_or_exit("suite.py", lambda: runner.make_plan(
            _load_suite(config), str(tmp_path / "w"), tasks="cola,sts"))
    assert str(exit_.value.code).startswith("suite.py: error: unknown task(s) ['sts']")
    assert "\n" not in str(exit_.value.code)  # one line, exit status 1
    os.remove(glue / "MNLI" / "dev_mismatched.tsv")
    with pytest.raises(FileNotFoundError, match="task mnli: .*MNLI/dev_mismatched.tsv: no such"):
        runner.make_plan(_load_suite(config), str(tmp_path / "w"), tasks="cola,mnli")
    assert not (tmp_path / "w").exists()


def _load_suite(config):
    module_spec = importlib.util.spec_from_file_location("tiny_glue", config)
    module = importlib.util.module_from_spec(module_spec)
    sys.path.insert(0, REPO)
    try:
        module_spec.loader.exec_module(module)
    finally:
        sys.path.remove(REPO)
    return module.get_config()


class FakeRuns:
    """train_and_evaluate and evaluate of the fine-tuning recipe, without training: each writes
    the prediction records a run would; `fail` names the tasks (folders) that raise, `stop` the
    ones that end as if by SIGTERM."""

    def __init__(self, fail=(), stop=()):
        self.fail, self.stop, self.trained = set(fail), set(stop), []

    def _records(self, config, directory):
        os.makedirs(directory, exist_ok=True)
        pairs = ([(1.0, 1.5), (2.0, 1.0), (3.0, 3.5)] if config.task == "regression"
                 else [("1", "1"), ("0", "1"), ("1", "1")])
        with open(os.path.join(directory, "predictions.jsonl"), "w") as f:
            f.writelines(json.dumps({"label": g, "prediction": p}) + "\n" for g, p in pairs)

    def train_and_evaluate(self, config, workdir):
        folder = os.path.basename(os.path.dirname(config.data.train_path))
        self.trained.append(folder)
        os.makedirs(workdir, exist_ok=True)
        with open(os.path.join(workdir, "config.json"), "w") as f:
            json.dump(config.to_dict(), f)
        if folder in self.fail:
            raise readers.DataError(f"{config.data.eval_path}:10: the row has 5 columns, not the "
                                    "6 columns of the header\nsecond line")
        if folder in self.stop:
            return types.SimpleNamespace(preempted=True, signal_number=15, step=1)
        self._records(config, os.path.join(workdir, "predictions", "step_3"))
        return types.SimpleNamespace(preempted=False, signal_number=None, step=3)

    def evaluate(self, config, workdir, step, output_dir):
        self._records(config, output_dir)
        return step, {}


def test_a_failed_task_is_recorded_and_the_rest_of_the_table_stays(tmp_path):
    _, config = _tiny_suite(tmp_path)
    plan = runner.make_plan(_load_suite(config), str(tmp_path / "w"), tasks="cola,rte,mnli,stsb",
                            seeds=2)
    assert [s.name for s in plan.specs] == ["cola", "mnli", "rte", "stsb"]  # MNLI before RTE
    fake = FakeRuns(fail={"MNLI"})
    outcome = runner.run_suite(plan, fake.train_and_evaluate, fake.evaluate)
    failed = {(r["task"], r["seed"]): r["error"] for r in outcome.failed}
    assert set(failed) == {(t, seed) for t in ("mnli", "rte", "stsb") for seed in (0, 1)}
    assert failed["mnli", 0].startswith("DataError: ") and "MNLI/dev_matched.tsv:10" in \
        failed["mnli", 0] and "\n" not in failed["mnli", 0]
    assert failed["rte", 0] == ("starts from mnli seed 0 (init_from), which has no finished "
                                "run (it failed)")
    assert fake.trained == ["CoLA", "MNLI"] * 2  # RTE and STS-B never started
    document = json.loads((tmp_path / "w" / "suite.json").read_text())
    assert document["score"]["missing"] == ["mnli", "rte", "stsb"]
    assert document["score"]["tasks"] == ["cola"]
    assert "| mnli | FAILED seed 0 | | | | DataError:" in (tmp_path / "w" / "suite.md").read_text()
    assert (tmp_path / "w" / "suite.png").exists()

    fake = FakeRuns(stop={"RTE"})  # the data fixed; SIGTERM during RTE seed 0
    outcome = runner.run_suite(plan, fake.train_and_evaluate, fake.evaluate)
    assert outcome.signal_number == 15 and fake.trained == ["MNLI", "RTE"]
    assert [r["reused"] for r in outcome.runs] == [True, False]

    fake = FakeRuns()
    outcome = runner.run_suite(plan, fake.train_and_evaluate, fake.evaluate)
    assert not outcome.failed and fake.trained == ["RTE", "STS-B", "MNLI", "RTE", "STS-B"]
    score = outcome.table["score"]
    assert score["missing"] == [] and sorted(score["per_seed"]) == [0, 1]
    # the fake records of every classification task: accuracy 2/3, MCC 0; STS-B's Pearson
    # 2/sqrt(7) and Spearman 0.5 (ranks 1,2,3 against 2,1,3)
    assert score["value"] == pytest.approx(np.mean([0.0, 2 / 3, 2 / 3,
                                                    (2 / np.sqrt(7) + 0.5) / 2]))

    # A finished run the suite would now configure otherwise is not shown with its old numbers
    suite = _load_suite(config)
    suite.specs.cola.run.learning_rate = 5e-4
    plan = runner.make_plan(suite, str(tmp_path / "w"), tasks="cola", seeds=1)
    outcome = runner.run_suite(plan, fake.train_and_evaluate, fake.evaluate)
    assert [r["status"] for r in outcome.runs] == ["failed"]
    assert "finished with another config (learning_rate" in outcome.runs[0]["error"]


def _wait_for(predicate, process, timeout=240):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        if process.poll() is not None:
            raise AssertionError(f"the suite ended (status {process.returncode}) too early:\n"
                                 + process.stderr.read()[-3000:])
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_glue_suite_end_to_end_resumes_after_a_kill(tmp_path):
    """Every GLUE task on fixture folders, killed after CoLA finished and SST-2 started; the
    same command then completes the table without running CoLA again."""
    _, config = _tiny_suite(tmp_path)
    workdir = tmp_path / "suite"
    cola = workdir / "cola" / "seed_0"
    sst2 = workdir / "sst2" / "seed_0"
    process = subprocess.Popen(_suite_command(config, workdir), env=_env(), text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _wait_for(lambda: (cola / runner.RESULT_FILE).exists()
                  and (sst2 / "config.json").exists(), process)
    finally:
        process.send_signal(signal.SIGKILL)
        process.communicate()
    assert not (sst2 / runner.RESULT_FILE).exists()
    cola_result = (cola / runner.RESULT_FILE).read_text()
    cola_metrics_time = os.path.getmtime(cola / "metrics.jsonl")

    completed = subprocess.run(_suite_command(config, workdir), env=_env(),
                               capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    document = json.loads((workdir / "suite.json").read_text())
    runs = {r["task"]: r for r in document["runs"]}
    assert document["tasks"] == ["cola", "sst2", "mnli", "mrpc", "qqp", "stsb", "qnli", "rte",
                                 "wnli"]
    assert runs["cola"]["reused"] and not runs["sst2"]["reused"]
    assert (cola / runner.RESULT_FILE).read_text() == cola_result
    assert os.path.getmtime(cola / "metrics.jsonl") == cola_metrics_time  # not trained again
    assert all(r["status"] == "done" for r in runs.values()), runs
    assert set(runs["mnli"]["metrics"]) == {"accuracy", "mismatched/accuracy"}
    assert set(runs["mrpc"]["metrics"]) == set(runs["qqp"]["metrics"]) == {"f1", "accuracy"}
    assert set(runs["stsb"]["metrics"]) == {"pearson", "spearman"}
    assert set(runs["cola"]["metrics"]) == {"mcc"}
    # RTE started from the MNLI run of its seed; MNLI's mismatched set was evaluated
    rte_config = json.loads((workdir / "rte" / "seed_0" / "config.json").read_text())
    assert rte_config["init"]["checkpoint"] == str(workdir / "mnli" / "seed_0" / "checkpoints")
    assert (workdir / "mnli" / "seed_0" / "evaluation" / "mismatched" /
            "predictions.jsonl").exists()
    score = document["score"]
    assert score["missing"] == [] and score["excluded"] == ["wnli"]
    assert len(score["tasks"]) == 8
    printed = json.loads(completed.stdout.strip().splitlines()[-1])
    assert printed["score"] == pytest.approx(score["value"])
    table = (workdir / "suite.md").read_text()
    assert "| cola | MCC |" in table and "| wnli (not scored) | acc |" in table
    assert (workdir / "suite.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # Each run is an ordinary fine-tuning workdir: its config.json reads CoLA's header-less files
    # again as evaluate.py and predict.py would
    saved = run_record.load_config(str(cola))
    assert (saved.data.format, saved.data.text_column, saved.data.label_column) == (
        "tsv_no_header", "3", "1")
    examples = kinds.get(saved.task).read(saved.data.eval_path, settings.typed(saved))
    assert len(examples) == 8 and {e.label for e in examples} == {"0", "1"}


def test_packaged_suite_prepares_its_two_tasks_from_the_gensim_wheel(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    sys.path.insert(0, REPO)
    try:
        from experiments.configs import packaged_suite
    finally:
        sys.path.remove(REPO)
    folder = packaged_suite.prepare(str(tmp_path))
    polarity_dev = readers.read_text_examples(f"{folder}/polarity/dev.tsv", "tsv", "sentence")
    assert len(polarity_dev) == 50 and sorted({e.label for e in polarity_dev}) == ["neg", "pos"]
    simlex = readers.read_text_examples(f"{folder}/simlex/train.tsv", "tsv", "word1", "score",
                                        "word2", regression=True)
    simlex_dev = readers.read_text_examples(f"{folder}/simlex/dev.tsv", "tsv", "word1", "score",
                                            "word2", regression=True)
    assert len(simlex) + len(simlex_dev) == 999
    assert all(0 <= e.label <= 10 for e in simlex)
    suite = packaged_suite.get_config()
    assert suite.data_dir.startswith(str(tmp_path / "cache"))
    specs = spec.task_specs(suite)
    assert [m.key for m in specs["simlex"].metrics] == ["pearson", "spearman"]
