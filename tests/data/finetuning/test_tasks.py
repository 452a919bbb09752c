"""Fine-tuning readers and features: formats, bad input, label alignment, sliding windows over
long texts and sentences, SQuAD windows."""

import json
import os

import numpy as np
import pytest

from bert_jax.convert import hf
from bert_jax.data import batches, row_layout
from bert_jax.data.corpora import demo as demo_corpus
from bert_jax.data.finetuning import encoding, readers, squad, tfds_tasks
from bert_jax.data.tokenizers import load as tok


@pytest.fixture(scope="module")
def minilm_tokenizer():
    return tok.load_tokenizer(hf.packaged_minilm_dir())


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return str(path)


# ----- readers -------------------------------------------------------------------------------

def test_csv_tsv_jsonl_with_named_columns(tmp_path):
    csv_path = write(tmp_path / "a.csv",
                     'id,sentence,other,gold\n1,"Hi, there",x,pos\n2,Bye,y,neg\n')
    examples = readers.read_text_examples(csv_path, text_column="sentence", label_column="gold")
    assert examples == [readers.TextExample("Hi, there", None, "pos"),
                        readers.TextExample("Bye", None, "neg")]
    tsv_path = write(tmp_path / "b.tsv", "s1\ts2\tscore\nA cat\tA dog\t3.5\n")
    pairs = readers.read_text_examples(tsv_path, text_column="s1", text_pair_column="s2",
                                     label_column="score", regression=True)
    assert pairs == [readers.TextExample("A cat", "A dog", 3.5)]
    jsonl_path = write(tmp_path / "c.jsonl", '{"t": "good", "y": 1}\n\n{"t": "bad", "y": 0}\n')
    assert [e.label for e in readers.read_text_examples(jsonl_path, text_column="t",
                                                      label_column="y")] == ["1", "0"]


def test_fasttext_polarity_file_reads_200_balanced():
    path = os.path.join(demo_corpus.gensim_test_data(), "pang_lee_polarity.cor")
    with pytest.raises(readers.DataError,
                       match=r"pang_lee_polarity\.cor:\d+: not valid utf-8.*cp1252"):
        readers.read_text_examples(path)  # the file is cp1252 (em dashes, accents)
    examples = readers.read_text_examples(path, encoding="cp1252")
    assert any("amélie" in e.text for e in examples)
    assert len(examples) == 200
    assert sorted({e.label for e in examples}) == ["neg", "pos"]
    assert sum(e.label == "pos" for e in examples) == 100
    train, held = readers.holdout_split(examples, 0.25, seed=0)
    assert len(held) == 50 and sum(e.label == "pos" for e in held) == 25
    assert not set(map(id, train)) & set(map(id, held))
    assert readers.holdout_split(examples, 0.25, seed=0) == (train, held)  # seeded


def test_missing_text_column_names_file_and_columns(tmp_path):
    path = write(tmp_path / "a.csv", "sentence,label\nhi,pos\n")
    with pytest.raises(readers.DataError,
                       match=r"a\.csv.*'text'.*columns are \['sentence', 'label'\]"):
        readers.read_text_examples(path, text_column="text", label_column="label")
    jsonl = write(tmp_path / "a.jsonl", '{"sentence": "hi", "label": "x"}\n')
    with pytest.raises(readers.DataError, match=r"a\.jsonl:1: no column 'text'"):
        readers.read_text_examples(jsonl, text_column="text", label_column="label")


def test_empty_file_is_a_clear_error(tmp_path):
    for name in ("e.csv", "e.jsonl", "e.conll", "e.json", "e.cor"):
        path = write(tmp_path / name, "")
        reader = {"e.conll": readers.read_conll, "e.json": readers.read_squad_json}.get(
            name, readers.read_text_examples)
        with pytest.raises(readers.DataError, match=rf"{name}: the file is empty"):
            reader(path)


def test_regression_label_not_a_number(tmp_path):
    path = write(tmp_path / "r.tsv", "a\tb\tscore\nx\ty\thigh\n")
    with pytest.raises(readers.DataError, match=r"r\.tsv:2: label 'high' is not a number"):
        readers.read_text_examples(path, text_column="a", text_pair_column="b",
                                 label_column="score", regression=True)


def test_conll_sentences_and_malformed_line_number(tmp_path):
    good = write(tmp_path / "g.conll", "-DOCSTART- -X- O O\n\nEU NNP B-ORG\nrejects VBZ O\n\n"
                                       "Peter NNP B-PER\nBlackburn NNP I-PER\n")
    sentences = readers.read_conll(good)
    assert sentences == [readers.TaggedSentence(("EU", "rejects"), ("B-ORG", "O")),
                         readers.TaggedSentence(("Peter", "Blackburn"), ("B-PER", "I-PER"))]
    bad = write(tmp_path / "b.conll", "EU B-ORG\nrejects O\n\nPeter B-PER\nBlackburn\n")
    with pytest.raises(readers.DataError, match=r"b\.conll:5: malformed CoNLL line 'Blackburn'"):
        readers.read_conll(bad)


def squad_document(context, answer_text, answer_start, impossible=False):
    answers = [] if impossible else [{"text": answer_text, "answer_start": answer_start}]
    return {"data": [{"title": "t", "paragraphs": [{"context": context, "qas": [
        {"id": "q1", "question": "Where?", "answers": answers, "is_impossible": impossible}]}]}]}


def test_squad_json_and_offset_mismatch(tmp_path):
    context = "The tower is in Paris."
    good = write(tmp_path / "ok.json", json.dumps(squad_document(context, "Paris", 16)))
    assert readers.read_squad_json(good)[0].answers == (readers.Answer("Paris", 16),)
    impossible = write(tmp_path / "v2.json", json.dumps(squad_document(context, "", 0, True)))
    assert readers.read_squad_json(impossible)[0].is_impossible
    bad = write(tmp_path / "bad.json", json.dumps(squad_document(context, "Paris", 14)))
    with pytest.raises(readers.DataError, match=r"bad\.json.*'q1'.*'Paris'.*answer_start=14 does "
                                              r"not match the context there \('n Par'\)"):
        readers.read_squad_json(bad)


def test_tfds_names_offline_give_a_clear_error(tmp_path):
    for name in ("glue/sst2", "conll2003", "squad/v2.0"):
        with pytest.raises(readers.DataError, match=rf"{name}.*not prepared in .*network"):
            tfds_tasks.read_tfds(name, "train", data_dir=str(tmp_path), download=False)
    with pytest.raises(readers.DataError, match="not supported"):
        tfds_tasks.read_tfds("imdb_reviews", "train", data_dir=str(tmp_path), download=False)


# ----- labels and features -------------------------------------------------------------------

def test_eval_label_never_seen_in_training(minilm_tokenizer):
    label_map = encoding.build_label_map(["neg", "pos", "pos"])
    assert label_map == ("neg", "pos")
    examples = [readers.TextExample("fine", None, "neutral")]
    with pytest.raises(readers.DataError,
                       match=r"dev\.csv: label\(s\) \['neutral'\] never seen in training; "
                             r"the training labels are \['neg', 'pos'\]"):
        encoding.encode_text_examples(minilm_tokenizer, examples, 16, label_map, source="dev.csv")
    sentences = [readers.TaggedSentence(("Bob",), ("B-PER",))]
    with pytest.raises(readers.DataError, match=r"B-PER.*never seen"):
        encoding.encode_tagged_sentences(minilm_tokenizer, sentences, 16, ("O", "B-LOC"),
                                         "dev.conll")


def test_pair_features_truncate_longest_first(minilm_tokenizer):
    t = minilm_tokenizer
    long_a = "word " * 40
    features = encoding.encode_text_examples(
        t, [readers.TextExample(long_a, "short one", "x")], 16, ("x",))
    ids, types, mask = (features[k][0] for k in ("input_ids", "token_type_ids", "attention_mask"))
    assert mask.sum() == 16 and ids[0] == t.cls_id and ids[-1] == t.sep_id
    b_ids = t.encode("short one")
    assert list(ids[-len(b_ids) - 1:-1]) == b_ids  # the short text is kept whole
    assert list(types) == [0] * (16 - len(b_ids) - 1) + [1] * (len(b_ids) + 1)
    single = encoding.encode_text_examples(t, [readers.TextExample("a b", None, 2.5)], 8, None)
    assert single["labels"].dtype == np.float32 and single["attention_mask"][0].sum() == 4


def test_ner_labels_on_first_subword_only(minilm_tokenizer):
    t = minilm_tokenizer
    words = ("Johannesburgian", "visits", "Anticonstitutionnellement", "today")
    tags = ("B-PER", "O", "B-LOC", "O")
    label_map = ("B-LOC", "B-PER", "O")
    features = encoding.encode_tagged_sentences(t, [readers.TaggedSentence(words, tags)], 32,
                                                label_map)
    labels, word_index = features["labels"][0], features["word_index"][0]
    pieces = [t.encode(w) for w in words]
    assert len(pieces[0]) > 1 and len(pieces[2]) > 1  # the test needs multi-piece words
    position = 1
    for w, word_pieces in enumerate(pieces):
        assert labels[position] == label_map.index(tags[w]) and word_index[position] == w
        assert all(labels[position + 1:position + len(word_pieces)] == encoding.IGNORE)
        assert list(features["input_ids"][0, position:position + len(word_pieces)]) == word_pieces
        position += len(word_pieces)
    assert labels[0] == encoding.IGNORE and features["input_ids"][0, position] == t.sep_id
    # reading predictions back at first sub-words recovers the tags
    predicted = np.where(labels >= 0, labels, 0)[None]
    assert encoding.tags_from_token_predictions(predicted, word_index[None], [4], label_map) == \
        [list(tags)]
    # truncation: words that do not fit come back as "O"
    short = encoding.encode_tagged_sentences(t, [readers.TaggedSentence(words, tags)], 6, label_map)
    recovered = encoding.tags_from_token_predictions(
        np.where(short["labels"] >= 0, short["labels"], 0), short["word_index"], [4], label_map)
    assert recovered[0][0] == "B-PER" and recovered[0][2:] == ["O", "O"]


def test_short_inputs_give_one_window_the_truncated_row(minilm_tokenizer):
    t = minilm_tokenizer
    texts = ["a short text", "", "another one, with a comma"]
    examples = [readers.TextExample(text, None, "x") for text in texts]
    rows = encoding.encode_text_examples(t, examples, 16, None, with_labels=False)
    windowed = encoding.encode_text_windows(t, examples, 16, 7)
    assert list(windowed["example_index"]) == [0, 1, 2]
    for key in ("input_ids", "token_type_ids", "attention_mask"):
        np.testing.assert_array_equal(windowed[key], rows[key])

    sentences = [readers.TaggedSentence(("Johannesburgian", "visits", "Paris"),
                                        ("B-PER", "O", "B-LOC")),
                 readers.TaggedSentence(("today",), ("O",))]
    label_map = ("B-LOC", "B-PER", "O")
    truncated = encoding.encode_tagged_sentences(t, sentences, 16, label_map)
    slid = encoding.encode_tagged_sentences(t, sentences, 16, label_map, stride=7)
    assert list(slid.pop("example_index")) == [0, 1]
    assert truncated.keys() == slid.keys()
    for key in truncated:
        np.testing.assert_array_equal(slid[key], truncated[key])


def test_tagged_windows_name_each_word_in_exactly_one_row(minilm_tokenizer):
    t = minilm_tokenizer
    words = tuple(["Johannesburgian", "visits", "the", "Anticonstitutionnellement", "today"] * 6)
    tags = tuple(["B-PER", "O", "O", "B-LOC", "O"] * 6)
    label_map = ("B-LOC", "B-PER", "O")
    features = encoding.encode_tagged_sentences(t, [readers.TaggedSentence(words, tags)], 16,
                                                label_map, stride=5)
    assert len(features["input_ids"]) > 3 and set(features["example_index"]) == {0}
    named = features["word_index"][features["word_index"] >= 0]
    assert sorted(named) == list(range(len(words)))  # each word once
    predicted = np.where(features["labels"] >= 0, features["labels"], 0)
    assert encoding.tags_from_token_predictions(
        predicted, features["word_index"], [len(words)], label_map,
        example_index=features["example_index"]) == [list(tags)]


def test_squad_windows_cover_context_and_locate_answer(minilm_tokenizer):
    t = minilm_tokenizer
    filler = " ".join(f"sentence number {i} is filler." for i in range(30))
    context = filler + " The treasure is buried under the old oak tree. " + filler
    start = context.index("under the old oak tree")
    example = readers.QAExample("q", "Where is the treasure buried?", context,
                              (readers.Answer("under the old oak tree", start),))
    config = squad.WindowConfig(max_seq_len=64, doc_stride=20, max_query_len=16)
    features = squad.encode_qa_examples(t, [example], config)
    num_context_tokens = len(t.encode(context))
    assert len(features["input_ids"]) > 3
    # every context token is the max-context token of exactly one window
    covered = features["max_context"].sum()
    assert covered == num_context_tokens
    answered = np.nonzero(features["start_positions"])[0]
    assert len(answered) >= 1
    for w in answered:
        s, e = features["start_positions"][w], features["end_positions"][w]
        a, b = features["offsets"][w, s, 0], features["offsets"][w, e, 1]
        assert context[a:b] == "under the old oak tree"
        assert (features["token_type_ids"][w, s:e + 1] == 1).all()
    # decoding: logits peaked at the answer in one window recover the text
    start_logits = np.zeros(features["input_ids"].shape, np.float32)
    end_logits = np.zeros_like(start_logits)
    w = answered[0]
    start_logits[w, features["start_positions"][w]] = 10
    end_logits[w, features["end_positions"][w]] = 10
    prediction = squad.decode_answers([example], features, start_logits, end_logits)["q"]
    assert prediction.text == "under the old oak tree"


def test_squad_decoding_limits_and_no_answer(minilm_tokenizer):
    context = "alpha beta gamma delta epsilon"
    example = readers.QAExample("q", "which?", context, (readers.Answer("gamma", 11),))
    features = squad.encode_qa_examples(minilm_tokenizer, [example], squad.WindowConfig(32, 8, 8))
    first = int(np.nonzero(features["offsets"][0, :, 0] >= 0)[0][0])  # "alpha"
    start_logits = np.zeros((1, 32), np.float32)
    end_logits = np.zeros((1, 32), np.float32)
    start_logits[0, first], end_logits[0, first + 4] = 5, 5  # alpha .. epsilon: 5 tokens
    end_logits[0, first + 1] = 4  # alpha beta
    decoded = squad.decode_answers([example], features, start_logits, end_logits,
                                   max_answer_length=5)["q"]
    assert decoded.text == context
    decoded = squad.decode_answers([example], features, start_logits, end_logits,
                                   max_answer_length=2)["q"]
    assert decoded.text == "alpha beta"
    start_logits[0, 0], end_logits[0, 0] = 6, 6  # [CLS]: null score 12 > best span 9
    v2 = squad.decode_answers([example], features, start_logits, end_logits, max_answer_length=2,
                              allow_no_answer=True)["q"]
    assert v2.text == "" and v2.null_score == 12 and v2.best_span_score == 9
    lenient = squad.decode_answers([example], features, start_logits, end_logits,
                                   max_answer_length=2, allow_no_answer=True,
                                   no_answer_threshold=5.0)["q"]
    assert lenient.text == "alpha beta"  # 12 - 9 = 3 is under the threshold


def test_train_batches_resume_and_cover_every_row():
    features = {"x": np.arange(10)}
    iterator = batches.train_batches(features, 4, seed=3)
    first_epoch = np.concatenate([next(iterator)["x"] for _ in range(2)])
    state = iterator.get_state()
    after = [next(iterator)["x"] for _ in range(3)]
    resumed = batches.train_batches(features, 4, seed=3)
    resumed.set_state(state)
    assert all((a == next(resumed)["x"]).all() for a in after)
    assert len(set(first_epoch.tolist())) == 8  # no repeats inside an epoch
    halves = [batches.train_batches(features, 4, seed=3, process_index=p, process_count=2)
              for p in range(2)]
    rows = np.concatenate([next(h)["x"] for h in halves])
    assert len(set(rows.tolist())) == 4


def test_eval_batches_pad_last_batch():
    features = {"x": np.arange(5, dtype=np.int32)}
    passes = list(batches.eval_batches(features, 4))
    assert [b["x"].tolist() for b in passes] == [[0, 1, 2, 3], [4, 0, 0, 0]]
    assert passes[1]["example_weights"].tolist() == [1, 0, 0, 0]
    halves = [list(batches.eval_batches(features, 4, process_index=p, process_count=2))
              for p in range(2)]
    assert [b["x"].tolist() for b in halves[1]] == [[2, 3], [0, 0]]
    assert halves[0][1]["example_weights"].tolist() == [1, 0]


def test_pad_rows_adds_or_extends_example_weights():
    batch = {"x": np.ones((3, 2), np.int32), "w": np.ones(3, np.float32)}
    padded = batches.pad_rows(batch, 4)
    assert padded["x"].shape == (4, 2) and padded["x"].dtype == np.int32
    assert padded["x"][3].tolist() == [0, 0] and padded["w"].tolist() == [1, 1, 1, 0]
    assert padded["example_weights"].tolist() == [1, 1, 1, 0]
    weighted = {"x": np.ones(2), "example_weights": np.asarray([1.0, 0.5], np.float32)}
    assert batches.pad_rows(weighted, 3)["example_weights"].tolist() == [1.0, 0.5, 0.0]
    assert batches.pad_rows(batch, 3)["example_weights"].tolist() == [1, 1, 1]
    with pytest.raises(ValueError, match="3 rows to 2"):
        batches.pad_rows(batch, 2)
    assert [row_layout.round_up(n, 4) for n in (0, 1, 4, 5)] == [0, 4, 4, 8]
