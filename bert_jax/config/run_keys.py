"""The run config's schema read back: its keys, their meanings, the check of a new run's config.

    run_config_keys.flat(config)               # {"optimizer.b1": 0.9, ...}
    run_config_keys.describe("pretrain")       # {"optimizer.b1": "Adam's decay of ...", ...}
    run_config_keys.help_lines("finetune", given)   # --help's lines, one per key
    run_config_keys.check(config)              # ConfigError for a key or value outside the schema

The schema is bert_jax/config/run.py, written once as data: each key's default and meaning
side by side, so no second list of keys or meanings exists to fall out of step. Importing this
module imports no ml_collections (bert_jax.config.run loads it where a config is built).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from bert_jax.config import run as run_config


def value_at(config: Any, *keys: str) -> Any:
    """config[keys[0]][keys[1]]..., or None where a key is absent (a ConfigDict, a dict, or a
    saved config.json read back)."""
    value = config
    for key in keys:
        try:
            value = value[key]
        except (KeyError, TypeError, AttributeError):
            return None
    return value


def run_inputs(config) -> list[tuple[str, str]]:
    """(what, path) of what a run's config reads that its workdir must not equal, hold or lie
    inside: the model or checkpoint it starts from, its tokenizer, its data files."""
    def get(*keys):
        value = value_at(config, *keys)
        return value if isinstance(value, str) and value else None

    return [(what, value) for what, value in (
        ("the model folder it starts from (init.hf_dir)", get("init", "hf_dir")),
        ("the checkpoint it starts from (init.checkpoint)", get("init", "checkpoint")),
        ("its tokenizer (tokenizer.path)", get("tokenizer", "path")),
        ("its training file (data.train_path)", get("data", "train_path")),
        ("its held-out file (data.eval_path)", get("data", "eval_path"))) if value]


def flat(config: Any) -> dict[str, Any]:
    """{dotted key: value} of a ConfigDict or nested mapping (placeholders as None)."""
    tree = run_config.plain(config.to_dict() if hasattr(config, "to_dict") else config)
    out: dict[str, Any] = {}

    def walk(node: Mapping, prefix: str) -> None:
        for key, value in node.items():
            if isinstance(value, Mapping):
                walk(value, f"{prefix}{key}.")
            else:
                out[f"{prefix}{key}"] = value
    walk(tree, "")
    return out


def describe(recipe: str) -> dict[str, str]:
    """{dotted key: its meaning} for the keys of `recipe` (pretrain | finetune): the schema's
    (bert_jax.config.run.meanings)."""
    return run_config.meanings(recipe)


def help_lines(recipe: str, given: Any = None) -> list[str]:
    """One line per key of `recipe`'s schema: `key = default  meaning`, with the value of a
    config file (`given`) where it differs, and the keys `given` has outside the schema."""
    task = given.get("task", "classification") if given is not None else "classification"
    schema = run_config.defaults_for({"recipe": recipe, "task": task})
    defaults, meanings = flat(schema), describe(recipe)
    values = flat(given) if given is not None else {}
    lines = []
    for key, default in defaults.items():
        line = f"  {key} = {default!r}"
        if key in values and values[key] != default:
            line += f" (the file: {values[key]!r})"
        lines.append(f"{line}  # {meanings.get(key, '')}".rstrip(" #"))
    lines += [f"  {key} = {value!r}  # not in the schema: a run refuses it"
              for key, value in values.items() if key not in defaults]
    return lines


def check(config: Any) -> None:
    """A ConfigError (a ValueError) naming the first key of a new run's config that does not fit
    the schema: a key it does not have, a value of another type, a learning rate that is not a
    positive finite number, a text encoding Python does not know. Recipes call it before
    anything of the run is written."""
    import difflib

    from bert_jax.config.bert import ConfigError
    saved = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    schema = run_config.defaults_for(saved)
    defaults, values = flat(schema), flat(config)
    for key, value in values.items():
        if key not in defaults:
            close = difflib.get_close_matches(key, list(defaults), n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise ConfigError(f"config key {key} is not in the schema (bert_jax/config/run.py; "
                              f"--help lists the keys){hint}")
        expected = _schema_type(key, defaults[key])
        if not _fits(value, expected, nullable=defaults[key] is None):
            raise ConfigError(f"config.{key}={value!r} is a {type(value).__name__}; the key "
                              f"takes a {expected.__name__} (default {defaults[key]!r})")
    for key in ("learning_rate",):
        rate = values[key]
        if not (math.isfinite(rate) and rate > 0):
            raise ConfigError(f"config.{key}={rate} must be a positive finite number (BERT "
                              "pre-training uses about 1e-4, fine-tuning 2e-5..5e-5)")
    for key, fits, what in _RANGES:
        if key in values and not fits(values[key]):
            raise ConfigError(f"config.{key}={values[key]!r} must be {what}")
    if "data.encoding" in values:
        import codecs
        try:
            codecs.lookup(values["data.encoding"])
        except LookupError:
            raise ConfigError(f"config.data.encoding={values['data.encoding']!r} is not a text "
                              "encoding Python knows (e.g. utf-8, cp1252, latin-1)") from None

# Values no run can use (the type is checked first): (key, test, what it must be).
_RANGES = (
    ("data.long_inputs", lambda v: v in run_config.LONG_INPUTS,
     f"one of {', '.join(run_config.LONG_INPUTS)}"),
    ("data.window_stride", lambda v: v >= 0,
     "an integer >= 0 (tokens between window starts; 0: half a row)"),
    ("epochs", lambda v: math.isfinite(v) and v > 0, "a positive finite number"),
    ("accumulation_steps", lambda v: v >= 1, "at least 1 (micro-batches per optimizer step)"),
    ("seed", lambda v: 0 <= v < 2**32, "in [0, 2**32)"),
    ("data.mask_rate", lambda v: 0 < v < 1, "in (0, 1): the share of tokens masked"),
    ("data.batch_warmup_tokens", lambda v: v >= 0, "an integer >= 0 (0: no batch-size warm-up)"),
    ("data.batch_warmup_start", lambda v: v >= 0, "an integer >= 0 (0: no batch-size warm-up)"),
    ("data.eval_mask_rate", lambda v: 0 < v < 1, "in (0, 1): the share of tokens masked"),
)


def _schema_type(key: str, default: Any) -> type:
    if key.startswith("model.") and key[len("model."):] in run_config.MODEL_FIELDS:
        return run_config.MODEL_FIELDS[key[len("model."):]]
    return type(default)


def _fits(value: Any, expected: type, nullable: bool) -> bool:
    """A value of the key's type: None where the schema's default is None (a model field: the
    preset's), an int for a float; a bool is never a number here."""
    if value is None:
        return nullable
    if isinstance(value, bool):
        return expected is bool
    if expected is float:
        return isinstance(value, (int, float))
    return isinstance(value, expected)
