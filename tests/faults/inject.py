"""Run a script of experiments/ with a write failure injected, as a full disk or a read-only
filesystem would make it (a test cannot mount either; the injected errors are the OSErrors those
give, raised where the real ones would be):

    python tests/faults/inject.py <fault> <script.py> [flags...]

    enospc-metrics:<n>       the n-th append to metrics.jsonl raises ENOSPC
    enospc-tensorboard:<n>   the n-th flush of TensorBoard's event file raises ENOSPC
    enospc-checkpoint:<step> writing checkpoint <step> raises ENOSPC (its data-iterator item)
    enospc-array-record:<split>  writing the TFDS array_record file of <split> fails as the
                             C++ writer does on a full disk (its RuntimeError, after half the
                             records are written)
    enospc-vocab             writing vocab.txt stops half-way with ENOSPC (its temporary file)
    readonly:<folder>        every write, folder creation, rename or removal under <folder>
                             raises EROFS (Python's file calls; the run must stop before any
                             other writer starts)
"""

import builtins
import errno
import os
import runpy
import sys


def as_saved_before_checksums(step_dir) -> None:
    """Make a checkpoint step look as one saved before checksums were recorded: no checksums/
    folder, and no "checksums" key in its metadata (a step saved to have a record and without
    one is unreadable: bert_jax.train.checkpoint.store.verify_checksums)."""
    import json
    import shutil
    step_dir = os.fspath(step_dir)
    shutil.rmtree(os.path.join(step_dir, "checksums"))
    metadata_file = os.path.join(step_dir, "metadata", "metadata")
    with open(metadata_file) as f:
        metadata = json.load(f)
    metadata.pop("checksums", None)
    with open(metadata_file, "w") as f:
        json.dump(metadata, f)


def _error(code: int, path: str = "") -> OSError:
    return OSError(code, os.strerror(code), *([path] if path else []))


def _nth_call_fails(owner, name: str, n: int, code: int) -> None:
    real, calls = getattr(owner, name), [0]

    def failing(*args, **kwargs):
        calls[0] += 1
        if calls[0] == n:
            raise _error(code)
        return real(*args, **kwargs)

    setattr(owner, name, failing)


def _metrics(n: int) -> None:
    from bert_jax.train import metrics_writer
    appends = [0]

    def open_(file, mode="r", *args, **kwargs):
        if "a" in mode and os.fspath(file).endswith(metrics_writer.TRAIN_FILE):
            appends[0] += 1
            if appends[0] == n:
                raise _error(errno.ENOSPC, os.fspath(file))
        return builtins.open(file, mode, *args, **kwargs)

    metrics_writer.open = open_  # the module's own `open`, ahead of the builtin


def _tensorboard(n: int) -> None:
    from tensorboardX import record_writer
    _nth_call_fails(record_writer.RecordWriter, "flush", n, errno.ENOSPC)


def _checkpoint(step: int) -> None:
    from grain import checkpoint as grain_checkpoint
    real = grain_checkpoint.CheckpointHandler.save

    def save(self, directory, *args, **kwargs):
        if directory.parent.name.startswith(f"{step}."):  # <step>.orbax-checkpoint-tmp*/...
            raise _error(errno.ENOSPC)
        return real(self, directory, *args, **kwargs)

    grain_checkpoint.CheckpointHandler.save = save


def _array_record(split: str) -> None:
    from tensorflow_datasets.core import file_adapters
    adapter = file_adapters.ArrayRecordFileAdapter
    real = adapter.write_examples.__func__

    def write_examples(cls, path, iterator):
        if f"-{split}.array_record" not in os.fspath(path):
            return real(cls, path, iterator)
        examples = list(iterator)
        real(cls, path, examples[:len(examples) // 2])  # half of it on disk, then the disk fills
        raise RuntimeError(f"write() failed: No space left on device; writing {path}; at byte "
                           f"{os.path.getsize(path)}; Failed to close chunk_writer")

    adapter.write_examples = classmethod(write_examples)


def _vocab() -> None:
    real_open = builtins.open

    class HalfWritten:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, text):
            self.f.write(text[:len(text) // 2])
            self.f.flush()
            raise _error(errno.ENOSPC, self.f.name)

    def open_(file, mode="r", *args, **kwargs):
        f = real_open(file, mode, *args, **kwargs)
        if "w" in mode and os.path.basename(os.fspath(file)).startswith("vocab.txt.tmp"):
            return HalfWritten(f)
        return f

    builtins.open = open_


def _readonly(folder: str) -> None:
    folder = os.path.abspath(folder)

    def inside(path) -> bool:
        try:
            path = os.path.abspath(os.fspath(path))
        except TypeError:  # a file descriptor
            return False
        return path == folder or path.startswith(folder + os.sep)

    def guard(owner, name: str, writes=lambda *args, **kwargs: True) -> None:
        real = getattr(owner, name)

        def guarded(*args, **kwargs):
            if args and writes(*args, **kwargs) and any(
                    inside(a) for a in args[:2] if isinstance(a, (str, bytes, os.PathLike))):
                raise _error(errno.EROFS, os.fspath(args[0]))
            return real(*args, **kwargs)

        setattr(owner, name, guarded)

    guard(builtins, "open", lambda file, mode="r", *a, **k: any(c in mode for c in "wax+"))
    guard(os, "open", lambda path, flags, *a, **k: bool(
        flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)))
    for name in ("mkdir", "makedirs"):  # an existing folder is no write
        guard(os, name, lambda path, *a, **k: not os.path.isdir(path))
    for name in ("link", "rename", "replace", "remove", "unlink", "rmdir"):
        guard(os, name)


FAULTS = {"enospc-metrics": lambda v: _metrics(int(v)),
          "enospc-tensorboard": lambda v: _tensorboard(int(v)),
          "enospc-checkpoint": lambda v: _checkpoint(int(v)),
          "enospc-array-record": _array_record,
          "enospc-vocab": lambda v: _vocab(),
          "readonly": _readonly}


def main() -> None:
    fault, script, *flags = sys.argv[1:]
    kind, _, value = fault.partition(":")
    FAULTS[kind](value)
    sys.argv = [script, *flags]
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(script))))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
