"""Shared pytest setup. Tests run on one CPU device; multi-device tests start subprocesses with
XLA_FLAGS=--xla_force_host_platform_device_count=8 (the flag must be set before jax is imported)."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow: an end-to-end run of minutes (deselect with -m 'not slow')")
