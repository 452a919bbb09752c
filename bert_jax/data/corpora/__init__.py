"""Pre-training corpora, from the files users have to what training reads.

Token shards (corpora prepared once, for any size): sources.py names a corpus (`text:`, `jsonl:`,
`parquet:`, `hf:` specs and weighted `mix:` of them) over files.py (local or gs://, plain or
gzip/bz2/zstd) and readers.py (each format streamed into positioned documents; records.py: bad
records skipped with names or refused, over-long documents cut); sample.py draws the seeded,
bounded sample a tokenizer is trained on; preparation.py tokenizes every work unit on every core
into ArrayRecord token shards with a manifest (resumable, the same bytes for any worker count),
beam_preparation.py does the same as an Apache Beam pipeline (the same bytes); token_shards.py,
the one reader, reads them by global document index.

Raw-text corpora (small ones, tokenized while training): catalog.py (a name -> a TFDS
array_record dataset: "demo", "text:GLOB", a TFDS catalog name), text_files.py, demo.py (the
gensim wheel's sample texts); splits.py (the stable train/validation split, shared by both);
data_dir_lock.py (one process prepares, the others wait).

Import the submodules directly (`from bert_jax.data.corpora import catalog`); this package
imports none of them.
"""
