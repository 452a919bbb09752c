"""The run config's schema read back: its keys, their meanings, the check of a new run's config.

    run_config_keys.flat(config)               # {"optimizer.b1": 0.9, ...}
    run_config_keys.describe("pretrain")       # {"optimizer.b1": "Adam's decay of ...", ...}
    run_config_keys.help_lines("finetune", given)   # --help's lines, one per key
    run_config_keys.check(config)              # ConfigError for a key or value outside the schema

The schema is bert_jax/config/run.py, written once: its defaults are read by building its configs,
and a key's meaning is the comment on (or just above) the line that sets it there, read from that
file's source (`describe`), so no second list of keys or meanings exists to fall out of step.
Importing this module imports no ml_collections (bert_jax.config.run loads it where a config is
built).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from bert_jax.config import run as run_config

# Where each recipe's keys are defined in bert_jax/config/run.py, most specific first: a key's
# meaning is the first comment found along this chain (finetune_config's total_steps says
# "0: from epochs").
_DEFINED_IN = {
    "pretrain": ("pretrain_config", "base_config", "LOOP_DEFAULTS", "optimizer_block",
                 "model_block", "MODEL_FIELDS"),
    "finetune": ("finetune_config", "base_config", "LOOP_DEFAULTS", "optimizer_block",
                 "model_block", "MODEL_FIELDS"),
}
_PREFIXES = {"model_block": "model", "MODEL_FIELDS": "model", "optimizer_block": "optimizer"}


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
    """{dotted key: its comment in bert_jax/config/run.py} for the keys of `recipe` (pretrain |
    finetune)."""
    import ast
    import io
    import tokenize
    with open(run_config.__file__, encoding="utf-8") as f:
        source = f.read()
    comments: dict[int, tuple[str, bool]] = {}  # line -> (text, the line is only a comment)
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = (token.string.lstrip("#").strip(),
                                        token.line.strip().startswith("#"))

    def comment_for(line: int) -> str:
        if line in comments and not comments[line][1]:
            return comments[line][0]
        above, n = [], line - 1
        while n in comments and comments[n][1]:
            above.insert(0, comments[n][0])
            n -= 1
        return " ".join(above)

    found: dict[str, dict[str, str]] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef):
            found[node.name] = _definitions(node.body, _PREFIXES.get(node.name, ""), comment_for)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            if isinstance(target, ast.Name):
                found[target.id] = _keys_in(node.value, _PREFIXES.get(target.id, ""),
                                            comment_for)
    out: dict[str, str] = {}
    for place in reversed(_DEFINED_IN[recipe]):  # the most specific place wins
        out.update({key: text for key, text in found.get(place, {}).items() if text})
    return out


def _definitions(body: list, prefix: str, comment_for) -> dict[str, str]:
    """Keys set by a schema function's statements: config.<key> = ..., block = dict(...),
    return ConfigDict({...})."""
    import ast
    out: dict[str, str] = {}
    for statement in body:
        for node in ast.walk(statement):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                path = _attribute_path(node.targets[0])
                if path is not None and path[0] == "config" and len(path) > 1:
                    key = ".".join(path[1:])
                    out[key] = comment_for(node.lineno)
                    out.update(_keys_in(node.value, key, comment_for))
                elif isinstance(node.targets[0], ast.Name):
                    out.update(_keys_in(node.value, prefix, comment_for))
            elif isinstance(node, ast.Return) and node.value is not None:
                out.update(_keys_in(node.value, prefix, comment_for))
    return out


def _attribute_path(node) -> list[str] | None:
    import ast
    names = []
    while isinstance(node, ast.Attribute):
        names.insert(0, node.attr)
        node = node.value
    return [node.id, *names] if isinstance(node, ast.Name) else None


def _keys_in(value, prefix: str, comment_for) -> dict[str, str]:
    """Keys of the dict(...) calls and {...} literals in `value`, under `prefix`."""
    import ast
    out: dict[str, str] = {}
    join = (lambda key: f"{prefix}.{key}") if prefix else (lambda key: key)
    for node in ast.walk(value):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "dict":
            for keyword in node.keywords:
                if keyword.arg is not None:
                    out[join(keyword.arg)] = comment_for(keyword.value.lineno)
        elif isinstance(node, ast.Dict):
            for key in node.keys:
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    out[join(key.value)] = comment_for(key.lineno)
    return out


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
