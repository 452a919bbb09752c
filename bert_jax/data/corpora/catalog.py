"""Text corpora by name: one string -> a TFDS dataset stored in `array_record` files, read by
random access.

Three kinds of corpus, named by one string (`load_source(corpus, split, data_dir)`):

  "demo"                 real English text shipped by the `gensim` wheel: Wikipedia sample
                         articles and the Lee news stories, about 3 MB
                         (`bert_jax.data.corpora.demo`).
  "text:GLOB"            local UTF-8 plain-text files matched by GLOB ("text:/data/books/*.txt"),
                         documents separated by blank lines (default), or one per file or one per
                         line; a changed file set is prepared anew, and a copy prepared with another
                         document delimiter is an error naming both
                         (`bert_jax.data.corpora.text_files`, which also says what bad input is
                         refused or skipped).
  any other name         a TFDS catalog name ("wikipedia/20230601.en") passed through to TFDS, which
                         downloads and prepares it (network needed; field "text" by default).

Each corpus is prepared once under `data_dir` (`prepare`: idempotent, under the data dir's lock,
`bert_jax.data.corpora.data_dir_lock`) and then read with `as_data_source()`, which needs no
TensorFlow. Every example is a dict with a "text" field (bytes): `document_text` reads it,
`SourceTexts` iterates over a source's texts. The split into "train" and "validation" is stable: a
document goes to validation when a hash of its text falls below `validation_fraction`, so adding
files never moves existing documents between splits (`bert_jax.data.corpora.splits`).

Preparing shows progress bars (files read, articles parsed, documents written per split; TFDS's
own bars for a catalog dataset's download) under the rules of `bert_jax.runtime.progress`: process
0, on a terminal or with BERT_JAX_PROGRESS=1.

`matched_files` (text_files.py) and `gensim_test_data` (demo.py) are re-exported here, where
callers have always found them.
"""

from __future__ import annotations

import errno
import os
from typing import Any, Iterator, Protocol

import tensorflow_datasets as tfds

from bert_jax.data.corpora.data_dir_lock import exclusive
from bert_jax.data.corpora.demo import DemoCorpus, gensim_test_data
from bert_jax.data.corpora.text_files import (
    TextFiles,
    check_document_delimiter,
    matched_files,
    text_files_config,
)
from bert_jax.runtime import progress

__all__ = ["DEMO", "TEXT_PREFIX", "SourceTexts", "TextSource", "builder_for", "document_text",
           "gensim_test_data", "load_source", "matched_files", "prepare"]

DEMO = "demo"
TEXT_PREFIX = "text:"


class TextSource(Protocol):
    """Random access to documents: `len(source)`, `source[i] -> {"text": bytes, ...}`."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Any: ...


def document_text(record: Any, text_key: str = "text") -> str:
    """The text of one record of a source: a dict with `text_key`, bytes or str."""
    if isinstance(record, dict):
        if text_key not in record:
            raise KeyError(f"record has no field {text_key!r}; its fields are {sorted(record)}")
        record = record[text_key]
    return record.decode("utf-8") if isinstance(record, bytes) else str(record)


class SourceTexts:
    """The texts of source[0], ..., source[count - 1], in order; each iteration reads the source
    anew, so a consumer that passes over the texts twice (`wordpiece_training.train_wordpiece`)
    needs no copy of them in memory."""

    def __init__(self, source: TextSource, text_key: str = "text", count: int | None = None):
        self.source, self.text_key = source, text_key
        self.count = len(source) if count is None else min(count, len(source))

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[str]:
        return (document_text(self.source[i], self.text_key) for i in range(self.count))


def builder_for(corpus: str, data_dir: str, **text_options) -> tfds.core.DatasetBuilder:
    """The TFDS builder of `corpus` ("demo", "text:GLOB" or a catalog name), not yet prepared."""
    data_dir = os.path.expanduser(data_dir)
    if corpus == DEMO:
        return DemoCorpus(data_dir=data_dir, file_format="array_record")
    if corpus.startswith(TEXT_PREFIX):
        config = text_files_config(corpus[len(TEXT_PREFIX):], **text_options)
        return TextFiles(config=config, data_dir=data_dir, file_format="array_record")
    try:
        return tfds.builder(corpus, data_dir=data_dir, file_format="array_record")
    except Exception as e:  # unknown name, or the catalog needs something missing
        first_line = str(e).strip().split("\n")[0]
        raise ValueError(f"corpus {corpus!r} is neither 'demo', 'text:GLOB' nor a TFDS catalog "
                         f"name that this installation can build ({first_line})") from e


def prepare(corpus: str, data_dir: str, **text_options) -> tfds.core.DatasetBuilder:
    """Prepares `corpus` under `data_dir` unless it is there (idempotent); returns its builder.

    A "text:GLOB" corpus already prepared there with another document_delimiter is a ValueError
    naming both (`check_document_delimiter`)."""
    data_dir = os.path.expanduser(data_dir)
    builder = builder_for(corpus, data_dir, **text_options)
    if not builder.is_prepared():
        with exclusive(data_dir):
            builder = builder_for(corpus, data_dir, **text_options)  # another process may have
            if not builder.is_prepared():
                _download_and_prepare(builder, corpus, data_dir)
        builder = builder_for(corpus, data_dir, **text_options)
    if isinstance(builder, TextFiles):
        check_document_delimiter(builder, corpus)
    return builder


# What a full disk or an exhausted quota says, in an OSError or in the text of the RuntimeError that
# TFDS's array_record writer raises ("write() failed: No space left on device; writing <file>").
_DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_DISK_FULL_TEXTS = (os.strerror(errno.ENOSPC), os.strerror(errno.EDQUOT), "No space left on device",
                    "Disk quota exceeded")


def disk_full(error: BaseException) -> bool:
    """True when `error`, or an error it was raised from, is a full disk (or quota)."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in _DISK_FULL_ERRNOS:
            return True
        if any(text in str(error) for text in _DISK_FULL_TEXTS):
            return True
        error = error.__cause__ or error.__context__
    return False


def _download_and_prepare(builder: tfds.core.DatasetBuilder, corpus: str, data_dir: str) -> None:
    """TFDS writes the corpus into an `incomplete.*` folder beside its version folder and renames
    it when every split is written; a failure removes that folder. So a full disk leaves nothing
    half-prepared: it ends in an OSError(ENOSPC) naming the data dir (one line in the scripts),
    and the same command, once space is freed, prepares the corpus whole, the same bytes as a
    preparation that never stopped (the writer is deterministic). A corpus whose records pass
    TFDS's in-memory shuffle buffer (1 GB) needs TensorFlow to spill: without it, one line that
    says so and what to do instead."""
    local = corpus == DEMO or corpus.startswith(TEXT_PREFIX)
    tfds.display_progress_bar(not local and progress.enabled())  # TFDS's own bars: downloads
    try:
        builder.download_and_prepare()
    except Exception as e:
        if _needs_tensorflow(e):
            raise ValueError(
                f"corpus {corpus!r} is too large for TFDS to prepare in memory here: past "
                f"{_shuffle_buffer_gb():.0f} GB of records its shuffle spills to disk through "
                "TensorFlow, which is not installed; nothing of it was kept. Prepare it as token "
                "shards (experiments/prepare_shards.py, any size, no TensorFlow), or split it "
                "into corpora under that size, or pip install tensorflow") from e
        if disk_full(e):
            raise OSError(errno.ENOSPC, f"no space left on the device while preparing corpus "
                          f"{corpus!r} there ({_first_line(e)}); nothing of it was kept: free "
                          "space and run the same command again", data_dir) from e
        if local:
            raise
        raise RuntimeError(
            f"could not download and prepare the TFDS dataset {corpus!r} into {data_dir!r} "
            f"(network access and the dataset's own dependencies are needed): {e}") from e
    finally:
        tfds.display_progress_bar(True)


def _needs_tensorflow(error: BaseException) -> bool:
    """True when TFDS stopped for want of TensorFlow (its shuffle's spill to disk)."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, ModuleNotFoundError) and (error.name or "").startswith("tensorflow"):
            return True
        error = error.__cause__ or error.__context__
    return False


def _shuffle_buffer_gb() -> float:
    from tensorflow_datasets.core import shuffle
    return shuffle.MAX_MEM_BUFFER_SIZE / 1e9


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:300] if text else type(error).__name__


def load_source(corpus: str, split: str, data_dir: str, **text_options) -> TextSource:
    """A random-access source of `split` of `corpus`, preparing the corpus first if needed.

    Returns an `array_record` data source: `len(source)`, `source[i] -> {"text": bytes, ...}`.
    `text_options` (document_delimiter, invalid_utf8, validation_fraction) apply to "text:GLOB".
    """
    builder = prepare(corpus, data_dir, **text_options)
    if split not in builder.info.splits and "[" not in split:
        raise ValueError(f"corpus {corpus!r} has no split {split!r}; it has "
                         f"{sorted(builder.info.splits)}")
    return builder.as_data_source(split=split)
