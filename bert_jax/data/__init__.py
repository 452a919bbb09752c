"""Input pipelines.

Pre-training: corpora (a corpus by name -> TFDS array_record; with text_corpus, demo_corpus,
corpus_splits, data_dir_lock), pretraining (make_iterator; with pretraining_config,
pretraining_vocab, pretraining_rows, pretraining_iterator) with document_packing,
sentence_pairs and masking; synthetic (random-token batches).
Tokenizers: tokenizer (load_tokenizer), subword_tokenizer (the classes), tokenizer_json (what a
tokenizer.json says), wordpiece (BERT's pipeline and vocab.txt), wordpiece_training
(train_wordpiece), hf_tokenizer (save_hf: the Hugging Face folder).
Fine-tuning: readers (files -> examples), tfds_tasks (TFDS names -> examples), encoding
(examples -> rows), squad (span-QA windows and answers), batches (rows -> batches),
example_packing (a batch's examples packed into shared rows).

Import the submodules directly (`from bert_jax.data import corpora, pretraining, tokenizer`); this
package imports none of them so that `import bert_jax` stays light.
"""
