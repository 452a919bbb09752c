"""Progress bars for the slow passes a person waits on: one helper, one set of rules.

    for batch in progress.bar(batches, total=n, desc="evaluation", unit="batch"):
        ...

Used by corpus preparation (`bert_jax.data.corpora.catalog`), vocabulary training
(`bert_jax.data.tokenizers.wordpiece_training.train_wordpiece`) and evaluation passes
(`bert_jax.train.evaluation`); not by the training loop, whose log line every
`log_every_steps` is its progress.

When a bar shows: only in process 0 of a job (`jax.process_index() == 0`), on stderr, and only
when stderr is a terminal, so that log files and CI output stay clean. The environment variable
BERT_JAX_PROGRESS overrides the terminal test: `1` (or true/yes/on) shows bars even when stderr is
redirected, `0` (or false/no/off) hides them on a terminal too; process 0 only in both cases.
A bar yields the items of its iterable unchanged: it never changes a result.
"""

from __future__ import annotations

import os
import sys
from typing import Iterable, Optional, TypeVar

import tqdm

ENV_VAR = "BERT_JAX_PROGRESS"
_ON = ("1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off")
T = TypeVar("T")


def enabled() -> bool:
    """Whether a bar would show now: BERT_JAX_PROGRESS on/off, else stderr is a terminal; and this
    is process 0 (asked last, and only then, so a disabled bar never touches the JAX backend)."""
    setting = os.environ.get(ENV_VAR, "").strip().lower()
    if setting in _OFF:
        return False
    if setting not in _ON:
        isatty = getattr(sys.stderr, "isatty", None)
        if isatty is None or not isatty():
            return False
    import jax  # imported here: the data modules that use bars need no JAX otherwise
    return jax.process_index() == 0


def bar(iterable: Optional[Iterable[T]] = None, total: Optional[int] = None,
        desc: Optional[str] = None, unit: str = "it", wanted: bool = True) -> tqdm.tqdm[T]:
    """A tqdm bar over `iterable` (or a manual one: `.update(n)`), on the stderr of the moment,
    disabled unless `enabled()`. total None: the length of the iterable if it has one, else a
    count and a rate without a percentage. The bar is cleared when done (leave=False): the logs
    say what was done, the bar only that it is going on. wanted=False: no bar in any case."""
    return tqdm.tqdm(iterable, total=total, desc=desc, unit=unit, file=sys.stderr,
                     disable=not (wanted and enabled()), leave=False, dynamic_ncols=True,
                     mininterval=0.5)
