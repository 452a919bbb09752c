"""Tokenizers: load.py (`load_tokenizer`: vocab.txt / tokenizer.json / a folder of either -> the
tokenizer), subword.py (SubwordTokenizer, WordPieceTokenizer: the ids and facts the pipelines ask
of a tokenizer), tokenizer_json.py (what a tokenizer.json says), wordpiece.py (BERT's WordPiece
pipeline and vocab.txt), wordpiece_training.py (`train_wordpiece`), hf_folder.py (`save_hf`: a
tokenizer as a Hugging Face folder).

Import the submodules directly (`from bert_jax.data.tokenizers import load`); this package
imports none of them.
"""
