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
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
_CACHE = tempfile.mkdtemp(prefix="bert_jax_tests_xla_")
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", _CACHE)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")

# pytest's settings (testpaths, the `slow` marker, the filter that makes our own
# DeprecationWarnings errors) are in pyproject.toml's [tool.pytest.ini_options].


def pytest_unconfigure(config):
    shutil.rmtree(_CACHE, ignore_errors=True)
