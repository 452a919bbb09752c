"""experiments/evaluate.py: the run's own eval set and another labelled file (--input), each
in a folder of its own, with the per-class table and confusion matrix of a 3-class run."""

import json
import os

import pytest

from bert_jax.recipes.finetune import recipe
from bert_jax.tools import evaluation as run_evaluation
from experiments import evaluate

from finetune_runs import text_rows, tiny_config, write_vocab


def _read(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    import numpy as np
    root = tmp_path_factory.mktemp("evaluate")
    rng = np.random.default_rng(5)
    for name, rows in (("train.tsv", text_rows(rng, 120)), ("dev.tsv", text_rows(rng, 24))):
        (root / name).write_text("text\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in rows),
                                 encoding="utf-8")
    other = text_rows(rng, 10)  # another labelled file, in another format
    (root / "other.jsonl").write_text("".join(json.dumps({"text": t, "label": y}) + "\n"
                                              for t, y in other), encoding="utf-8")
    config = tiny_config(write_vocab(root / "vocab.txt"), "classification", max_seq_len=16,
                         total_steps=40, **{"data.train_path": str(root / "train.tsv"),
                                            "data.eval_path": str(root / "dev.tsv")})
    workdir = str(root / "run")
    result = recipe.train_and_evaluate(config, workdir)
    return root, workdir, result.step


def test_own_eval_set_and_another_file_each_in_their_folder(run):
    root, workdir, step = run
    evaluation = os.path.join(workdir, "evaluation")
    own_step, own_metrics, own_extra = run_evaluation.evaluate_run(workdir, None, None, None)
    evaluate.write_record(workdir, own_step, own_metrics, own_extra)
    own_json = os.path.join(evaluation, f"step_{step}.json")
    own = _read(own_json)
    assert own_step == step and own["metrics"] == _read(
        os.path.join(evaluation, f"step_{step}", "metrics.json"))["metrics"]
    assert {"macro_f1", "f1_of_person", "f1_of_place", "f1_of_org"} <= set(own["metrics"])
    matrix = own["confusion_matrix"]
    assert matrix["labels"] == sorted(own["per_class"]) == ["org", "person", "place"]
    assert sum(map(sum, matrix["counts"])) == 24
    assert [own["per_class"][label]["support"] for label in matrix["labels"]] == [
        sum(row) for row in matrix["counts"]]
    assert own["per_class"]["org"]["f1"] == pytest.approx(own["metrics"]["f1_of_org"])

    before = open(own_json).read()
    input_step, metrics, extra = run_evaluation.evaluate_run(
        workdir, None, str(root / "other.jsonl"), "jsonl")
    record = evaluate.write_record(workdir, input_step, metrics, extra)
    folder = os.path.join(evaluation, "other.jsonl")
    assert sorted(os.listdir(folder)) == [f"step_{step}", f"step_{step}.json"]
    assert _read(os.path.join(folder, f"step_{step}.json")) == record
    assert record["input"] == str(root / "other.jsonl") and record["input_rows"] == 10
    assert sum(map(sum, record["confusion_matrix"]["counts"])) == 10
    with open(os.path.join(folder, f"step_{step}", "predictions.jsonl")) as f:
        predictions = [json.loads(line) for line in f]
    assert len(predictions) == 10
    assert metrics["accuracy"] == pytest.approx(
        sum(p["label"] == p["prediction"] for p in predictions) / 10)
    assert open(own_json).read() == before  # the run's own evaluation untouched
    assert len(_read(os.path.join(evaluation, f"step_{step}", "metrics.json")) and
               open(os.path.join(evaluation, f"step_{step}", "predictions.jsonl")).readlines()
               ) == 24


def test_input_folder_names():
    assert run_evaluation.input_folder_name("/data/dev set.tsv") == "dev_set.tsv"
    assert run_evaluation.input_folder_name("step_3.tsv") == "input_step_3.tsv"
