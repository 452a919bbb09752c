"""Labels and records that are not what the task needs (issue 40, class 4): each is one line
naming the file, the line or question id, and the value, before anything is written
(bert_jax/data/finetuning/readers.py, the kinds' describe_labels, config/settings.py)."""

import json
import os

import pytest

from bert_jax.data.finetuning import readers
from bert_jax.recipes.finetune import recipe as finetune_recipe

import script_errors
from finetune_runs import set_keys, tiny_finetune_config

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ["good", "bad", "movie", "film", "the", "a", "is", "was", "not", "fun"]


def one_line(fn, script="finetune.py"):
    return script_errors.one_line(fn, script)


def write(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


# ----- regression targets ----------------------------------------------------------------------

@pytest.mark.parametrize("value", ["nan", "inf", "-Infinity", "NaN"])
def test_regression_labels_nan_and_inf_are_refused_naming_file_line_and_value(tmp_path, value):
    path = write(tmp_path / "scores.tsv", ["text\tlabel", "good film\t0.5", f"bad film\t{value}"])
    with pytest.raises(readers.DataError) as error:
        readers.read_text_examples(path, regression=True)
    assert str(error.value).startswith(f"{path}:3: label {value!r} is not a finite number "
                                       "(regression task)")


def test_a_json_nan_regression_label_is_refused(tmp_path):
    path = write(tmp_path / "scores.jsonl", ['{"text": "a", "label": 1.0}',
                                             '{"text": "b", "label": NaN}'])
    with pytest.raises(readers.DataError, match=rf"^{path}:2: label nan is not a finite number"):
        readers.read_text_examples(path, regression=True)


# ----- class labels ----------------------------------------------------------------------------

def test_a_json_object_as_a_class_label_is_refused(tmp_path):
    path = write(tmp_path / "train.jsonl", ['{"text": "a", "label": "pos"}',
                                            '{"text": "b", "label": {"name": "neg"}}'])
    with pytest.raises(readers.DataError) as error:
        readers.read_text_examples(path, list_labels=False)
    assert str(error.value) == (f'{path}:2: label {{"name": "neg"}} is a JSON object; a label is '
                                "a class name or a number")


def test_a_json_list_as_a_single_class_label_is_refused(tmp_path):
    path = write(tmp_path / "train.jsonl", ['{"text": "a", "label": "pos"}',
                                            '{"text": "b", "label": ["pos", "neg"]}'])
    with pytest.raises(readers.DataError, match=rf'^{path}:2: label \["pos", "neg"\] is a list; '
                                                "an example of this task has one class"):
        readers.read_text_examples(path, list_labels=False)
    # multi-label classification reads it as the example's labels
    assert readers.read_text_examples(path)[1].label == ("pos", "neg")


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(SPECIALS + WORDS) + "\n", encoding="utf-8")
    return str(path)


def config_for(task, vocab, train, **changes):
    config = tiny_finetune_config(task, vocab, hidden_size=16, num_hidden_layers=1,
                                  max_position_embeddings=32,
                                  **{"data.train_path": train, "data.eval_path": train,
                                     "max_seq_len": 16, "total_steps": 2})
    return set_keys(config, changes)


def test_a_training_set_with_one_class_is_refused(tmp_path, vocab):
    train = write(tmp_path / "train.tsv", ["text\tlabel"] + [f"{w} movie\tpos" for w in WORDS])
    workdir = str(tmp_path / "run")
    message = one_line(lambda: finetune_recipe.train_and_evaluate(
        config_for("classification", vocab, train), workdir))
    assert message == (f"finetune.py: error: {train}: every training example has the class 'pos' "
                       "(data.label_column='label'): a classifier trained on one class predicts "
                       "it whatever the input; check the column, or the split "
                       "(data.heldout_fraction)")


def test_eval_batch_size_zero_is_reported_under_its_own_key(tmp_path, vocab):
    train = write(tmp_path / "train.tsv", ["text\tlabel"] + [
        f"{w} movie\t{'pos' if i % 2 else 'neg'}" for i, w in enumerate(WORDS)])
    workdir = str(tmp_path / "run")
    message = one_line(lambda: finetune_recipe.train_and_evaluate(
        config_for("classification", vocab, train, eval_batch_size=0), workdir))
    assert message == "finetune.py: error: eval_batch_size=0 must be positive"
    assert not os.path.exists(os.path.join(workdir, "checkpoints"))


# ----- SQuAD records ----------------------------------------------------------------------------

def squad(tmp_path, qa):
    path = tmp_path / "squad.json"
    path.write_text(json.dumps({"data": [{"paragraphs": [{
        "context": "Paris is in France.",
        "qas": [{"id": "q1", "question": "Where?", "answers": [{"text": "France",
                                                                "answer_start": 12}]}, qa]}]}]}))
    return str(path)


@pytest.mark.parametrize("qa, expected", [
    ({"id": "q2", "question": "What?", "answers": {"text": "Paris", "answer_start": 0}},
     "question 'q2': 'answers' is {\"text\": \"Paris\", \"answer_start\": 0}, not a list"),
    ({"id": "q3", "question": "What?", "answers": [{"text": "Paris", "answer_start": "zero"}]},
     "question 'q3': answer_start 'zero' is not an integer"),
    ({"id": "q4", "question": "What?", "answers": [{"text": "Paris", "answer_start": 0.7}]},
     "question 'q4': answer_start 0.7 is not an integer"),
])
def test_squad_answers_not_a_list_or_a_start_not_an_integer_are_one_line(tmp_path, qa,
                                                                          expected):
    path = squad(tmp_path, qa)
    with pytest.raises(readers.DataError) as error:
        readers.read_squad_json(path)
    assert str(error.value).startswith(f"{path}: data[0].paragraphs[0]: {expected}"), error.value


# ----- new cases, as an adversarial user would try -----------------------------------------------

def test_a_json_boolean_regression_label_is_refused(tmp_path):
    """float(True) is 1.0: a `true` in a score column would train as a score of 1."""
    path = write(tmp_path / "scores.jsonl", ['{"text": "a", "label": 0.25}',
                                             '{"text": "b", "label": true}'])
    with pytest.raises(readers.DataError, match=rf"^{path}:2: label true is a boolean, not a "
                                                "number"):
        readers.read_text_examples(path, regression=True)


def test_a_squad_answer_start_true_is_not_offset_one(tmp_path):
    """True is an int in Python: answer_start=true must not read as character 1."""
    path = squad(tmp_path, {"id": "q5", "question": "What?",
                            "answers": [{"text": "aris", "answer_start": True}]})
    with pytest.raises(readers.DataError, match="question 'q5': answer_start true is not an "
                                                "integer"):
        readers.read_squad_json(path)


def test_a_multi_label_training_set_naming_one_label_is_refused(tmp_path, vocab):
    """Every row `sports` (a label_separator that never splits): nothing to learn."""
    train = write(tmp_path / "train.tsv", ["text\tlabel"] + [f"{w} movie\tsports"
                                                             for w in WORDS])
    message = one_line(lambda: finetune_recipe.train_and_evaluate(
        config_for("multi_label", vocab, train), str(tmp_path / "run")))
    assert f"{train}: the training examples name 1 label (['sports'])" in message


def test_a_nested_list_in_a_multi_label_label_is_refused(tmp_path):
    path = write(tmp_path / "train.jsonl", ['{"text": "a", "label": ["x", ["y"]]}'])
    with pytest.raises(readers.DataError, match=rf'^{path}:1: label list \["x", \["y"\]\] holds '
                                                r'\["y"\], not a class name'):
        readers.read_text_examples(path)


@pytest.mark.parametrize("lines, where, spelled, first", [
    (['{"text": "a", "label": 1}', '{"text": "b", "label": 0}', '{"text": "c", "label": 1.0}'],
     3, "1.0", "1"),
    (['{"text": "a", "label": "1"}', '{"text": "b", "label": "01"}'], 2, "01", "1")])
def test_one_number_spelled_two_ways_is_not_two_classes(tmp_path, lines, where, spelled, first):
    """New case (tried on JSONL exported by pandas, whose integer column became floats after a
    missing value): labels 1 and 1.0 were read as the classes '1' and '1.0', a third class the
    run trained and scored on without a word. Now one line naming both places."""
    path = write(tmp_path / "train.jsonl", lines)
    with pytest.raises(readers.DataError) as error:
        readers.read_text_examples(path, list_labels=False)
    assert str(error.value) == (f"{path}:{where}: label {spelled!r} is the number of label "
                                f"{first!r} ({path}:1) spelled another way: the two would be two "
                                "classes; spell each class one way")
    tsv = write(tmp_path / "train.tsv", ["text\tlabel", "a\t1", "b\t1.0"])
    with pytest.raises(readers.DataError, match=rf"^{tsv}:3: label '1.0' is the number of"):
        readers.read_text_examples(tsv)
    # one spelling each, and names that are not numbers, read as before
    same = write(tmp_path / "same.jsonl", ['{"text": "a", "label": 1}',
                                           '{"text": "b", "label": "1"}',
                                           '{"text": "c", "label": "one"}'])
    assert [e.label for e in readers.read_text_examples(same)] == ["1", "1", "one"]
