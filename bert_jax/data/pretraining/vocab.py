"""The vocabulary of a pre-training run: the one it names, or one trained on its corpus once.

`resolve_vocab_path(cfg)`: cfg.vocab_path when set; else, for the "demo" and "text:GLOB"
corpora, a WordPiece vocabulary of cfg.demo_vocab_size trained on the corpus's train split on first
use (`prepare_demo`, `prepare_text_vocabulary`) and kept in data_dir, trained by one process
under the data dir's lock (`bert_jax.data.corpora.data_dir_lock`) while the others wait and read it.
The same corpus gives the same vocab.txt, byte for byte. Prepared token shards ("shards:DIR")
use the tokenizer their folder holds or names (`shard_iterator.shard_vocab_path`). Any other
corpus needs a vocabulary named (ValueError).
"""

from __future__ import annotations

import logging
import os

from etils import epath

from bert_jax.data.corpora import catalog as corpora
from bert_jax.data.corpora import data_dir_lock
from bert_jax.data.pretraining import shard_iterator, shard_source
from bert_jax.data.pretraining.data_config import PretrainingDataConfig
from bert_jax.data.tokenizers import wordpiece_training


def prepare_demo(data_dir: str, vocab_size: int = 8192, lowercase: bool = True) -> str:
    """Prepares the demo corpus and trains its vocabulary on the train split (both only once).

    Returns the path of vocab.txt (under data_dir/demo_vocab_<size>_<cased|uncased>/). Both are
    the same, byte for byte, in every preparation.
    """
    return _trained_once(corpora.DEMO, os.path.expanduser(data_dir), "demo", vocab_size,
                         lowercase)


def prepare_text_vocabulary(corpus: str, data_dir: str, vocab_size: int = 8192,
                            lowercase: bool = True, **text_options) -> str:
    """The vocabulary of a `text:GLOB` corpus whose run names none: a WordPiece vocabulary of
    `vocab_size` trained on the corpus's train split (prepared first, with `text_options`) on
    first use, as the demo's is. It lives in data_dir (a run's is <workdir>/data unless
    data.data_dir says otherwise) under `<corpus preparation>_vocab_<size>_<cased|uncased>/`, so
    another set of files or options trains its own; the same files give the same vocab.txt,
    byte for byte. Returns the path of vocab.txt."""
    data_dir = os.path.expanduser(data_dir)
    preparation = corpora.builder_for(corpus, data_dir, **text_options).builder_config.name
    return _trained_once(corpus, data_dir, preparation, vocab_size, lowercase, **text_options)


def prepare_vocabulary(corpus: str, data_dir: str, vocab_size: int, lowercase: bool = True,
                       vocab_dir: str = "", max_documents: int = 0, text_key: str = "text",
                       **options) -> str:
    """What prepare_data.py trains: the vocabulary of a raw-text corpus (the demo, `text:GLOB`
    or a TFDS name), returning its vocab.txt path. Without vocab_dir and max_documents it goes
    where a run on that data dir finds it by itself (`prepare_demo`, `prepare_text_vocabulary`);
    otherwise into vocab_dir (default <data_dir>/vocab_<size>_<casing>) from the first
    max_documents training documents (0: all). options: a text corpus's reading options."""
    if not vocab_dir and not max_documents:
        if corpus == corpora.DEMO:
            return prepare_demo(data_dir, vocab_size, lowercase)
        if corpus.startswith(corpora.TEXT_PREFIX):
            return prepare_text_vocabulary(corpus, data_dir, vocab_size, lowercase, **options)
    source = corpora.load_source(corpus, "train", data_dir, **options)
    texts = corpora.SourceTexts(source, text_key, max_documents or None)
    casing = "uncased" if lowercase else "cased"
    vocab_dir = vocab_dir or os.path.join(data_dir, f"vocab_{vocab_size}_{casing}")
    return wordpiece_training.train_wordpiece(texts, vocab_size, vocab_dir, lowercase)


def _trained_once(corpus: str, data_dir: str, prefix: str, vocab_size: int, lowercase: bool,
                  **text_options) -> str:
    """vocab.txt of `corpus`'s train split in data_dir/<prefix>_vocab_<size>_<casing>/, trained
    there unless it exists (under the data dir's lock: one process trains, the others read)."""
    casing = "uncased" if lowercase else "cased"
    vocab_dir = os.path.join(data_dir, f"{prefix}_vocab_{vocab_size}_{casing}")
    vocab_path = os.path.join(vocab_dir, "vocab.txt")
    source = corpora.load_source(corpus, "train", data_dir, **text_options)
    if not epath.Path(vocab_path).is_file():  # data_dir: a local folder or gs://
        with data_dir_lock.exclusive(data_dir):
            if not epath.Path(vocab_path).is_file():  # another process may have trained it
                logging.info("training a %d-token vocabulary on the train split of %s "
                             "(config.tokenizer.path is empty) into %s", vocab_size, corpus,
                             vocab_dir)
                wordpiece_training.train_wordpiece(corpora.SourceTexts(source), vocab_size,
                                                   vocab_dir, lowercase)
    return vocab_path


def resolve_vocab_path(cfg: PretrainingDataConfig) -> str:
    if cfg.vocab_path:
        return os.path.expanduser(cfg.vocab_path)
    if cfg.corpus.startswith(shard_source.PREFIX):
        directory = shard_source.shards_directory(cfg.corpus)
        return shard_iterator.shard_vocab_path(cfg, shard_source.read_manifest(directory),
                                               directory)
    if cfg.corpus == corpora.DEMO:
        return prepare_demo(cfg.data_dir, cfg.demo_vocab_size, cfg.lowercase)
    if cfg.corpus.startswith(corpora.TEXT_PREFIX):
        return prepare_text_vocabulary(cfg.corpus, cfg.data_dir, cfg.demo_vocab_size,
                                       cfg.lowercase, **cfg.text_options())
    raise ValueError(f"PretrainingDataConfig.vocab_path is empty; corpus {cfg.corpus!r} needs a "
                     "vocabulary (train one with experiments/prepare_data.py)")
