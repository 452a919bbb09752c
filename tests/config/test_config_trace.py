"""The run's ConfigDict is read once, at the recipe's entry: from
recipes/pretrain.train_and_evaluate (and recipes/finetune/recipe.train_and_evaluate) it reaches
bert_jax.config.settings, which reads it into RunSettings, and no module under bert_jax/train,
data, model or convert (those take the typed settings); the tokenizer is read once and handed on.

Tiny runs of 2 steps (pre-training on a text corpus whose vocabulary is trained on first use;
fine-tuning a classifier), traced with tests/config_trace.py.
"""

from config_trace import tiny_config, trace

LOWER_LAYERS = ("train/", "data/", "model/", "convert/")


def _text_corpus(folder):
    folder.mkdir()
    words = "river stone bridge lantern harbour meadow orchard violin".split()
    lines = [" ".join(words[(i + j) % len(words)] for j in range(12)) for i in range(80)]
    (folder / "lines.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return f"text:{folder}/*.txt"


def test_the_config_stops_at_the_settings_and_the_tokenizer_is_read_once(tmp_path, monkeypatch):
    """Training, then evaluating the saved run as evaluate.py does."""
    from bert_jax.data.tokenizers import load
    from bert_jax.recipes import pretrain, run_record

    loads = []
    real_load = load.load_tokenizer

    def counting_load(*args, **kwargs):
        loads.append(args)
        return real_load(*args, **kwargs)

    monkeypatch.setattr(load, "load_tokenizer", counting_load)
    config = tiny_config(_text_corpus(tmp_path / "txt"))
    config.data.document_delimiter = "line"
    workdir = str(tmp_path / "run")

    exact, any_dict = trace(lambda: pretrain.train_and_evaluate(config, workdir), config)

    assert exact == ["config/settings.py", "recipes/pretrain.py"]
    assert [f for f in any_dict if f.startswith(LOWER_LAYERS)] == []
    assert len(loads) == 1, loads  # one tokenizer for the checks, the model and the data
    assert (tmp_path / "run" / "config.json").is_file()
    assert (tmp_path / "run" / "metrics.jsonl").read_text().count("\n") == 2

    saved = run_record.load_config(workdir)  # evaluate.py's: the run's config.json
    exact, any_dict = trace(lambda: pretrain.evaluate(saved, workdir), saved)
    assert exact == ["config/settings.py", "recipes/pretrain.py"]
    assert [f for f in any_dict if f.startswith(LOWER_LAYERS)] == []
    assert len(loads) == 2  # evaluation reads the tokenizer once


def test_a_fine_tuning_config_stops_at_the_settings(tmp_path):
    from bert_jax.recipes.finetune import recipe

    from finetune_runs import tiny_finetune_config

    words = ["good", "bad", "film", "plot", "acting", "very", "not"]
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words) + "\n",
                     encoding="utf-8")
    rows = ["text,label"] + [f"{words[i % 2]} {words[2 + i % 3]},{i % 2}" for i in range(24)]
    (tmp_path / "train.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    config = tiny_finetune_config("classification", str(vocab), hidden_size=16,
                                  num_hidden_layers=1, max_seq_len=16, total_steps=2,
                                  batch_size=4, eval_batch_size=4, **{
                                      "data.train_path": str(tmp_path / "train.csv"),
                                      "data.heldout_fraction": 0.25})

    exact, any_dict = trace(lambda: recipe.train_and_evaluate(config, str(tmp_path / "run")),
                            config)

    assert exact == ["config/settings.py", "recipes/finetune/recipe.py"]
    assert [f for f in any_dict if f.startswith(LOWER_LAYERS)] == []
