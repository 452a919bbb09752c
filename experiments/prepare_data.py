r"""Prepares a pre-training corpus (TFDS array_record) and trains its WordPiece vocabulary.

  # The demo corpus (text shipped by gensim) and an 8192-token vocabulary: seconds.
  python experiments/prepare_data.py --corpus=demo --data_dir=/tmp/bert_data

  # Your own text files (documents separated by blank lines), a 30522-token uncased vocabulary.
  python experiments/prepare_data.py --corpus='text:/data/books/**/*.txt' \
      --data_dir=/data/bert --vocab_size=30522 --vocab_dir=/data/bert/vocab

  # One document a line (a file without blank lines is otherwise ONE document).
  python experiments/prepare_data.py --corpus='text:/data/lines/*.txt' --data_dir=/data/bert \
      --document_delimiter=line

Prints the documents per split and the path of vocab.txt. The demo and `text:` corpora keep
their vocabulary where a pre-training run with the same data dir, vocabulary size and casing
looks for it (`tokenizer.path` empty; a run trains it there itself when it is missing), so a run
needs none named; pass the printed path as `tokenizer.path` for any other place. The
document delimiter is recorded with the prepared corpus: pre-training on it needs the same
`data.document_delimiter` (another one is an error naming both, in this script too).
Exit status 1 with one line `prepare_data.py: error: ...` for bad input.
"""

import os
import sys

from absl import app, flags, logging

from bert_jax import cli
from bert_jax.data.corpora import catalog as corpora
from bert_jax.data.corpora import text_files as text_corpus
from bert_jax.data.pretraining import vocab as pretraining_vocab
from bert_jax.data.tokenizers import load as tok

FLAGS = flags.FLAGS
flags.DEFINE_string("corpus", "demo", "'demo', 'text:GLOB' or a TFDS catalog name.")
flags.DEFINE_string("data_dir", "~/bert_jax_data", "Where TFDS datasets are prepared.")
flags.DEFINE_integer("vocab_size", 8192, "Size of the WordPiece vocabulary to train.")
flags.DEFINE_string("vocab_dir", "", "Where vocab.txt and tokenizer.json go (default: where a "
                    "run finds them by data_dir, size and casing for the demo and text: corpora, "
                    "data_dir/vocab_<size>_<cased|uncased> for a TFDS catalog corpus).")
flags.DEFINE_bool("lowercase", True, "Lower-case and strip accents.")
flags.DEFINE_integer("max_documents", 0, "Train the vocabulary on at most this many training "
                     "documents (0: all).")
flags.DEFINE_string("text_key", "text", "Field holding the text in the corpus records.")
flags.DEFINE_enum("document_delimiter", "blank_line", list(text_corpus.DOCUMENT_DELIMITERS),
                  "text:GLOB corpora: what ends a document: a blank line (a file without one "
                  "is one document), a line end, or the file's end; the pre-training config's "
                  "data.document_delimiter.")
flags.DEFINE_enum("invalid_utf8", "fail", ["fail", "skip"],
                  "text:GLOB corpora: a file that is not UTF-8 stops preparation, or is skipped.")
flags.DEFINE_float("validation_fraction", 0.02, "text:GLOB corpora: documents held out.")


def prepare() -> None:
    data_dir = os.path.expanduser(FLAGS.data_dir)
    options = {}
    if FLAGS.corpus.startswith(corpora.TEXT_PREFIX):
        options = dict(document_delimiter=FLAGS.document_delimiter,
                       invalid_utf8=FLAGS.invalid_utf8,
                       validation_fraction=FLAGS.validation_fraction)
    vocab_path = pretraining_vocab.prepare_vocabulary(
        FLAGS.corpus, data_dir, FLAGS.vocab_size, FLAGS.lowercase, FLAGS.vocab_dir,
        FLAGS.max_documents, FLAGS.text_key, **options)
    builder = corpora.prepare(FLAGS.corpus, data_dir, **options)
    for split, info in builder.info.splits.items():
        logging.info("split %s: %d documents", split, info.num_examples)
        print(f"{split}: {info.num_examples} documents")
    if options:
        print(f"document_delimiter: {options['document_delimiter']} (recorded with the corpus; "
              "pre-training on it needs the same data.document_delimiter)")
    vocab = tok.load_tokenizer(vocab_path, lowercase=FLAGS.lowercase)
    print(f"vocabulary: {vocab.vocab_size} tokens in {vocab_path}")


def main(argv):
    if len(argv) > 1:
        sys.exit(f"prepare_data.py: error: unexpected arguments {argv[1:]}")
    cli.run_or_exit("prepare_data.py", prepare)


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags)
