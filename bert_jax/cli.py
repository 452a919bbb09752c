"""What the scripts in experiments/ share: their flags (defined when a script asks), one-line
errors for a user's mistakes, `--help`, joining a multi-process job, and the exit-status contract.

    def define_flags(flag_values=flags.FLAGS):
        cli.define_run_flags(recipe="pretrain", flag_values=flag_values)  # --config, --workdir, ...

    if __name__ == "__main__":
        define_flags()
        app.run(main, flags_parser=cli.parse_flags)

Exit status: 0 done; 1 with one line `<script>: error: <what is wrong>` for bad input (a config
file or key, a file, a checkpoint that does not fit, a run that diverged, a workdir in use); 143
after SIGTERM and 130 after Ctrl-C (SIGINT). Inside the training loop the state is saved first:
run the same command again to continue (a second Ctrl-C aborts at once, without saving). Before
the loop (start-up: reading data, building and compiling the step) nothing needs saving: Ctrl-C
stops the process at once, exit 130 and one line. A bug still shows its traceback.

Config files (`--config=FILE`, any flag of config_flags.DEFINE_config_file) are checked first, in
`parse_flags`, whatever the other flags: a missing file, a folder, a syntax error (file and line
named), a file without get_config(), an error raised while it runs (file and line) or a
get_config() that returns no config are each one line. `--help` (-h, --helpshort) prints the
script's own flags and, for a script with a run config, every key of the schema
(bert_jax/config/run.py) with its default and meaning, and exits 0 (bert_jax.config.help);
`--helpfull` lists every flag of every library.

`start`, the first lines of a script's main, joins the job, keeps compiled programs on disk
(bert_jax.runtime.compilation_cache) and keeps Orbax's chatter out of the log
(bert_jax.runtime.orbax_logs).
"""

from __future__ import annotations

import ast
import contextlib
import errno
import json
import os
import re
import signal
import sys
import threading
import traceback
from typing import Callable, Iterator, Optional, TypeVar

from absl import flags, logging

from bert_jax.config import help as script_help
from bert_jax.config import run_keys
from bert_jax.runtime import compilation_cache as compilation_cache_lib
from bert_jax.runtime import distributed, orbax_logs, platform

FLAGS = flags.FLAGS
# Bad input surfaces as these: ConfigError, DataError, CheckpointError, CheckpointMismatchError
# are ValueErrors; a missing file is FileNotFoundError.
USER_ERRORS = (ValueError, FileNotFoundError)
# An OSError with one of these is the user's machine or path, not a bug: one line naming the file.
PATH_ERRNOS = frozenset({errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT,
                         errno.EISDIR, errno.ENOTDIR, errno.EEXIST})
INTERRUPTED = 130  # 128 + SIGINT
# A Ctrl-C that code catching every exception swallowed (a garbage-collection callback, a
# __del__) still stops the process this many seconds later.
SWALLOWED_INTERRUPT_GRACE_SECONDS = 5.0
HELP_ARGUMENTS = ("--help", "-help", "-h", "--helpshort", "-helpshort", "-?", "--?")
T = TypeVar("T")


LOADED_ATTRIBUTE = "bert_jax_loaded_config"  # on a config-file flag: get_config()'s result


def fail(script: str, message: str) -> None:
    """Exit with status 1 and the one line `<script>: error: <message>`."""
    sys.exit(f"{script}: error: {message}")


# ----- flags -------------------------------------------------------------------------------------

def define_run_flags(config_required: bool = True, recipe: str = "pretrain",
                     flag_values: flags.FlagValues = FLAGS) -> None:
    """--config (a config file, with --config.<key>=<value> overrides; `--help` lists the keys
    of `recipe`'s schema), --workdir, and the multi-process flags."""
    define_config_file_flag("config", "Path to a config file (get_config()); "
                            "--config.<key>=<value> overrides one key.", flag_values)
    script_help.set_recipe(flag_values["config"], recipe)
    flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics and logs.",
                        flag_values=flag_values)
    if config_required:
        flags.mark_flags_as_required(["config", "workdir"], flag_values=flag_values)
    distributed.define_flags(flag_values)


def define_config_file_flag(name: str, help_string: str,
                            flag_values: flags.FlagValues = FLAGS) -> None:
    """A config-file flag (ml_collections), checked by `parse_flags` before anything else. The
    flag keeps what its file's get_config() returned (`LOADED_ATTRIBUTE`), so that a config that
    did not load is named as such even when an override of it fails first."""
    from ml_collections import config_flags
    config_flags.DEFINE_config_file(name, None, help_string, flag_values=flag_values,
                                    lock_config=True)
    flag = flag_values[name]
    parse = flag.parser.parse

    def parse_and_keep(argument):
        config = parse(argument)
        setattr(flag, LOADED_ATTRIBUTE, config)
        return config

    flag.parser.parse = parse_and_keep


def _config_file_flags(flag_values: flags.FlagValues) -> list[str]:
    try:
        from ml_collections import config_flags
    except ImportError:  # an image without ml_collections (device_check.py) has no such flag
        return []
    return [name for name in flag_values
            if isinstance(flag_values[name].parser, config_flags.config_flags.ConfigFileFlagParser)]


def _given(argv: list[str], name: str) -> Optional[str]:
    """The value of --name (or -name) on the command line, None if absent; the last one wins."""
    value = None
    args = argv[1:]
    for i, arg in enumerate(args):
        if arg == "--":
            break
        for dashes in ("--", "-"):
            if arg.startswith(f"{dashes}{name}="):
                value = arg[len(dashes) + len(name) + 1:]
            elif arg == f"{dashes}{name}" and i + 1 < len(args):
                value = args[i + 1]
    return value


def config_file_fault(value: str) -> Optional[str]:
    """What is wrong with a config-file flag's value (FILE or FILE:ARGUMENT), found without
    running it: a missing file, a folder, unreadable bytes, a syntax error (file:line), no
    get_config; None when nothing is."""
    path = value.split(":", 1)[0]
    if not path:
        return "the config file is empty: name a .py file defining get_config()"
    if not os.path.exists(path):
        return f"config file {path} not found"
    if os.path.isdir(path):
        return f"config file {path} is a folder: name a .py file defining get_config()"
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as e:
        return f"config file {path} cannot be read ({e.strerror})"
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as e:
        return f"{path}:{e.lineno}: syntax error in the config file: {e.msg}"
    except ValueError as e:  # e.g. NUL bytes: not Python source at all
        return f"config file {path} is not Python source ({e})"
    if "get_config" not in _top_level_names(tree):
        return f"config file {path} defines no get_config()"
    return None


def _top_level_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _raised_in_config(error: BaseException, files: list[str]) -> Optional[str]:
    """'FILE:LINE: <error>' when `error` was raised while a config file ran (in it, or in a file
    of its folder that it imports); None otherwise (an override's fault, or a bug)."""
    folders = {os.path.dirname(os.path.realpath(f)) for f in files}

    def ours(filename: str) -> bool:
        return os.path.dirname(os.path.realpath(filename)) in folders

    location = None
    for frame, line in traceback.walk_tb(error.__traceback__):
        if ours(frame.f_code.co_filename):
            location = (frame.f_code.co_filename, line)
    text = str(error)
    what = f"{type(error).__name__}: {text}"
    if "Error whilst parsing config file" in text:  # ml_collections re-raises with the trace
        for match in re.finditer(r'File "([^"]+)", line (\d+)', text):
            if ours(match.group(1)):
                location = (match.group(1), int(match.group(2)))
        what = [line for line in text.splitlines() if line.strip()][-1].strip()
    if location is None:
        return None
    return f"{location[0]}:{location[1]}: the config file raised {what}"


def parse_flags(argv: list[str], flag_values: Optional[flags.FlagValues] = None) -> list[str]:
    """absl flag parsing with the config files checked first, `--help` (exit 0), and one line
    for a bad config file, an unknown or ill-typed --config.<key>, or any other flag error."""
    flag_values = FLAGS if flag_values is None else flag_values
    script = os.path.basename(argv[0])
    config_flags_given = {name: _given(argv, name) for name in _config_file_flags(flag_values)}
    for name, value in config_flags_given.items():
        fault = value is not None and config_file_fault(value)
        if fault:
            fail(script, f"--{name}: {fault}")
    arguments = argv[1:argv.index("--") if "--" in argv else None]
    if any(arg in HELP_ARGUMENTS for arg in arguments):
        print(script_help.help_text(script, flag_values, config_flags_given))
        sys.exit(0)
    if any(arg in ("--helpfull", "-helpfull") for arg in arguments):
        print(flag_values.get_help())  # every flag, those of the libraries too
        sys.exit(0)
    files = [value.split(":", 1)[0] for value in config_flags_given.values() if value]

    def check_loaded():
        for name, value in config_flags_given.items():
            if value is not None and hasattr(flag_values[name], LOADED_ATTRIBUTE):
                _check_loaded(script, name, value, getattr(flag_values[name], LOADED_ATTRIBUTE))

    try:
        rest = flag_values(argv)
    except flags.Error as e:
        check_loaded()  # an override of a config that did not load: say why it did not
        required = re.search(r"Flag (--\w+) must have a value other than None", str(e))
        message = (_raised_in_config(e, files)
                   or (f"{required.group(1)} is required" if required else
                       "; ".join(line for line in str(e).splitlines() if line.strip()))
                   + " (--help lists the flags)")
        fail(script, message)
    except Exception as e:  # a config file's own error, or a bad override
        located = _raised_in_config(e, files)
        if located:
            fail(script, located)
        check_loaded()
        if not isinstance(e, (AttributeError, KeyError, TypeError, ValueError)):
            raise
        overrides = [a for a in argv[1:] if any(a.startswith(f"--{n}.") for n in
                                                config_flags_given)]
        message = str(e).strip("'\"").replace("\\n", " ").replace("\\'", "'")
        fail(script, f"bad config override among {overrides}: {message}")
    check_loaded()
    return rest


def _check_loaded(script: str, name: str, value: str, config) -> None:
    """A config file that ran but gave no config: get_config() returned None, or failed with an
    OSError (ml_collections keeps that error until the config is read)."""
    path = value.split(":", 1)[0]
    if type(config).__name__ == "_ErrorConfig":
        error = object.__getattribute__(config, "_error")
        detail = str(error).splitlines()[0] if str(error) else type(error).__name__
        fail(script, f"--{name}: config file {path} failed: {detail}")
    if config is None:
        fail(script, f"--{name}: config file {path}: get_config() returned None")


# ----- outputs and workdirs ----------------------------------------------------------------------

def output_file_fault(path: str, flag: str = "--output", protected=()) -> Optional[str]:
    """What keeps a file from being written at `path`: it is a folder, a symbolic link, a
    device (a FIFO, a socket), a file stands where a folder above it must be, or it equals or
    lies inside one of `protected` ((what, path) pairs: the inputs; bert_jax.runtime.outputs);
    None when nothing does (an object-storage path: only the path rule, outputs.fault)."""
    from bert_jax.runtime import outputs, paths
    if not path:
        return f"{flag} is empty: name the file to write"
    if paths.is_remote(path):
        return outputs.fault(path, flag, protected)
    return outputs.fault(path, flag, protected) or _file_above(path, flag)


def _file_above(path: str, flag: str) -> Optional[str]:
    parent = os.path.dirname(os.path.abspath(path))
    while parent and not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if parent and not os.path.isdir(parent):
        return f"{flag}={path}: {parent} is a file, not a folder"
    return None


def workdir_fault(path: str, flag: str = "--workdir", protected=()) -> Optional[str]:
    """What keeps `path` from being a workdir: a file stands there or above it, it is a model
    folder (a Hugging Face folder a run did not write), or it equals, holds or lies inside one
    of `protected` (the inputs of the run: the model it starts from, its data files)."""
    from bert_jax.runtime import outputs, paths
    if not path:
        return f"{flag} is empty: name a folder"
    if paths.is_remote(path):  # the path rule and the folder's files (outputs' module doc)
        return (outputs.overlap_fault(path, flag, protected)
                or outputs.foreign_folder_fault(path, flag, workdir=True))
    if os.path.exists(path) and not os.path.isdir(path):
        return f"{flag}={path} is a file, not a folder"
    return (_file_above(path, flag) or outputs.overlap_fault(path, flag, protected)
            or outputs.foreign_folder_fault(path, flag, workdir=True))


def check_output(script: str, path: str, flag: str = "--output", protected=()) -> None:
    """One line and exit 1 when a file cannot be written at `path` (`output_file_fault`)."""
    fault = output_file_fault(path, flag, protected)
    if fault:
        fail(script, fault)


def check_text_encoding(name: str, what: str) -> None:
    """ValueError naming `what` unless Python knows the text encoding `name`."""
    import codecs
    try:
        codecs.lookup(name)
    except LookupError:
        raise ValueError(f"{what}={name!r} is not a text encoding Python knows (e.g. utf-8, "
                         "cp1252, latin-1)") from None


# ----- start-up and the run --------------------------------------------------------------------

def start(argv: list[str], compilation_cache: bool = True) -> None:
    """First lines of a script's main: no stray arguments, no libtpu start-up on a host without
    a TPU (`platform.skip_absent_tpu`), join the job, quiet Orbax, keep compiled programs on disk
    (off for a script that measures compilation)."""
    script = os.path.basename(argv[0])
    if len(argv) > 1:
        fail(script, f"unexpected arguments {argv[1:]}")
    platform.skip_absent_tpu()
    compilation_cache_lib.use_compilation_cache(compilation_cache)
    try:
        distributed.initialize_from_flags()
    except flags.ValidationError as e:
        fail(script, str(e))
    orbax_logs.quiet_orbax_logs()


def exit_interrupted(script: str) -> None:
    """Exit 130 with one line: a Ctrl-C stopped the script."""
    _interrupts.reported = True
    print(f"{script}: interrupted (Ctrl-C); stopped: run the same command again to start or "
          "resume", file=sys.stderr, flush=True)
    sys.exit(INTERRUPTED)


def run_or_exit(script: str, fn: Callable[[], T]) -> T:
    """fn(), with bad input turned into one line `<script>: error: ...` and exit status 1 (so is
    a file that cannot be written: a read-only or full disk, a folder where a file goes), and a
    Ctrl-C (KeyboardInterrupt) into one line and exit status 130."""
    try:
        return fn()
    except USER_ERRORS as e:
        logging.error("%s", e)
        fail(script, str(e))
    except OSError as e:
        if e.errno not in PATH_ERRNOS:
            raise
        logging.error("%s", e)
        fail(script, f"{e.filename or 'a file'}: {e.strerror}")
    except KeyboardInterrupt:
        exit_interrupted(script)


class _Interrupts:
    reported = False  # exit_interrupted has printed its line


_interrupts = _Interrupts()


def _exit_now(code: int) -> None:  # the process, at once: threads, atexit and all
    os._exit(code)


@contextlib.contextmanager
def interrupts_stop(script: str, grace: Optional[float] = None) -> Iterator[None]:
    """Within: Ctrl-C raises KeyboardInterrupt, as Python's own handler does (run_or_exit turns
    it into exit 130 and one line). Where Python cannot raise it (a gc callback such as JAX's
    _xla_gc_callback, a __del__: "Exception ignored in ..."), the signal is delivered again a
    moment later, outside that code; and should code that catches every exception swallow it,
    the process still stops `grace` seconds later, exit 130. The training loop installs its own
    handler while it runs (save, then 130) and restores this one. Only the main thread can
    install a handler; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    wait = SWALLOWED_INTERRUPT_GRACE_SECONDS if grace is None else grace
    timers = []

    def stop_later():
        if not _interrupts.reported:
            print(f"{script}: interrupted (Ctrl-C); stopped: run the same command again to "
                  "start or resume", file=sys.stderr, flush=True)
        _exit_now(INTERRUPTED)

    def handle(signum, frame):
        if not timers:
            timer = threading.Timer(wait, stop_later)
            timer.daemon = True
            timer.start()
            timers.append(timer)
        raise KeyboardInterrupt

    previous_hook = sys.unraisablehook

    def deliver_again(unraisable):
        if not issubclass(unraisable.exc_type, KeyboardInterrupt):
            previous_hook(unraisable)
            return
        again = threading.Timer(0.01, os.kill, (os.getpid(), signal.SIGINT))
        again.daemon = True
        again.start()

    previous = signal.signal(signal.SIGINT, handle)
    sys.unraisablehook = deliver_again
    try:
        yield
    except BaseException:  # on its way out already (exit 130 among others): no timer needed
        for timer in timers:
            timer.cancel()
        raise
    else:
        for timer in timers:
            timer.cancel()
        if timers:  # a Ctrl-C came and was swallowed on the way: stop now
            exit_interrupted(script)
    finally:
        signal.signal(signal.SIGINT, previous)
        sys.unraisablehook = previous_hook


def train_main(argv: list[str], script: str, train_and_evaluate: Callable) -> None:
    """The main of a training script: train_and_evaluate(FLAGS.config, FLAGS.workdir)."""
    with interrupts_stop(script):
        run_or_exit(script, lambda: start(argv))
        fault = workdir_fault(FLAGS.workdir, protected=run_keys.run_inputs(FLAGS.config))
        if fault:
            fail(script, fault)
        result = run_or_exit(script, lambda: train_and_evaluate(FLAGS.config, FLAGS.workdir))
    if result.preempted:
        logging.warning("stopped by signal %d at step %d (saved); run the same command again to "
                        "resume", result.signal_number, result.step)
        sys.exit(128 + result.signal_number)
    logging.info("done at step %d: train %s; held-out %s", result.step,
                 result.last_train_metrics, result.last_eval_metrics)
    print(json.dumps({"step": result.step, "metrics": result.last_eval_metrics or {}}))
