"""Sentence embeddings of a file of texts, from one of our runs or a Hugging Face BERT folder.

    python experiments/embed.py --input=sentences.txt --output=out/sentences \
        --model=HF_FOLDER | --workdir=RUN [--step=N] \
        [--pooling=mean|cls] [--normalize] [--batch_size=32] [--max_seq_len=N] [--nopack]

--input: one text per line (stripped; a blank line before the last text stops the run, naming
it, and blank lines at the end are ignored, so vector i is always line i + 1), or .jsonl / .csv /
.tsv with the text under --text_column (blank lines are not records there); --encoding if not
UTF-8. Writes out/sentences.npy (float32 [N, hidden], row i = input row i, in input order) and
out/sentences.index.jsonl (line i: {"index": i, "line": its input line, "text": ...}); prints
one JSON line with the row count and the paths. --workdir takes the encoder of a pre-training
or fine-tuning run (heads dropped) and the tokenizer of its config.json. How texts are pooled
and batched: bert_jax/embeddings/encode.py.

Exit status: 0 done; 1 with one line `embed.py: error: <what, naming the file and line>` for bad
input (a bad row, a missing file or checkpoint); nothing is written then.
"""

import json

from absl import app, flags, logging

from bert_jax import cli
from bert_jax.embeddings import encode as sentence_embeddings
from bert_jax.recipes import inputs as run_inputs
from bert_jax.runtime import distributed, outputs
from bert_jax.tools import saved_runs

FLAGS = flags.FLAGS
SCRIPT = "embed.py"


def embed_file():
    cli.check_text_encoding(FLAGS.encoding, "--encoding")
    rows = sentence_embeddings.read_rows(FLAGS.input, FLAGS.format, FLAGS.text_column,
                                         FLAGS.encoding)
    encoder = saved_runs.load_encoder(hf_dir=FLAGS.model, workdir=FLAGS.workdir,
                                      step=FLAGS.step)
    logging.info("embedding %d rows of %s with %s (%s pooling%s)", len(rows), FLAGS.input,
                 encoder.source, FLAGS.pooling, ", normalized" if FLAGS.normalize else "")
    vectors = sentence_embeddings.embed(encoder, [row.text for row in rows], FLAGS.pooling,
                                        FLAGS.normalize, FLAGS.batch_size, FLAGS.max_seq_len,
                                        progress=True, pack=FLAGS.pack)
    with outputs.naming(" and ".join(sentence_embeddings.output_paths(FLAGS.output))):
        paths = sentence_embeddings.write_outputs(FLAGS.output, vectors, rows)
    return {"rows": len(rows), "hidden_size": int(vectors.shape[1]), "embeddings": paths[0],
            "index": paths[1]}


def main(argv):
    cli.start(argv)
    protected = [("the input (--input)", FLAGS.input), ("the model folder (--model)", FLAGS.model)]
    protected += outputs.run_files(FLAGS.workdir)
    for path in sentence_embeddings.output_paths(FLAGS.output):
        cli.check_output(SCRIPT, path, protected=protected)
    with cli.interrupts_stop(SCRIPT):
        if FLAGS.workdir:
            cli.run_or_exit(SCRIPT, lambda: run_inputs.check_run(
                FLAGS.workdir, SCRIPT, roles=[run_inputs.TOKENIZER],
                allow=FLAGS.allow_changed_inputs))
        print(json.dumps(cli.run_or_exit(SCRIPT, embed_file)))


if __name__ == "__main__":
    flags.DEFINE_string("input", None, "Texts: one per line, or .jsonl/.csv/.tsv (--text_column).")
    flags.DEFINE_string("output", None, "Output prefix: writes PREFIX.npy and PREFIX.index.jsonl.")
    flags.DEFINE_string("model", None, "A Hugging Face BERT folder (config.json, weights, vocab).")
    flags.DEFINE_string("workdir", None, "A pre-training or fine-tuning run's workdir.")
    flags.DEFINE_integer("step", None, "--workdir: the checkpoint step (default: the newest).",
                         lower_bound=0)
    flags.DEFINE_enum("pooling", "mean", list(sentence_embeddings.POOLINGS),
                      "mean: over the real tokens; cls: the [CLS] vector.")
    flags.DEFINE_boolean("normalize", False, "Scale every vector to unit L2 norm.")
    flags.DEFINE_integer("batch_size", None, "Texts per call unpacked; packed, batch_size // 4 "
                         "rows of 128 tokens (or the longest text's length) per call (default: 32 "
                         "on a CPU, 64 elsewhere).", lower_bound=1)
    flags.DEFINE_boolean("pack", True, "Several short texts a row, each attending only to itself "
                         "(the same vectors up to float rounding, less padding computed); "
                         "--nopack: one text a row.")
    flags.DEFINE_integer("max_seq_len", None,
                         "Tokens per row with [CLS] and [SEP] (default: max_position_embeddings).",
                         lower_bound=1)
    flags.DEFINE_enum("format", "auto", list(sentence_embeddings.FORMATS),
                      "Input format (auto: by extension; .jsonl, .csv, .tsv, else text lines).")
    flags.DEFINE_string("text_column", "text", "JSONL key or CSV/TSV column of the text.")
    flags.DEFINE_string("encoding", "utf-8", "Text encoding of --input (e.g. cp1252).")
    flags.mark_flags_as_required(["input", "output"])
    flags.register_multi_flags_validator(
        ["model", "workdir"], lambda f: (f["model"] is None) != (f["workdir"] is None),
        message="give exactly one of --model (a Hugging Face folder) and --workdir (a run)")
    flags.DEFINE_bool("allow_changed_inputs", False,
                      "Go on when a file the run was trained with (--workdir: its tokenizer files) "
                      "changed since it started (<workdir>/inputs.json); the change is recorded "
                      "there.")
    distributed.define_flags()
    app.run(main, flags_parser=cli.parse_flags)
