"""The run's ConfigDict is read once, at the recipe's entry: from
recipes/pretrain.train_and_evaluate it reaches bert_jax.config.settings (which reads it into
RunSettings) and no module under bert_jax/train, data, model or convert (those take the typed
settings); the tokenizer is read once and handed on.

A tiny pre-training run (2 steps) on a text corpus, its vocabulary trained on first use, traced
with tests/config_trace.py.
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
    from bert_jax.data.tokenizers import load
    from bert_jax.recipes import pretrain

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
