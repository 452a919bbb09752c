"""Outputs that destroy what they replace (issue 40, class 2): the one rule of
bert_jax/runtime/outputs.py, as predict.py, evaluate.py, embed.py, convert.py and the training
scripts apply it. An output never equals, holds or lies inside an input, a run's files or a model
folder it did not write (one line, before anything is written); a file or an export folder is
written beside its target and renamed into place (a killed or failed write leaves the previous
version whole, and the next write names the leftover); an export folder holds one export."""

import json
import logging
import os
import signal
import subprocess
import sys

import jax
import numpy as np
import pytest

from bert_jax import BertConfig, BertModel, cli
from bert_jax.config import run_keys
from bert_jax.convert import hf
from bert_jax.recipes.finetune import predict
from bert_jax.runtime import outputs
from bert_jax.tools import convert_runs as runs

import script_errors
from repo_root import ROOT

CFG = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                 intermediate_size=32, max_position_embeddings=32, type_vocab_size=2)
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(59)]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A run's workdir (config.json, vocab, checkpoints/ from a tiny HF folder) and that folder."""
    root = tmp_path_factory.mktemp("outputs")
    model = str(root / "hf_model")
    params = BertModel(CFG).init(jax.random.key(0), np.ones((1, 4), np.int32))["params"]
    hf.save(CFG, params, model)
    workdir = root / "run"
    runs.hf_to_ours(model, str(workdir / "checkpoints"), encoder_only=True)
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n")
    (workdir / "config.json").write_text(json.dumps(
        {"recipe": "pretrain", "max_seq_len": 12, "tokenizer": {"path": str(vocab)},
         "init": {"hf_dir": ""}}))
    return {"root": root, "workdir": str(workdir), "model": model, "vocab": str(vocab),
            "checkpoints": str(workdir / "checkpoints")}


def export(run, hf_dir, **options):
    return runs.ours_to_hf(run["checkpoints"], str(hf_dir), None, False, **options)


def one_line(fn, script="convert.py"):
    return script_errors.one_line(fn, script)


def snapshot(folder):
    return {name: open(os.path.join(folder, name), "rb").read()
            for name in sorted(os.listdir(folder))
            if os.path.isfile(os.path.join(folder, name))}


# ----- the cases of the issue ------------------------------------------------------------------

def test_predict_output_naming_the_input_is_refused(tmp_path):
    """predict.py --output=<--input>: one line, the input untouched."""
    source = tmp_path / "new.txt"
    source.write_text("a text\n")
    fault = cli.output_file_fault(str(source), protected=predict.protected_inputs(
        str(tmp_path / "run"), str(source)))
    assert fault == (f"--output={source} is the input (--input) ({source}): writing there would "
                     "replace it; name another path")
    assert source.read_text() == "a text\n"


def test_export_into_the_runs_own_workdir_is_refused(run):
    before = open(os.path.join(run["workdir"], "config.json")).read()
    message = one_line(lambda: export(run, run["workdir"], tokenizer=run["vocab"]))
    assert f"--hf_dir={run['workdir']} holds the checkpoint folder" in message
    assert open(os.path.join(run["workdir"], "config.json")).read() == before


def test_a_workdir_that_is_the_model_folder_it_starts_from_is_refused(run):
    """finetune.py --workdir=<the Hugging Face folder of init.hf_dir>."""
    config = {"init": {"hf_dir": run["model"], "checkpoint": ""}, "tokenizer": {"path": ""},
              "data": {"train_path": "", "eval_path": ""}}
    fault = cli.workdir_fault(run["model"], protected=run_keys.run_inputs(config))
    assert fault.startswith(f"--workdir={run['model']} is the model folder it starts from "
                            "(init.hf_dir)")
    # a model folder that the config does not name is no workdir either
    assert "is a model folder (it holds model.safetensors)" in cli.workdir_fault(run["model"])


def test_export_into_a_folder_holding_another_model_is_refused(run):
    before = snapshot(run["model"])
    message = one_line(lambda: export(run, run["model"], tokenizer=run["vocab"]))
    assert "holds files that no export of ours wrote (config.json, model.safetensors)" in message
    assert snapshot(run["model"]) == before


def test_a_failed_reexport_leaves_the_previous_export_whole(run, tmp_path, monkeypatch):
    """A full disk half-way through a re-export: the previous export is as it was, and nothing
    is left beside it."""
    target = tmp_path / "export"
    export(run, target, tokenizer=run["vocab"])
    before = snapshot(target)
    real_save = hf.save

    def disk_full(cfg, params, folder, **options):
        real_save(cfg, params, folder, **options)
        raise OSError(28, "No space left on device", os.path.join(folder, "model.safetensors"))

    monkeypatch.setattr(hf, "save", disk_full)
    message = one_line(lambda: export(run, target, tokenizer=run["vocab"]))
    assert "No space left on device" in message
    assert snapshot(target) == before
    assert not outputs.leftovers(str(target))


KILLED_EXPORT = """
import os, signal, sys
from bert_jax.convert import hf
from bert_jax.tools import convert_runs as runs
real_save = hf.save
def save_then_die(cfg, params, folder, **options):
    real_save(cfg, params, folder, **options)
    os.kill(os.getpid(), signal.SIGKILL)
hf.save = save_then_die
runs.ours_to_hf(sys.argv[1], sys.argv[2], None, False, tokenizer=sys.argv[3])
"""


def test_a_reexport_killed_half_way_leaves_the_previous_export_and_names_the_leftover(
        run, tmp_path, caplog):
    target = tmp_path / "export"
    export(run, target, tokenizer=run["vocab"])
    before = snapshot(target)
    killed = subprocess.run([sys.executable, "-c", KILLED_EXPORT, run["checkpoints"],
                             str(target), run["vocab"]], cwd=ROOT, capture_output=True,
                            text=True, timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert snapshot(target) == before
    (leftover,) = outputs.leftovers(str(target))
    with caplog.at_level(logging.WARNING):
        export(run, target, tokenizer=run["vocab"])
    assert leftover in caplog.text and "partial write" in caplog.text
    assert not os.path.exists(leftover) and snapshot(target) == before


def test_a_reexport_holds_only_the_files_of_the_new_export(run, tmp_path):
    """With a tokenizer, then without: the old vocab.txt and tokenizer files do not stay."""
    target = tmp_path / "export"
    export(run, target, tokenizer=run["vocab"])
    assert "vocab.txt" in os.listdir(target)
    export(run, target, tokenizer="none")
    assert sorted(os.listdir(target)) == [runs.EXPORT_MARKER, "config.json", "model.safetensors"]


@pytest.mark.skipif(not os.path.exists("/dev/null"), reason="no /dev/null")
def test_output_that_is_a_character_device_or_a_symlink_is_refused(tmp_path):
    assert cli.output_file_fault("/dev/null") == ("--output=/dev/null is a character device: "
                                                  "name a regular file to write")
    real = tmp_path / "real.jsonl"
    real.write_text("kept\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    assert cli.output_file_fault(str(link)).startswith(f"--output={link} is a symbolic link "
                                                       f"(to {real})")
    assert real.read_text() == "kept\n"


# ----- new cases, as an adversarial user would try -----------------------------------------------

def test_output_that_is_a_hard_link_to_the_input_is_refused(tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("a text\n")
    other_name = tmp_path / "out.jsonl"
    os.link(source, other_name)
    fault = cli.output_file_fault(str(other_name), protected=[("the input (--input)",
                                                               str(source))])
    assert fault.startswith(f"--output={other_name} is the input (--input)")


def test_an_export_over_the_model_folder_the_run_started_from_is_refused_even_if_ours(
        run, tmp_path):
    """An earlier export (our marker) that a run then started from (init.hf_dir): replacing it
    would take the run's own starting weights and tokenizer away."""
    start = tmp_path / "start"
    export(run, start, tokenizer=run["vocab"])
    workdir = tmp_path / "second_run"
    os.makedirs(workdir)
    (workdir / "config.json").write_text(json.dumps({"recipe": "finetune",
                                                     "init": {"hf_dir": str(start)}}))
    fault = runs.export_fault(str(start), run["checkpoints"], str(workdir), None)
    assert fault.startswith(f"--hf_dir={start} is the model folder the run started from")


def test_embed_outputs_that_would_replace_the_input_are_refused(tmp_path):
    """embed.py --input=x.index.jsonl --output=x: PREFIX.index.jsonl is the input."""
    source = tmp_path / "x.index.jsonl"
    source.write_text('{"text": "a"}\n')
    from bert_jax.embeddings import encode
    faults = [cli.output_file_fault(path, protected=[("the input (--input)", str(source))])
              for path in encode.output_paths(str(tmp_path / "x"))]
    assert faults[0] is None and faults[1].startswith(f"--output={source} is the input")


def test_predict_output_over_a_runs_checkpoints_is_refused(run):
    inside = os.path.join(run["checkpoints"], "0", "out.jsonl")
    fault = cli.output_file_fault(inside, protected=outputs.run_files(run["workdir"]))
    assert "lies inside the run's checkpoints" in fault


def test_a_workdir_holding_its_own_training_file_is_refused(tmp_path):
    data = tmp_path / "data.tsv"
    data.write_text("text\tlabel\na\tb\n")
    config = {"data": {"train_path": str(data)}}
    assert cli.workdir_fault(str(tmp_path), protected=run_keys.run_inputs(config)).startswith(
        f"--workdir={tmp_path} holds its training file (data.train_path)")


def test_an_output_over_a_file_the_run_was_trained_on_is_refused(tmp_path):
    """New case (tried on a tiny classification run): `evaluate.py --output=<the run's training
    TSV>` and `predict.py --output=<its held-out TSV>` wrote their JSON over the data the run was
    trained and scored on, exit 0; `predict.py --output=<workdir>/inputs.json` replaced the
    run's record of its inputs. Every file the run recorded in inputs.json, and the record
    itself, is now an input no output may replace: one line, the file untouched."""
    from bert_jax.recipes import inputs as run_inputs

    from finetune_runs import tiny_finetune_config

    vocab, train, held_out = (tmp_path / name for name in ("vocab.txt", "train.tsv", "eval.tsv"))
    vocab.write_text("\n".join(VOCAB) + "\n")
    for data in (train, held_out):
        data.write_text("text\tlabel\nw5 w6\tpos\nw7\tneg\n")
    workdir = tmp_path / "run"
    workdir.mkdir()
    config = tiny_finetune_config("classification", str(vocab), **{
        "data.train_path": str(train), "data.eval_path": str(held_out)})
    (workdir / "config.json").write_text(json.dumps(config.to_dict()))
    run_inputs.check_and_record(config, str(workdir), has_checkpoint=False)
    texts = tmp_path / "texts.txt"
    texts.write_text("w5 w6\n")
    protected = predict.protected_inputs(str(workdir), str(texts))
    assert cli.output_file_fault(str(held_out), protected=protected) == (
        f"--output={held_out} is the run's held-out data (data.eval_path) ({held_out}): "
        "writing there would replace it; name another path")
    assert cli.output_file_fault(str(workdir / "inputs.json"), protected=protected).startswith(
        f"--output={workdir / 'inputs.json'} is the run's inputs.json")
    assert cli.output_file_fault(str(vocab), protected=protected).startswith(
        f"--output={vocab} is the run's tokenizer")
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "experiments", "evaluate.py"),
         f"--workdir={workdir}", f"--output={train}"], capture_output=True, text=True,
        env=dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT), timeout=300)
    assert done.returncode == 1 and done.stderr.strip().splitlines()[-1] == (
        f"evaluate.py: error: --output={train} is the run's training data (data.train_path) "
        f"({train}): writing there would replace it; name another path"), done.stderr[-2000:]
    assert train.read_text() == "text\tlabel\nw5 w6\tpos\nw7\tneg\n"


def test_a_full_disk_during_an_export_names_the_export_folder(run, tmp_path, monkeypatch):
    """New case: the safetensors writer on a full disk raises without a file name, and convert.py
    said `a file: No space left on device`. Now the export folder is named."""
    def disk_full(cfg, params, folder, **options):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(hf, "save", disk_full)
    target = tmp_path / "export"
    assert one_line(lambda: export(run, target, tokenizer=run["vocab"])) == (
        f"convert.py: error: {target}: No space left on device (while writing it; what was "
        "there before is as it was)")
    assert not os.path.exists(target) and not outputs.leftovers(str(target))
