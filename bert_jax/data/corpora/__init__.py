"""Pre-training corpora: a corpus named in a run config ("demo", "text:GLOB", a TFDS name) ->
prepared TFDS array_record shards read with `as_data_source()`. catalog.py (the names, `prepare`,
`load`), text_files.py ("text:GLOB": plain-text files -> documents), demo.py (the gensim wheel's
sample texts), splits.py (the stable train/validation split), data_dir_lock.py (one process
prepares, the others wait).

Import the submodules directly (`from bert_jax.data.corpora import catalog`); this package
imports none of them.
"""
