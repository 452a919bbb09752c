"""Resources that run out (issue 40, class 7): a full disk while experiments/prepare_data.py
prepares a raw-text corpus (TFDS array_record) or writes its vocabulary ends in one line naming
the folder or file, leaves no half-written file that a rerun would take for a whole one, and the
rerun after space is freed gives the same bytes as a preparation that never stopped.

The full disk is injected (tests/faults/inject.py: the array_record writer's own error, a
vocab.txt write stopped half-way); where this process may mount a tmpfs (root on Linux), the
corpus case also runs against a real 1 MB tmpfs that is then grown ("space freed").
"""

import errno
import filecmp
import os
import subprocess
import sys

import pytest

from bert_jax.data.corpora import catalog

from repo_root import ROOT, TESTS

SCRIPT = os.path.join(ROOT, "experiments", "prepare_data.py")
INJECT = os.path.join(ROOT, "tests", "faults", "inject.py")
WORDS = ("river stone light paper window garden music winter summer letter morning number "
         "market silver forest island station teacher village engine").split()


def write_corpus(folder, documents=240, seed=0):
    """Documents of 40-80 words from a fixed word list, blank-line separated, in 4 files."""
    import random
    rng = random.Random(seed)
    os.makedirs(folder, exist_ok=True)
    for i in range(4):
        docs = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(40, 80)))
                for _ in range(documents // 4)]
        with open(os.path.join(folder, f"part{i}.txt"), "w", encoding="utf-8") as f:
            f.write("\n\n".join(docs) + "\n")
    return f"text:{folder}/*.txt"


def prepare_data(corpus, data_dir, fault=None, vocab_size=200):
    command = [sys.executable, *([INJECT, fault] if fault else []), SCRIPT, f"--corpus={corpus}",
               f"--data_dir={data_dir}", f"--vocab_size={vocab_size}"]
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)


def prepared_files(data_dir):
    """Relative path -> full path of every file under data_dir (the lock file aside)."""
    found = {}
    for folder, _, names in os.walk(data_dir):
        for name in names:
            if name != ".bert_jax.lock":
                path = os.path.join(folder, name)
                found[os.path.relpath(path, data_dir)] = path
    return found


def same_data(reference, data_dir):
    """The array_record files and vocab.txt of two data dirs hold the same bytes (the file names
    include a hash of the glob, so both preparations read the same text folder)."""
    ours, theirs = prepared_files(reference), prepared_files(data_dir)
    names = [n for n in ours if ".array_record-" in n or n.endswith("vocab.txt")]
    assert len(names) >= 3 and sorted(n for n in theirs if n in names) == sorted(names)
    return all(filecmp.cmp(ours[n], theirs[n], shallow=False) for n in names)


def one_error_line(result):
    lines = [line for line in result.stderr.splitlines() if line.startswith("prepare_data.py:")]
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert len(lines) == 1, result.stderr[-3000:]
    return lines[0]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The corpus and an uninterrupted preparation of it."""
    root = tmp_path_factory.mktemp("corpus")
    corpus = write_corpus(str(root / "text"))
    result = prepare_data(corpus, str(root / "reference"))
    assert result.returncode == 0, result.stderr[-3000:]
    return corpus, str(root / "reference")


def test_a_full_disk_while_the_corpus_is_written_is_one_line_and_the_rerun_gives_the_same_bytes(
        reference, tmp_path):
    corpus, reference_dir = reference
    data_dir = str(tmp_path / "data")
    line = one_error_line(prepare_data(corpus, data_dir, fault="enospc-array-record:train"))
    assert line.startswith(f"prepare_data.py: error: {data_dir}: no space left on the device "
                           "while preparing corpus"), line
    assert "run the same command again" in line
    # nothing half-prepared is left to be taken for a corpus: no array_record file at all
    assert not [n for n in prepared_files(data_dir) if ".array_record-" in n]
    rerun = prepare_data(corpus, data_dir)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert same_data(reference_dir, data_dir)


def test_a_full_disk_while_vocab_txt_is_written_leaves_no_part_and_the_rerun_trains_it_whole(
        reference, tmp_path):
    """New case: the vocabulary is the marker of a trained folder (a run reuses a vocab.txt it
    finds); a full disk half-way through it must leave none, nor a temporary file beside it."""
    corpus, reference_dir = reference
    data_dir = str(tmp_path / "data")
    line = one_error_line(prepare_data(corpus, data_dir, fault="enospc-vocab"))
    assert line.endswith("vocab.txt: No space left on device (it was left as it was)"), line
    assert not [n for n in prepared_files(data_dir) if os.path.basename(n).startswith("vocab.txt")]
    rerun = prepare_data(corpus, data_dir)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert same_data(reference_dir, data_dir)


def test_disk_full_is_found_through_the_errors_tfds_wraps_it_in():
    inner = RuntimeError("write() failed: No space left on device; writing /d/x; at byte 9")
    try:
        try:
            raise inner
        except RuntimeError as e:
            raise RuntimeError('Failed to finalize writing of split "train"') from e
    except RuntimeError as outer:
        assert catalog.disk_full(outer)
    assert catalog.disk_full(OSError(errno.EDQUOT, "quota"))
    assert not catalog.disk_full(RuntimeError("Failed to close chunk_writer"))


def _mount_tmpfs(folder, size):
    os.makedirs(folder, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", folder],
                          capture_output=True).returncode == 0


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.geteuid() != 0,
                    reason="mounting a tmpfs needs root on Linux")
def test_a_real_full_tmpfs_then_more_space(reference, tmp_path):
    corpus, reference_dir = reference
    mount = str(tmp_path / "small")
    if not _mount_tmpfs(mount, "96k"):
        pytest.skip("this container may not mount a tmpfs")
    try:
        data_dir = os.path.join(mount, "data")
        line = one_error_line(prepare_data(corpus, data_dir))
        assert line.startswith(f"prepare_data.py: error: {data_dir}: no space left"), line
        assert subprocess.run(["mount", "-o", "remount,size=8m", mount]).returncode == 0
        rerun = prepare_data(corpus, data_dir)
        assert rerun.returncode == 0, rerun.stderr[-3000:]
        assert same_data(reference_dir, data_dir)
    finally:
        subprocess.run(["umount", mount])


def test_a_corpus_past_tfds_shuffle_buffer_without_tensorflow_is_one_line(tmp_path, monkeypatch):
    """New case: past 1 GB of records TFDS's shuffle spills to disk through TensorFlow, which
    this stack does not install: a traceback (ModuleNotFoundError) before, one line now (the
    buffer is made small here instead of writing a GB)."""
    pytest.importorskip("tensorflow_datasets")
    try:
        import tensorflow  # noqa: F401
        pytest.skip("TensorFlow is installed: TFDS spills through it")
    except ImportError:
        pass
    from tensorflow_datasets.core import shuffle
    monkeypatch.setattr(shuffle, "MAX_MEM_BUFFER_SIZE", 1 << 10)
    corpus = write_corpus(str(tmp_path / "text"))
    with pytest.raises(ValueError, match=r"too large for TFDS to prepare in memory here: past 0 "
                                         r"GB of records its shuffle spills to disk through "
                                         r"TensorFlow, which is not installed.*prepare_shards"):
        catalog.prepare(corpus, str(tmp_path / "data"))


# ----- new case: a full disk while a script writes its output ----------------------------------

class _FullAfter:
    """A file whose writes fail with ENOSPC, and no file name, once `room` bytes are written
    (what a full disk does to a buffered write)."""

    def __init__(self, f, room):
        self._f, self._room = f, room

    def write(self, data):
        self._room -= len(data)
        if self._room < 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self._f.write(data)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


def _open_filling_up(room):
    def open_(file, mode="r", *args, **kwargs):
        f = open(file, mode, *args, **kwargs)
        return _FullAfter(f, room) if "w" in mode and ".partial-" in str(file) else f
    return open_


def test_a_full_disk_while_predict_writes_its_output_names_the_output(tmp_path, monkeypatch):
    """New case (predict.py, embed.py and convert.py writing onto a full 64 KiB tmpfs): the
    error was `predict.py: error: a file: No space left on device`, naming nothing. Now the
    output is named, and the previous version is left whole with nothing beside it."""
    from bert_jax import cli
    from bert_jax.recipes.finetune import predict

    output = tmp_path / "out.jsonl"
    output.write_text("the previous predictions\n")
    monkeypatch.setattr(predict, "open", _open_filling_up(100), raising=False)
    records = ({"index": i, "prediction": "pos"} for i in range(50))
    with pytest.raises(SystemExit) as stopped:
        cli.run_or_exit("predict.py", lambda: predict.write_jsonl_atomically(records,
                                                                              str(output)))
    assert stopped.value.code == (f"predict.py: error: {output}: No space left on device (while "
                                  "writing it; what was there before is as it was)")
    assert output.read_text() == "the previous predictions\n"
    assert os.listdir(tmp_path) == ["out.jsonl"]


EMBED_ON_A_FULL_DISK = """
import runpy, sys
from bert_jax.embeddings import encode
sys.path.insert(0, sys.argv[1])
from test_resource_faults import _open_filling_up
encode.open = _open_filling_up(64)
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_a_full_disk_while_embed_writes_names_both_files(tmp_path):
    from bert_jax.convert import hf
    texts = tmp_path / "texts.txt"
    texts.write_text("a short text\nanother one\n")
    prefix = tmp_path / "vectors"
    done = subprocess.run(
        [sys.executable, "-c", EMBED_ON_A_FULL_DISK, os.path.dirname(__file__),
         os.path.join(ROOT, "experiments", "embed.py"), f"--model={hf.packaged_minilm_dir()}",
         f"--input={texts}", f"--output={prefix}"], capture_output=True, text=True,
        timeout=300, env=dict(os.environ, JAX_PLATFORMS="cpu",
                              PYTHONPATH=os.pathsep.join([ROOT, TESTS])))
    assert done.returncode == 1, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1] == (
        f"embed.py: error: {prefix}.npy and {prefix}.index.jsonl: No space left on device (while "
        "writing it; what was there before is as it was)")
    assert sorted(os.listdir(tmp_path)) == ["texts.txt"]
