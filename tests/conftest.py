"""Shared pytest setup. Tests run on one CPU device; multi-device tests start subprocesses with
XLA_FLAGS=--xla_force_host_platform_device_count=8 (the flag must be set before jax is imported).

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


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow: an end-to-end run of minutes (deselect with -m 'not slow')")


def pytest_unconfigure(config):
    shutil.rmtree(_CACHE, ignore_errors=True)
