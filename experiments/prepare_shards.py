r"""Tokenizes a corpus once, on every core, into token shards (ArrayRecord + manifest.json).

  # JSONL compressed with zstd, a tokenizer you have (tokenizer.json, vocab.txt or a folder):
  python experiments/prepare_shards.py --corpus='jsonl:/data/web/*.jsonl.zst' \
      --tokenizer=/data/tok --output_dir=/data/shards --workers=8

  # Train a tokenizer first, on a 1 GB uniform sample of the corpus (written to --tokenizer):
  python experiments/prepare_shards.py --corpus='parquet:/data/fineweb2/*.parquet' \
      --train_tokenizer=unigram --vocab_size=64000 --sample_bytes=1e9 \
      --tokenizer=/data/tok --output_dir=/data/shards

  # A mixture of sources with weights (the weights share the tokenizer's sample; recorded):
  python experiments/prepare_shards.py \
      --corpus='mix:0.7*jsonl:/data/a/*.jsonl.gz,0.3*text[document_delimiter=line]:/data/b/*.txt' \
      --tokenizer=/data/tok --output_dir=/data/shards

  # The same preparation as an Apache Beam pipeline (pip install 'bert_jax[beam]'): the same
  # bytes; the commands for Dataflow, Flink and Spark: bert_jax/data/corpora/beam_preparation.py
  python experiments/prepare_shards.py --corpus='jsonl:/data/web/*.jsonl.zst' \
      --tokenizer=/data/tok --output_dir=/data/shards --runner=DirectRunner \
      --beam_options='--direct_num_workers=8 --direct_running_mode=multi_processing'
  python experiments/prepare_shards.py --corpus='parquet:gs://b/fineweb2/*.parquet' \
      --tokenizer=/data/tok --output_dir=gs://b/shards --runner=DataflowRunner \
      --beam_options='--project=P --region=us-central1 --temp_location=gs://b/tmp
                      --setup_file=./setup.py --max_num_workers=64'

The folder holds the shards, each document's token count, the tokenizer (tokenizer.json) and
manifest.json: pre-train from it with --config.data.corpus=shards:DIR (no tokenizer.path).
Corpus specs: text:GLOB, jsonl:GLOB, parquet:GLOB, hf:PATH and mix:W*SPEC,... with per-source
options in brackets (`bert_jax.data.corpora.sources`). Run the same command again after a kill,
a full disk or a failed Beam job: the completed shards are kept (checked against their recorded
size and hash; on Beam, size) and the rest is done; the result is byte for byte an uninterrupted
run's, whatever --workers or runner. With --train_tokenizer, the sample stays in the tokenizer's
folder until the tokenizer is trained: a rerun after a kill during training reads it back instead
of the corpus (the `tokenizers` trainer itself cannot resume: it trains again).
Prints the manifest's split totals. Exit status 1 with one line `prepare_shards.py: error: ...`
for bad input, a bad record under --bad_records=fail, or a full disk.
"""

import os

from absl import app, flags, logging

from bert_jax import cli

FLAGS = flags.FLAGS
flags.DEFINE_string("corpus", None, "Corpus spec: text:GLOB, jsonl:GLOB, parquet:GLOB, hf:PATH "
                    "or mix:W*SPEC,W*SPEC,...")
flags.DEFINE_string("tokenizer", None, "tokenizer.json, vocab.txt or a folder holding either; "
                    "with --train_tokenizer, the folder the trained tokenizer is written to "
                    "(reused when it holds one already).")
flags.DEFINE_string("output_dir", None, "Local folder of the shards and manifest.json.")
flags.DEFINE_integer("workers", os.cpu_count() or 1, "Worker processes (the output does not "
                     "depend on it).")
flags.DEFINE_enum("train_tokenizer", "", ["", "wordpiece", "bpe", "unigram"],
                  "Train a tokenizer of this kind on a sample of the corpus first.")
flags.DEFINE_integer("vocab_size", 32768, "Vocabulary size of a trained tokenizer.")
flags.DEFINE_float("sample_bytes", 100e6, "Bytes of text in the tokenizer's training sample.")
flags.DEFINE_integer("seed", 0, "Seed of the tokenizer's training sample.")
flags.DEFINE_enum("unicode_form", "", ["", "NFKC", "NFC", "NFKD", "NFD", "none"],
                  "Unicode normalisation of a trained tokenizer (empty: the kind's custom).")
flags.DEFINE_enum("lowercase", "", ["", "true", "false"], "Lowercase (a trained tokenizer; "
                  "empty: the kind's custom); for a vocab.txt given, its casing (default true).")
flags.DEFINE_enum("strip_accents", "", ["", "true", "false"],
                  "Strip accents (a trained tokenizer; empty: the kind's custom).")
flags.DEFINE_bool("split_cjk", True, "A trained tokenizer splits CJK ideographs apart.")
flags.DEFINE_string("text_key", "text", "The JSON field or column holding the text.")
flags.DEFINE_enum("document_delimiter", "blank_line", ["blank_line", "line", "file"],
                  "text: sources: what ends a document.")
flags.DEFINE_enum("bad_records", "skip", ["skip", "fail"], "A bad record (invalid UTF-8, not "
                  "JSON, a missing field, an empty text) is skipped and counted, or stops.")
flags.DEFINE_float("validation_fraction", 0.02, "Share of documents held out (by a hash of "
                   "their text).")
flags.DEFINE_integer("unit_mb", 64, "Work-unit size in MB of text (also the shard size).")
flags.DEFINE_integer("max_document_mb", 8, "Documents longer than this are cut into pieces.")
flags.DEFINE_enum("verify", "hash", ["hash", "size"], "How a rerun checks completed shards.")
flags.DEFINE_enum("runner", "", ["", "DirectRunner", "DataflowRunner", "FlinkRunner",
                                   "SparkRunner", "PortableRunner", "PrismRunner"],
                  "Run the preparation as an Apache Beam pipeline on this runner (empty: worker "
                  "processes of this machine, --workers).")
flags.DEFINE_string("beam_options", "", "Beam pipeline options for --runner, one string "
                    "('--project=P --region=R --temp_location=gs://b/tmp ...').")
flags.mark_flags_as_required(["corpus", "tokenizer", "output_dir"])

SCRIPT = "prepare_shards.py"


def _flag_bool(value: str):
    return None if not value else value == "true"


def _tokenizer():
    from bert_jax.data.corpora import sample as document_sample
    from bert_jax.data.corpora import sources as corpus_sources
    from bert_jax.data.tokenizers import training as tokenizer_training
    from bert_jax.data.tokenizers.load import load_tokenizer
    path = os.path.expanduser(FLAGS.tokenizer)
    if not FLAGS.train_tokenizer:
        return load_tokenizer(path, lowercase=_flag_bool(FLAGS.lowercase) is not False)
    if os.path.isfile(os.path.join(path, "tokenizer.json")):
        logging.info("%s holds a tokenizer already: used as is", path)
        return load_tokenizer(path)
    sources = corpus_sources.parse_corpus(FLAGS.corpus, FLAGS.text_key, FLAGS.document_delimiter)
    sample = document_sample.kept_sample(sources, int(FLAGS.sample_bytes), FLAGS.seed,
                                         FLAGS.bad_records, FLAGS.max_document_mb << 20, path)
    normalization = tokenizer_training.Normalization(
        FLAGS.unicode_form or None, _flag_bool(FLAGS.lowercase), _flag_bool(FLAGS.strip_accents),
        FLAGS.split_cjk)
    tokenizer_training.train_tokenizer(sample.texts, FLAGS.train_tokenizer, FLAGS.vocab_size,
                                       path, normalization)
    document_sample.discard_samples(path)
    print(f"tokenizer: {FLAGS.train_tokenizer}, trained on {len(sample.texts)} documents "
          f"({sum(sample.kept_bytes):,} bytes) in {path}")
    return load_tokenizer(path)


def prepare() -> None:
    from bert_jax.data.corpora.preparation import prepare_shards
    tokenizer = _tokenizer()
    if FLAGS.runner:
        import shlex

        from bert_jax.data.corpora.beam_preparation import prepare_shards_beam
        manifest = prepare_shards_beam(
            FLAGS.corpus, tokenizer, FLAGS.output_dir,
            [f"--runner={FLAGS.runner}", *shlex.split(FLAGS.beam_options)],
            FLAGS.validation_fraction, FLAGS.unit_mb << 20, FLAGS.max_document_mb << 20,
            FLAGS.bad_records, FLAGS.text_key, FLAGS.document_delimiter)
    else:
        manifest = prepare_shards(
            FLAGS.corpus, tokenizer, FLAGS.output_dir, FLAGS.workers, FLAGS.validation_fraction,
            FLAGS.unit_mb << 20, FLAGS.max_document_mb << 20, FLAGS.bad_records, FLAGS.verify,
            FLAGS.text_key, FLAGS.document_delimiter)
    for split, totals in manifest["splits"].items():
        print(f"{split}: {totals['documents']} documents, {totals['tokens']} tokens, "
              f"{totals['shards']} shards")
    bad = manifest["bad_records"]
    if bad["total"] or bad["cut_documents"]:
        print(f"bad records skipped: {bad['total']}; over-long documents cut: "
              f"{bad['cut_documents']} (see the log)")
    output = FLAGS.output_dir if "://" in FLAGS.output_dir else os.path.abspath(FLAGS.output_dir)
    print(f"manifest: {output.rstrip('/')}/manifest.json")


def main(argv):
    if len(argv) > 1:
        cli.fail(SCRIPT, f"unexpected arguments {argv[1:]}")
    if FLAGS.workers < 1:
        cli.fail(SCRIPT, f"--workers={FLAGS.workers}; give at least 1")
    with cli.interrupts_stop(SCRIPT):
        cli.run_or_exit(SCRIPT, prepare)


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags)
