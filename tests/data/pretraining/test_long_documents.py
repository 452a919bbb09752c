"""Long documents: tokenized a window at a time, so the first batch does not wait for them.

The corpus of issue 24 (one short paragraph a line, no blank line, so each file is ONE document
under the default delimiter) made the first pre-training step wait about a minute; here it is
generated small (benchmarks/first_batch.py writes the same shape, 9 MB, for the measurement).
"""

import json
import threading
import time

import grain
import numpy as np
import pytest

from benchmarks.first_batch import write_corpus
from bert_jax.data.corpora import catalog as corpora
from bert_jax.data.pretraining import document_tokens
from bert_jax.data.pretraining import pipeline as pretraining
from bert_jax.data.pretraining.document_packing import PackedRowsIterDataset, PackingSpec
from bert_jax.data.pretraining.document_tokens import DocumentTokens, window_end
from bert_jax.data.tokenizers import load as tok
from bert_jax.data.tokenizers import wordpiece_training
from bert_jax.data.tokenizers.subword import WordPieceTokenizer
from bert_jax.recipes.inputs import schema_data_config

MIXED_TEXT = ("Élan vital\tand CAFÉ au lait. 東京は大きい都市です。 Don't stop-believing!\n"
              "naïve coöperation, résumé; x1y2z3 ##hash [MASK] tokens.\n  \n") * 40


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """(glob, data_dir, vocab_path) of 2 generated files of ~2 MB, one paragraph a line and no
    blank line: 2 documents (one held out), prepared, with a vocabulary of a 200 kB sample."""
    root = tmp_path_factory.mktemp("long_documents")
    paths = write_corpus(str(root / "txt"), files=2, megabytes=4.0)
    with open(paths[0], encoding="utf-8") as f:
        sample = f.read(200_000).split("\n")
    vocab_path = wordpiece_training.train_wordpiece(sample, 1000, str(root / "vocab"))
    glob = f"text:{root}/txt/*.txt"
    data_dir = str(root / "data")
    corpora.prepare(glob, data_dir)  # outside every clock below
    return glob, data_dir, vocab_path


@pytest.fixture(scope="module")
def vocab(corpus):
    return tok.load_tokenizer(corpus[2])


def read_in_steps(document, rng):
    """All ids of a DocumentTokens, read forwards in requests of random sizes."""
    out, start = [], 0
    while True:
        step = int(rng.integers(1, 300))
        ids = document.ids(start, start + step)
        if len(ids) == 0:
            return np.concatenate(out) if out else np.zeros([0], np.int32)
        out.append(ids)
        start += int(rng.integers(1, len(ids) + 1))  # overlapping requests, never backwards
        out[-1] = ids[:start - sum(map(len, out[:-1]))]


@pytest.mark.parametrize("window", [41, 97, 4096])  # half a window > any word here
def test_windows_give_the_ids_of_the_whole_text(vocab, window):
    for text in (MIXED_TEXT, MIXED_TEXT.lower().replace("\n", " ")):
        whole = np.asarray(vocab.encode(text), np.int32)
        document = DocumentTokens(text, vocab.encode, window)
        assert np.array_equal(read_in_steps(document, np.random.default_rng(window)), whole)
        assert document.chars_tokenized == len(text)


def test_window_ends_after_whitespace_or_at_its_limit():
    text = "aaaa bbbb\ncccc dddd eeee"
    assert window_end(text, 0, 12) == 10  # the line break in the window's second half
    assert window_end(text, 10, 8) == 15  # else the last space
    assert window_end("x" * 50, 0, 16) == 16  # none: a hard cut
    assert window_end(text, 20, 100) == len(text)


def test_first_row_tokenizes_one_window_and_rows_keep_every_id(vocab):
    text = "\n".join(["alpha beta gamma delta epsilon " * 6] * 3000)  # ~560k chars, one doc
    given = []

    def encode(piece):
        given.append(len(piece))
        return vocab.encode(piece)

    documents = grain.MapDataset.source([text]).map(lambda t: DocumentTokens(t, encode, 8192))
    spec = PackingSpec(64, vocab.cls_id, vocab.sep_id, vocab.pad_id, 8, vocab.is_continuation, 1)
    rows = iter(PackedRowsIterDataset(
        documents.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)),
        spec))
    first = [next(rows)]
    assert sum(given) == window_end(text, 0, 8192) <= 8192  # one window of ~560k characters
    all_rows = first + list(rows)
    ids = np.concatenate([r["input_ids"][(r["segment_ids"] > 0)
                                         & (r["input_ids"] != vocab.cls_id)
                                         & (r["input_ids"] != vocab.sep_id)] for r in all_rows])
    assert np.array_equal(ids, vocab.encode(text))  # every id, in order, none dropped
    assert sum(given) == len(text)  # each character tokenized once


def count_tokenized(monkeypatch) -> list[int]:
    """The lengths of the texts handed to the tokenizer from now on, by any thread."""
    given = []
    encode, encode_batch = WordPieceTokenizer.encode, WordPieceTokenizer.encode_batch
    monkeypatch.setattr(WordPieceTokenizer, "encode",
                        lambda self, text: given.append(len(text)) or encode(self, text))
    monkeypatch.setattr(WordPieceTokenizer, "encode_batch", lambda self, texts: given.append(
        sum(map(len, texts))) or encode_batch(self, texts))
    return given


@pytest.mark.parametrize("sentence_pairs", [False, True])
def test_first_batch_of_long_documents_is_quick_and_reads_a_prefix(corpus, monkeypatch,
                                                                   sentence_pairs):
    glob, data_dir, vocab_path = corpus
    source = corpora.load_source(glob, "train", data_dir)
    longest = max(len(corpora.document_text(source[i])) for i in range(len(source)))
    assert len(source) == 1 and longest > 1_500_000  # one document of ~2 MB on this split
    given = count_tokenized(monkeypatch)
    cfg = schema_data_config(corpus=glob, data_dir=data_dir, vocab_path=vocab_path,
                             sentence_pairs=sentence_pairs)
    start = time.perf_counter()
    iterator = pretraining.make_iterator(cfg, "train", global_batch_size=32)
    batch = next(iterator)
    seconds = time.perf_counter() - start
    tokenized = sum(given)
    iterator.close()
    print(f"first batch after {seconds:.2f} s, {tokenized} characters tokenized of a document "
          f"of {longest}")
    assert batch["input_ids"].shape == (32, 128)
    # The read-ahead threads tokenize the first window of each document they hold (32 at most,
    # here the one document again and again) and, for sentence pairs, a random B's span; the
    # packer a few windows more.
    assert tokenized <= 48 * document_tokens.WINDOW_CHARS < longest / 2
    assert seconds < 30.0  # generous: about a second on a quiet 2-core machine


def test_resume_inside_a_long_document_starts_at_its_window(corpus, monkeypatch):
    glob, data_dir, vocab_path = corpus
    cfg = schema_data_config(corpus=glob, data_dir=data_dir, vocab_path=vocab_path, seed=5)
    iterator = pretraining.make_iterator(cfg, "train", global_batch_size=16)
    for _ in range(12):  # 192 rows: ~24k ids, past the first windows
        next(iterator)
    state = json.loads(json.dumps(iterator.get_state()))
    expected = next(iterator)
    iterator.close()
    window = state["grain"]["window"]
    assert window[0] > 0 and 0 < state["grain"]["offset"] - window[1] < 16 * 128 * 4
    old_state = json.loads(json.dumps(state))
    del old_state["grain"]["window"]  # as saved before documents were tokenized by windows
    encode = WordPieceTokenizer.encode
    for saved in (state, old_state):
        by_packer = []  # characters the packer (this thread) tokenizes; read-ahead threads aside

        def counting(self, text, by_packer=by_packer):
            if threading.current_thread() is threading.main_thread():
                by_packer.append(len(text))
            return encode(self, text)

        monkeypatch.setattr(WordPieceTokenizer, "encode", counting)
        resumed = pretraining.make_iterator(cfg, "train", global_batch_size=16)
        resumed.set_state(saved)
        batch = next(resumed)
        resumed.close()
        for key in expected:
            np.testing.assert_array_equal(batch[key], expected[key])
        if saved is state:  # from the window on, not from the document's beginning
            assert sum(by_packer) <= 2 * document_tokens.WINDOW_CHARS < window[0]
        else:
            assert sum(by_packer) >= window[0] - document_tokens.WINDOW_CHARS


def test_sentences_by_window_are_those_of_the_whole_text(vocab):
    from bert_jax.data.pretraining.sentence_pairs import PairSpec, Sentences, split_sentences

    ends = tuple(vocab.token_to_id(t) for t in (".", "!"))
    spec = PairSpec(32, vocab.cls_id, vocab.sep_id, vocab.pad_id, ends, 0.1,
                    vocab.is_continuation)
    lines = [line for line in MIXED_TEXT.split("\n") if line.strip()]
    whole = split_sentences(vocab.encode_batch(lines), spec)
    sentences = Sentences(MIXED_TEXT, vocab.encode_batch, spec, window_chars=300)
    read, i = [], 0
    while sentences.has(i):
        read.append(sentences[i])
        sentences.forget_before(i - 2)  # a consumer steps back a little, never far
        i += 1
    assert len(read) == len(whole) > 100
    assert all(np.array_equal(a, b) for a, b in zip(read, whole))


def test_sentence_pairs_resume_inside_a_long_document(corpus):
    glob, data_dir, vocab_path = corpus
    cfg = schema_data_config(corpus=glob, data_dir=data_dir, vocab_path=vocab_path,
                             seed=7, sentence_pairs=True)
    iterator = pretraining.make_iterator(cfg, "train", global_batch_size=16)
    for _ in range(6):
        next(iterator)
    state = json.loads(json.dumps(iterator.get_state()))
    expected = next(iterator)
    iterator.close()
    assert state["grain"]["offset"] == 6 * 16  # rows into the one document: inside it
    resumed = pretraining.make_iterator(cfg, "train", global_batch_size=16)
    resumed.set_state(state)  # the document's rows are made again up to the offset
    batch = next(resumed)
    resumed.close()
    for key in expected:
        np.testing.assert_array_equal(batch[key], expected[key])
