"""`--help` of the scripts in experiments/: what the script does (its docstring), its own flags
(those of the script and of bert_jax, not the libraries' ~190: `--helpfull` lists those), and for
a script with a run config every key of the schema (bert_jax/config/run.py) with its default and
meaning, beside the values of the config file given with `--config`, if any.

bert_jax.cli.parse_flags prints `help_text` and exits 0 when the command line asks for help.
"""

from __future__ import annotations

import os
import sys
from typing import Optional

from absl import flags

# On a run-config flag: the recipe whose schema --help lists (`set_recipe`).
RECIPE_ATTRIBUTE = "bert_jax_help_recipe"


def set_recipe(flag: flags.Flag, recipe: str) -> None:
    """Make --help list the keys of `recipe`'s schema (pretrain | finetune) for this flag."""
    setattr(flag, RECIPE_ATTRIBUTE, recipe)


def own_flags(script: str, flag_values: flags.FlagValues) -> list:
    """The flags this script and bert_jax define (not those of absl, jax, grain, ...)."""
    chosen = {}
    for module, module_flags in flag_values.flags_by_module_dict().items():
        mine = (module in ("__main__",) or module.startswith(("bert_jax", "experiments"))
                or os.path.basename(module) == script)
        if not mine:
            continue
        for flag in module_flags:
            if "." not in flag.name:
                chosen[flag.name] = flag
    return [chosen[name] for name in sorted(chosen)]


def _flag_line(flag) -> str:
    name = f"--[no]{flag.name}" if flag.boolean else f"--{flag.name}"
    details = []
    if flag.default is not None:
        details.append(f"default: {flag.default_as_str or repr(flag.default)}")
    enum_values = getattr(flag.parser, "enum_values", None)
    if enum_values:
        details.append("one of " + " | ".join(enum_values))
    head = f"  {name}" + (f" ({'; '.join(details)})" if details else "")
    return f"{head}\n      {' '.join(str(flag.help).split())}"


def _docstring(script: str, flag_values: flags.FlagValues) -> str:
    """The docstring of the script's module: __main__ when it runs as a script, or the
    experiments.* module that defined its flags."""
    for module in flag_values.flags_by_module_dict():
        if module.startswith("experiments.") and module in sys.modules:
            return (sys.modules[module].__doc__ or "").strip()
    return (getattr(sys.modules.get("__main__"), "__doc__", None) or "").strip()


def help_text(script: str, flag_values: flags.FlagValues,
              config_files: Optional[dict[str, Optional[str]]] = None) -> str:
    """The script's docstring, its own flags, and for each run-config flag the schema's keys with
    their defaults and meanings (and the values of the config file given, if any)."""
    doc = _docstring(script, flag_values)
    lines = [doc, ""] if doc else []
    lines.append(f"{script}: its flags (--helpfull lists every flag, those of the libraries "
                 "too):")
    lines += [_flag_line(flag) for flag in own_flags(script, flag_values)]
    for name, value in (config_files or {}).items():
        recipe = getattr(flag_values[name], RECIPE_ATTRIBUTE, None)
        if recipe is None:
            continue
        from bert_jax.config import run_keys as run_config_keys
        given = _load_for_help(value) if value else None
        source = value.split(":", 1)[0] if given is not None else None
        lines += ["", f"--{name}.<key>=<value>: the keys of the run config "
                  f"(bert_jax/config/run.py), with their defaults"
                  + (f" and the values of {source}" if source else "") + ":"]
        lines += run_config_keys.help_lines(recipe, given)
    return "\n".join(lines)


def _load_for_help(value: str):
    """The config of a config file (FILE[:ARGUMENT]) for --help; None if it does not load."""
    import importlib.util
    path, _, argument = value.partition(":")
    try:
        spec = importlib.util.spec_from_file_location("_help_config", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.get_config(*([argument] if argument else []))
    except Exception:  # noqa: BLE001 - --help shows the schema's defaults instead
        return None
