"""Real text pairs that ship with Python: (a docstring's summary paragraph, the rest of it) for the
functions and classes of the standard library, for contrastive fine-tuning and retrieval tests.

Each pair's anchor is a docstring's first paragraph and its positive the remaining paragraphs
(whitespace collapsed), kept when the anchor has at least 20 characters and the rest at least 80;
one pair per distinct body. Pairs are split by module file, so no module (and no body text) is
in both splits: the test split takes a fifth of the modules, drawn with `seed`. Test suites,
IDLE, tkinter, lib2to3 and the like are skipped. The pairs depend on the Python version (its
standard library), which `prepare` records.
"""

from __future__ import annotations

import ast
import json
import os
import sys
import sysconfig

import numpy as np

from bert_jax.runtime import paths

SKIPPED_DIRS = frozenset({"test", "tests", "idlelib", "site-packages", "lib2to3", "tkinter",
                          "turtledemo", "ensurepip", "__pycache__"})
MIN_ANCHOR_CHARS, MIN_POSITIVE_CHARS = 20, 80


def _module_pairs(path: str, module: str) -> list[dict[str, str]]:
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (SyntaxError, UnicodeDecodeError):
        return []
    pairs = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        doc = ast.get_docstring(node)
        parts = doc.split("\n\n", 1) if doc else []
        if len(parts) < 2:
            continue
        anchor, positive = " ".join(parts[0].split()), " ".join(parts[1].split())
        if len(anchor) >= MIN_ANCHOR_CHARS and len(positive) >= MIN_POSITIVE_CHARS:
            pairs.append({"anchor": anchor, "positive": positive, "module": module,
                          "name": node.name})
    return pairs


def stdlib_pairs(root: str | None = None) -> list[dict[str, str]]:
    """Every pair of the standard library under `root` (default: this Python's), files in sorted
    order, the first pair of each distinct body kept."""
    root = root or sysconfig.get_paths()["stdlib"]
    pairs = []
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(dirpath, name)
            pairs.extend(_module_pairs(path, os.path.relpath(path, root)))
    seen, unique = set(), []
    for pair in pairs:
        if pair["positive"] not in seen:
            seen.add(pair["positive"])
            unique.append(pair)
    return unique


def split_by_module(pairs: list[dict[str, str]], seed: int = 0
                    ) -> dict[str, list[dict[str, str]]]:
    """{"train", "test"}: a fifth of the modules (drawn with `seed`) to test, rows shuffled."""
    rng = np.random.default_rng(seed)
    modules = sorted({p["module"] for p in pairs})
    test_modules = set(rng.permutation(modules)[:len(modules) // 5].tolist())
    split = {"train": [p for p in pairs if p["module"] not in test_modules],
             "test": [p for p in pairs if p["module"] in test_modules]}
    return {name: [rows[i] for i in rng.permutation(len(rows))] for name, rows in split.items()}


def prepare(folder: str, seed: int = 0) -> dict[str, object]:
    """Write train.jsonl and test.jsonl ({"anchor", "positive", "module", "name"}) and
    summary.json (Python version, counts) into `folder`, unless summary.json is there; returns
    the summary. Files appear complete (written aside, then renamed)."""
    summary_path = os.path.join(folder, "summary.json")
    if os.path.isfile(summary_path):
        with open(summary_path, encoding="utf-8") as f:
            return json.load(f)
    pairs = stdlib_pairs()
    split = split_by_module(pairs, seed)
    os.makedirs(folder, exist_ok=True)
    for name, rows in split.items():
        paths.write_text_atomically(os.path.join(folder, f"{name}.jsonl"),
                          "".join(json.dumps(row) + "\n" for row in rows))
    summary = {"python": sys.version.split()[0], "pairs": len(pairs),
               "modules": len({p["module"] for p in pairs}), "seed": seed,
               **{name: len(rows) for name, rows in split.items()},
               **{f"{name}_modules": len({p["module"] for p in rows})
                  for name, rows in split.items()}}
    paths.write_text_atomically(summary_path, json.dumps(summary, indent=1))
    return summary
