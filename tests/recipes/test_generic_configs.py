"""experiments/configs/finetune_<kind>.py: generic fine-tuning configs that any labelled file
of the kind fits, and read errors that name the config key choosing the format."""

import importlib

import pytest

from bert_jax.config import settings
from bert_jax.convert import hf
from bert_jax.data.finetuning.readers import DataError
from bert_jax.recipes.finetune import kinds, recipe

CONFIGS = {"classification": "classification", "pairs": "classification",
           "regression": "regression", "multi_label": "multi_label",
           "token_classification": "token_classification", "span_qa": "span_qa"}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_each_generic_config_starts_from_minilm_in_utf8(name):
    module = importlib.import_module(f"experiments.configs.finetune_{name}")
    config = module.get_config()
    assert config.task == CONFIGS[name] and config.task in kinds.REGISTRY
    assert config.init.hf_dir == hf.packaged_minilm_dir()
    assert config.data.encoding == "utf-8" and config.data.format == "auto"
    assert config.data.heldout_fraction == 0.0 and config.batch_size == 16
    for words in (f"--config=experiments/configs/finetune_{name}.py", "Expected runtime",
                  "Expected result"):
        assert words in module.__doc__, words


def _classification(tmp_path, file_name, content, **data):
    from experiments.configs import finetune_classification
    config = finetune_classification.get_config()
    (tmp_path / file_name).write_text(content, encoding="utf-8")
    config.data.train_path = str(tmp_path / file_name)
    for key, value in data.items():
        config.data[key] = value
    return config


def test_a_format_error_names_the_config_key(tmp_path):
    config = _classification(tmp_path, "train.tsv", "text\tlabel\ngood film\tpos\n",
                             format="fasttext")
    with pytest.raises(DataError, match=r"expected '__label__<label> <text>'.*"
                       r"\(data\.format='fasttext'; set --config\.data\.format to csv, tsv"):
        kinds.get("classification").read(config.data.train_path, settings.typed(config))
    config = _classification(tmp_path, "train.txt", "text\tlabel\ngood film\tpos\n")
    with pytest.raises(DataError, match=r"data\.format='auto' reads '\.txt' files as fasttext; "
                       r"set --config\.data\.format"):
        kinds.get("classification").read(config.data.train_path, settings.typed(config))


@pytest.mark.slow  # MiniLM's compilation: 100 s on the loaded 2-core machine
def test_generic_classification_trains_on_a_utf8_tsv(tmp_path):
    """Only the paths changed: a UTF-8 TSV with a header trains and evaluates (1 step of the
    MiniLM encoder), the non-ASCII text read as written."""
    rows = [("un film très réussi", "pos"), ("a dull, lifeless film", "neg"),
            ("Zoë loved every minute", "pos"), ("naïve and boring", "neg")] * 4
    content = "text\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in rows)
    config = _classification(tmp_path, "train.tsv", content)
    (tmp_path / "dev.tsv").write_text(content, encoding="utf-8")
    config.data.eval_path = str(tmp_path / "dev.tsv")
    config.total_steps, config.max_seq_len, config.async_checkpoints = 1, 16, False
    result = recipe.train_and_evaluate(config, str(tmp_path / "run"))
    assert {"accuracy", "macro_f1", "f1_of_pos", "f1_of_neg"} <= set(result.last_eval_metrics)
    examples = kinds.get("classification").read(config.data.train_path, settings.typed(config))
    assert examples[0].text == "un film très réussi"
