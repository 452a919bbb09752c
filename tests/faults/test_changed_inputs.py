"""A run's inputs change under it (issue 40, class 1): <workdir>/inputs.json fingerprints the
files a run reads when it starts (bert_jax/recipes/inputs.py); a resume, evaluate.py, predict.py
and embed.py against a changed file stop with one line naming it and what changed, unless
allow_changed_inputs says to go on, and then inputs.json records the change."""

import json
import os
import subprocess
import sys

import pytest

from bert_jax.recipes import inputs as run_inputs
from bert_jax.recipes import pretrain
from bert_jax.recipes.finetune import recipe as finetune_recipe

from finetune_runs import set_keys, tiny_finetune_config
from pretrain_runs import tiny_pretrain_config
from repo_root import ROOT
from script_errors import one_line

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ["good", "bad", "movie", "film", "the", "a", "is", "was", "not", "fun"]



def script(name, *flags):
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, os.path.join(ROOT, "experiments", name), *flags],
                          env=env, capture_output=True, text=True, timeout=300)
    return done


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory):
    """A finished tiny classification run (4 steps, checkpoints 2 and 4) and its files."""
    root = tmp_path_factory.mktemp("finetuned")
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(SPECIALS + WORDS) + "\n", encoding="utf-8")
    rows = [f"{a} {b}\t{'pos' if a == 'good' else 'neg'}" for a in ("good", "bad")
            for b in WORDS] * 2
    train = root / "train.tsv"
    train.write_text("text\tlabel\n" + "\n".join(rows) + "\n", encoding="utf-8")
    config = tiny_finetune_config("classification", str(vocab), hidden_size=16,
                                  num_hidden_layers=1, max_position_embeddings=32,
                                  **{"data.train_path": str(train), "data.eval_path": str(train),
                                     "max_seq_len": 16, "total_steps": 4,
                                     "checkpoint_every_steps": 2})
    workdir = root / "run"
    finetune_recipe.train_and_evaluate(config, str(workdir))
    return config, workdir, vocab, train


def test_the_run_records_a_fingerprint_of_each_input(finetuned):
    _, workdir, vocab, train = finetuned
    record = json.loads((workdir / "inputs.json").read_text())
    assert record["files"][str(vocab)]["role"] == "tokenizer"
    assert record["files"][str(train)]["role"].startswith("training data")
    assert record["files"][str(train)]["size"] == os.path.getsize(train)
    assert not record["files"][str(train)]["sampled"]


def test_a_training_tsv_edited_between_interruption_and_resume_stops_the_resume(finetuned,
                                                                                tmp_path):
    """Half the labels flipped (the same size): the rerun of the same command refuses in one
    line naming the file; with allow_changed_inputs it goes on and inputs.json says so."""
    config, workdir, _, train = finetuned
    original = train.read_text(encoding="utf-8")
    lines = original.splitlines()
    flipped = [line.replace("\tpos", "\tneg") if i % 2 else line for i, line in enumerate(lines)]
    train.write_text("\n".join(flipped) + "\n", encoding="utf-8")
    try:
        message = one_line(lambda: finetune_recipe.train_and_evaluate(config, str(workdir)),
                           "finetune.py")
        assert message.startswith(f"finetune.py: error: an input of the run in {workdir} "
                                  "changed since the run started"), message
        assert (f"{train} (training data (data.train_path)) has other content than when the "
                "run started (same size") in message
        assert "--config.allow_changed_inputs=true" in message
        allowed = set_keys(config.copy_and_resolve_references(), {"allow_changed_inputs": True})
        finetune_recipe.train_and_evaluate(allowed, str(workdir))
        record = json.loads((workdir / "inputs.json").read_text())
        assert record["changes"][-1]["by"] == "training (resumed)"
        assert str(train) in record["changes"][-1]["changed"][0]
        # the change is now the record: the same command goes on without the flag
        finetune_recipe.train_and_evaluate(config, str(workdir))
    finally:
        train.write_text(original, encoding="utf-8")
        run_inputs.check_and_record(config, str(workdir), has_checkpoint=False)  # as it was


def test_two_lines_of_vocab_txt_swapped_stop_predict_and_evaluate(finetuned, tmp_path):
    _, workdir, vocab, _ = finetuned
    original = vocab.read_text(encoding="utf-8")
    lines = original.splitlines()
    lines[5], lines[6] = lines[6], lines[5]  # "good" <-> "bad": same size
    vocab.write_text("\n".join(lines) + "\n", encoding="utf-8")
    texts = tmp_path / "texts.txt"
    texts.write_text("good movie\nbad film\n", encoding="utf-8")
    try:
        done = script("predict.py", f"--workdir={workdir}", f"--input={texts}",
                      f"--output={tmp_path / 'out.jsonl'}")
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
        line = done.stderr.strip().splitlines()[-1]
        assert line.startswith(f"predict.py: error: an input of the run in {workdir} changed"), line
        assert f"{vocab} (tokenizer) has other content than when the run started" in line
        assert "--allow_changed_inputs" in line and not (tmp_path / "out.jsonl").exists()
        message = one_line(lambda: run_inputs.check_run(str(workdir), "evaluate.py"),
                           "evaluate.py")
        assert f"{vocab} (tokenizer) has other content" in message
        done = script("evaluate.py", f"--workdir={workdir}")
        assert done.returncode == 1, done.stderr[-3000:]
        assert f"{vocab} (tokenizer) has other content" in done.stderr.strip().splitlines()[-1]
        run_inputs.check_run(str(workdir), "predict.py", allow=True)  # goes on, recorded
        record = json.loads((workdir / "inputs.json").read_text())
        assert record["changes"][-1]["by"] == "predict.py"
    finally:
        vocab.write_text(original, encoding="utf-8")


def test_a_prepared_corpus_file_cut_in_half_or_added_stops_the_resume(tmp_path):
    folder = tmp_path / "txt"
    folder.mkdir()
    words = "river stone bridge lantern harbour meadow orchard violin".split()
    lines = [" ".join(words[(i + j) % len(words)] for j in range(12)) for i in range(60)]
    (folder / "lines.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = tiny_pretrain_config(**{"data.corpus": f"text:{folder}/*.txt",
                                     "data.document_delimiter": "line",
                                     "tokenizer.vocab_size": 120, "eval_batches": 1})
    workdir = str(tmp_path / "run")
    pretrain.train_and_evaluate(config, workdir)
    record = json.loads((tmp_path / "run" / "inputs.json").read_text())
    shards = sorted(p for p, f in record["files"].items() if ".array_record-" in p
                    and "-train." in p)
    assert shards and all(record["files"][p]["role"] == "corpus" for p in shards)
    assert any(f["role"] == "tokenizer" for f in record["files"].values())
    largest = max(shards, key=os.path.getsize)
    content = open(largest, "rb").read()
    with open(largest, "wb") as f:
        f.write(content[:len(content) // 2])
    message = one_line(lambda: pretrain.train_and_evaluate(config, workdir), "pretrain.py")
    assert f"{largest} (corpus) has {len(content) // 2} bytes, and {len(content)} when the run " \
           "started" in message, message
    # New case: the file restored, but a file added to the corpus folder (another shard
    # copied in) is named too.
    with open(largest, "wb") as f:
        f.write(content)
    extra = os.path.join(os.path.dirname(largest), "text_files-train.array_record-00001-of-00002")
    with open(extra, "wb") as f:
        f.write(content)
    message = one_line(lambda: pretrain.train_and_evaluate(config, workdir), "pretrain.py")
    assert f"{extra} (corpus) is new in the corpus folder" in message, message
    os.remove(extra)
    pretrain.train_and_evaluate(config, workdir)  # as recorded: resumes


def test_a_sampled_fingerprint_finds_truncation_and_a_changed_block_and_says_what_it_misses(
        tmp_path, monkeypatch):
    """New case, a corpus file over SAMPLE_ABOVE: its size and the sampled blocks are
    compared; a same-size change between the sampled blocks is not seen (the documented
    limit)."""
    monkeypatch.setattr(run_inputs, "SAMPLE_ABOVE", 1 << 16)
    monkeypatch.setattr(run_inputs, "SAMPLE_BYTES", 1 << 10)
    path = tmp_path / "shard"
    data = bytearray(os.urandom(1 << 20))
    path.write_bytes(bytes(data))
    saved = run_inputs.fingerprint(str(path), sampled=True)
    assert saved["sampled"] and saved["size"] == 1 << 20
    record = {"files": {str(path): {"role": "corpus", **saved}}}
    changed = bytearray(data)
    changed[0] ^= 1  # the first sampled block
    path.write_bytes(bytes(changed))
    assert "has other content" in run_inputs.differences(record)[0]
    gap = (len(data) - (1 << 10)) // 15 // 2  # halfway between two sampled blocks
    changed = bytearray(data)
    changed[gap] ^= 1
    path.write_bytes(bytes(changed))
    assert run_inputs.differences(record) == []  # what a sample misses
    path.write_bytes(bytes(data[:-1]))
    assert "has 1048575 bytes" in run_inputs.differences(record)[0]


def test_the_shard_readers_derived_counts_are_not_inputs(tmp_path):
    """A token-shard folder prepared without per-document counts gets them from its first run
    (document_tokens.<split>.npy, checked against the manifest at every open): a file the run
    writes into the folder after recording its inputs, so not one of them; a resume after it is
    not refused (tests/data/pretraining/test_batch_warmup.py resumes such a run)."""
    from bert_jax.recipes import inputs as run_inputs

    for name in ("manifest.json", "train-00000-of-00001.array_record", "tokenizer.json",
                 "document_tokens.train.npy", "document_tokens.validation.npy", ".hidden"):
        (tmp_path / name).write_bytes(b"x")
    assert [os.path.basename(p) for p in run_inputs.corpus_inputs(str(tmp_path))] == [
        "manifest.json", "tokenizer.json", "train-00000-of-00001.array_record"]


# ----- new cases, as an adversarial user would try -----------------------------------------------

def _swapped_tokenizer_json(vocab_lines, path):
    """A tokenizer.json of the same WordPiece vocabulary with "good" and "bad" swapped."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    lines = list(vocab_lines)
    a, b = lines.index("good"), lines.index("bad")
    lines[a], lines[b] = lines[b], lines[a]
    tokenizer = Tokenizer(models.WordPiece({t: i for i, t in enumerate(lines)},
                                           unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.save(str(path))


def test_a_tokenizer_file_added_to_the_runs_tokenizer_folder_stops_predict(tmp_path, caplog):
    """New case: a run whose tokenizer.path is a folder holding vocab.txt; a tokenizer.json
    copied into that folder afterwards is what the loader reads first (tokenizer.json is
    preferred), so predict.py answered with other token ids, exit 0: only the files present at
    the start were fingerprinted. The folder is recorded too, and a tokenizer file new in it is
    a change, named in one line."""
    from bert_jax.data.tokenizers.load import load_tokenizer

    folder = tmp_path / "tokenizer"
    folder.mkdir()
    (folder / "vocab.txt").write_text("\n".join(SPECIALS + WORDS) + "\n", encoding="utf-8")
    train = tmp_path / "train.tsv"
    train.write_text("text\tlabel\ngood film\tpos\nbad film\tneg\n", encoding="utf-8")
    config = tiny_finetune_config("classification", str(folder), hidden_size=16,
                                  num_hidden_layers=1, max_position_embeddings=32,
                                  **{"data.train_path": str(train), "max_seq_len": 16})
    workdir = tmp_path / "run"
    workdir.mkdir()
    run_inputs.check_and_record(config, str(workdir), has_checkpoint=False)
    before = load_tokenizer(str(folder)).encode("good film")
    _swapped_tokenizer_json(SPECIALS + WORDS, folder / "tokenizer.json")
    assert load_tokenizer(str(folder)).encode("good film") != before  # what the run would read
    message = one_line(lambda: run_inputs.check_run(str(workdir), "predict.py",
                                                    roles=[run_inputs.TOKENIZER]), "predict.py")
    assert (f"{folder / 'tokenizer.json'} (tokenizer) is new in the tokenizer folder"
            in message), message
    with caplog.at_level("WARNING"):
        run_inputs.check_run(str(workdir), "predict.py", roles=[run_inputs.TOKENIZER],
                             allow=True)
    assert "tokenizer.json (tokenizer) is new in the tokenizer folder" in caplog.text


@pytest.mark.slow  # three scripts in their own processes and a resume: ~25 s
def test_a_run_made_before_fingerprints_says_so_and_records_them_on_resume(finetuned,
                                                                          tmp_path, caplog):
    """Item 2: an old workdir (no inputs.json): evaluate.py, predict.py and embed.py on it say
    in one line that its inputs were not fingerprinted when it was made and go on; its resume
    says so too and records them, so that a later change is found."""
    import shutil
    config, workdir, _, train = finetuned
    old = tmp_path / "old_run"
    shutil.copytree(workdir, old)
    os.remove(old / "inputs.json")
    notice = (f"the run in {old} was made before its inputs were fingerprinted (it has no "
              "inputs.json)")
    texts = tmp_path / "texts.txt"
    texts.write_text("good movie\n", encoding="utf-8")
    for name, flags in (("predict.py", [f"--input={texts}", f"--output={tmp_path / 'p.jsonl'}"]),
                        ("evaluate.py", []),
                        ("embed.py", [f"--input={texts}", f"--output={tmp_path / 'e'}"])):
        done = script(name, f"--workdir={old}", *flags)
        assert done.returncode == 0, done.stderr[-3000:]
        lines = [line for line in done.stderr.splitlines() if notice in line]
        assert len(lines) == 1 and f"{name} cannot tell whether its tokenizer or data changed " \
            "since it was trained (a resume records them)" in lines[0], done.stderr[-3000:]
    assert not (old / "inputs.json").exists()
    with caplog.at_level("WARNING"):
        finetune_recipe.train_and_evaluate(config, str(old))  # the same command: resumes
    assert f"{notice}: they are recorded now" in caplog.text
    record = json.loads((old / "inputs.json").read_text())
    assert record["files"][str(train)]["size"] == os.path.getsize(train)
