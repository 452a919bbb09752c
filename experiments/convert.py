r"""Convert BERT weights between Hugging Face folders and our Orbax checkpoints.

  # Hugging Face folder (config.json + model.safetensors or pytorch_model.bin) -> our checkpoint
  python experiments/convert.py --direction=hf_to_ours --hf_dir=PATH --checkpoint_dir=OUT

  # our checkpoint (newest step, or --step) -> a folder transformers.BertModel.from_pretrained loads
  python experiments/convert.py --direction=ours_to_hf --checkpoint_dir=WORKDIR/checkpoints \
      --hf_dir=OUT

The checkpoint written by hf_to_ours is an ordinary step-0 checkpoint of our trainer (params and
model config; no optimizer state): `bert_jax.train.checkpoint.params.load_params(OUT)` reads it.
Heads travel with the weights: a BertForPreTraining checkpoint gives `bert/`, `mlm/`, `nsp/`
(see bert_jax.convert.hf); --encoder_only keeps the encoder alone. After writing, the output is
read back and compared with what was written, tensor by tensor (bert_jax/tools/convert_runs.py).

ours_to_hf of a training run writes a folder that transformers' AutoTokenizer and pipelines use
as they are. The run is --workdir, or the folder holding --checkpoint_dir when it has the run's
config.json. Its tokenizer (config.json: tokenizer.path / lowercase, init.hf_dir, or the demo
vocabulary of a pre-training run) is written as vocab.txt, tokenizer.json, tokenizer_config.json
and special_tokens_map.json; a fine-tuning run's task.json gives the head's labels (id2label /
label2id) and problem_type: classification -> BertForSequenceClassification
"single_label_classification", regression -> "regression", multi_label ->
"multi_label_classification"; token_classification -> BertForTokenClassification with its tags;
span_qa -> BertForQuestionAnswering. A checkpoint with no run beside it (e.g. one written by
hf_to_ours) needs --tokenizer=PATH (a tokenizer.json, vocab.txt or Hugging Face folder), or
--tokenizer=none for the weights and config.json alone; --tokenizer=PATH also replaces a run's
own. No folder is written without a tokenizer unless asked: from such a folder transformers 5's
AutoTokenizer builds an empty tokenizer without an error.

--hf_dir is written whole beside its target and swapped into place (a killed or failed export
leaves the previous one whole; the next export names and removes the leftover), holds one export
only (bert_jax_export.json says which checkpoint it came from), and is refused, before anything
is written, when it is a link, the run's workdir or checkpoints, the model folder the run started
from, or a folder holding anything that is not an earlier export (another model, a run). The
tokenizer's model_max_length is the run's max_seq_len.

--format=sentence_transformers (ours_to_hf) writes the encoder alone (heads dropped) plus the
files SentenceTransformer(path) reads (bert_jax/convert/sentence_transformers_folder.py):
pooling and normalisation a contrastive run's (task.json pooling, L2-normalised), otherwise mean
pooling without normalisation, unless --pooling / --[no]normalize / --similarity say otherwise;
max_seq_length the run's max_seq_len. Its encode() gives embed.py's vectors with the same
settings. From a Hugging Face folder instead of a run:

  python experiments/convert.py --direction=ours_to_hf --format=sentence_transformers \
      --model=HF_FOLDER --hf_dir=OUT [--pooling=cls] [--normalize]

Exit status: 0 done; 1 with one line `convert.py: error: <what, naming the file>` for a user's
mistake (a missing folder, a damaged weights file, a bad config.json, an output folder that
already holds checkpoints). A failed read-back comparison is a bug and shows its traceback.
"""

from __future__ import annotations

from absl import app, flags

from bert_jax import cli
from bert_jax.convert import sentence_transformers_folder as sentence_folder
from bert_jax.runtime import distributed
from bert_jax.tools import convert_runs as runs

FLAGS = flags.FLAGS
SCRIPT = "convert.py"


def main(argv):
    cli.start(argv)
    if FLAGS.direction == "hf_to_ours":
        cli.run_or_exit(SCRIPT, lambda: runs.hf_to_ours(FLAGS.hf_dir, FLAGS.checkpoint_dir,
                                                        FLAGS.encoder_only))
    else:
        embedding = {"pooling": FLAGS.pooling, "normalize": FLAGS.normalize,
                     "similarity": FLAGS.similarity}
        if FLAGS.model is not None:
            cli.run_or_exit(SCRIPT, lambda: runs.hf_to_sentence_transformers(
                FLAGS.model, FLAGS.hf_dir, embedding))
            return
        cli.run_or_exit(SCRIPT, lambda: runs.ours_to_hf(
            FLAGS.checkpoint_dir, FLAGS.hf_dir, FLAGS.step, FLAGS.encoder_only, FLAGS.workdir,
            FLAGS.tokenizer, FLAGS.format, embedding))


def _check_sources(f) -> bool:
    """hf_to_ours reads --hf_dir into --checkpoint_dir; ours_to_hf reads --checkpoint_dir, or
    --model (a Hugging Face folder) with --format=sentence_transformers."""
    if f["direction"] == "hf_to_ours" or f["model"] is None:
        return f["checkpoint_dir"] is not None and f["model"] is None
    return f["checkpoint_dir"] is None and f["format"] == runs.SENTENCE_TRANSFORMERS


if __name__ == "__main__":
    flags.DEFINE_enum("direction", None, ["hf_to_ours", "ours_to_hf"], "Which way to convert.")
    flags.DEFINE_string("hf_dir", None,
                        "Hugging Face folder: read (hf_to_ours) or written (ours_to_hf).")
    flags.DEFINE_string("checkpoint_dir", None,
                        "Our Orbax checkpoint folder: written (hf_to_ours) or read (ours_to_hf).")
    flags.DEFINE_integer("step", None, "ours_to_hf: the step to convert (default: the newest).",
                         lower_bound=0)
    flags.DEFINE_boolean("encoder_only", False, "Drop the heads (MLM, NSP, classifier, ...).")
    flags.DEFINE_string("workdir", None,
                        "ours_to_hf: the training run whose config.json / task.json give the "
                        "tokenizer and labels (default: the folder above --checkpoint_dir).")
    flags.DEFINE_string("tokenizer", None,
                        "ours_to_hf: the tokenizer to write (tokenizer.json, vocab.txt or a "
                        "Hugging Face folder; default: the run's), or 'none' for the weights "
                        "alone.")
    flags.DEFINE_enum("format", runs.HF_FORMAT, list(runs.FORMATS),
                      "ours_to_hf: hf (a folder transformers loads) or sentence_transformers (the "
                      "encoder alone, plus the files SentenceTransformer(path) reads: pooling, "
                      "normalisation, max length, similarity).")
    flags.DEFINE_string("model", None, "--format=sentence_transformers: a Hugging Face folder to "
                        "write as a sentence-transformers folder (instead of --checkpoint_dir).")
    flags.DEFINE_enum("pooling", None, list(sentence_folder.POOLING_MODES),
                      "--format=sentence_transformers: pooling (default: a contrastive run's, "
                      "else mean).")
    flags.DEFINE_boolean("normalize", None, "--format=sentence_transformers: L2-normalise "
                         "(default: yes for a contrastive run, else no).")
    flags.DEFINE_enum("similarity", None, list(sentence_folder.SIMILARITIES),
                      "--format=sentence_transformers: similarity_fn_name (default: cosine).")
    flags.mark_flags_as_required(["direction", "hf_dir"])
    flags.register_multi_flags_validator(
        ["direction", "checkpoint_dir", "model", "format"], _check_sources,
        message="give --checkpoint_dir (with --direction=hf_to_ours: the checkpoint to write), or "
                "with --direction=ours_to_hf --format=sentence_transformers --model=HF_FOLDER "
                "instead")
    distributed.define_flags()
    app.run(main, flags_parser=cli.parse_flags)
