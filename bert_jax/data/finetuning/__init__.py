"""Fine-tuning input: task files and TFDS names -> examples -> model rows. readers.py (labelled
examples from CSV/TSV/JSONL/fastText/CoNLL/SQuAD files), tfds_tasks.py (the same from TFDS
names), unlabelled.py (new inputs for prediction and embeddings), encoding.py (examples -> rows;
label maps), windows.py (sliding windows of long inputs), squad.py (span-QA windows and answers),
docstring_pairs.py (text pairs from Python docstrings).

Import the submodules directly (`from bert_jax.data.finetuning import readers`); this package
imports none of them.
"""
