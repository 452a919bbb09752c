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
"""

import os

FAST_COMPILE = ("--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true "
                "--xla_cpu_use_fusion_emitters=false")


def with_devices(count: int | None = None) -> str:
    """XLA_FLAGS for a test process: the fast-compile flags, and `count` CPU devices."""
    flags = [FAST_COMPILE]
    if count is not None:
        flags.append(f"--xla_force_host_platform_device_count={count}")
    return " ".join(flags)


def add_fast_compile(environ=os.environ) -> None:
    """Adds the fast-compile flags to environ's XLA_FLAGS (kept as the user set them else)."""
    current = environ.get("XLA_FLAGS", "")
    if FAST_COMPILE not in current:
        environ["XLA_FLAGS"] = f"{current} {FAST_COMPILE}".strip()
