"""The output rule on object storage (issue 40, class 2; bert_jax/runtime/outputs.py): an output
on gs:// never equals, holds or lies inside an input or a run's file on the same bucket, and an
export or a workdir there is listed for another model's or run's files, as a local one is; a
bucket that cannot be read to check it is refused in one line, never written blindly.

The gs:// cases run against the Cloud Storage emulator of tests/gcs_emulator.py (its `gcs`
fixture); the path arithmetic also runs on fsspec's in-memory filesystem (memory://), and a
storage whose every read fails stands for a bucket without credentials."""

import fsspec
import pytest

from bert_jax import cli
from bert_jax.recipes.finetune import predict
from bert_jax.runtime import outputs
from bert_jax.tools import convert_runs

from gcs_emulator import BUCKET, _filesystem, gcs_fixture  # noqa: F401 - the `gcs` fixture

RUN_OBJECTS = ("config.json", "task.json", "checkpoints/4/state/manifest.ocdbt",
               "checkpoints/4/metadata/metadata")


def _put(filesystem, root, names):
    for name in names:
        filesystem.pipe_file(f"{root}/{name}", b"{}")


@pytest.fixture
def memory_run():
    filesystem = fsspec.filesystem("memory")
    root = "/outputs-test"
    _put(filesystem, f"{root}/run", RUN_OBJECTS)
    _put(filesystem, f"{root}/hf", ["config.json", "model.safetensors"])
    filesystem.pipe_file(f"{root}/in.txt", b"a text\n")
    yield f"memory://{root.lstrip('/')}"
    filesystem.rm(root, recursive=True)


def test_remote_paths_are_compared_as_bucket_and_key(memory_run):
    run = f"{memory_run}/run"
    protected = predict.protected_inputs(run, f"{memory_run}/in.txt")
    assert cli.output_file_fault(f"{memory_run}/in.txt", protected=protected) == (
        f"--output={memory_run}/in.txt is the input (--input) ({memory_run}/in.txt): writing "
        "there would replace it; name another path")
    # spelled another way: a repeated slash and a '.'
    spelled = memory_run.replace("/run", "") + "//./run/config.json"
    assert cli.output_file_fault(spelled, protected=protected).startswith(
        f"--output={spelled} is the run's config.json")
    assert "lies inside the run's checkpoints" in cli.output_file_fault(
        f"{run}/checkpoints/4/out.jsonl", protected=protected)
    # a file beside the run's files, or a name the run does not hold, is fine
    assert cli.output_file_fault(f"{run}/predicted.jsonl", protected=protected) is None
    assert cli.output_file_fault(f"{run}/predictions/x.jsonl", protected=protected) is None
    # a local input never meets a remote output
    assert cli.output_file_fault(f"{memory_run}/x", protected=[("the input", "/x")]) is None


def _export_fault(hf_dir, run):
    """convert_runs.export_fault's rule (it reads the run's config.json through etils.epath,
    which knows gs:// but not memory://)."""
    protected = [("the checkpoint folder (--checkpoint_dir)", f"{run}/checkpoints")]
    return (outputs.fault(hf_dir, "--hf_dir", protected + outputs.run_files(run), folder=True)
            or outputs.foreign_folder_fault(hf_dir, "--hf_dir", marker="marker.json"))


def test_a_remote_export_over_a_run_or_another_model_is_refused(memory_run):
    run = f"{memory_run}/run"
    assert _export_fault(memory_run, run).startswith(
        f"--hf_dir={memory_run} holds the checkpoint folder")
    assert _export_fault(f"{run}/", run).startswith(f"--hf_dir={run}/ holds the checkpoint")
    assert "holds files that no export of ours wrote (config.json, model.safetensors)" in \
        _export_fault(f"{memory_run}/hf", run)
    assert _export_fault(f"{memory_run}/new", run) is None
    other_model = f"{memory_run}/hf"
    assert cli.workdir_fault(other_model) == (
        f"--workdir={other_model} is a model folder (it holds model.safetensors), not the "
        "workdir of a run: a run would write its files over it; name a new folder (start from "
        "the model with --config.init.hf_dir)")


class _Unreadable(fsspec.AbstractFileSystem):
    """A bucket without credentials: every read fails with the client's own error."""

    protocol = "unreadable"

    def info(self, path, **kwargs):
        raise PermissionError(f"403 Forbidden: {path}")

    def ls(self, path, detail=True, **kwargs):
        raise RuntimeError(f"no credentials for {path}")


def test_a_bucket_that_cannot_be_read_to_check_the_output_is_refused():
    fsspec.register_implementation("unreadable", _Unreadable, clobber=True)
    fault = outputs.foreign_folder_fault("unreadable://b/export", "--hf_dir", marker="m.json")
    assert fault.startswith(
        "--hf_dir=unreadable://b/export cannot be checked against the inputs it must not replace "
        "(reading the bucket failed: OSError: unreadable://b/export: PermissionError: 403 "
        "Forbidden")
    assert fault.endswith("nothing was written: make the bucket readable, or name a local path")
    fault = cli.output_file_fault("unreadable://b/run/config.json",
                                  protected=outputs.run_files("unreadable://b/run"))
    assert fault.startswith("--output=unreadable://b/run/config.json cannot be checked")


def test_gs_outputs_follow_the_rule(gcs):
    filesystem = _filesystem()
    _put(filesystem, f"{BUCKET}/remote-outputs/run", RUN_OBJECTS)
    _put(filesystem, f"{BUCKET}/remote-outputs/hf", ["config.json", "model.safetensors"])
    root = f"gs://{BUCKET}/remote-outputs"
    run = f"{root}/run"
    protected = predict.protected_inputs(run, f"gs://{BUCKET}/elsewhere/in.txt")
    assert cli.output_file_fault(f"{run}/task.json", protected=protected).startswith(
        f"--output={run}/task.json is the run's task.json")
    assert cli.output_file_fault(f"{run}/out.jsonl", protected=protected) is None
    assert convert_runs.export_fault(root, f"{run}/checkpoints", run, None).startswith(
        f"--hf_dir={root} holds the checkpoint folder")
    assert "holds files that no export of ours wrote" in convert_runs.export_fault(
        f"{root}/hf", f"{run}/checkpoints", run, None)
    assert convert_runs.export_fault(f"{root}/new", f"{run}/checkpoints", run, None) is None
    assert cli.workdir_fault(f"{root}/hf").startswith(f"--workdir={root}/hf is a model folder")
    assert cli.workdir_fault(f"{root}/fresh") is None
