"""Where a run's ConfigDict goes: the bert_jax files whose functions hold it.

    python tests/config_trace.py [--corpus=synthetic|demo] [--workdir=DIR]

runs bert_jax.recipes.pretrain.train_and_evaluate on a tiny pre-training config (2 steps) with a
profile hook on every thread, and prints, one per line, each bert_jax file (relative to the
package) in which a called function held in its locals the very config object that was passed in
(`exact`), then each file in which one held any ml_collections ConfigDict (`any`: the config
or one of its blocks, such as config.data). `trace` is the function the tests call.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
from typing import Any, Callable

from repo_root import ROOT

PACKAGE = os.path.join(ROOT, "bert_jax") + os.sep


def trace(run: Callable[[], Any], config: Any) -> tuple[list[str], list[str]]:
    """(files whose frames held `config` itself, files whose frames held any ConfigDict) while
    `run()` ran, each a sorted list of paths relative to bert_jax/ ("recipes/pretrain.py")."""
    from ml_collections import ConfigDict, FrozenConfigDict
    exact: set[str] = set()
    any_dict: set[str] = set()
    checked: dict[Any, bool] = {}  # code objects outside bert_jax are skipped cheaply

    def profile(frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        inside = checked.get(code)
        if inside is None:
            inside = checked[code] = code.co_filename.startswith(PACKAGE)
        if not inside:
            return
        relative = code.co_filename[len(PACKAGE):]
        for value in frame.f_locals.values():
            if value is config:
                exact.add(relative)
                any_dict.add(relative)
            elif isinstance(value, (ConfigDict, FrozenConfigDict)):
                any_dict.add(relative)

    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return sorted(exact), sorted(any_dict)


def tiny_config(corpus: str):
    """A one-layer BERT pre-trained for 2 steps of 4 rows of 16 tokens on `corpus`
    (pretrain_runs.tiny_pretrain_config), evaluated on one batch, logged every step."""
    from pretrain_runs import tiny_pretrain_config
    return tiny_pretrain_config(**{
        "data.corpus": corpus, "tokenizer.vocab_size": 97 if corpus == "synthetic" else 200,
        "eval_batches": 1, "checkpoint_every_steps": 0, "log_every_steps": 1})


def trace_pretraining(workdir: str, corpus: str = "synthetic") -> tuple[list[str], list[str]]:
    """`trace` of recipes/pretrain.train_and_evaluate on `tiny_config(corpus)` in `workdir`."""
    from bert_jax.recipes import pretrain
    config = tiny_config(corpus)
    return trace(lambda: pretrain.train_and_evaluate(config, workdir), config)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default="synthetic")
    parser.add_argument("--workdir", default="")
    args = parser.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="config_trace_")
    exact, any_dict = trace_pretraining(workdir, args.corpus)
    print("# files whose functions held the config object itself")
    print("\n".join(exact))
    print("# files whose functions held any ConfigDict (the config or one of its blocks)")
    print("\n".join(any_dict))


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    main()
