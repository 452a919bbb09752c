"""Sentence-embedding throughput: ours (bert_jax.embeddings.encode, what embed.py runs) against
transformers + torch, each implementation in its own process (benchmarks/harness/worker.py).

    python benchmarks/compare_embed.py [--hf_dir=HF_FOLDER] [--batch_size=32] [--repeats=3] \
        [--json=out.json]

Design: the same texts for both, real short sentences (gensim's 200 polarity sentences), the same
encoder (default: the packaged MiniLM), mean pooling over real tokens, L2-normalised, fp32, batch 32
(embed.py's default on a CPU; docs/results.md also gives both at 64), each text cut at the model's
length; torch's texts sorted longest first, each batch padded to its longest (sentence-transformers'
`encode`; ours packs short texts into shared rows). Each process loads the model, then embeds every
text `repeats` times; per pass: seconds and sentences/s (pass 1 includes JAX's compilation of each
length bucket; torch has none; later passes shuffle the texts, so their batches are new). What
counts: sentences/s of pass 1 (a cold call), of pass 2 (the second call in the same process:
sentences_per_second_second_call, and second_call_speedup = pass 2 / pass 1) and of the best later
pass (warm), and the largest difference between the two implementations' vectors. Then, in a new
process for each implementation, two batches of `batch_size` texts (the first `batch_size`
sentences, then the next): the seconds of each (the first includes JAX's compilation of the batch's
shape) and second_batch_speedup = first / second. Two more figures of a one-off command:
ours_cached, ours run twice with a compilation cache as embed.py keeps one
(bert_jax.runtime.compilation_cache), the second process reported: its pass 1 loads the programs the
first compiled (ratio_cold_cached: its cold sentences/s over torch's); and ratio_process,
sentences/s of load + pass 1 (model loading included, Python start-up and imports not) ours over
torch's, both cold.

Last, the whole commands, each in its own process from start to exit, Python's start-up and the
imports included (after one unreported run of each, `--command_repeats` rounds, the order rotated
each round): experiments/embed.py (--normalize, --batch_size) with an empty compilation cache
(a machine that has compiled nothing: ours_empty_cache) and with the cache its earlier run left
(ours_cached: every run after the first on a machine), against benchmarks/peers/
transformers_embed.py (the same job: the file of the 200 sentences in, a .npy out; texts sorted
longest first as sentence-transformers sorts them, each batch padded to its longest); wall
seconds of each run, the median's sentences/s, ratio_command_empty_cache and ratio_command_cached
(ours over torch's), and the largest difference between any run's vectors and torch's. Both run
with JAX_PLATFORMS=cpu unless the environment sets it. Never run it beside another XLA or torch
process.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app, flags

FLAGS = flags.FLAGS


def polarity_sentences() -> list[str]:
    from bert_jax.data.corpora import catalog as corpora
    from bert_jax.data.finetuning import readers
    path = os.path.join(corpora.gensim_test_data(), "pang_lee_polarity.cor")
    return [example.text for example in readers.read_fasttext(path, "cp1252")]


def _passes(embed_once, texts, repeats: int) -> tuple[list[float], object]:
    """Seconds of each call in one process, and the vectors of the texts in their order. Pass
    1 embeds the texts as given; every later pass a new shuffle of them (new batches, as a
    second call on new texts would bring: JAX may reuse compiled shapes, not results)."""
    import numpy as np
    seconds, vectors = [], None
    rng = np.random.default_rng(0)
    for repeat in range(repeats):
        order = np.arange(len(texts)) if repeat == 0 else rng.permutation(len(texts))
        start = time.perf_counter()
        out = np.asarray(embed_once([texts[i] for i in order]))
        seconds.append(time.perf_counter() - start)
        vectors = np.empty_like(out)
        vectors[order] = out
    return seconds, vectors


def _result(seconds: list[float], vectors, texts, spec: dict, load_seconds: float) -> dict:
    import numpy as np
    np.save(spec["vectors_path"], np.asarray(vectors, np.float32))
    rates = [len(texts) / s for s in seconds]
    return {"load_seconds": load_seconds, "pass_seconds": seconds,
            "sentences_per_second_cold": rates[0], "sentences_per_second_second_call": rates[1],
            "sentences_per_second_warm": max(rates[1:]),
            "second_call_speedup": rates[1] / rates[0], "sentences": len(texts)}


def _with_load(result: dict) -> float:
    """Sentences/s of a process's load + first pass: what a one-off command waits for, past
    starting Python and importing its framework."""
    return result["sentences"] / (result["load_seconds"] + result["pass_seconds"][0])


def _two_batches(embed_once, texts, batch_size: int) -> dict:
    """Seconds of a first and a second call on `batch_size` texts each (different texts)."""
    seconds = []
    for batch in (texts[:batch_size], texts[batch_size:2 * batch_size]):
        start = time.perf_counter()
        embed_once(batch)
        seconds.append(time.perf_counter() - start)
    return {"first_batch_seconds": seconds[0], "second_batch_seconds": seconds[1],
            "second_batch_speedup": seconds[0] / seconds[1], "batch_texts": batch_size}


def ours(spec: dict) -> dict:
    """The worker job of bert_jax (worker.py protocol); with spec["compilation_cache"], compiled
    programs are kept in (and loaded from) that folder as embed.py keeps them."""
    from bert_jax.embeddings import encode as se
    from bert_jax.runtime import compilation_cache
    from bert_jax.tools import saved_runs
    if spec.get("compilation_cache"):
        os.environ[compilation_cache.COMPILATION_CACHE_VARIABLE] = spec["compilation_cache"]
        import jax
        jax.config.update("jax_compilation_cache_dir", spec["compilation_cache"])
        compilation_cache.use_compilation_cache()
    start = time.perf_counter()
    encoder = saved_runs.load_encoder(hf_dir=spec["hf_dir"])
    load_seconds = time.perf_counter() - start
    texts = polarity_sentences()
    embed_once = lambda t: se.embed(encoder, t, pooling="mean", normalize=True,
                                    batch_size=spec["batch_size"])
    if spec.get("two_batches"):
        return _two_batches(embed_once, texts, spec["batch_size"])
    seconds, vectors = _passes(embed_once, texts, spec["repeats"])
    return _result(seconds, vectors, texts, spec, load_seconds)


def torch_transformers(spec: dict) -> dict:
    """The worker job of transformers + torch: the same pooling, the texts sorted longest first
    and each batch padded to its longest (benchmarks/peers/transformers_embed.py's `embed`)."""
    import transformers

    from benchmarks.peers import transformers_embed
    start = time.perf_counter()
    tokenizer = transformers.AutoTokenizer.from_pretrained(spec["hf_dir"])
    model = transformers.AutoModel.from_pretrained(spec["hf_dir"]).eval()
    load_seconds = time.perf_counter() - start
    texts = polarity_sentences()
    embed_once = lambda t: transformers_embed.embed(tokenizer, model, t, spec["batch_size"],
                                                    normalize=True)

    if spec.get("two_batches"):
        return _two_batches(embed_once, texts, spec["batch_size"])
    seconds, vectors = _passes(embed_once, texts, spec["repeats"])
    return _result(seconds, vectors, texts, spec, load_seconds)


def _timed_command(argv: list[str], env: dict, log_path: str) -> float:
    """Wall seconds of one command run to its end from the repository root (its output
    appended to log_path); a non-zero exit raises RuntimeError naming the log."""
    from benchmarks.harness.worker import ROOT
    with open(log_path, "a", encoding="utf-8") as log:
        start = time.perf_counter()
        done = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        seconds = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(f"{argv[1]} exited {done.returncode}; see {log_path}")
    return seconds


def commands(hf_dir: str, folder: str, batch_size: int, repeats: int) -> dict:
    """The whole-command figures (module docstring): after one unreported run of each command
    (ours filling the cache the cached runs read; both bringing their files into the page
    cache), `repeats` rounds of ours_empty_cache, ours_cached and torch_transformers, the order
    rotated by one each round; every run writes a file of its own, and each is checked against
    torch's last."""
    import numpy as np
    texts = polarity_sentences()
    sentences = os.path.join(folder, "sentences.txt")
    with open(sentences, "w", encoding="utf-8") as f:
        f.write("".join(text + "\n" for text in texts))
    env = {**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
    cached = os.path.join(folder, "commands_cache")
    log = os.path.join(folder, "commands.log")
    embed_py = [sys.executable, "experiments/embed.py", f"--input={sentences}",
                f"--model={hf_dir}", "--normalize", f"--batch_size={batch_size}"]
    peer = [sys.executable, "benchmarks/peers/transformers_embed.py", f"--input={sentences}",
            f"--model={hf_dir}", "--normalize", f"--batch_size={batch_size}"]

    def run(name: str, tag: str) -> tuple[float, str]:
        """(wall seconds, the .npy written) of one run of command `name`."""
        output = os.path.join(folder, f"command_{name}_{tag}")
        if name == "torch_transformers":
            argv, run_env = peer + [f"--output={output}.npy"], env
        else:
            cache = cached if name == "ours_cached" else os.path.join(folder, f"empty_cache_{tag}")
            argv = embed_py + [f"--output={output}"]
            run_env = {**env, "JAX_COMPILATION_CACHE_DIR": cache}
        return _timed_command(argv, run_env, log), f"{output}.npy"

    names = ["ours_empty_cache", "ours_cached", "torch_transformers"]
    run("ours_cached", "warmup")
    run("torch_transformers", "warmup")
    seconds = {name: [] for name in names}
    outputs = {name: [] for name in names}
    for round_ in range(repeats):
        for name in names[round_ % 3:] + names[:round_ % 3]:
            took, output = run(name, str(round_))
            seconds[name].append(took)
            outputs[name].append(output)
    rates = {name: len(texts) / statistics.median(values) for name, values in seconds.items()}
    reference = np.load(outputs["torch_transformers"][-1])
    difference = 0.0
    for output in outputs["ours_empty_cache"] + outputs["ours_cached"]:
        vectors = np.load(output)
        if vectors.shape != reference.shape or len(vectors) != len(texts):
            raise RuntimeError(f"{output}: {vectors.shape} vectors for {len(texts)} sentences, "
                               f"torch's {reference.shape}")
        difference = max(difference, float(np.abs(vectors - reference).max()))
    return {"seconds": seconds, "sentences_per_second": rates,
            "ratio_command_empty_cache": rates["ours_empty_cache"] / rates["torch_transformers"],
            "ratio_command_cached": rates["ours_cached"] / rates["torch_transformers"],
            "max_abs_difference": difference}


def main(argv):
    del argv
    import numpy as np

    from benchmarks.harness import worker
    from bert_jax.convert import hf
    hf_dir = FLAGS.hf_dir or hf.packaged_minilm_dir()
    if not 0 < 2 * FLAGS.batch_size <= len(polarity_sentences()):
        raise app.UsageError(f"--batch_size={FLAGS.batch_size}: two batches of it must fit in "
                             f"the {len(polarity_sentences())} sentences")
    folder = tempfile.mkdtemp(prefix="compare_embed_")
    cache = os.path.join(folder, "compilation_cache")  # empty until ours_cached's first run
    results, batches = {}, {}
    runs = [("ours", "ours", False, ""), ("torch_transformers", "torch_transformers", False, ""),
            ("ours_cached", "ours", False, cache), ("ours_cached", "ours", False, cache),
            ("ours", "ours", True, ""), ("torch_transformers", "torch_transformers", True, "")]
    for tag, name, two_batches, compilation_cache in runs:
        label = f"{tag}_two_batches" if two_batches else tag
        spec = {"job": f"benchmarks.compare_embed:{name}", "hf_dir": hf_dir,
                "batch_size": FLAGS.batch_size, "repeats": FLAGS.repeats,
                "two_batches": two_batches, "compilation_cache": compilation_cache,
                "result_path": os.path.join(folder, f"{label}.json"),
                "vectors_path": os.path.join(folder, f"{tag}.npy")}
        # ours_cached runs twice: the first process fills the cache, the second is reported
        (batches if two_batches else results)[tag] = worker.run(
            spec, os.path.join(folder, f"{label}.spec.json"),
            os.path.join(folder, f"{label}.log"), label)
    difference = float(np.abs(np.load(os.path.join(folder, "ours.npy"))
                              - np.load(os.path.join(folder, "torch_transformers.npy"))).max())
    report = {"hf_dir": hf_dir, "batch_size": FLAGS.batch_size, "results": results,
              "two_batches": batches,
              "max_abs_difference": difference,
              "ratio_cold": results["ours"]["sentences_per_second_cold"]
              / results["torch_transformers"]["sentences_per_second_cold"],
              "ratio_cold_cached": results["ours_cached"]["sentences_per_second_cold"]
              / results["torch_transformers"]["sentences_per_second_cold"],
              "ratio_process": _with_load(results["ours"]) / _with_load(
                  results["torch_transformers"]),
              "ratio_warm": results["ours"]["sentences_per_second_warm"]
              / results["torch_transformers"]["sentences_per_second_warm"]}
    if FLAGS.command_repeats:
        report["commands"] = commands(hf_dir, folder, FLAGS.batch_size, FLAGS.command_repeats)
    text = json.dumps(report, indent=1)
    if FLAGS.json:
        with open(FLAGS.json, "w", encoding="utf-8") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    flags.DEFINE_string("hf_dir", None, "Hugging Face BERT folder (default: packaged MiniLM).")
    flags.DEFINE_integer("batch_size", 32, "Texts per batch (32: embed.py's default on a CPU).")
    flags.DEFINE_integer("repeats", 3, "Passes over the texts in each process (>= 2).")
    flags.DEFINE_integer("command_repeats", 3, "Rounds of the whole-command runs (0: none).",
                         lower_bound=0)
    flags.DEFINE_string("json", None, "Also write the report here.")
    app.run(main)
