"""Exported runs work in transformers as they are: tokenizer, labels, heads, pipelines.

Tiny BERTs (1 layer, 32 wide, the MiniLM vocabulary, one batch length) are fine-tuned in-process
for a few steps on real sentences for classification (gensim's polarity sentences), NER (news-style
sentences tagged here) and span QA (encyclopedia-style paragraphs written here), and a tiny BERT is
pre-trained with experiments/pretrain.py on the Lee news stories of the demo corpus, as a text:
corpus (its own vocabulary, trained on them; the whole demo corpus's preparation costs four times
the run, the Wikipedia sample's parsing, and is not the subject here). Each run is
exported the way `experiments/convert.py --direction=ours_to_hf` does (the script itself in a new
process for the NER run, the others in-process through the same cli.run_or_exit and
runs.ours_to_hf); transformers' AutoTokenizer, pipelines and BertForMaskedLM must then give what
our own code gives on the same inputs: every classification label (probabilities within 1e-5),
every NER first-sub-word tag, every QA answer text, every MLM masked token and top-5 list (the
model is on the unigram plateau after so few steps, so the logits over the 512-piece vocabulary,
within 1e-4, are the telling figure).
"""

import json
import os
import re
import subprocess
import sys

import flax.linen as nn
import jax
import numpy as np
import pytest
import tokenizers
import torch
import transformers

from bert_jax import (
    BertConfig,
    BertForPreTraining,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertModel,
)
from bert_jax.config import run as run_config
from bert_jax.convert import hf
from bert_jax.data.corpora import demo as demo_corpus
from bert_jax.data.finetuning import encoding, readers
from bert_jax.data.tokenizers import hf_folder as hf_tokenizer
from bert_jax.data.tokenizers import load as tok
from bert_jax.data.tokenizers import subword as subword_tokenizer
from bert_jax.data.tokenizers import wordpiece, wordpiece_training
from bert_jax.recipes.finetune import recipe
from bert_jax.tools import convert_runs
from bert_jax.train.checkpoint import params as params_loading
from bert_jax.train.checkpoint import store as checkpointing

import hf_peer
from finetune_runs import tiny_finetune_config
from repo_root import ROOT

torch.set_num_threads(2)
transformers.logging.set_verbosity_error()

MINILM = hf.packaged_minilm_dir()

# Real sentences with accents, other scripts and odd punctuation, for tokenizer parity.
ODD_SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Café naïve façade — «quoted» text… and Ampère’s ‘curly’ quotes",
    "Zürich's Straße; ¿Dónde está el baño? ¡Olé!",
    "北京欢迎你! 東京タワー is in Tokyo.",
    "e-mail: jane.doe@example.com, $3.50 (approx.) #hashtag 50% off!!!",
    "Ελληνικά and Русский текст, plus Ünïcödé MIXED case",
    "He said: \"don't\" — it's 9:30pm… ok?!",
    "ﬁne ligatures ① ⅔ ™ non\u00a0breaking and zero\u200bwidth",
    "Tabs\tand\nnew lines, emoji 😀 and control\u0007chars",
]


def run_convert(*flags):
    """experiments/convert.py in a new process."""
    done = subprocess.run([sys.executable, os.path.join(ROOT, "experiments", "convert.py"), *flags],
                          capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def export_run(workdir, out, checkpoint_dir=None, named_workdir=None, script=False):
    """convert.py ours_to_hf of a run's checkpoints (the run found from the checkpoint folder,
    unless named_workdir, its --workdir, is given): the script in a new process if `script`, else
    what its main does, in-process; config.json as written."""
    checkpoint_dir = checkpoint_dir or os.path.join(workdir, "checkpoints")
    if script:
        run_convert("--direction=ours_to_hf", f"--hf_dir={out}",
                    f"--checkpoint_dir={checkpoint_dir}",
                    *([f"--workdir={named_workdir}"] if named_workdir else []))
    else:
        from bert_jax import cli
        cli.run_or_exit("convert.py", lambda: convert_runs.ours_to_hf(
            str(checkpoint_dir), str(out), None, False, named_workdir))
    with open(os.path.join(out, "config.json"), encoding="utf-8") as f:
        return json.load(f)


def tiny_config(task, **changes):
    """A 1-layer, 32-wide BERT over the MiniLM vocabulary (tokenizer.json, uncased), one batch
    length (no buckets: one compiled program per step kind)."""
    return tiny_finetune_config(task, MINILM, hidden_size=32, num_hidden_layers=1,
                                max_position_embeddings=128,
                                **{"max_seq_len": 128, "learning_rate": 2e-3,
                                   "data.bucket_lengths": "none", **changes})


def load_run_params(workdir):
    cfg, params = params_loading.load_params(checkpointing.checkpoint_dir(workdir))
    return cfg, jax.device_get(params)


# ----- the tokenizer ---------------------------------------------------------------------------

def small_model(vocab_size, max_position_embeddings=64):
    cfg = BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=1,
                     num_attention_heads=2, intermediate_size=64,
                     max_position_embeddings=max_position_embeddings)
    ids = np.ones((1, 4), np.int32)
    return cfg, nn.meta.unbox(BertModel(cfg).init(jax.random.key(0), ids)["params"])


def tokenizers_to_check(tmp_path):
    """(name, tokenizer): uncased tokenizer.json (MiniLM), vocab.txt lower-cased and cased, and
    a cased vocabulary trained here on real text (its tokenizer.json)."""
    lee = os.path.join(demo_corpus.gensim_test_data(), "lee_background.cor")
    with open(lee, encoding="utf-8") as f:
        texts = [line for line in f if line.strip()][:200]
    trained = wordpiece_training.train_wordpiece(texts, 2000, str(tmp_path / "cased_vocab"),
                                                 lowercase=False)
    vocab_txt = os.path.join(MINILM, "vocab.txt")
    return [("minilm tokenizer.json", tok.load_tokenizer(MINILM)),
            ("vocab.txt lowercase", tok.load_tokenizer(vocab_txt, lowercase=True)),
            ("vocab.txt cased", tok.load_tokenizer(vocab_txt, lowercase=False)),
            ("vocab.txt cased, accents stripped",
             tok.load_tokenizer(vocab_txt, lowercase=False, strip_accents=True)),
            ("trained cased tokenizer.json",
             tok.load_tokenizer(os.path.join(os.path.dirname(trained), "tokenizer.json")))]


def test_autotokenizer_of_an_export_tokenizes_as_ours(tmp_path):
    for number, (name, ours) in enumerate(tokenizers_to_check(tmp_path)):
        cfg, params = small_model(max(ours.vocab_size, 8), max_position_embeddings=96)
        out = tmp_path / f"export_{number}"
        hf.save(cfg, params, out, tokenizer=ours)
        settings = json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))
        assert settings["tokenizer_class"] == "BertTokenizer"
        assert settings["model_max_length"] == 96
        assert settings["do_lower_case"] == ("cased" not in name), name
        assert (out / "vocab.txt").read_text(encoding="utf-8").splitlines() == [
            ours.id_to_token(i) for i in range(ours.vocab_size)]
        # transformers 4: tokenizer.json, and vocab.txt with the options (the slow one);
        # transformers 5: one class, rebuilt from vocab.txt and the options (hf_peer)
        for fast in (True, False) if hf_peer.MAJOR < 5 else (True,):
            theirs = transformers.AutoTokenizer.from_pretrained(out, use_fast=fast)
            assert type(theirs).__name__ == (hf_peer.fast_tokenizer_name("BertTokenizer")
                                             if fast else "BertTokenizer")
            for text in ODD_SENTENCES:
                expected = [ours.cls_id, *ours.encode(text), ours.sep_id]
                assert theirs(text)["input_ids"] == expected, (name, fast, text)
            a, b = ODD_SENTENCES[1], ODD_SENTENCES[2]
            ids, types = encoding.pack_pair(ours, ours.encode(a), ours.encode(b), 96)
            pair = theirs(a, b)
            assert (pair["input_ids"], pair["token_type_ids"]) == (ids, types), (name, fast)


def test_special_token_text_is_the_one_difference():
    """transformers matches "[MASK]" written in the text; our tokenizer from a vocab.txt reads
    it as characters (a tokenizer.json with the special tokens registered agrees)."""
    text = "Paris is the [MASK] of France."
    from_json = tok.load_tokenizer(MINILM)
    from_txt = tok.load_tokenizer(os.path.join(MINILM, "vocab.txt"))
    assert from_json.mask_id in from_json.encode(text)
    assert from_txt.mask_id not in from_txt.encode(text)


def test_a_tokenizer_hf_bert_cannot_express_is_refused(tmp_path):
    vocab = {t: i for i, t in enumerate([*wordpiece.SPECIAL_TOKENS, "a", "##b"])}
    backend = tokenizers.Tokenizer(tokenizers.models.WordPiece(vocab, unk_token=wordpiece.UNK))
    backend.normalizer = tokenizers.normalizers.Lowercase()
    backend.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    odd = subword_tokenizer.WordPieceTokenizer(backend, source="odd.json")
    cfg, params = small_model(16)
    with pytest.raises(ValueError) as error:
        hf.save(cfg, params, tmp_path / "out", tokenizer=odd)
    assert "odd.json" in str(error.value) and "BertNormalizer" in str(error.value)
    assert "BertPreTokenizer" in str(error.value)
    assert not (tmp_path / "out").exists()  # nothing written
    too_big = tok.load_tokenizer(MINILM)
    with pytest.raises(hf.CheckpointError, match="30522 tokens but the model's vocab_size is 16"):
        hf.save(cfg, params, tmp_path / "out", tokenizer=too_big)
    assert not (tmp_path / "out").exists()


# ----- what the Hugging Face format cannot hold -------------------------------------------------

def test_a_model_option_hf_bert_lacks_is_refused(tmp_path):
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class WithRotary(BertConfig):  # a model option added after the exporter was written
        rotary_positions: bool = False

    cfg, params = small_model(16)
    with pytest.raises(hf.CheckpointError) as error:
        hf.save(WithRotary(**dataclasses.asdict(cfg), rotary_positions=True), params,
                tmp_path / "refused")
    assert "BertConfig.rotary_positions=True cannot be exported" in str(error.value)
    assert not (tmp_path / "refused").exists()
    # At its default it computes plain BERT: exported, and config.json holds only HF's keys.
    hf.save(WithRotary(**dataclasses.asdict(cfg)), params, tmp_path / "fine")
    written = json.loads((tmp_path / "fine" / "config.json").read_text())
    assert "rotary_positions" not in written and "remat_policy" not in written
    # Runtime fields (compute dtype, remat) are not model options.
    hf.save(cfg.replace(dtype="bfloat16", remat_policy="full"), params, tmp_path / "bf16")


def test_labels_must_fit_the_head(tmp_path):
    cfg, encoder = small_model(16)
    ids = np.ones((1, 4), np.int32)
    sequence = nn.meta.unbox(BertForSequenceClassification(cfg, 3).init(
        jax.random.key(1), ids, ids, ids)["params"])
    tokens = nn.meta.unbox(BertForTokenClassification(cfg, 3).init(
        jax.random.key(1), ids, ids, ids)["params"])
    for params, options, message in [
            (sequence, {"label_map": ["a", "b"]}, "does not name the 3 outputs"),
            (sequence, {"label_map": ["a", "b", "a"]}, "once each"),
            (sequence, {"problem_type": "regression"}, "needs 1 output"),
            (sequence, {"problem_type": "ranking"}, "does not fit"),
            (tokens, {"problem_type": "single_label_classification"}, "does not fit a "
             "BertForTokenClassification"),
            (encoder, {"label_map": ["a"]}, "need a classifier head")]:
        with pytest.raises(hf.CheckpointError, match=message):
            hf.save(cfg, params, tmp_path / "out", **options)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("problem_type, num_labels", [
    ("single_label_classification", 3), ("multi_label_classification", 3), ("regression", 1)])
def test_problem_type_gives_the_pipeline_our_scores(tmp_path, problem_type, num_labels):
    """softmax, a sigmoid per label, or the raw score: transformers' text-classification
    pipeline reads problem_type and must give the scores our heads give."""
    ours_tokenizer = tok.load_tokenizer(MINILM)
    cfg = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=64)
    model = BertForSequenceClassification(cfg, num_labels)
    ids = np.ones((1, 4), np.int32)
    params = nn.meta.unbox(model.init(jax.random.key(2), ids, ids, ids)["params"])
    labels = ["politics", "sports", "weather"][:num_labels] if num_labels > 1 else None
    hf.save(cfg, params, tmp_path, tokenizer=ours_tokenizer, label_map=labels,
            problem_type=problem_type)
    pipe = transformers.pipeline("text-classification", model=str(tmp_path), device=-1)
    for text in ODD_SENTENCES[:4]:
        row = np.asarray([[ours_tokenizer.cls_id, *ours_tokenizer.encode(text),
                           ours_tokenizer.sep_id]], np.int32)
        logits = np.asarray(model.apply({"params": params}, row, np.zeros_like(row),
                                        np.ones_like(row)))[0]
        expected = {"single_label_classification": np.exp(logits) / np.exp(logits).sum(),
                    "multi_label_classification": 1 / (1 + np.exp(-logits)),
                    "regression": logits}[problem_type]
        got = {r["label"]: r["score"] for r in pipe(text, top_k=None)}
        names = labels or ["LABEL_0"]
        np.testing.assert_allclose([got[n] for n in names], expected, atol=1e-5)


def test_export_options_of_each_task_kind(tmp_path):
    """task.json -> hf.save's labels and problem_type (convert.py), for every kind."""
    params = {"bert": {}, "classifier": {}}
    expected = {"classification": "single_label_classification", "regression": "regression",
                "multi_label": "multi_label_classification", "token_classification": None}
    for kind, problem_type in expected.items():
        workdir = tmp_path / kind
        config = run_config.finetune_config(kind)
        config.tokenizer.path = os.path.join(MINILM, "vocab.txt")
        config.tokenizer.lowercase = False
        workdir.mkdir()
        (workdir / "config.json").write_text(json.dumps(config.to_dict()))
        labels = [] if kind == "regression" else ["B-LOC", "O"]
        (workdir / "task.json").write_text(json.dumps({"task": kind, "label_map": labels}))
        options = convert_runs.run_export_options(str(workdir), params)
        assert options["problem_type"] == problem_type, kind
        assert options["label_map"] == (labels or None), kind
        assert options["tokenizer"].source.endswith("vocab.txt")
        assert hf_tokenizer.hf_bert_settings(options["tokenizer"])["do_lower_case"] is False
    assert convert_runs.find_workdir(str(tmp_path / "classification" / "checkpoints")) == \
        str(tmp_path / "classification")
    assert convert_runs.find_workdir(str(tmp_path / "classification" / "checkpoints" / "12")) \
        == str(tmp_path / "classification")
    assert convert_runs.find_workdir(str(tmp_path / "nowhere" / "checkpoints")) is None
    qa = convert_runs.run_export_options(str(tmp_path / "classification"),
                                           {"bert": {}, "qa_outputs": {}})
    assert "label_map" not in qa and "problem_type" not in qa


# ----- fine-tuned runs through transformers' pipelines ------------------------------------------

def test_classification_run_in_the_text_classification_pipeline(tmp_path):
    polarity = os.path.join(demo_corpus.gensim_test_data(), "pang_lee_polarity.cor")
    config = tiny_config("classification", total_steps=6, **{
        "data.train_path": polarity, "data.format": "fasttext", "data.encoding": "cp1252",
        "data.heldout_fraction": 0.25})
    workdir = str(tmp_path / "run")
    result = recipe.train_and_evaluate(config, workdir)
    with open(os.path.join(workdir, "predictions", f"step_{result.step}", "predictions.jsonl"),
              encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    written = export_run(workdir, tmp_path / "hf")
    assert written["architectures"] == ["BertForSequenceClassification"]
    assert written["id2label"] == {"0": "neg", "1": "pos"}
    assert written["label2id"] == {"neg": 0, "pos": 1}
    assert written["problem_type"] == "single_label_classification"

    pipe = transformers.pipeline("text-classification", model=str(tmp_path / "hf"), device=-1)
    got = pipe([r["text"] for r in records], truncation=True, batch_size=8)
    agree = sum(g["label"] == r["prediction"] for g, r in zip(got, records))
    score_diff = max(abs(g["score"] - max(r["probabilities"].values()))
                     for g, r in zip(got, records))
    print(f"classification: pipeline agrees on {agree}/{len(records)} labels "
          f"(ours predicts {sorted({r['prediction'] for r in records})}); "
          f"max |score - our probability| {score_diff:.2g}")
    assert agree == len(records) == 50
    assert score_diff <= 1e-5  # our probabilities are written with 6 decimals


def bio(annotated):
    """'[Angela Merkel](PER) met ...' -> (words, BIO tags)."""
    words, tags = [], []
    for entity, kind, word in re.findall(r"\[([^\]]+)\]\((\w+)\)|(\S+)", annotated):
        if word:
            words.append(word)
            tags.append("O")
        else:
            pieces = entity.split()
            words += pieces
            tags += [f"B-{kind}"] + [f"I-{kind}"] * (len(pieces) - 1)
    return words, tags


NER_TRAIN = [
    "[Angela Merkel](PER) met [Emmanuel Macron](PER) in [Berlin](LOC) on Tuesday .",
    "[Apple](ORG) opened a new store in [Tokyo](LOC) last week .",
    "[Serena Williams](PER) won the [US Open](MISC) in [New York](LOC) .",
    "The [European Union](ORG) fined [Google](ORG) 2.4 billion euros .",
    "[Barack Obama](PER) was born in [Honolulu](LOC) , [Hawaii](LOC) .",
    "[Toyota](ORG) recalled thousands of cars sold in [Canada](LOC) .",
    "[Lionel Messi](PER) signed with [Inter Miami](ORG) in 2023 .",
    "Heavy snow closed roads across [Scotland](LOC) on Monday .",
    "[Microsoft](ORG) chief [Satya Nadella](PER) spoke in [Seattle](LOC) .",
    "[Marie Curie](PER) studied physics at the [University of Paris](ORG) .",
    "The [Nile](LOC) flows north through [Egypt](LOC) into the [Mediterranean Sea](LOC) .",
    "[NASA](ORG) launched the [Artemis](MISC) rocket from [Florida](LOC) .",
    "[Pedro Sánchez](PER) visited [São Paulo](LOC) and [Brasília](LOC) .",
    "Fans of [Real Madrid](ORG) celebrated in the streets of [Madrid](LOC) .",
    "[Amazon](ORG) employs more than a million people in the [United States](LOC) .",
    "The [Tour de France](MISC) ended in [Paris](LOC) on Sunday .",
    "[Elon Musk](PER) said [Tesla](ORG) would build a factory near [Berlin](LOC) .",
    "[Jacinda Ardern](PER) led [New Zealand](LOC) through the pandemic .",
    "[Siemens](ORG) reported higher profits in [Germany](LOC) .",
    "The [Olympic Games](MISC) were held in [Tokyo](LOC) in 2021 .",
]
NER_EVAL = [
    "[Angela Merkel](PER) visited [Zürich](LOC) with [Olaf Scholz](PER) .",
    "[Google](ORG) announced a deal with [Samsung](ORG) in [Seoul](LOC) .",
    "[Novak Djokovic](PER) won [Wimbledon](MISC) again .",
    "[Renault](ORG) builds cars in [Morocco](LOC) and [Turkey](LOC) .",
    "[François Hollande](PER) spoke at the [United Nations](ORG) in [New York](LOC) .",
    "Rain fell on [Lisbon](LOC) all weekend , forecasters said .",
    "[Sony](ORG) sold 20 million consoles , analysts said .",
    "[Kylian Mbappé](PER) joined [Real Madrid](ORG) from [Paris Saint-Germain](ORG) .",
]


def write_conll(path, annotated):
    with open(path, "w", encoding="utf-8") as f:
        for sentence in annotated:
            words, tags = bio(sentence)
            f.writelines(f"{w} {t}\n" for w, t in zip(words, tags))
            f.write("\n")
    return str(path)


def test_token_classification_run_in_the_token_classification_pipeline(tmp_path):
    config = tiny_config("token_classification", total_steps=6, **{
        "data.train_path": write_conll(tmp_path / "train.conll", NER_TRAIN),
        "data.eval_path": write_conll(tmp_path / "eval.conll", NER_EVAL)})
    workdir = str(tmp_path / "run")
    result = recipe.train_and_evaluate(config, workdir)
    with open(os.path.join(workdir, "predictions", f"step_{result.step}", "predictions.conll"),
              encoding="utf-8") as f:
        ours = [[line.split()[2] for line in block.splitlines()]
                for block in f.read().strip().split("\n\n")]
    # convert.py in a new process: --workdir named, the checkpoint folder elsewhere (a copy)
    import shutil
    shutil.copytree(os.path.join(workdir, "checkpoints"), tmp_path / "copied")
    written = export_run(workdir, tmp_path / "hf", str(tmp_path / "copied"), workdir,
                         script=True)
    assert written["architectures"] == ["BertForTokenClassification"]
    tags = sorted({t for s in NER_TRAIN for t in bio(s)[1]})
    assert written["id2label"] == {str(i): t for i, t in enumerate(tags)}
    assert "problem_type" not in written

    # Our probabilities at the first sub-words, in-process through bert_jax.
    cfg, params = load_run_params(workdir)
    sentences = [readers.TaggedSentence(*map(tuple, bio(s))) for s in NER_EVAL]
    features = encoding.encode_tagged_sentences(tok.load_tokenizer(MINILM), sentences, 128, tags)
    logits = np.asarray(BertForTokenClassification(cfg, len(tags)).apply(
        {"params": params}, features["input_ids"], features["token_type_ids"],
        features["attention_mask"]))
    probabilities = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)

    pipe = transformers.pipeline("token-classification", model=str(tmp_path / "hf"),
                                 aggregation_strategy="none", ignore_labels=[], device=-1)
    agree = total = 0
    score_diff = 0.0
    for row, (sentence, predicted) in enumerate(zip(sentences, ours)):
        tokens = {t["start"]: t for t in pipe(" ".join(sentence.words))}  # first sub-words
        position = 0
        first_subwords = np.nonzero(features["word_index"][row] >= 0)[0]
        for word, tag, token in zip(sentence.words, predicted, first_subwords):
            theirs = tokens[position]
            agree += theirs["entity"] == tag
            total += 1
            score_diff = max(score_diff, abs(theirs["score"] - probabilities[row, token].max()))
            assert tags[probabilities[row, token].argmax()] == tag
            position += len(word) + 1
    print(f"token classification: pipeline agrees on {agree}/{total} first-sub-word tags "
          f"(ours predicts {sorted({t for s in ours for t in s})}); max |score diff| "
          f"{score_diff:.2g}")
    assert agree == total == sum(len(s.words) for s in sentences)
    assert score_diff <= 1e-5


QA_PARAGRAPHS = [
    ("The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. "
     "It is named after the engineer Gustave Eiffel, whose company designed and built the tower "
     "from 1887 to 1889.",
     [("Who is the Eiffel Tower named after?", "Gustave Eiffel"),
      ("Where is the Eiffel Tower?", "on the Champ de Mars in Paris"),
      ("When was the tower built?", "from 1887 to 1889")]),
    ("Marie Curie was a Polish and naturalised-French physicist and chemist who conducted "
     "pioneering research on radioactivity. She was the first woman to win a Nobel Prize, and "
     "the only person to win Nobel Prizes in two scientific fields.",
     [("What did Marie Curie research?", "radioactivity"),
      ("What was Marie Curie's nationality?", "Polish and naturalised-French"),
      ("What was she the first woman to win?", "a Nobel Prize")]),
    ("The Amazon River in South America is the largest river by discharge volume of water in "
     "the world. It flows through Peru, Colombia and Brazil before emptying into the Atlantic "
     "Ocean.",
     [("Into which ocean does the Amazon flow?", "the Atlantic Ocean"),
      ("Which countries does the Amazon flow through?", "Peru, Colombia and Brazil")]),
    ("Python is a high-level programming language created by Guido van Rossum and first "
     "released in 1991. Its design philosophy emphasizes code readability with the use of "
     "significant indentation.",
     [("Who created Python?", "Guido van Rossum"),
      ("When was Python first released?", "1991"),
      ("What does Python's design philosophy emphasize?", "code readability")]),
]


def write_squad(path):
    paragraphs = [{"context": context, "qas": [
        {"id": f"q{p}_{i}", "question": question, "is_impossible": False,
         "answers": [{"text": answer, "answer_start": context.index(answer)}]}
        for i, (question, answer) in enumerate(questions)]}
        for p, (context, questions) in enumerate(QA_PARAGRAPHS)]
    path.write_text(json.dumps({"data": [{"title": "facts", "paragraphs": paragraphs}]}),
                    encoding="utf-8")
    return str(path)


def test_span_qa_run_in_the_question_answering_pipeline(tmp_path):
    """One window per question (the contexts fit), every span considered (n_best = max_seq_len)
    and the pipeline's answer kept to token boundaries (align_to_words=False), as ours is: then
    both pick the span of the highest start + end logit, and the texts must be the same."""
    squad = write_squad(tmp_path / "facts.json")
    config = tiny_config("span_qa", total_steps=6, **{
        "data.train_path": squad, "data.eval_path": squad, "squad.doc_stride": 64,
        "squad.max_query_len": 32, "squad.n_best": 128, "squad.max_answer_length": 15})
    workdir = str(tmp_path / "run")
    result = recipe.train_and_evaluate(config, workdir)
    with open(os.path.join(workdir, "predictions", f"step_{result.step}", "predictions.json"),
              encoding="utf-8") as f:
        ours = json.load(f)
    # one step folder: the run is two levels up
    written = export_run(workdir, tmp_path / "hf",
                         os.path.join(workdir, "checkpoints", str(result.step)))
    assert written["architectures"] == ["BertForQuestionAnswering"]
    assert (tmp_path / "hf" / "tokenizer.json").exists()

    # transformers 5 has no question-answering pipeline; the README's replacement, the model
    # class and the tokenizer's offsets, is checked in both versions, the pipeline where it is.
    answerers = {"model and offsets": hf_span_answer(tmp_path / "hf")}
    if hf_peer.MAJOR < 5:
        pipe = transformers.pipeline("question-answering", model=str(tmp_path / "hf"),
                                     device=-1)
        answerers["pipeline"] = lambda question, context: pipe(
            question=question, context=context, max_answer_len=15, align_to_words=False,
            max_seq_len=128, doc_stride=64)["answer"]
    for reader, answer in answerers.items():
        agree = total = 0
        for p, (context, questions) in enumerate(QA_PARAGRAPHS):
            for i, (question, _) in enumerate(questions):
                agree += answer(question, context) == ours[f"q{p}_{i}"]
                total += 1
        print(f"span QA, {reader}: agrees on {agree}/{total} answers; ours: "
              f"{sorted(ours.values())}")
        assert agree == total == len(ours) == 11


def hf_span_answer(folder, max_answer_len: int = 15):
    """question, context -> the answer of transformers' AutoModelForQuestionAnswering on an
    exported folder, read as the README says: the span of context tokens with the highest start
    + end logit (start <= end, at most max_answer_len tokens), cut from the context at the
    tokenizer's offsets."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForQuestionAnswering.from_pretrained(folder).eval()

    def answer(question: str, context: str) -> str:
        encoded = tokenizer(question, context, return_offsets_mapping=True,
                            return_tensors="pt")
        offsets = encoded.pop("offset_mapping")[0].tolist()
        in_context = [i for i, s in enumerate(encoded.sequence_ids(0)) if s == 1]
        with torch.no_grad():
            out = model(**encoded)
        start, end = out.start_logits[0].tolist(), out.end_logits[0].tolist()
        best = max(((a, b) for a in in_context for b in in_context
                    if a <= b < a + max_answer_len), key=lambda ab: start[ab[0]] + end[ab[1]])
        return context[offsets[best[0]][0]:offsets[best[1]][1]]
    return answer


# ----- a pre-training run in BertForMaskedLM ---------------------------------------------------

MASKED_SENTENCES = [
    "The president of the [MASK] States spoke on Monday.",
    "The police said the man was [MASK] in the attack.",
    "Australia won the [MASK] match against England.",
    "The government will spend more [MASK] on schools.",
    "It was the [MASK] day of the year in Sydney.",
    "[MASK] people were killed when the bus crashed.",
    "The company said its profits had [MASK] by ten per cent.",
    "Fire crews fought the [MASK] for three days.",
]


def test_pretraining_run_in_bert_for_masked_lm(tmp_path):
    workdir = str(tmp_path / "demo")
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "experiments", "pretrain.py"),
         "--config=" + os.path.join(ROOT, "experiments", "configs", "demo.py"),
         f"--workdir={workdir}", "--config.total_steps=10", "--config.eval_batches=2",
         # the demo corpus's news stories, one per line, without its Wikipedia sample
         "--config.data.corpus=text:" + os.path.join(demo_corpus.gensim_test_data(),
                                                     demo_corpus.LEE_CORPUS),
         "--config.data.document_delimiter=line",
         # a small model, a small batch: the export is the point, not the learning
         "--config.model.hidden_size=32", "--config.model.num_hidden_layers=1",
         "--config.model.num_attention_heads=2", "--config.model.intermediate_size=64",
         "--config.batch_size=8", "--config.eval_batch_size=8",
         "--config.model.layer_norm_position=post",  # BERT as published: exportable
         "--config.model.position_embedding_type=absolute", "--config.data.mask_rate=0.15",
         "--config.max_seq_len=16", "--config.data.max_predictions=3",
         "--config.learning_rate=1e-3", "--config.tokenizer.vocab_size=512",
         "--config.eval_every_steps=0", "--config.checkpoint_every_steps=0",
         "--config.async_checkpoints=false"],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
        env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert done.returncode == 0, done.stderr[-3000:]
    written = export_run(workdir, tmp_path / "hf")
    assert written["architectures"] == ["BertForMaskedLM"]

    theirs_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    masked_lm = transformers.BertForMaskedLM.from_pretrained(tmp_path / "hf").eval()
    from bert_jax.tools import saved_runs
    ours_tokenizer = saved_runs.run_tokenizer(workdir)
    cfg, params = load_run_params(workdir)
    model = BertForPreTraining(cfg, with_nsp=False)
    agree = total = 0
    logit_diff = 0.0
    predicted = []
    top5_agree = 0
    for text in MASKED_SENTENCES:
        batch = theirs_tokenizer(text, return_tensors="np")
        ids = batch["input_ids"].astype(np.int32)
        pieces = [ours_tokenizer.encode(part) for part in text.split("[MASK]")]
        ours_ids = [ours_tokenizer.cls_id, *pieces[0], ours_tokenizer.mask_id, *pieces[1],
                    ours_tokenizer.sep_id]
        assert ids[0].tolist() == ours_ids  # the same tokens, [MASK] where the text says
        positions = np.nonzero(ids[0] == ours_tokenizer.mask_id)[0][None].astype(np.int32)
        ours = np.asarray(model.apply({"params": params}, ids, positions, np.zeros_like(ids),
                                      np.ones_like(ids)).mlm_logits)[0]
        with torch.no_grad():
            logits = masked_lm(**{k: torch.from_numpy(v) for k, v in batch.items()}).logits
        at_masks = logits[0, positions[0]].numpy()
        logit_diff = max(logit_diff, float(np.abs(ours - at_masks).max()))
        agree += int((ours.argmax(-1) == at_masks.argmax(-1)).sum())
        total += positions.shape[1]
        top5 = np.argsort(-at_masks, axis=-1, kind="stable")[:, :5]
        top5_agree += int((np.argsort(-ours, axis=-1, kind="stable")[:, :5] == top5).all(-1).sum())
        predicted += [theirs_tokenizer.convert_ids_to_tokens(row.tolist()) for row in top5]
    print(f"MLM: BertForMaskedLM agrees on {agree}/{total} masked tokens, on the top 5 in "
          f"order at {top5_agree}/{total} (top 5: {predicted}); max |logit diff| "
          f"{logit_diff:.2g} over the vocabulary")
    assert agree == top5_agree == total == len(MASKED_SENTENCES)
    assert logit_diff <= 1e-4
