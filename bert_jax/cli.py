"""What the scripts in experiments/ share: their flags (defined when a script asks), one-line
errors for a user's mistakes, joining a multi-process job, and the exit-status contract.

    if __name__ == "__main__":
        cli.define_run_flags()                        # --config, --workdir, --distributed, ...
        app.run(main, flags_parser=cli.parse_flags)

Exit status: 0 done; 1 with one line `<script>: error: <what is wrong>` for bad input (a config
key, a file, a checkpoint that does not fit, a run that diverged, a workdir in use); 143 after
SIGTERM and 130 after Ctrl-C (SIGINT), the state saved first: run the same command again to
continue (a second Ctrl-C aborts at once, without saving). A bug still shows its traceback.

Compiled XLA programs are kept on disk (JAX's persistent compilation cache), so a second run of
the same shapes (a resume, the next fold or seed, evaluate.py after training) loads them instead
of compiling again: in $JAX_COMPILATION_CACHE_DIR when that is set (empty: no cache), else in
$XDG_CACHE_HOME/bert_jax/xla (~/.cache/bert_jax/xla). A cached program is keyed by the program,
the compiler options, the devices and the jax/jaxlib versions, so it computes what a fresh
compilation would.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Callable, TypeVar

from absl import flags, logging

from bert_jax import distributed

FLAGS = flags.FLAGS
# Bad input surfaces as these: ConfigError, DataError, CheckpointError, CheckpointMismatchError
# are ValueErrors; a missing file is FileNotFoundError.
USER_ERRORS = (ValueError, FileNotFoundError)
T = TypeVar("T")


def define_run_flags(config_required: bool = True) -> None:
    """--config (a config file, with --config.<key>=<value> overrides), --workdir, and the
    multi-process flags."""
    from ml_collections import config_flags
    config_flags.DEFINE_config_file("config", None, "Path to a config file (get_config()).",
                                    lock_config=True)
    flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics and logs.")
    if config_required:
        flags.mark_flags_as_required(["config", "workdir"])
    distributed.define_flags()


def parse_flags(argv: list[str]) -> list[str]:
    """absl flag parsing, with a one-line error for an unknown or ill-typed --config.<key>."""
    try:
        return FLAGS(argv)
    except flags.Error as e:
        message = "; ".join(line for line in str(e).splitlines() if line.strip())
        sys.exit(f"{os.path.basename(argv[0])}: error: {message} (--help lists the flags)")
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        overrides = [a for a in argv[1:] if a.startswith("--config.")]
        message = str(e).strip("'\"").replace("\\n", " ").replace("\\'", "'")
        sys.exit(f"{os.path.basename(argv[0])}: error: bad config override among {overrides}: "
                 f"{message}")


def quiet_orbax_logs() -> None:
    """Keep Orbax's per-save INFO chatter out of the training log (its warnings still show)."""
    import logging as std_logging

    class _DropOrbaxInfo(std_logging.Filter):
        def filter(self, record):
            return record.levelno >= std_logging.WARNING or "/orbax/" not in record.pathname

    logging.get_absl_handler().addFilter(_DropOrbaxInfo())


COMPILATION_CACHE_VARIABLE = "JAX_COMPILATION_CACHE_DIR"


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
    if COMPILATION_CACHE_VARIABLE in os.environ:
        return
    folder = default_compilation_cache_dir()
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:  # a read-only home: run without the cache rather than fail
        logging.warning("not keeping compiled programs: cannot create %s (%s)", folder, e)
        return
    jax.config.update("jax_compilation_cache_dir", folder)


def start(argv: list[str], compilation_cache: bool = True) -> None:
    """First lines of a script's main: no stray arguments, join the job, quiet Orbax, keep
    compiled programs on disk (off for a script that measures compilation)."""
    script = os.path.basename(argv[0])
    if len(argv) > 1:
        sys.exit(f"{script}: error: unexpected arguments {argv[1:]}")
    use_compilation_cache(compilation_cache)
    try:
        distributed.initialize_from_flags()
    except flags.ValidationError as e:
        sys.exit(f"{script}: error: {e}")
    quiet_orbax_logs()


def run_or_exit(script: str, fn: Callable[[], T]) -> T:
    """fn(), with bad input turned into one line `<script>: error: ...` and exit status 1."""
    try:
        return fn()
    except USER_ERRORS as e:
        logging.error("%s", e)
        sys.exit(f"{script}: error: {e}")


def train_main(argv: list[str], script: str, train_and_evaluate: Callable) -> None:
    """The main of a training script: train_and_evaluate(FLAGS.config, FLAGS.workdir)."""
    start(argv)
    result = run_or_exit(script, lambda: train_and_evaluate(FLAGS.config, FLAGS.workdir))
    if result.preempted:
        logging.warning("stopped by signal %d at step %d (saved); run the same command again to "
                        "resume", result.signal_number, result.step)
        sys.exit(128 + result.signal_number)
    logging.info("done at step %d: train %s; held-out %s", result.step,
                 result.last_train_metrics, result.last_eval_metrics)
    print(json.dumps({"step": result.step, "metrics": result.last_eval_metrics or {}}))
