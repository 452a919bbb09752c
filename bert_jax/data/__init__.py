"""Input pipelines.

Pre-training: corpora (TFDS array_record), tokenizer (WordPiece), pretraining (the pipeline and its
iterator) with document_packing, sentence_pairs and masking; synthetic (random-token batches).
Fine-tuning: readers (files -> examples), tfds_tasks (TFDS names -> examples), encoding
(examples -> rows), squad (span-QA windows and answers), batches (rows -> batches),
example_packing (a batch's examples packed into shared rows).

Import the submodules directly (`from bert_jax.data import corpora, pretraining, tokenizer`); this
package imports none of them so that `import bert_jax` stays light.
"""
