"""Input pipelines.

Pre-training: corpora/ (a corpus by name -> TFDS array_record: catalog, text_files, demo, splits,
data_dir_lock), pretraining/ (pipeline.make_iterator; with data_config, vocab, rows, iterator,
document_packing, document_tokens, sentence_pairs, masking, host_shards; synthetic: random-token
batches).
Tokenizers: tokenizers/ (load: load_tokenizer; subword: the classes; tokenizer_json: what a
tokenizer.json says; wordpiece: BERT's pipeline and vocab.txt; wordpiece_training:
train_wordpiece; hf_folder: save_hf, the Hugging Face folder).
Fine-tuning: finetuning/ (readers: files -> examples; tfds_tasks: TFDS names -> examples;
unlabelled: new inputs; encoding: examples -> rows; windows; squad: span-QA windows and answers;
docstring_pairs).
What they all share stays here: textfiles (decoding, records, DataError), batches (rows ->
batches), row_layout, example_packing (a batch's examples packed into shared rows).

Import the submodules directly (`from bert_jax.data.pretraining import pipeline`); this package
imports none of them so that `import bert_jax` stays light.
"""
