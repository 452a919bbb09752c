"""data.long_inputs: inputs longer than a row, truncated (the default) or read in sliding
windows in evaluation and prediction.

The windowing units (bert_jax.data.finetuning.windows) against brute force (the window rows of
bert_jax.data.finetuning.encoding are tested in tests/data/finetuning/test_tasks.py); then tiny
runs (the point is the arithmetic, not accuracy) whose long inputs are predicted in windows,
checked against the model applied directly to window rows built here: a text's logits are the
mean of its windows', a word's logits are those of the window whose centre is nearest to it; and
the default, truncation, against the truncated row.
"""

import itertools
import json
import os

import numpy as np
import pytest

from bert_jax.config import run as run_config
from bert_jax.config import run_keys as run_config_keys
from bert_jax.config import settings
from bert_jax.config.bert import ConfigError
from bert_jax.data.finetuning import encoding, readers, windows
from bert_jax.recipes.finetune import kinds, predict, recipe, task_data
from bert_jax.train import evaluation

from finetune_runs import ner_sentence, text_rows, tiny_finetune_config

WORDS = ["john", "mary", "paris", "berlin", "acme", "globex", "book", "car", "visited", "met",
         "works", "at", "in", "the", "today", "and", "is", "old", "red", "."]
FILLER = ["visited", "met", "works", "at", "in", "the", "today", "and", "is", "old", "red"]
MAX_SEQ_LEN = 16  # 14 text tokens a row; the default stride is 7


def write_vocab(path) -> str:
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    path.write_text("\n".join(specials + WORDS + ["bl", "##ack", "##burn"]) + "\n",
                    encoding="utf-8")
    return str(path)


def nearest_by_brute_force(lengths, window, spans):
    """For each word, the span holding it whose token centre is nearest the word's centre
    (the first on a tie), computed word by word."""
    clipped = [min(n, window) for n in lengths]
    chosen = []
    for word in range(len(lengths)):
        a = sum(clipped[:word])
        word_centre = a + (clipped[word] - 1) / 2
        best = None
        for k, (first, stop) in enumerate(spans):
            if first <= word < stop:
                start, end = sum(clipped[:first]), sum(clipped[:stop])
                distance = abs(word_centre - (start + end - 1) / 2)
                if best is None or distance < best[0]:
                    best = (distance, k)
        chosen.append(best[1])
    return chosen


# ----- windowing units ----------------------------------------------------------------------------

@pytest.mark.parametrize("num_tokens,window,stride", [(0, 14, 7), (14, 14, 7), (15, 14, 7),
                                                      (45, 14, 7), (45, 14, 14), (45, 14, 1),
                                                      (100, 30, 11)])
def test_token_windows_cover_every_token_within_the_row_stride_apart(num_tokens, window,
                                                                     stride):
    spans = windows.token_spans(num_tokens, window, stride)
    covered = sorted({t for start, stop in spans for t in range(start, stop)})
    assert covered == list(range(num_tokens))
    assert all(0 < stop - start <= window for start, stop in spans if num_tokens)
    assert [b[0] - a[0] for a, b in itertools.pairwise(spans)] == [stride] * (len(spans) - 1)
    assert spans[-1][1] == num_tokens and all(stop < num_tokens for _, stop in spans[:-1])
    if num_tokens <= window:
        assert spans == [(0, num_tokens)]


@pytest.mark.parametrize("seed", range(6))
def test_word_windows_hold_whole_words_and_cover_each_once_at_least(seed):
    rng = np.random.default_rng(seed)
    lengths = list(rng.integers(1, 5, rng.integers(1, 40)))
    if seed == 0:
        lengths[3:4] = [20]  # a word longer than the window: a window of its own
    window, stride = 14, int(rng.integers(1, 15))
    clipped = np.minimum(lengths, window)
    offsets = np.concatenate([[0], np.cumsum(clipped)])
    spans = windows.word_spans(lengths, window, stride)
    assert spans[0][0] == 0 and spans[-1][1] == len(lengths)
    for (first, stop), (next_first, _) in itertools.pairwise(spans):
        assert first < next_first <= stop  # progress, and no word skipped
        # stride honoured: the first word starting >= stride tokens on, unless that skips words
        at_stride = next(w for w in range(first + 1, len(lengths) + 1)
                         if offsets[w] - offsets[first] >= stride or w == len(lengths))
        assert next_first == min(at_stride, stop)
    for first, stop in spans:
        assert offsets[stop] - offsets[first] <= window  # fits in a row
        # as many words as fit: the next word would not
        assert stop == len(lengths) or offsets[stop + 1] - offsets[first] > window
    chosen = windows.nearest_windows(lengths, window, spans)
    assert list(chosen) == nearest_by_brute_force(lengths, window, spans)
    assert all(spans[k][0] <= w < spans[k][1] for w, k in enumerate(chosen))
    if offsets[-1] <= window:
        assert spans == [(0, len(lengths))]


def test_window_means_per_example():
    values = np.arange(12, dtype=np.float32).reshape(6, 2)
    means = windows.mean_by_example(values, np.array([0, 0, 0, 1, 2, 2]), 3)
    np.testing.assert_allclose(means, [[2, 3], [6, 7], [9, 10]])
    assert means.dtype == np.float32
    with pytest.raises(ValueError, match="no window"):
        windows.mean_by_example(values, np.array([0, 0, 0, 2, 2, 2]), 3)


# ----- bad values -------------------------------------------------------------------------------

def test_bad_values_are_one_line_errors_naming_the_key(tmp_path):
    config = run_config.finetune_config("classification")
    config.data.long_inputs = "sliding"
    with pytest.raises(ConfigError) as error:
        run_config_keys.check(config)
    assert str(error.value) == ("config.data.long_inputs='sliding' must be one of truncate, "
                                "slide")
    with pytest.raises(ConfigError, match=r"^config\.data\.long_inputs='sliding' must be one "
                       r"of truncate, slide$"):
        kinds.window_stride(settings.typed(config))  # never met the schema (predict_file)
    config.data.long_inputs, config.data.window_stride = "slide", -1
    with pytest.raises(ConfigError, match=r"^config\.data\.window_stride=-1 must be an "
                       r"integer >= 0"):
        run_config_keys.check(config)
    config.data.window_stride = 200
    with pytest.raises(ConfigError, match=r"^config\.data\.window_stride=200 must be in \[1, "
                       r"max_seq_len - 2 = 126\]"):
        kinds.window_stride(settings.typed(config))
    config.data.window_stride = 0
    assert kinds.window_stride(settings.typed(config)) == 63  # (128 - 2) // 2
    pairs = [readers.TextExample("a cat", "a dog", "x")]
    with pytest.raises(ConfigError) as error:
        kinds.get("classification").stride(settings.typed(config), pairs, "dev.tsv")
    assert str(error.value) == ("config.data.long_inputs='slide' reads single texts, but "
                                "dev.tsv holds text pairs: set data.long_inputs to 'truncate'")
    contrastive = run_config.finetune_config("contrastive")
    contrastive.data.long_inputs = "slide"
    with pytest.raises(ConfigError, match=r"^config\.data\.long_inputs='slide': task "
                       r"'contrastive' reads no sliding windows \(only classification, "
                       r"multi_label, regression, span_qa, token_classification\); set it to "
                       r"'truncate'$"):
        task_data.check_long_inputs(settings.typed(contrastive), kinds.get("contrastive"))
    for value in run_config.LONG_INPUTS:  # the schema takes both values
        config = run_config.finetune_config("classification")
        config.data.long_inputs = value
        run_config_keys.check(config)


# ----- tiny runs ------------------------------------------------------------------------------

def tiny_run(root, task, train_name, train_text, dev_name, dev_text, **changes):
    """60 steps of a tiny run on the files given (enough for the windows of a text to
    differ), evaluated with sliding windows."""
    (root / train_name).write_text(train_text, encoding="utf-8")
    (root / dev_name).write_text(dev_text, encoding="utf-8")
    config = tiny_finetune_config(
        task, write_vocab(root / "vocab.txt"), hidden_size=32, num_hidden_layers=1,
        max_seq_len=MAX_SEQ_LEN, eval_batch_size=16, total_steps=60, learning_rate=2e-3,
        **{"data.train_path": str(root / train_name), "data.eval_path": str(root / dev_name),
           "data.long_inputs": "slide", **changes})
    workdir = str(root / "run")
    recipe.train_and_evaluate(config, workdir)
    return config, workdir


def run_outputs(workdir, name):
    (step_dir,) = os.listdir(os.path.join(workdir, "predictions"))
    return os.path.join(workdir, "predictions", step_dir, name)


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def load(workdir):
    """(predictor, kind) of the run's checkpoint: the model applied directly to rows below."""
    config, kind, labels = predict.load_run(workdir)
    options = predict.PredictOptions("", "", batch_size=8, progress=False)
    return predict.load_predictor(workdir, settings.typed(config), kind, labels, options), kind


def model_logits(predictor, rows):
    """The model's logits of whole rows [R, L] built here (no buckets)."""
    inputs = {
        "input_ids": np.asarray(rows, np.int32),
        "token_type_ids": np.zeros((len(rows), MAX_SEQ_LEN), np.int32),
        "attention_mask": (np.asarray(rows) != 0).astype(np.int32)}  # [PAD] is id 0
    return evaluation.predict_rows(predictor.predict, predictor.params, inputs, 8,
                                   predictor.mesh)["logits"]


def row(tokenizer, ids):
    """[CLS] ids [SEP], padded to MAX_SEQ_LEN."""
    ids = [tokenizer.cls_id, *ids, tokenizer.sep_id]
    return ids + [tokenizer.pad_id] * (MAX_SEQ_LEN - len(ids))


def softmax(logits):
    shifted = np.exp(logits - logits.max(-1, keepdims=True))
    return shifted / shifted.sum(-1, keepdims=True)


def test_a_long_texts_logits_are_the_mean_of_its_windows(tmp_path):
    rng = np.random.default_rng(0)
    train, dev = text_rows(rng, 64), text_rows(rng, 12)
    long_text = " ".join(list(rng.choice(FILLER, 44)) + ["paris"])  # 45 tokens: 3x a row
    dev[5] = (long_text, "place")
    tsv = "text\tlabel\n{}".format
    config, workdir = tiny_run(tmp_path, "classification",
                               "train.tsv", tsv("".join(f"{t}\t{y}\n" for t, y in train)),
                               "dev.tsv", tsv("".join(f"{t}\t{y}\n" for t, y in dev)))
    predictor, kind = load(workdir)
    t = predictor.tokenizer
    ids = t.encode(long_text)
    assert len(ids) == 45
    starts = [s for s in range(0, len(ids), 7) if s == 0 or s - 7 + 14 < len(ids)]
    assert starts == [0, 7, 14, 21, 28, 35]
    window_logits = model_logits(predictor, [row(t, ids[s:s + 14]) for s in starts])
    assert np.ptp(window_logits, axis=0).max() > 0.1  # the windows differ: a real mean
    expected = softmax(window_logits.mean(0))
    label_map = predictor.labels["label_map"]

    # The run's own evaluation: one record per dev text, the long one from its windows' mean.
    theirs = read_jsonl(run_outputs(workdir, "predictions.jsonl"))
    assert [r["text"] for r in theirs] == [text for text, _ in dev]
    np.testing.assert_allclose(list(theirs[5]["probabilities"].values()), expected, atol=2e-6)
    with open(run_outputs(workdir, "metrics.json")) as f:
        accuracy = json.load(f)["metrics"]["accuracy"]
    assert accuracy == pytest.approx(np.mean([r["prediction"] == r["label"] for r in theirs]))

    # predict.py: rows in == records out, the same mean; every short text one window as before.
    (tmp_path / "new.txt").write_text("".join(f"{text}\n" for text, _ in dev))
    summary = predict.predict_file(workdir, predict.PredictOptions(
        str(tmp_path / "new.txt"), str(tmp_path / "out.jsonl"), batch_size=8,
        file_format="lines", progress=False))
    mine = read_jsonl(tmp_path / "out.jsonl")
    assert summary.rows == summary.records == len(mine) == len(dev)
    assert summary.cut == {"inputs longer than max_seq_len=16 tokens, read in sliding windows": 1}
    assert [r["index"] for r in mine] == list(range(len(dev)))
    np.testing.assert_allclose(list(mine[5]["probabilities"].values()), expected, atol=1e-6)
    assert mine[5]["prediction"] == label_map[int(np.argmax(expected))]
    short = model_logits(predictor, [row(t, t.encode(text)) for text, _ in dev[:5]])
    for record, logits in zip(mine[:5], short):
        np.testing.assert_allclose(list(record["probabilities"].values()), softmax(logits),
                                   atol=1e-6)
    for a, b in zip(mine, theirs):
        assert a["prediction"] == b["prediction"]

    # The default, truncate: the long text is its first row, as it always was.
    summary = predict.predict_file(workdir, predict.PredictOptions(
        str(tmp_path / "new.txt"), str(tmp_path / "cut.jsonl"), batch_size=8,
        file_format="lines", progress=False, long_inputs="truncate"))
    assert summary.cut == {"inputs truncated to max_seq_len=16 tokens": 1}
    cut = read_jsonl(tmp_path / "cut.jsonl")
    np.testing.assert_allclose(list(cut[5]["probabilities"].values()),
                               softmax(model_logits(predictor, [row(t, ids[:14])])[0]),
                               atol=1e-6)
    assert np.abs(np.subtract(list(cut[5]["probabilities"].values()),
                              list(mine[5]["probabilities"].values()))).max() > 1e-3
    for i, (a, b) in enumerate(zip(cut, mine)):
        if i != 5:  # one window each way
            assert a["prediction"] == b["prediction"]
            np.testing.assert_allclose(list(a["probabilities"].values()),
                                       list(b["probabilities"].values()), atol=1e-6)
    from bert_jax.tools import evaluation as run_evaluation  # what evaluate.py runs, here
    step, _, _ = run_evaluation.evaluate_run(workdir, None, None, None, "truncate")
    evaluated = read_jsonl(os.path.join(workdir, "evaluation", f"step_{step}",
                                        "predictions.jsonl"))
    assert len(evaluated) == len(dev)
    np.testing.assert_allclose(list(evaluated[5]["probabilities"].values()),
                               list(cut[5]["probabilities"].values()), atol=2e-6)
    config.data.long_inputs = "truncate"
    run = settings.typed(config)
    examples = kind.read(str(tmp_path / "dev.tsv"), run)
    labels = predictor.labels
    truncated = kind.encode_eval(predictor.tokenizer, examples, run, labels, "dev")
    trained = kind.encode(predictor.tokenizer, examples, run, labels, "dev")
    assert truncated.keys() == trained.keys() and "example_index" not in truncated
    for key in trained:
        np.testing.assert_array_equal(truncated[key], trained[key])


def conll(sentences):
    return "".join("".join(f"{w} {t}\n" for w, t in zip(*s)) + "\n" for s in sentences)


def test_every_word_of_a_long_sentence_is_tagged_from_its_nearest_window(tmp_path):
    rng = np.random.default_rng(1)
    dev = [ner_sentence(rng) for _ in range(10)]
    long_words = ["john", "blackburn", "visited", "paris", "and", "met", "mary", "blackburn",
                  "at", "acme", "today"] * 3  # 3 x 15 = 45 tokens, 33 words
    long_tags = ["B-PER", "I-PER", "O", "B-LOC", "O", "O", "B-PER", "I-PER", "O", "B-ORG",
                 "O"] * 3
    dev[4] = (long_words, long_tags)
    train = [ner_sentence(rng) for _ in range(64)] + [(long_words[:11], long_tags[:11])]
    config, workdir = tiny_run(tmp_path, "token_classification", "train.conll", conll(train),
                               "dev.conll", conll(dev))
    predictor, kind = load(workdir)
    t = predictor.tokenizer
    pieces = [t.encode(word) for word in long_words]
    lengths = [len(p) for p in pieces]
    assert sum(lengths) == 45 and max(lengths) == 3

    # The model on each window built here; each word read where its chosen window puts it.
    spans = windows.word_spans(lengths, 14, 7)
    chosen = nearest_by_brute_force(lengths, 14, spans)
    assert len(spans) >= 5 and len(set(chosen)) == len(spans)
    window_logits = model_logits(predictor, [
        row(t, [i for word in range(first, stop) for i in pieces[word]])
        for first, stop in spans])
    expected = []
    for word, k in enumerate(chosen):
        position = 1 + sum(lengths[spans[k][0]:word])
        expected.append(window_logits[k, position])
    expected = np.stack(expected)

    # The pipeline's per-word logits: the same, and one for every word.
    placeholder = [readers.TaggedSentence(tuple(words), ()) for words, _ in dev]
    run = settings.read(config, "finetune")
    features, cut = kind.encode_unlabelled(t, placeholder, run, predictor.labels, "dev")
    assert cut == {"sentences longer than max_seq_len=16 tokens, tagged in sliding windows": 1}
    inputs = {k: features[k] for k in kinds.MODEL_INPUTS}
    outputs = evaluation.predict_rows(predictor.predict, predictor.params, inputs, 8,
                                      predictor.mesh, task_data.eval_buckets(run))
    per_word = encoding.word_values(outputs["logits"], features["word_index"],
                                    [len(words) for words, _ in dev], features["example_index"])
    assert all(value is not None for sentence in per_word for value in sentence)
    np.testing.assert_allclose(np.stack(per_word[4]), expected, atol=1e-5)
    label_map = predictor.labels["label_map"]
    expected_tags = [label_map[i] for i in expected.argmax(-1)]

    # The run's own evaluation and predict.py: a tag per word, each sentence once.
    with open(run_outputs(workdir, "predictions.conll")) as f:
        theirs = [[line.split() for line in block.splitlines()]
                  for block in f.read().strip().split("\n\n")]
    assert len(theirs) == len(dev)
    assert [[w for w, _, _ in s] for s in theirs] == [words for words, _ in dev]
    assert [p for _, _, p in theirs[4]] == expected_tags
    (tmp_path / "new.conll").write_text("".join(
        "".join(f"{w}\n" for w in words) + "\n" for words, _ in dev))
    summary = predict.predict_file(workdir, predict.PredictOptions(
        str(tmp_path / "new.conll"), str(tmp_path / "out.jsonl"), batch_size=8,
        progress=False))
    mine = read_jsonl(tmp_path / "out.jsonl")
    assert summary.rows == summary.records == len(dev)
    assert [r["prediction"] for r in mine] == [[p for _, _, p in s] for s in theirs]
    assert len(mine[4]["prediction"]) == len(long_words)

    # The default, truncate: the words past the row are "O", as they always were.
    summary = predict.predict_file(workdir, predict.PredictOptions(
        str(tmp_path / "new.conll"), str(tmp_path / "cut.jsonl"), batch_size=8,
        progress=False, long_inputs="truncate"))
    assert summary.cut == {"sentences truncated to max_seq_len=16 tokens (their last words "
                           "tagged O)": 1}
    cut = read_jsonl(tmp_path / "cut.jsonl")
    fits = np.searchsorted(np.cumsum(lengths), 14, side="right")
    first_row = model_logits(predictor, [row(t, [i for p in pieces[:fits] for i in p])])[0]
    positions = 1 + np.concatenate([[0], np.cumsum(lengths[:fits - 1])])
    assert cut[4]["prediction"] == (
        [label_map[i] for i in first_row[positions].argmax(-1)] + ["O"] * (len(long_words)
                                                                            - fits))
    assert [r for i, r in enumerate(cut) if i != 4] == [r for i, r in enumerate(mine) if i != 4]


def test_the_long_inputs_benchmark_hides_its_sentences_past_the_first_row(tmp_path):
    """benchmarks/long_inputs.py's data: training rows fit a row, every evaluation document's
    first row is narrative only (truncation sees no sentence), and no sentence is in both."""
    import csv

    from benchmarks import long_inputs
    from bert_jax.convert import hf
    from bert_jax.data.tokenizers.load import load_tokenizer
    counts = long_inputs.make_data(str(tmp_path), 128, variants=2, docs_per_sentence=1, seed=0)
    assert counts == {"train_rows": 200, "eval_documents": 100}
    tokenizer = load_tokenizer(hf.packaged_minilm_dir())

    def read(name):
        with open(tmp_path / name, encoding="utf-8", newline="") as f:
            return list(csv.DictReader(f, dialect="excel-tab"))

    sentences = long_inputs.polarity_rows()
    train_sentences = {text for text, _ in sentences[0::2]}
    eval_sentences = {text for text, _ in sentences[1::2]}
    assert not train_sentences & eval_sentences
    for row in read("train.tsv"):
        assert len(tokenizer.encode(row["text"])) <= 126
    for row in read("long_eval.tsv"):
        first_row = tokenizer.decode(tokenizer.encode(row["text"])[:126])
        assert not any(tokenizer.decode(tokenizer.encode(s)) in first_row for s in eval_sentences)
        assert sum(s in row["text"] for s in eval_sentences) == 2
