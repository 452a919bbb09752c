"""A serving artefact: a run's inference function compiled with `jax.export`, which a process
that has jax, numpy and `tokenizers` (no bert_jax, no flax, no training config) loads and calls.

    write_artefact(output, workdir=RUN | hf_dir=FOLDER, step=None, platforms=None)

writes the folder `output` (bert_jax.runtime.outputs' rule: written beside, swapped in, marked
by SERVING_MARKER; refused over a run, a model folder or anything not an artefact of ours):

    model.jax        jax.export's serialisation (StableHLO) of
                     f(weights: list of arrays, input_ids, token_type_ids, attention_mask)
                     with the three inputs int32 [batch, length], both dimensions symbolic
    weights.npz      the arrays, "0", "1", ... in the order f takes them
    tokenizer.json   (and the other Hugging Face tokenizer files) at the run's max length
    manifest.json    inputs, outputs (name, shape, meaning), labels, max_length, pad_id, kind,
                     pooling, jax version, platforms
    serve.py         a 60-line client: `python serve.py FOLDER "a text" ...` prints one JSON line a
                     text; `serve.load(FOLDER)` returns a callable on lists of texts

What f returns: a fine-tuning run of a text kind (classification, regression, multi_label) its
"logits" [batch, labels] as predict.py computes them (before softmax / sigmoid); a
token_classification run "logits" [batch, length, tags] per token; a contrastive run, a
pre-training run or a Hugging Face folder "embeddings" [batch, hidden] pooled as embed.py does
(a contrastive run's pooling, L2-normalised; otherwise mean, not normalised). span_qa is not
exported (its answers need the windowing and span search of predict.py).

An exported function runs on the platforms it was exported for (`platforms`, default: the one
JAX runs on here) and in any jax within jax.export's compatibility window of the exporting one.
"""

from __future__ import annotations

import io
import json
import os
import time
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.runtime import outputs

SERVING_MARKER = "bert_jax_serving.json"
FUNCTION_FILE = "model.jax"
WEIGHTS_FILE = "weights.npz"
MANIFEST_FILE = "manifest.json"
CLIENT_FILE = "serve.py"
TEXT_KINDS = ("classification", "regression", "multi_label")
INPUTS = ("input_ids", "token_type_ids", "attention_mask")


def _flat(params) -> tuple[list[np.ndarray], object]:
    leaves, treedef = jax.tree.flatten(jax.device_get(params))
    return [np.asarray(leaf) for leaf in leaves], treedef


def _embedding_function(cfg, pooling: str, normalize: bool):
    from bert_jax.embeddings import encode
    from bert_jax.model import families
    model = families.of(cfg).encoder(cfg, add_pooler=False)

    def embed(params, input_ids, token_type_ids, attention_mask):
        out = model.apply({"params": params}, input_ids, token_type_ids, attention_mask, True)
        return {"embeddings": encode.pool(out.sequence_output, attention_mask, pooling,
                                          normalize)}
    return embed


def inference_function(workdir: Optional[str] = None, hf_dir: Optional[str] = None,
                       step: Optional[int] = None):
    """(f(params, input_ids, token_type_ids, attention_mask) -> {name: array}, params,
    tokenizer, max_length, description for the manifest) of a run or a Hugging Face folder."""
    from bert_jax.tools import convert_runs, saved_runs
    kind_name = None
    if workdir is not None:
        from bert_jax.recipes import run_record
        from bert_jax.recipes.finetune.task_data import read_task_file
        config = run_record.load_config(workdir)
        kind_name = (read_task_file(workdir) or {}).get("task") \
            if config.recipe == "finetune" else None
    if kind_name in TEXT_KINDS + ("token_classification",):
        from bert_jax.config import settings as run_settings
        from bert_jax.recipes import common
        from bert_jax.recipes.finetune import predict, recipe
        config, kind, labels = predict.load_run(workdir)
        run = run_settings.typed(config)
        mesh = run.mesh.fitted().make()
        step, cfg, params = common.load_checkpoint(
            workdir, step,
            lambda c: recipe.make_init_fn(kind.make_model(c, labels), run.max_seq_len), mesh)
        tokenizer = common.finetuning_tokenizer(run)
        model_fn = recipe.make_predict_fn(kind, kind.make_model(cfg, labels))

        def classify(params, input_ids, token_type_ids, attention_mask):
            return model_fn(params, {"input_ids": input_ids, "token_type_ids": token_type_ids,
                                     "attention_mask": attention_mask})
        per_token = kind_name == "token_classification"
        description = {"kind": kind_name, "labels": labels.get("label_map"), "outputs": {
            "logits": ["batch", "length", "labels"] if per_token else ["batch", "labels"]}}
        return classify, params, tokenizer, run.max_seq_len, description
    if kind_name == "span_qa":
        raise ValueError(f"{workdir} is a span_qa run: its answers need predict.py's windows "
                         "and span search, which a serving artefact does not export")
    encoder = saved_runs.load_encoder(hf_dir=hf_dir, workdir=workdir, step=step)
    settings = convert_runs.embedding_settings(workdir, encoder.cfg)
    if hf_dir is not None:
        from bert_jax.convert import sentence_transformers_folder as sentence_folder
        settings.update(sentence_folder.read_settings(hf_dir) or {})
        settings["max_seq_len"] = settings.get("max_seq_len") or encoder.cfg.max_sequence_length
    function = _embedding_function(encoder.cfg, settings["pooling"], settings["normalize"])
    description = {"kind": "embeddings", "labels": None,
                   "outputs": {"embeddings": ["batch", "hidden"]},
                   "pooling": settings["pooling"], "normalize": settings["normalize"]}
    return function, encoder.params, encoder.tokenizer, settings["max_seq_len"], description


def export(function, params, max_length: int, platforms: Optional[tuple[str, ...]] = None):
    """(serialized bytes, flat weights) of `function` with symbolic batch and length (at most
    max_length: the model's position checks need the bound)."""
    weights, treedef = _flat(params)

    def flat_function(weights, input_ids, token_type_ids, attention_mask):
        return function(jax.tree.unflatten(treedef, weights), input_ids, token_type_ids,
                        attention_mask)

    batch, length = jax.export.symbolic_shape(
        "batch, length", constraints=(f"length <= {int(max_length)}",))
    ids = jax.ShapeDtypeStruct((batch, length), jnp.int32)
    specs = [jax.ShapeDtypeStruct(w.shape, w.dtype) for w in weights]
    exported = jax.export.export(jax.jit(flat_function), platforms=platforms)(
        specs, ids, ids, ids)
    return exported.serialize(), weights


def write_artefact(output: str, workdir: Optional[str] = None, hf_dir: Optional[str] = None,
                   step: Optional[int] = None,
                   platforms: Optional[tuple[str, ...]] = None) -> dict:
    """Write the folder (module docstring); returns the manifest."""
    if (workdir is None) == (hf_dir is None):
        raise ValueError("give exactly one of a run's workdir and a Hugging Face folder")
    fault = (outputs.fault(output, "--output", [*outputs.run_files(workdir),
                                                ("the model folder (--model)", hf_dir)],
                           folder=True)
             or outputs.foreign_folder_fault(output, "--output", marker=SERVING_MARKER))
    if fault:
        raise ValueError(fault)
    function, params, tokenizer, max_length, description = inference_function(
        workdir, hf_dir, step)
    started = time.perf_counter()
    blob, weights = export(function, params, max_length, platforms)
    manifest = {
        "inputs": {name: {"dtype": "int32", "shape": ["batch", "length"]} for name in INPUTS},
        **description, "max_length": int(max_length), "pad_id": int(tokenizer.pad_id),
        "jax_version": jax.__version__,
        "platforms": list(platforms or (jax.default_backend(),)),
        "call": "jax.export.deserialize(model.jax).call([weights.npz[str(i)] for i in range("
                "num_weights)], input_ids, token_type_ids, attention_mask)",
        "num_weights": len(weights), "source": os.fspath(workdir or hf_dir)}
    export_seconds = time.perf_counter() - started

    def write(folder: str) -> None:
        from bert_jax.data.tokenizers import hf_folder
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, FUNCTION_FILE), "wb") as f:
            f.write(blob)
        buffer = io.BytesIO()
        np.savez(buffer, **{str(i): w for i, w in enumerate(weights)})
        with open(os.path.join(folder, WEIGHTS_FILE), "wb") as f:
            f.write(buffer.getvalue())
        hf_folder.save_hf(tokenizer, folder, int(max_length))
        with open(os.path.join(folder, MANIFEST_FILE), "w", encoding="utf-8") as f:
            f.write(json.dumps(manifest, indent=2) + "\n")
        with open(os.path.join(folder, CLIENT_FILE), "w", encoding="utf-8") as f:
            f.write(CLIENT)

    outputs.replace_folder(output, write, SERVING_MARKER, {"source": manifest["source"],
                                                           "step": step})
    return {**manifest, "export_seconds": round(export_seconds, 2)}


CLIENT = '''"""Run the exported model of this folder: needs jax, numpy and tokenizers only.

    python serve.py FOLDER "first text" "second text"   # one JSON line a text
    from serve import load; predict = load(FOLDER); outputs = predict(["a text"])
"""

import json
import os
import sys

import jax
import numpy as np
import tokenizers


def load(folder):
    """A function: list of texts (or of (text, pair) tuples) -> {output name: numpy array}."""
    with open(os.path.join(folder, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    with open(os.path.join(folder, "model.jax"), "rb") as f:
        exported = jax.export.deserialize(bytearray(f.read()))
    with np.load(os.path.join(folder, "weights.npz")) as arrays:
        weights = [jax.device_put(arrays[str(i)]) for i in range(manifest["num_weights"])]
    tokenizer = tokenizers.Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    tokenizer.enable_truncation(manifest["max_length"])
    tokenizer.enable_padding(pad_id=manifest["pad_id"])

    def predict(texts):
        rows = tokenizer.encode_batch(list(texts))
        arrays = [np.array([getattr(row, name) for row in rows], np.int32)
                  for name in ("ids", "type_ids", "attention_mask")]
        return {name: np.asarray(value)
                for name, value in exported.call(weights, *arrays).items()}

    predict.manifest = manifest
    return predict


if __name__ == "__main__":
    predict = load(sys.argv[1])
    outputs = predict(sys.argv[2:])
    labels = predict.manifest.get("labels")
    for i, text in enumerate(sys.argv[2:]):
        record = {"text": text, **{k: v[i].tolist() for k, v in outputs.items()}}
        if labels and predict.manifest["kind"] == "classification":
            record["prediction"] = labels[int(np.argmax(outputs["logits"][i]))]
        print(json.dumps(record))
'''
