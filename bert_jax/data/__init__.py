"""Input pipelines: corpora (TFDS array_record), WordPiece tokenizer, pre-training batches.

Import the submodules directly (`from bert_jax.data import corpora, pretraining, tokenizer`); this
package imports none of them so that `import bert_jax` stays light.
"""
