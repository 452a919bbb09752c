"""XLA_FLAGS for every JAX process the tests run: in-process (set by conftest) and the scripts
they start (which add a device count with `with_devices`).

Test programs are tiny and compiled once or twice, so compilation is most of a test's time on a
CPU. LLVM's optimisation level 0 without its expensive passes compiles them in about 0.57x the
time (12 option-training tests: 204 s against 358 s and 371 s, run one after the other on 2 cores
beside other work, 2026-12-03). It changes how fast a compiled program runs, not what it
computes: XLA's own graph passes (fusion, layouts, the dtypes of dots) run as before, and LLVM
keeps IEEE semantics at every level (XLA:CPU does not enable fast-math).

XLA:CPU's older loop emitters (`--xla_cpu_use_fusion_emitters=false`) generate the fused
elementwise code from the same fusions with half the compile work: the tiny pre-training step of
tests/pretrain_runs.py compiles in 1.9-2.0 s against 3.6-3.8 s, a whole 2-step run takes 8.6-9.1 s
against 11.9 s, and the fast tier 165 s against 215 s (2-core AMD EPYC, nothing else running,
2026-12-03). 20 steps of that run log the same loss and gradient norm to the last bit with and
without it.

Not every jaxlib knows every flag, and jaxlib aborts the whole process (a fatal error, not an
exception) on an XLA_FLAGS entry it does not know: jaxlib 0.12 no longer has the loop emitters'
flag. So the flags are candidates: `fast_compile()` keeps those that the installed jaxlib starts
with, found once per test session by starting JAX in a subprocess (about a second), and hands the
answer to the session's workers and scripts through the environment.
"""

from __future__ import annotations

import os
import subprocess
import sys

CANDIDATES = ("--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true",
              "--xla_cpu_use_fusion_emitters=false")
# The accepted flags, once found: inherited by pytest-xdist's workers and every script started.
_ACCEPTED = "BERT_JAX_TESTS_FAST_COMPILE"


def starts_with(flags: tuple[str, ...] | list[str]) -> bool:
    """Whether a JAX process on CPU starts with `flags` as its XLA_FLAGS (in a subprocess, since
    an unknown flag ends the process that reads it)."""
    env = {**os.environ, "XLA_FLAGS": " ".join(flags), "JAX_PLATFORMS": "cpu"}
    probe = subprocess.run([sys.executable, "-c", "import jax; jax.devices()"], env=env,
                           capture_output=True, check=False)
    return probe.returncode == 0


def fast_compile() -> str:
    """The fast-compile flags that the installed jaxlib accepts (module docstring)."""
    if _ACCEPTED not in os.environ:
        accepted = (CANDIDATES if starts_with(CANDIDATES)
                    else [flag for flag in CANDIDATES if starts_with([flag])])
        os.environ[_ACCEPTED] = " ".join(accepted)
    return os.environ[_ACCEPTED]


def with_devices(count: int | None = None) -> str:
    """XLA_FLAGS for a test process: the fast-compile flags, and `count` CPU devices."""
    flags = [fast_compile()]
    if count is not None:
        flags.append(f"--xla_force_host_platform_device_count={count}")
    return " ".join(flag for flag in flags if flag)


def add_fast_compile(environ=os.environ) -> None:
    """Adds the fast-compile flags to environ's XLA_FLAGS (kept as the user set them else)."""
    current = environ.get("XLA_FLAGS", "")
    flags = fast_compile()
    if flags not in current:
        environ["XLA_FLAGS"] = f"{current} {flags}".strip()
