"""Predict new, unlabelled inputs with a fine-tuned run (any task kind).

    python experiments/predict.py --workdir=/tmp/polarity --input=new.txt --output=out.jsonl \
        [--step=N] [--batch_size=64] [--dtype=float32|bfloat16] [--format=lines] \
        [--skip_bad_rows] [--long_inputs=truncate|slide]

Input, in the formats of training with the label optional (--format, default: the run's
config.data.format; auto goes by the extension): csv | tsv | jsonl with the run's text (and pair)
columns, fasttext (`__label__x` words at the start of a line are optional and dropped), lines
(every line one text, stripped, even one that starts with `__label__`), token classification:
raw sentences, one record per line always, split into words as CoNLL sets them (letters/digits
runs, each punctuation mark its own word), or CoNLL tokens only when asked (--format=conll, a
.conll file with auto) or when the file cannot be raw text (a -DOCSTART- line; token-and-tag
lines in blank-line-separated sentences); the log says which; SQuAD-style JSON or JSONL of
{"question", "context"} (span QA). Raw text (fasttext, lines, raw sentences) is one row a line,
so a record's "index" is its line - 1: a blank line before the last text is a bad row (below),
blank lines that end the file are ignored; in csv, tsv, jsonl and CoNLL blank lines are not
rows. Output: one JSON line per input
row, in input order, "index" first (the row's position in the input, from 0), and the answer
always under "prediction" (the keys of a run's own predictions.jsonl, less the gold "label"):
classification {"index", "text", ("text_pair"), "prediction", "probabilities": {label: p}};
regression {"index", "text", ("text_pair"), "prediction"}; multi_label {"index", "text",
("text_pair"), "prediction": [labels], "probabilities": {label: p}}; token_classification
{"index", "words", "prediction": [a tag per word]}; span_qa {"index", "id", "question",
"prediction": the answer text, "start", "end", "score"}.

A bad row (file:line named) stops the run before anything is written, or, with --skip_bad_rows,
is skipped and listed. Over-long inputs are truncated (NER: the words past the row get "O"; QA:
sliding windows) and counted; --long_inputs=slide (default: the run's config.data.long_inputs)
reads long texts and sentences in sliding windows instead (a text: the mean of its windows'
logits; a word: from the window whose centre is nearest to it), still one record per row. The
last stdout line is a JSON summary (rows, records, bad rows, what was cut, rows/s). Exit status:
0 done, 1 bad input (one line `predict.py: error: ...`). The logic:
bert_jax.recipes.finetune.predict.
"""

import json

import jax
from absl import app, flags

from bert_jax import cli
from bert_jax.recipes import inputs as run_inputs
from bert_jax.recipes.finetune import predict
from bert_jax.runtime import distributed

FLAGS = flags.FLAGS


def main(argv):
    cli.start(argv)
    cli.check_output("predict.py", FLAGS.output,
                     protected=predict.protected_inputs(FLAGS.workdir, FLAGS.input))
    options = predict.PredictOptions(
        input_path=FLAGS.input, output_path=FLAGS.output, step=FLAGS.step,
        batch_size=FLAGS.batch_size, dtype=FLAGS.dtype, file_format=FLAGS.format,
        skip_bad_rows=FLAGS.skip_bad_rows, long_inputs=FLAGS.long_inputs)
    with cli.interrupts_stop("predict.py"):
        cli.run_or_exit("predict.py", lambda: run_inputs.check_run(
            FLAGS.workdir, "predict.py", roles=[run_inputs.TOKENIZER],
            allow=FLAGS.allow_changed_inputs))
        summary = cli.run_or_exit("predict.py",
                                  lambda: predict.predict_file(FLAGS.workdir, options))
    if jax.process_index() == 0:
        print(json.dumps(summary.to_dict(), ensure_ascii=False))


if __name__ == "__main__":
    flags.DEFINE_string("workdir", None, "The workdir of a fine-tuning run.", required=True)
    flags.DEFINE_string("input", None, "The file of unlabelled inputs.", required=True)
    flags.DEFINE_string("output", None, "The JSONL file to write.", required=True)
    flags.DEFINE_integer("step", None, "Checkpoint step (default: the newest).", lower_bound=0)
    flags.DEFINE_integer("batch_size", 64, "Rows per model call, over all devices.")
    flags.DEFINE_enum("dtype", None, ["float32", "bfloat16"],
                      "Compute dtype (default: the run's).")
    flags.DEFINE_enum("format", None, ["auto", "csv", "tsv", "jsonl", "fasttext", "lines",
                                       "conll", "json", "squad"],
                      "Input format (default: the run's config.data.format).")
    flags.DEFINE_bool("skip_bad_rows", False, "Skip bad rows (listed) instead of stopping.")
    flags.DEFINE_enum("long_inputs", None, ["truncate", "slide"],
                      "Inputs longer than a row: truncated, or read in sliding windows "
                      "(default: the run's config.data.long_inputs).")
    flags.DEFINE_bool("allow_changed_inputs", False,
                      "Go on when a file the run was trained with (its tokenizer files) "
                      "changed since it started (<workdir>/inputs.json); the change is recorded "
                      "there.")
    distributed.define_flags()
    app.run(main, flags_parser=cli.parse_flags)
