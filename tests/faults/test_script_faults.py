"""Script faults (issue 11): a torn metrics line that blocks every resume, and
experiments/convert.py answering a user's mistake with a traceback instead of one line naming the
file."""

import json
import logging
import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

from bert_jax import BertConfig, BertModel, ConfigError
from bert_jax.convert import hf
from bert_jax.train import metrics_writer
from bert_jax.train.checkpoint import params as params_loading
from bert_jax.train.checkpoint import store as checkpointing

from repo_root import ROOT

# ----- a torn last line in metrics.jsonl ----------------------------------------------------------

GOOD = [{"step": 10, "loss": 3.5}, {"step": 20, "loss": 2.5}, {"step": 30, "loss": 1.5}]


def write_metrics(path, records, tail=""):
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail, encoding="utf-8")
    return str(path)


def test_torn_last_line_is_dropped_on_resume_with_a_warning(tmp_path, caplog):
    path = write_metrics(tmp_path / "metrics.jsonl", GOOD, tail='{"step": 40, "lo')  # killed
    with caplog.at_level(logging.WARNING):
        assert metrics_writer.read_metrics(path) == GOOD
    assert path in caplog.text and "line 4" in caplog.text
    with open(path, encoding="utf-8") as f:
        assert f.read().endswith('"lo')  # reading changes nothing

    caplog.clear()
    with caplog.at_level(logging.WARNING):
        metrics_writer.drop_lines_after(path, 30)  # what a resume from step 30 does
    assert path in caplog.text
    assert metrics_writer.read_metrics(path) == GOOD
    with open(path, encoding="utf-8") as f:
        assert f.read() == "".join(json.dumps(r) + "\n" for r in GOOD)  # repaired for appends

    metrics_writer.drop_lines_after(path, 20)
    assert metrics_writer.read_metrics(path) == GOOD[:2]


def test_resume_repairs_both_metrics_files(tmp_path):
    train = write_metrics(tmp_path / metrics_writer.TRAIN_FILE, GOOD, tail='{"step": 4')
    evaluation = write_metrics(tmp_path / metrics_writer.EVAL_FILE, GOOD[:1], tail='{"step": 30, ')
    writer = metrics_writer.MetricsWriter(str(tmp_path), start_step=30)
    try:
        writer.write(40, {"loss": 1.0})
        writer.write(40, {"loss": 1.25}, evaluation=True)
    finally:
        writer.close()
    assert metrics_writer.read_metrics(train) == GOOD + [{"step": 40, "loss": 1.0}]
    assert metrics_writer.read_metrics(evaluation) == GOOD[:1] + [{"step": 40, "loss": 1.25}]


def test_a_bad_line_before_the_last_is_an_error_naming_file_and_line(tmp_path):
    path = write_metrics(tmp_path / "eval_metrics.jsonl", GOOD[:1])
    with open(path, "a", encoding="utf-8") as f:
        f.write('{"step": 15, "lo\n' + json.dumps(GOOD[1]) + "\n")
    for read in (metrics_writer.read_metrics, lambda p: metrics_writer.drop_lines_after(p, 10)):
        with pytest.raises(ValueError) as error:
            read(path)
        assert path in str(error.value) and "line 2" in str(error.value)
    with open(path, encoding="utf-8") as f:
        assert f.read().count("\n") == 3  # left as it was

    not_a_record = write_metrics(tmp_path / "metrics.jsonl", GOOD[:1],
                                 tail="[1, 2]\n" + json.dumps(GOOD[1]) + "\n")
    with pytest.raises(ValueError, match="line 2 is a JSON value but not a record"):
        metrics_writer.drop_lines_after(not_a_record, 10)


# ----- experiments/convert.py: one line for a user's mistake --------------------------------------

CFG = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                 intermediate_size=32, max_position_embeddings=16, type_vocab_size=2)


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory):
    """A real (tiny, random) Hugging Face BertModel folder."""
    directory = str(tmp_path_factory.mktemp("hf") / "good")
    params = BertModel(CFG).init(jax.random.key(0), np.ones((1, 4), np.int32))["params"]
    hf.save(CFG, params, directory)
    return directory


def copy_with(hf_folder, where, name, filename, damage):
    """A copy of hf_folder with one file damaged: damage(bytes) -> bytes; (folder, file)."""
    directory = os.path.join(str(where), name)
    shutil.copytree(hf_folder, directory)
    path = os.path.join(directory, filename)
    with open(path, "rb") as f:
        content = f.read()
    with open(path, "wb") as f:
        f.write(damage(content))
    return directory, path


def convert(*flags):
    """experiments/convert.py in a subprocess: the real exit status and stderr."""
    return subprocess.run([sys.executable, "experiments/convert.py", *flags], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"})


def assert_one_line_error(result, names):
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("convert.py: error: "), result.stderr[-3000:]
    assert names in last, last


def convert_in_process(direction, hf_dir, checkpoint_dir):
    """What convert.py's main does after parsing its flags (cli.run_or_exit around the
    conversion), in this process: the SystemExit it ends with, which a script turns into exit
    status 1 and its message as the last stderr line (one subprocess above shows that)."""
    from bert_jax import cli
    from bert_jax.tools import convert_runs as runs

    if direction == "hf_to_ours":
        fn = lambda: runs.hf_to_ours(hf_dir, checkpoint_dir, False)
    else:
        fn = lambda: runs.ours_to_hf(checkpoint_dir, hf_dir, None, False, None)
    with pytest.raises(SystemExit) as exit_:
        cli.run_or_exit("convert.py", fn)
    return exit_.value


def assert_one_line_exit(exit_, names):
    """A SystemExit with a message: exit status 1 and that message on stderr, no traceback."""
    message = exit_.code
    assert isinstance(message, str) and "\n" not in message, message
    assert message.startswith("convert.py: error: ") and names in message, message


def with_config(hf_folder, where, name, edit):
    def damage(content):
        return edit(content) if callable(edit) else edit
    return copy_with(hf_folder, where, name, hf.CONFIG, damage)


def set_field(name, value):
    def edit(content):
        config = json.loads(content)
        config[name] = value
        return json.dumps(config).encode()
    return edit


@pytest.mark.parametrize("case", ["random_bytes", "truncated", "config_not_json",
                                  "config_bad_value"])
def test_damaged_hugging_face_folder_is_one_line(hf_folder, tmp_path, case):
    if case == "random_bytes":
        folder, named = copy_with(hf_folder, tmp_path, case, hf.SAFETENSORS,
                                  lambda b: np.random.default_rng(0).bytes(len(b)))
    elif case == "truncated":
        folder, named = copy_with(hf_folder, tmp_path, case, hf.SAFETENSORS,
                                  lambda b: b[:len(b) // 2])
    elif case == "config_not_json":
        folder, named = with_config(hf_folder, tmp_path, case, lambda b: b[: len(b) // 2])
    else:
        folder, named = with_config(hf_folder, tmp_path, case, set_field("hidden_size", -3))
    if case == "random_bytes":  # the script itself, once: exit status 1, one stderr line
        result = convert("--direction=hf_to_ours", f"--hf_dir={folder}",
                         f"--checkpoint_dir={tmp_path / 'out'}")
        assert_one_line_error(result, named)
    else:
        assert_one_line_exit(convert_in_process("hf_to_ours", folder, str(tmp_path / "out")),
                             named)
    assert not (tmp_path / "out").exists()


def test_missing_folders_are_one_line(tmp_path):
    missing = str(tmp_path / "no_such_hf_folder")
    assert_one_line_exit(convert_in_process("hf_to_ours", missing, str(tmp_path / "out")),
                         missing)
    missing = str(tmp_path / "no_such_checkpoints")
    assert_one_line_exit(convert_in_process("ours_to_hf", str(tmp_path / "hf_out"), missing),
                         missing)


def test_output_that_already_holds_checkpoints_is_one_line(hf_folder, tmp_path):
    out = str(tmp_path / "ours")
    cfg, params = hf.load(hf_folder)
    manager = checkpointing.make_manager(out, keep=1, async_saves=False)
    try:
        checkpointing.save(manager, 0, {"params": params}, model_config=cfg)
        manager.wait_until_finished()
    finally:
        manager.close()
    exit_ = convert_in_process("hf_to_ours", hf_folder, out)
    assert_one_line_exit(exit_, out)
    assert "already holds checkpoints" in exit_.code


# ----- the same errors from hf.load, for damage that needs no subprocess to show ------------------

def test_more_damaged_files_raise_errors_naming_the_file(hf_folder, tmp_path):
    _, config = with_config(hf_folder, tmp_path, "list", b"[1, 2]")
    with pytest.raises(ConfigError, match="expected a JSON object") as error:
        hf.load(os.path.dirname(config))
    assert config in str(error.value)

    _, config = with_config(hf_folder, tmp_path, "type", set_field("hidden_dropout_prob", "0.1"))
    with pytest.raises(ConfigError, match="wrong type") as error:
        hf.load(os.path.dirname(config))
    assert config in str(error.value)

    folder, _ = copy_with(hf_folder, tmp_path, "index", hf.SAFETENSORS, lambda b: b)
    os.remove(os.path.join(folder, hf.SAFETENSORS))
    index = os.path.join(folder, hf.SAFETENSORS_INDEX)
    with open(index, "w", encoding="utf-8") as f:
        f.write('{"weight_map": ')
    with pytest.raises(hf.CheckpointError) as error:
        hf.load(folder)
    assert index in str(error.value)

    folder, _ = copy_with(hf_folder, tmp_path, "bin", hf.SAFETENSORS, lambda b: b)
    os.remove(os.path.join(folder, hf.SAFETENSORS))
    binary = os.path.join(folder, hf.PYTORCH_BIN)
    with open(binary, "wb") as f:
        f.write(np.random.default_rng(1).bytes(3000))
    with pytest.raises(hf.CheckpointError) as error:
        hf.load(folder)
    assert binary in str(error.value) and "Re-running" not in str(error.value)


def test_a_failed_read_back_is_still_a_bug_not_a_user_error(hf_folder, tmp_path, monkeypatch):
    from bert_jax.tools import convert_runs as runs
    real = params_loading.load_params

    def corrupted(*args, **kwargs):
        cfg, params = real(*args, **kwargs)
        return cfg, jax.tree.map(lambda x: np.asarray(x) + 1, params)

    monkeypatch.setattr(runs.params_loading, "load_params", corrupted)
    with pytest.raises(RuntimeError, match="differs after reading back"):
        runs.hf_to_ours(hf_folder, str(tmp_path / "ours"), encoder_only=False)
