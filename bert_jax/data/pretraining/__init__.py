"""Pre-training input: documents -> WordPiece ids -> packed rows -> masked batches. pipeline.py
(`make_iterator`: config + vocabulary + rows + iterator), data_config.py (PretrainingDataConfig),
vocab.py (the run's vocabulary), rows.py (one host's unmasked rows), iterator.py (masked batches
with an exact, resumable state), masking.py, document_packing.py, document_tokens.py,
sentence_pairs.py, host_shards.py, and synthetic.py (random-token batches, no data).

Import the submodules directly (`from bert_jax.data.pretraining import pipeline`); this package
imports none of them.
"""
