"""The pre-training input pipeline: documents -> WordPiece ids -> packed rows -> masked batches.

Prepared token shards (corpus "shards:DIR") take another, shorter path, with no tokenizer at run
time and the same global batches whatever the number of processes: `shard_iterator` (rows from
`shard_rows`, masks from `batch_masking`). The diagram below is the text path's.

    source (TFDS array_record, random access)
      -> this host's documents: a contiguous range of the split, disjoint from the other hosts'
         (`bert_jax.data.pretraining.host_shards.shard_range`: a host opens about 1/N of the files)
      -> shuffled by seed (a new order each epoch), repeated num_epochs times (None: forever)
      -> tokenized (no special tokens), a window of a document's text at a time, as its rows
         need it (`bert_jax.data.pretraining.document_tokens`): a long document does not hold
         back a row
      -> rows of exactly seq_len tokens:
           MLM mode (default): documents packed into rows, several per row, each piece with its
             own segment id and positions (`bert_jax.data.pretraining.document_packing`).
           sentence-pair mode (sentence_pairs=True): BERT's [CLS] A [SEP] B [SEP] with token types
             0/1 and an NSP label, one pair per row (`bert_jax.data.pretraining.sentence_pairs`).
      -> (optional) grain worker processes (num_workers > 0)
      -> dynamic masking of each row in the main process (`bert_jax.data.pretraining.masking`),
         from a generator seeded by (seed, stream, row number in the stream): the masks of a row
         are the same however the run is interrupted and resumed
      -> batches of global_batch_size // process_count rows, as numpy arrays (see `make_iterator`;
         a finite pass instead reads every document on every host and deals rows round-robin,
         so that all hosts make the same number of batches).

The steps live in modules of one job each: the config (`bert_jax.data.pretraining.data_config`), the
vocabulary (`bert_jax.data.pretraining.vocab`), the rows (`bert_jax.data.pretraining.rows`) and
the masked batches with their resumable state (`bert_jax.data.pretraining.iterator`);
`make_iterator` puts them together. `PretrainingDataConfig`, `PretrainingIterator`,
`resolve_vocab_path` and `prepare_demo` are re-exported here, where callers have always found
them.

State: `PretrainingIterator.get_state()` is JSON-serialisable; `set_state` on a fresh iterator
made with the same config, split, batch size and process layout resumes exactly
(`bert_jax.data.pretraining.iterator`).

Worker processes: grain reads its absl flags when it starts them, so `make_iterator` with
num_workers > 0 needs parsed absl flags, as in a script run by `absl.app.run` (experiments/*.py);
this library never parses them itself. num_workers=0 needs no flags.
"""

from __future__ import annotations

import logging
from typing import Optional

import grain

from bert_jax.data.corpora import catalog as corpora
from bert_jax.data.pretraining import shard_iterator, shard_source
from bert_jax.data.pretraining.data_config import PretrainingDataConfig
from bert_jax.data.pretraining.iterator import PretrainingIterator, stream_identity
from bert_jax.data.pretraining.masking import MaskingSpec
from bert_jax.data.pretraining.rows import build_rows
from bert_jax.data.pretraining.vocab import prepare_demo, resolve_vocab_path
from bert_jax.data.tokenizers import load as tok

__all__ = ["PretrainingDataConfig", "PretrainingIterator", "make_iterator", "prepare_demo",
           "resolve_vocab_path"]


def _check_worker_flags(num_workers: int) -> None:
    """grain reads absl flags (grain_enable_multiprocess_worker_profiling, with jax installed)
    when it starts worker processes, and fails deep inside the first batch if nobody parsed them;
    fail here instead, saying what the caller must do."""
    if num_workers == 0:
        return
    from absl import flags

    if not flags.FLAGS.is_parsed():
        raise ValueError(
            f"num_workers={num_workers} starts grain worker processes, which read absl flags, "
            "but no absl flags are parsed: call make_iterator from a script run by "
            "absl.app.run, or parse the flags first (absl.flags.FLAGS(sys.argv)), or use "
            "num_workers=0")


def make_iterator(cfg: PretrainingDataConfig, split: str = "train", global_batch_size: int = 32,
                  process_index: int = 0, process_count: int = 1,
                  num_epochs: Optional[int] = None, tokenizer=None) -> PretrainingIterator:
    """This host's batches of global_batch_size // process_count rows of `split`.

    tokenizer: the run's tokenizer, the one `resolve_vocab_path(cfg)` names (None: loaded
      here from there).

    corpus "shards:DIR" (prepared token shards): `shard_iterator.make_shard_iterator`, each host
      its share of every global batch, the same global batches for any process count; what
      follows here is the text path, whose batches depend on the process count (said in one
      warning at the start of a multi-process run).

    num_epochs=None (training): an endless stream of this host's documents (its contiguous
      range, `host_shards.shard_range`: no host reads the others'), in a new order each epoch.
    num_epochs=k (evaluation): k passes over the whole split, then StopIteration. Every host reads
      all documents and keeps every process_count-th row, so all hosts make the same number of
      batches (no host waits alone in a collective); the last batch is padded with zero-weight
      rows. A host thus tokenizes the whole split: meant for held-out sets, not for huge corpora.
    """
    if cfg.corpus.startswith(shard_source.PREFIX):
        return shard_iterator.make_shard_iterator(cfg, split, global_batch_size, process_index,
                                                  process_count, num_epochs, tokenizer)
    if cfg.batch_warmup_tokens and cfg.batch_warmup_start:
        raise ValueError(f"data.batch_warmup_tokens needs a token-shard corpus (shards:DIR, "
                         f"experiments/prepare_shards.py); corpus {cfg.corpus!r} is read as text")
    if global_batch_size % process_count:
        raise ValueError(f"global_batch_size={global_batch_size} is not divisible by "
                         f"process_count={process_count}")
    if not 0 <= process_index < process_count:
        raise ValueError(f"process_index={process_index} not in [0, {process_count})")
    if num_epochs is not None and num_epochs < 1:
        raise ValueError(f"num_epochs={num_epochs} must be None (endless) or positive")
    _check_worker_flags(cfg.num_workers)
    if num_epochs is None and process_count > 1 and process_index == 0:
        logging.warning(
            "data: corpus %r is read as text, each process from its own range of the documents, "
            "so the batch sequence depends on the process count (%d); prepared token shards "
            "(corpus shards:DIR) give the same batches for any process count", cfg.corpus,
            process_count)
    vocab = tokenizer or tok.load_tokenizer(resolve_vocab_path(cfg), lowercase=cfg.lowercase)
    source = corpora.load_source(cfg.corpus, split, cfg.data_dir, **(
        cfg.text_options() if cfg.corpus.startswith(corpora.TEXT_PREFIX) else {}))
    endless = num_epochs is None
    shard = (process_index, process_count) if endless else (0, 1)

    def rows_for(layout_changes: int) -> grain.IterDataset:
        rows = build_rows(cfg, source, vocab, *shard, num_epochs, layout_changes)
        if cfg.num_workers > 0:
            rows = rows.mp_prefetch(grain.MultiprocessingOptions(num_workers=cfg.num_workers))
        return rows

    masking = MaskingSpec.from_tokenizer(vocab, cfg.mask_rate, cfg.max_predictions,
                                         cfg.whole_word_masking)
    batch_rows = global_batch_size // process_count
    identity = stream_identity(cfg, split, process_index, process_count, batch_rows, num_epochs)
    if endless:
        return PretrainingIterator(rows_for, cfg, masking, batch_rows, stream_id=process_index,
                                   pad_id=vocab.pad_id, identity=identity)
    return PretrainingIterator(rows_for, cfg, masking, batch_rows, stream_id=0,
                               pad_id=vocab.pad_id, identity=identity, stride=process_count,
                               offset=process_index)
