"""End to end fine-tuning on small synthetic NER and QA sets that a tiny BERT must learn.

Learning them (> 90% entity F1, > 90% exact match) shows that the NER labels sit on the right
sub-words and that SQuAD windows, offsets and span decoding are right: a misaligned label or an
off-by-one span cannot score that high. The NER run is then evaluated again in a new process
(experiments/evaluate.py), which must reproduce the end-of-training metrics and predictions
exactly. A synthetic multi-label set shows a task kind added through the registry.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from bert_jax.config import run as run_config
from bert_jax.config import settings
from bert_jax.data.finetuning import encoding, readers
from bert_jax.recipes import common as recipe_common
from bert_jax.recipes.finetune import kinds, recipe
from bert_jax.recipes.finetune.task_data import build_task_data

from finetune_runs import tiny_finetune_config
from repo_root import ROOT as REPO

FIRST_NAMES = ["john", "mary", "peter", "anna", "james", "linda", "omar", "yuki"]
# Surnames cut into several pieces by the vocabulary below: the tag must sit on the first.
SURNAMES = ["johnson", "blackburn", "smithers", "okafor"]
PLACES = [["paris"], ["berlin"], ["new", "york"], ["san", "francisco"], ["lagos"], ["kyoto"]]
ORGS = [["acme", "corp"], ["globex"], ["initech", "labs"]]
FILLER = ["visited", "met", "works", "at", "in", "the", "today", "yesterday", "and", "with",
          "from", "said", "that", "old", "red", "house", "book", "is", "where", "a", "car",
          "garden", "bag", "key", ".", "who", "has"]
OBJECTS = ["book", "car", "bag", "key", "ring", "lamp", "coin", "map"]
PIECES = ["john", "##son", "black", "##burn", "smith", "##ers", "oka", "##for", "?"]


def write_vocab(path) -> str:
    words = {w for group in (FIRST_NAMES, FILLER, OBJECTS, PIECES) for w in group}
    words |= {w for group in PLACES + ORGS for w in group}
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    path.write_text("\n".join(specials + sorted(words)) + "\n", encoding="utf-8")
    return str(path)


def person(rng):
    words = [FIRST_NAMES[rng.integers(len(FIRST_NAMES))]]
    if rng.random() < 0.6:
        words.append(SURNAMES[rng.integers(len(SURNAMES))])
    return words, ["B-PER"] + ["I-PER"] * (len(words) - 1)


def entity(rng, choices, kind):
    words = list(choices[rng.integers(len(choices))])
    return words, [f"B-{kind}"] + [f"I-{kind}"] * (len(words) - 1)


def ner_sentence(rng):
    templates = [["PER", "visited", "LOC", "today"], ["PER", "works", "at", "ORG", "in", "LOC"],
                 ["PER", "met", "PER", "in", "LOC", "yesterday"], ["ORG", "is", "from", "LOC"],
                 ["the", "old", "house", "in", "LOC", "is", "red"],
                 ["PER", "and", "PER", "said", "that", "ORG", "is", "old"]]
    words, tags = [], []
    for slot in templates[rng.integers(len(templates))]:
        if slot == "PER":
            w, t = person(rng)
        elif slot == "LOC":
            w, t = entity(rng, PLACES, "LOC")
        elif slot == "ORG":
            w, t = entity(rng, ORGS, "ORG")
        else:
            w, t = [slot], ["O"]
        words += w
        tags += t
    return words, tags


def write_conll(path, sentences) -> str:
    with open(path, "w", encoding="utf-8") as f:
        for words, tags in sentences:
            f.writelines(f"{w} {t}\n" for w, t in zip(words, tags))
            f.write("\n")
    return str(path)


def qa_example(rng, qid):
    """Two facts among filler, 'the X is in P .' and 'N has the Y .'; the question asks either
    'where is the X ?' (a place, maybe two words) or 'who has the Y ?' (a name, maybe with a
    surname of several word pieces), so the answer depends on the question."""
    objects = rng.choice(len(OBJECTS), 2, replace=False)
    place = " ".join(PLACES[rng.integers(len(PLACES))])
    name = " ".join(person(rng)[0])
    pieces = [" ".join(rng.choice(FILLER[:12], rng.integers(3, 9))) + " ." for _ in range(3)]
    facts = [f"the {OBJECTS[objects[0]]} is in {place} .",
             f"{name} has the {OBJECTS[objects[1]]} ."]
    order = rng.permutation(2)
    context = " ".join([pieces[0], facts[order[0]], pieces[1], facts[order[1]], pieces[2]])
    if rng.random() < 0.5:
        question, answer = f"where is the {OBJECTS[objects[0]]} ?", place
        start = context.index(facts[0]) + facts[0].index(" is in ") + len(" is in ")
    else:
        question, answer = f"who has the {OBJECTS[objects[1]]} ?", name
        start = context.index(facts[1])
    assert context[start:start + len(answer)] == answer
    return {"id": qid, "question": question,
            "answers": [{"text": answer, "answer_start": start}], "is_impossible": False}, context


def write_squad(path, rng, count, prefix) -> str:
    paragraphs = []
    for i in range(count):
        qa, context = qa_example(rng, f"{prefix}{i}")
        paragraphs.append({"context": context, "qas": [qa]})
    path.write_text(json.dumps({"data": [{"title": "synthetic", "paragraphs": paragraphs}]}),
                    encoding="utf-8")
    return str(path)


def tiny_config(vocab_path, task="classification", **changes):
    return tiny_finetune_config(task, vocab_path, **changes)


def test_ner_learns_entities_and_evaluation_in_new_process_is_exact(tmp_path):
    rng = np.random.default_rng(0)
    vocab = write_vocab(tmp_path / "vocab.txt")
    train = write_conll(tmp_path / "train.conll", [ner_sentence(rng) for _ in range(320)])
    dev = write_conll(tmp_path / "dev.conll", [ner_sentence(rng) for _ in range(64)])
    config = tiny_config(vocab, "token_classification", max_seq_len=24, epochs=4.0,
                         learning_rate=2e-3, num_hidden_layers=1,
                         **{"data.train_path": train, "data.eval_path": dev})
    workdir = str(tmp_path / "ner")
    result = recipe.train_and_evaluate(config, workdir)
    assert result.last_eval_metrics["entity_f1"] > 0.9, result.last_eval_metrics
    # sub-word words are in the eval set, so the first-sub-word alignment is exercised
    assert any(s in open(dev).read() for s in SURNAMES)

    # Twice, sharing a compilation cache (every program kept, however quick to compile): the
    # first run fills it, the second loads every program from it and scores the same.
    cache = tmp_path / "compilation_cache"
    step_dir = f"step_{result.step}"
    with open(os.path.join(workdir, "predictions", step_dir, "metrics.json")) as f:
        at_end = json.load(f)
    for run in range(2):
        completed = subprocess.run(
            [sys.executable, os.path.join(REPO, "experiments", "evaluate.py"),
             f"--workdir={workdir}"], capture_output=True, text=True, cwd=REPO,
            env={**os.environ, "JAX_PLATFORMS": "cpu", "JAX_COMPILATION_CACHE_DIR": str(cache),
                 "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"})
        assert completed.returncode == 0, completed.stderr[-2000:]
        with open(os.path.join(workdir, "evaluation", step_dir, "metrics.json")) as f:
            reloaded = json.load(f)
        assert reloaded == at_end  # exactly, every digit
        with open(os.path.join(workdir, "predictions", step_dir, "predictions.conll")) as a, \
                open(os.path.join(workdir, "evaluation", step_dir, "predictions.conll")) as b:
            assert a.read() == b.read()
        cached = sorted(p.name for p in cache.iterdir())
        if run == 0:
            first_cached = cached
            assert any(name.startswith("jit_eval") or "predict" in name for name in cached), cached
        else:
            assert cached == first_cached  # nothing compiled anew


def test_squad_style_qa_learns_spans_across_windows(tmp_path):
    rng = np.random.default_rng(1)
    vocab = write_vocab(tmp_path / "vocab.txt")
    train = write_squad(tmp_path / "train.json", rng, 400, "t")
    dev = write_squad(tmp_path / "dev.json", rng, 64, "d")
    # one layer learns it too (exact match 0.98 at 8 epochs, 1.0 with two layers at twice the
    # CPU; 0.44 with two layers at 4 epochs)
    config = tiny_config(vocab, "span_qa", max_seq_len=40, epochs=8.0, learning_rate=2e-3,
                         num_hidden_layers=1,
                         **{"data.train_path": train, "data.eval_path": dev,
                            "squad.doc_stride": 12, "squad.max_query_len": 8,
                            "squad.max_answer_length": 6,
                            "data.bucket_lengths": "none"})  # one program per step kind
    data = build_task_data(settings.read(config, "finetune"), tasks_tokenizer(vocab))
    windows_per_question = np.bincount(data.eval_features["example_index"])
    assert windows_per_question.max() >= 2  # contexts really are cut into windows
    result = recipe.train_and_evaluate(config, str(tmp_path / "qa"))
    assert result.last_eval_metrics["exact_match"] > 0.9, result.last_eval_metrics
    with open(tmp_path / "qa" / "predictions" / f"step_{result.step}" / "predictions.json") as f:
        assert len(json.load(f)) == 64


def tasks_tokenizer(vocab_path):
    from bert_jax.data.tokenizers import load as tokenizer
    return tokenizer.load_tokenizer(vocab_path)


def test_bad_input_errors_name_the_fault(tmp_path):
    vocab = write_vocab(tmp_path / "vocab.txt")
    train = tmp_path / "train.csv"
    train.write_text("sentence,label\nthe red car,pos\nthe old book,neg\n", encoding="utf-8")
    dev = tmp_path / "dev.csv"
    dev.write_text("sentence,label\nthe red bag,neutral\n", encoding="utf-8")
    config = tiny_config(vocab, "classification", max_seq_len=16,
                         **{"data.train_path": str(train), "data.eval_path": str(dev),
                            "data.text_column": "sentence"})
    build = lambda: build_task_data(settings.typed(config), tasks_tokenizer(vocab))  # as changed
    with pytest.raises(readers.DataError, match=r"dev\.csv: label\(s\) \['neutral'\] never seen"):
        build()
    config.data.text_column = "text"
    with pytest.raises(readers.DataError, match=r"train\.csv: no column\(s\) \['text'\]"):
        build()
    config.task = "sentiment"
    with pytest.raises(ValueError, match="config.task='sentiment' is unknown"):
        build()


def test_token_loss_counts_first_subwords_of_real_rows_only(tmp_path):
    """The NER loss sees only labelled positions (first sub-words) of real rows: logits
    elsewhere do not move it, and its weight is the number of labelled words."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    vocab = write_vocab(tmp_path / "vocab.txt")
    tokenizer = tasks_tokenizer(vocab)
    sentences = [readers.TaggedSentence(("john", "blackburn", "visited", "paris"),
                                        ("B-PER", "I-PER", "O", "B-LOC")),
                 readers.TaggedSentence(("omar", "okafor"), ("B-PER", "I-PER"))]
    label_map = ("B-LOC", "B-PER", "I-PER", "O")
    features = encoding.encode_tagged_sentences(tokenizer, sentences, 12, label_map)
    batch = {k: jnp.asarray(v) for k, v in features.items() if k != "word_index"}
    batch["example_weights"] = jnp.asarray([1.0, 0.0])  # the second row is padding
    config = tiny_config(vocab, num_hidden_layers=1)
    cfg = recipe_common.model_config(settings.read(config, "finetune"), tokenizer.vocab_size)
    kind = kinds.get("token_classification")
    model = kind.make_model(cfg, {"label_map": label_map})
    params = nn.meta.unbox(recipe.make_init_fn(model, 12)(jax.random.PRNGKey(0)))
    terms, metric = recipe.make_loss_fn(kind, model)(params, batch, jax.random.PRNGKey(1), True)
    assert float(terms["cross_entropy"][1]) == 4.0  # 4 words of the real row
    assert float(metric["token_accuracy"][1]) == 4.0
    # the same loss by hand, from the logits at the first sub-words of row 0
    logits = model.apply({"params": params}, batch["input_ids"], batch["token_type_ids"],
                         batch["attention_mask"], True)
    positions = np.nonzero(features["labels"][0] >= 0)[0]
    log_probs = jax.nn.log_softmax(logits[0, positions], -1)
    expected = -sum(float(log_probs[i, features["labels"][0, p]])
                    for i, p in enumerate(positions))
    assert float(terms["cross_entropy"][0]) == pytest.approx(expected, rel=1e-5)


def test_init_from_a_pretraining_checkpoint_keeps_only_the_head_fresh(tmp_path):
    """init.checkpoint: the encoder of a pre-training run (BertForPreTraining, saved by the
    loop) starts the task model; only the new head is fresh, the MLM head is left out."""
    import jax
    import jax.numpy as jnp

    from bert_jax import BertConfig
    from bert_jax.data.pretraining.synthetic import RandomTokenBatches
    from bert_jax.model import BertForPreTraining
    from bert_jax.recipes import pretrain
    from bert_jax.runtime import sharding
    from bert_jax.train import loop, optimizer, state
    from bert_jax.train.checkpoint import params as params_loading

    cfg = BertConfig.preset("tiny", vocab_size=100, hidden_size=32, num_hidden_layers=1,
                            num_attention_heads=2, intermediate_size=64,
                            max_position_embeddings=32)
    pretraining = BertForPreTraining(cfg, with_nsp=False)
    ids = jnp.zeros((1, 16), jnp.int32)
    positions = jnp.zeros((1, 2), jnp.int32)
    task = loop.Task(cfg, lambda r: pretraining.init(r, ids, positions)["params"],
                     pretrain.make_loss(pretraining))
    opt = settings.OptimizerConfig(learning_rate=1e-3, total_steps=1, warmup_steps=0)
    pre_dir = str(tmp_path / "pretrain")
    loop.train(task, optimizer.make_optimizer(opt), RandomTokenBatches(4, 16, 2, 100, seed=0),
               pre_dir,
               settings.LoopConfig(total_steps=1, global_batch_size=4, async_checkpoints=False),
               sharding.make_mesh())

    vocab = write_vocab(tmp_path / "vocab.txt")
    config = tiny_config(vocab, "token_classification",
                         **{"init.checkpoint": os.path.join(pre_dir, "checkpoints")})
    config.model = run_config.model_block("tiny")  # the shape comes from the checkpoint
    run = settings.read(config, "finetune")
    init_cfg, initial = recipe_common.initial_weights(run)
    start_cfg = recipe_common.model_config(run, 60, init_cfg)
    assert start_cfg.hidden_size == 32 and set(initial) == {"bert"}  # the checkpoint's shape
    model = kinds.get("token_classification").make_model(start_cfg, {"label_map": list("abcde")})
    mesh = sharding.make_mesh()
    fresh, shardings = sharding.init_sharded(
        lambda: recipe.make_init_fn(model, 16)(jax.random.PRNGKey(0)), mesh)
    params, kept_fresh, unused = state.overlay_params(fresh, initial, shardings)
    assert kept_fresh == ["classifier/dense/bias", "classifier/dense/kernel"] and unused == []
    _, saved = params_loading.load_params(os.path.join(pre_dir, "checkpoints"))
    np.testing.assert_array_equal(
        params["bert"]["embeddings"]["word_embeddings"]["embedding"],
        saved["bert"]["embeddings"]["word_embeddings"]["embedding"])


CATEGORIES = {"person": FIRST_NAMES, "object": OBJECTS, "place": [p[0] for p in PLACES]}


def multi_label_rows(rng, count):
    """Texts of filler with words of one to three categories; their labels are the categories
    present, joined by '|' (the order of the names varies)."""
    rows = []
    for _ in range(count):
        present = [c for c in CATEGORIES if rng.random() < 0.5] or [list(CATEGORIES)[
            rng.integers(len(CATEGORIES))]]
        words = list(rng.choice(FILLER[:12], rng.integers(2, 6)))
        for category in present:
            words.insert(rng.integers(len(words) + 1),
                         CATEGORIES[category][rng.integers(len(CATEGORIES[category]))])
        rows.append((" ".join(words), "|".join(rng.permutation(present))))
    return rows


def test_multi_label_kind_learns_a_synthetic_set(tmp_path):
    rng = np.random.default_rng(2)
    vocab = write_vocab(tmp_path / "vocab.txt")
    # training labels joined by '|' in a TSV, evaluation labels as JSON lists
    paths = {"train": tmp_path / "train.tsv", "dev": tmp_path / "dev.jsonl"}
    paths["train"].write_text("text\tlabel\n" + "".join(
        f"{text}\t{labels}\n" for text, labels in multi_label_rows(rng, 400)), encoding="utf-8")
    paths["dev"].write_text("".join(
        json.dumps({"text": text, "label": labels.split("|")}) + "\n"
        for text, labels in multi_label_rows(rng, 64)), encoding="utf-8")
    config = tiny_config(vocab, "multi_label", max_seq_len=16, epochs=15.0, learning_rate=2e-3,
                         **{"data.train_path": str(paths["train"]),
                            "data.eval_path": str(paths["dev"])})
    result = recipe.train_and_evaluate(config, str(tmp_path / "tags"))
    final = result.last_eval_metrics
    assert final["micro_f1"] > 0.95 and final["macro_f1"] > 0.95, final
    with open(tmp_path / "tags" / "predictions" / f"step_{result.step}" /
              "predictions.jsonl", encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    assert len(records) == 64
    assert sum(sorted(r["prediction"]) == r["label"] for r in records) / 64 > 0.9


def test_multi_label_scores_and_label_sets():
    from bert_jax.recipes.finetune import multi_label
    assert multi_label.label_set("b| a |b", "|") == ("a", "b")
    assert multi_label.label_set(["x", "y"], "|") == ("x", "y")
    predicted = np.array([[1, 0, 1], [0, 1, 0]])
    gold = np.array([[1, 0, 0], [0, 1, 1]])
    scores = multi_label.multi_label_scores(predicted, gold)
    # tp 2, fp 1, fn 1 over all decisions; per label F1: 1, 1, 0
    assert scores["micro_f1"] == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))
    assert scores["macro_f1"] == pytest.approx(2 / 3)
    assert scores["exact_match"] == 0.0 and scores["label_accuracy"] == pytest.approx(4 / 6)


def test_accumulation_4x8_equals_1x32_on_a_finetuning_task(tmp_path):
    """Gradient accumulation in fine-tuning: 4 micro-batches of 8 rows give the step of one
    batch of 32 (loss, metrics, gradient norm and, with SGD at lr 1, the new parameters)."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import optax

    from bert_jax.train import steps

    vocab = write_vocab(tmp_path / "vocab.txt")
    tokenizer = tasks_tokenizer(vocab)
    rng = np.random.default_rng(3)
    examples = [readers.TextExample(text, None, labels.split("|")[0])
                for text, labels in multi_label_rows(rng, 32)]
    label_map = encoding.build_label_map([e.label for e in examples])
    features = encoding.encode_text_examples(tokenizer, examples, 16, label_map)
    batch = {k: jnp.asarray(v) for k, v in features.items()}
    run = settings.read(tiny_config(vocab, "classification", num_hidden_layers=1), "finetune")
    kind = kinds.get("classification")
    model = kind.make_model(recipe_common.model_config(run, tokenizer.vocab_size),
                            {"label_map": label_map})
    params = nn.meta.unbox(recipe.make_init_fn(model, 16)(jax.random.PRNGKey(0)))
    loss_fn = recipe.make_loss_fn(kind, model)
    results = []
    for accumulation in (1, 4):
        state = steps.TrainState.create(params, optax.sgd(1.0), jax.random.PRNGKey(1))
        step = jax.jit(steps.make_train_step(loss_fn, optax.sgd(1.0), accumulation))
        results.append(step(state, batch))
    (one, one_metrics), (four, four_metrics) = results
    for name in ("loss", "accuracy", "grad_norm"):
        assert abs(float(one_metrics[name]) - float(four_metrics[name])) < 1e-5, name
    differences = jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a - b))), one.params,
                               four.params)
    assert max(jax.tree.leaves(differences)) < 1e-5
