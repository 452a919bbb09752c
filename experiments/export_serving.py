"""Write a run's inference function as a serving artefact that needs no bert_jax (jax.export).

    python experiments/export_serving.py --workdir=RUN --output=DIR [--step=N] \
        [--platforms=cpu,cuda]
    python experiments/export_serving.py --model=HF_FOLDER --output=DIR   # an embedder
    python DIR/serve.py DIR "a text" "another"    # jax, numpy and tokenizers only

DIR holds model.jax (StableHLO, symbolic batch and length), weights.npz, the tokenizer files,
manifest.json and serve.py: what they are and what the function returns (logits of a classifier
or tagger, pooled embeddings of a contrastive run or an encoder) in bert_jax/tools/serving.py.
DIR is written beside and swapped in (an earlier artefact is replaced whole); a run's folder, a
model folder or anything else is refused. Prints the manifest as one JSON line.

Exit status: 0 done; 1 with one line `export_serving.py: error: ...` (no such run, span_qa).
"""

import json

from absl import app, flags

from bert_jax import cli
from bert_jax.runtime import distributed
from bert_jax.tools import serving

FLAGS = flags.FLAGS
SCRIPT = "export_serving.py"


def main(argv):
    cli.start(argv)
    platforms = tuple(FLAGS.platforms) if FLAGS.platforms else None
    manifest = cli.run_or_exit(SCRIPT, lambda: serving.write_artefact(
        FLAGS.output, workdir=FLAGS.workdir, hf_dir=FLAGS.model, step=FLAGS.step,
        platforms=platforms))
    print(json.dumps(manifest))


if __name__ == "__main__":
    flags.DEFINE_string("workdir", None, "A fine-tuning, contrastive or pre-training run.")
    flags.DEFINE_string("model", None, "A Hugging Face encoder folder (exported as an embedder).")
    flags.DEFINE_string("output", None, "The artefact folder to write.", required=True)
    flags.DEFINE_integer("step", None, "--workdir: the checkpoint step (default: the newest).",
                         lower_bound=0)
    flags.DEFINE_list("platforms", None, "Platforms to export for (default: the one JAX runs "
                      "on here), e.g. cpu,cuda,tpu.")
    flags.register_multi_flags_validator(
        ["model", "workdir"], lambda f: (f["model"] is None) != (f["workdir"] is None),
        message="give exactly one of --model (a Hugging Face folder) and --workdir (a run)")
    distributed.define_flags()
    app.run(main, flags_parser=cli.parse_flags)
