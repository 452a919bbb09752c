"""Where the scripts keep compiled XLA programs (JAX's persistent compilation cache).

A second run of the same shapes (a resume, the next fold or seed, evaluate.py after training)
loads its programs instead of compiling them again: they are kept in $JAX_COMPILATION_CACHE_DIR
when that is set (empty: no cache), else in $XDG_CACHE_HOME/bert_jax/xla (~/.cache/bert_jax/xla).
A cached program is keyed by the program, the compiler options, the devices and the jax/jaxlib
versions, so it computes what a fresh compilation would. Every program that took
CACHE_MIN_COMPILE_SECONDS or more to compile is kept (JAX's own threshold, 1 s, would leave out
embed.py's and predict.py's programs of about half a second;
$JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS overrides it). The folder is not bounded here: JAX's
size bound (jax_compilation_cache_max_size) fails on a folder written without it (jax 0.10: every
write then warns "Error writing persistent compilation cache entry"), so a folder grown too large
is the user's to delete.

Nothing changes at import: a script asks with `use_compilation_cache` (bert_jax.cli.start does).
"""

from __future__ import annotations

import os

from absl import logging

COMPILATION_CACHE_VARIABLE = "JAX_COMPILATION_CACHE_DIR"
CACHE_MIN_COMPILE_SECONDS = 0.2  # programs that compile faster are not kept (module docstring)


def default_compilation_cache_dir() -> str:
    cache_home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"),
                                                                  ".cache")
    return os.path.join(cache_home, "bert_jax", "xla")


def use_compilation_cache(enabled: bool = True) -> None:
    """Keep compiled programs on disk (module docstring; JAX reads the variable itself), or,
    with enabled=False, compile every program afresh whatever the environment says."""
    import jax
    if not enabled:
        jax.config.update("jax_enable_compilation_cache", False)
        return
    if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", CACHE_MIN_COMPILE_SECONDS)
    if COMPILATION_CACHE_VARIABLE in os.environ:
        return
    folder = default_compilation_cache_dir()
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:  # a read-only home: run without the cache rather than fail
        logging.warning("not keeping compiled programs: cannot create %s (%s)", folder, e)
        return
    jax.config.update("jax_compilation_cache_dir", folder)
