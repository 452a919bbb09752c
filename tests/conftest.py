"""Shared pytest setup. Tests run on one CPU device; multi-device tests start subprocesses with
XLA_FLAGS=--xla_force_host_platform_device_count=8 (the flag must be set before jax is imported).

JAX_PLATFORMS=cpu unless the environment sets it, here before anything imports jax, and inherited
by every script a test starts: with libtpu installed (the `test` extra brings it), a JAX process
on a host without a TPU otherwise tries the TPU backend and prints libtpu's start-up warnings to
stderr, and many tests assert that a script's stderr is one line.

Every program compiled in the session, in this process or in the scripts the tests start, goes to
one compilation cache that starts empty (JAX_COMPILATION_CACHE_DIR, however quick the compilation):
tests that build the same program again, and every resumed run, load it instead of compiling it.
A loaded program computes what a fresh compilation would (the cache is keyed by the program, the
compiler options, the devices and the jax version); compile_time.py, which measures compilation,
turns the cache off.
"""

import os
import shutil
import sys
import tempfile

# The helper modules of tests/ (xla_flags, pretrain_runs, repo_root, ...) import as top-level
# modules from the test files of every sub-folder. pytest's default `prepend` import mode puts
# this folder on sys.path as it imports this file; said here, it holds in any import mode.
if os.path.dirname(os.path.abspath(__file__)) not in sys.path:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import xla_flags

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Under pytest-xdist (`-n 2`) the workers inherit the controller's environment, so the controller
# makes the one cache directory, every worker and every script it starts shares it, and the
# controller removes it at the end. XLA's threads are left as they are: XLA_FLAGS
# --xla_cpu_multi_thread_eigen=false changes the compiled CPU programs (their bf16 dots become
# f32 ones), which tests/model/test_precision.py asserts on.
_CACHE = None
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _CACHE = tempfile.mkdtemp(prefix="bert_jax_tests_xla_")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _CACHE
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
# Compile for tests quickly (tests/xla_flags.py says why that computes the same).
xla_flags.add_fast_compile()

# pytest's settings (testpaths, the `slow` marker, the filter that makes our own
# DeprecationWarnings errors) are in pyproject.toml's [tool.pytest.ini_options].


def pytest_unconfigure(config):
    if _CACHE is not None:
        shutil.rmtree(_CACHE, ignore_errors=True)


_SLOW_LIST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "slow_tests.txt")


def _slow_entries() -> set[str]:
    """tests/slow_tests.txt: paths relative to the repository root, a file or file::test."""
    with open(_SLOW_LIST, encoding="utf-8") as f:
        return {line.strip() for line in f if line.strip() and not line.startswith("#")}


def _slow_files() -> list[str]:
    """The whole files of tests/slow_tests.txt, in the list's order."""
    with open(_SLOW_LIST, encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    return [line for line in lines if "::" not in line]


def pytest_collection_modifyitems(config, items):
    """Marks the tests named in tests/slow_tests.txt `slow` (whole files, or single tests with
    all their parameters); every entry must name something collected, so a renamed test cannot
    fall out of the list unnoticed."""
    import pytest

    entries = _slow_entries()
    root = os.path.dirname(os.path.dirname(_SLOW_LIST))
    matched = set()
    for item in items:
        path = os.path.relpath(str(item.path), root)
        test = f"{path}::{item.originalname or item.name}"
        for entry in (path, test):
            if entry in entries:
                item.add_marker(pytest.mark.slow)
                matched.add(entry)
    collected_files = {os.path.relpath(str(item.path), root) for item in items}
    unknown = {e for e in entries - matched if e.split("::")[0] in collected_files}
    if unknown:
        raise pytest.UsageError(f"tests/slow_tests.txt names tests that do not exist: "
                                f"{sorted(unknown)}")
    # The whole files of the slow list first, in the list's order (the longest near the top),
    # then the rest as collected: `-n 2 --dist loadfile` hands files to the two workers in this
    # order, so the long files do not start last and leave one worker running alone at the end.
    rank = {entry: i for i, entry in enumerate(_slow_files())}
    items.sort(key=lambda item: rank.get(os.path.relpath(str(item.path), root), len(rank)))
