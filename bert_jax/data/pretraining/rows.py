"""The grain dataset of one host's unmasked pre-training rows: `build_rows`, the pipeline's
stages from the source to rows of exactly seq_len tokens (the diagram in
bert_jax.data.pretraining.pipeline's docstring): this host's contiguous range of documents
(`host_shards.shard_range`), shuffled by seed each epoch and repeated num_epochs times (None:
forever), tokenized a window at a time as the rows need it (`document_tokens`: a long document
does not hold back a row), then packed into MLM rows (`document_packing`) or cut into sentence
pairs with an NSP label (`sentence_pairs`).

Rows are dicts of [seq_len] int32 arrays, read ahead by a few threads; masking and batching are
the iterator's (`bert_jax.data.pretraining.iterator`).
"""

from __future__ import annotations

import functools
from typing import Optional

import grain

from bert_jax.data.corpora import catalog as corpora
from bert_jax.data.pretraining import host_shards
from bert_jax.data.pretraining.data_config import PretrainingDataConfig
from bert_jax.data.pretraining.document_packing import PackedRowsIterDataset, PackingSpec
from bert_jax.data.pretraining.document_tokens import DocumentTokens
from bert_jax.data.pretraining.sentence_pairs import FlattenedIterDataset, PairRows, PairSpec
from bert_jax.data.tokenizers.subword import WordPieceTokenizer

# Documents are read and tokenized ahead by a few threads.
_READ_OPTIONS = grain.ReadOptions(num_threads=4, prefetch_buffer_size=32)


class _Tokenize:
    """Picklable map: record -> DocumentTokens (no special tokens), its first window tokenized.

    The read-ahead threads thus tokenize whole the documents that fit in a window, and the first
    window of longer ones; the packer tokenizes the rest of a long document as its rows need it
    (bert_jax.data.pretraining.document_tokens), so no row waits for the whole of a long
    document."""

    def __init__(self, vocab: WordPieceTokenizer, text_key: str):
        self.vocab, self.text_key = vocab, text_key

    def __call__(self, record) -> DocumentTokens:
        document = DocumentTokens(corpora.document_text(record, self.text_key), self.vocab.encode)
        document.ids(0, 1)
        return document


def build_rows(cfg: PretrainingDataConfig, source: corpora.TextSource,
               vocab: WordPieceTokenizer, process_index: int, process_count: int,
               num_epochs: Optional[int], layout_changes: int = 0) -> grain.IterDataset:
    """The grain dataset of this host's unmasked rows (dicts of [seq_len] int32 arrays).

    This host reads only its range of the documents (`host_shards.shard_range`); its order, and
    the random Bs of sentence pairs, come from `host_shards.pass_seed(cfg.seed, layout_changes)`.
    """
    shard = host_shards.shard_range(len(source), process_index, process_count)
    documents = grain.MapDataset.source(source)[shard.start:shard.stop]
    if len(documents) == 0:
        raise ValueError(f"corpus {cfg.corpus!r} has {len(source)} documents: none for process "
                         f"{process_index} of {process_count}")
    seed = host_shards.pass_seed(cfg.seed, layout_changes)
    if not cfg.sentence_pairs:
        tokens = documents.shuffle(seed=seed).repeat(num_epochs).map(
            _Tokenize(vocab, cfg.text_key))
        spec = PackingSpec(cfg.seq_len, vocab.cls_id, vocab.sep_id, vocab.pad_id,
                           cfg.min_segment_tokens, vocab.is_continuation, len(documents))
        return PackedRowsIterDataset(tokens.to_iter_dataset(_READ_OPTIONS), spec)
    ends = tuple(i for i in (vocab.token_to_id(t) for t in (".", "!", "?")) if i is not None)
    spec = PairSpec(cfg.seq_len, vocab.cls_id, vocab.sep_id, vocab.pad_id, ends,
                    cfg.short_seq_prob, vocab.is_continuation)
    texts = documents.map(functools.partial(corpora.document_text, text_key=cfg.text_key))
    order = grain.MapDataset.range(len(documents)).shuffle(seed=seed).repeat(num_epochs)
    row_lists = order.map_with_index(PairRows(texts, vocab.encode_batch, spec, seed,
                                              process_index))
    return FlattenedIterDataset(row_lists.to_iter_dataset(_READ_OPTIONS), len(documents))
