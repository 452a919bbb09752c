"""Throughput and memory of BERT training, ours against transformers (Flax, torch).

  python benchmarks/benchmark.py --preset=base --batch_size=8 --seq_len=128 --mode=train \
      --peer=hf_flax,hf_torch --json
  python benchmarks/benchmark.py --dtype=bfloat16 --peer=hf_flax@float32,hf_flax,hf_torch
  python benchmarks/benchmark.py --mode=finetune --task=classification --all \
      --hf_dir="$(python -c 'from bert_jax.convert import hf; print(hf.packaged_minilm_dir())')" \
      --batch_size=32 --max_seq_len=64 --steps=30 --warmup_steps=5

Modes: `train`, the MLM pre-training step, and `infer`, the encoder's forward pass, on random
token ids (benchmarks/harness/mlm_modes.py: tokens/s, MFU); `finetune`, training steps of a task
(classification, token_classification, span_qa) on real short texts
(benchmarks/harness/finetune_mode.py: examples/s, real tokens/s, compile time).

Each implementation runs in its own process (benchmarks/harness/worker.py; torch and JAX in one
process slow each other), at the same settings, on the same data; ours first (unless
--skip_ours), then each --peer (or, with --all, hf_torch and hf_flax). A peer may run at its own
dtype (`hf_flax@float32`), so that ours at its best settings and a peer at its own are measured in
one run. Every setting prints one line (one JSON object with --json), then the ratios ours / peer.
Peers need the `bench` extra: pip install -e '.[bench]'.
"""

from __future__ import annotations

import json
import os
import tempfile

from absl import app, flags

from benchmarks import peers
from benchmarks.harness import finetune_data, finetune_mode, mlm_modes, worker

IMPLEMENTATIONS = ("ours", "hf_flax", "hf_torch")
MODES = {"train": mlm_modes, "infer": mlm_modes, "finetune": finetune_mode}

FLAGS = flags.FLAGS


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """The script's flags, on `flag_values` (its own run: absl's FLAGS; a test defines them
    on a FlagValues of its own to check them in-process)."""
    fv = {"flag_values": flag_values}
    flags.DEFINE_enum("mode", "train", list(MODES), "MLM train step, encoder forward pass, or "
                      "fine-tuning steps on real texts.", **fv)
    flags.DEFINE_string("preset", "base", "BertConfig preset: tiny, mini, small, medium, base, "
                        "large.", **fv)
    flags.DEFINE_integer("batch_size", 8, "Sequences per step.", **fv)
    flags.DEFINE_integer("seq_len", 128, "Tokens per sequence (finetune: the longest row).", **fv)
    flags.DEFINE_alias("max_seq_len", "seq_len", **fv)
    flags.DEFINE_integer("max_predictions", None,
                         "Masked positions per sequence (default 15% of seq_len).", **fv)
    flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "Compute dtype (params stay "
                      "fp32).", **fv)
    flags.DEFINE_string("remat", "none", "Remat policy of our model (none, full, dots, "
                        "dots_no_batch).", **fv)
    flags.DEFINE_string("peer", "", "Comma-separated peers to run after ours: hf_flax, "
                        "hf_torch, each optionally at its own compute dtype (hf_flax@float32); "
                        "default --dtype.", **fv)
    flags.DEFINE_boolean("all", False, "Run ours, hf_torch and hf_flax (at --dtype) and compare.",
                         **fv)
    flags.DEFINE_boolean("skip_ours", False, "Run only the peers.", **fv)
    flags.DEFINE_integer("steps", 10, "Timed steps (train/infer: the median is reported).", **fv)
    flags.DEFINE_integer("warmup", 3, "Untimed steps first (compilation, allocator warm-up).", **fv)
    flags.DEFINE_alias("warmup_steps", "warmup", **fv)
    flags.DEFINE_float("peak_flops", None, "Peak FLOP/s of the device for MFU (default: by "
                       "device).", **fv)
    flags.DEFINE_boolean("json", False, "Print one JSON object per measured setting.", **fv)
    # --mode=finetune
    flags.DEFINE_enum("task", "classification", list(finetune_data.TASKS),
                      "finetune: the task kind whose step is measured.", **fv)
    flags.DEFINE_string("hf_dir", None, "finetune: a Hugging Face BERT folder (weights, config and "
                        "vocabulary); default: --preset with random weights.", **fv)
    flags.DEFINE_string("texts", None, "finetune: a file of short texts (one per line, or csv, "
                        "tsv, jsonl); default: gensim's 200 polarity sentences.", **fv)
    flags.DEFINE_string("texts_format", "auto", "finetune: format of --texts (auto: by extension; "
                        "lines, fasttext, csv, tsv, jsonl).", **fv)
    flags.DEFINE_string("texts_encoding", None, "finetune: encoding of --texts (default utf-8).",
                        **fv)
    flags.DEFINE_string("bucket_lengths", "auto", "finetune, ours: config.data.bucket_lengths "
                        "(auto: 32, 64, ... max_seq_len; none; or lengths such as 16,32,48).", **fv)
    flags.DEFINE_integer("group_by_length", 0, "finetune: config.data.group_by_length (0: off; G: "
                         "rows of similar length batched together, over windows of G batches).",
                         **fv)
    flags.DEFINE_integer("pack_examples", 0, "finetune, ours: config.data.pack_examples (0: off; "
                         "K: up to K examples packed into one training row).", **fv)
    flags.DEFINE_enum("dropout_rng", "threefry", ["threefry", "rbg"], "finetune, ours: "
                      "config.dropout_rng, the generator of the dropout bits.", **fv)
    flags.DEFINE_integer("torch_threads", 0, "finetune, hf_torch: torch threads (0: torch's "
                         "default).", **fv)
    flags.DEFINE_float("dropout", None, "finetune: hidden and attention dropout of every "
                       "implementation (default: the model's), e.g. 0 to see what dropout costs.",
                       **fv)
    flags.DEFINE_string("profile_dir", None, "finetune, ours: trace the timed steps into this "
                        "folder and report their op time by category "
                        "(benchmarks/benchmark_profile.py); needs --bucket_lengths=none (one "
                        "program).", **fv)


def measure(spec: dict) -> dict:
    """The job of a worker process (benchmarks/harness/worker.py): one implementation at the
    settings."""
    settings = spec["settings"]
    return {"impl": spec["impl"], **MODES[settings["mode"]].RUNNERS[spec["impl"]](settings)}


def _measure_in_subprocess(name: str, settings: dict) -> dict:
    """`measure` in a fresh process; its spec, result and log in a temporary folder."""
    with tempfile.TemporaryDirectory(prefix="benchmark_") as folder:
        spec = {"job": "benchmarks.benchmark:measure", "impl": name, "settings": settings,
                "result_path": os.path.join(folder, "result.json")}
        try:
            return worker.run(spec, os.path.join(folder, "spec.json"),
                              os.path.join(folder, "worker.log"), f"benchmark worker {name!r}")
        except worker.WorkerError as e:
            raise RuntimeError(f"{e}:\n{e.log_tail}") from None


def _parse_peer(text: str, fv: flags.FlagValues = FLAGS) -> tuple[str, str]:
    """'hf_flax' -> ('hf_flax', --dtype); 'hf_flax@float32' -> ('hf_flax', 'float32')."""
    name, _, dtype = text.partition("@")
    if name not in IMPLEMENTATIONS or name == "ours":
        raise app.UsageError(f"--peer: unknown peer {name!r}; choose from hf_flax, hf_torch")
    if dtype and dtype not in ("float32", "bfloat16"):
        raise app.UsageError(f"--peer: unknown dtype {dtype!r} in {text!r}; float32 or bfloat16")
    if name == peers.HF_FLAX and peers.flax_peer_fault():
        raise app.UsageError(f"--peer={text}: {peers.flax_peer_fault()}")
    return name, dtype or fv.dtype


def _runs(fv: flags.FlagValues = FLAGS) -> list[tuple[str, str]]:
    """(implementation, dtype) of every measurement, ours first."""
    if fv.all and fv.peer:
        raise app.UsageError("--all runs every peer: leave out --peer")
    everyone = ("hf_torch",) + (() if peers.flax_peer_fault() else (peers.HF_FLAX,))
    chosen = ([(name, fv.dtype) for name in everyone] if fv.all
              else [_parse_peer(p, fv) for p in fv.peer.split(",") if p])
    runs = ([] if fv.skip_ours else [("ours", fv.dtype)]) + chosen
    if len(set(runs)) != len(runs):
        raise app.UsageError(f"--peer: the same peer at the same dtype twice: {fv.peer!r}")
    if not runs:
        raise app.UsageError("nothing to run: --skip_ours without --peer")
    return runs


def _check_finetune_inputs(settings: dict) -> None:
    """One-line errors for a missing folder or unreadable texts, before any worker starts."""
    if settings["profile_dir"] and (settings["bucket_lengths"] != "none"
                                    or settings["pack_examples"]):
        raise app.UsageError("--profile_dir profiles one program: add --bucket_lengths=none "
                             "(and no --pack_examples)")
    if settings["hf_dir"] and not os.path.isfile(os.path.join(settings["hf_dir"], "config.json")):
        raise app.UsageError(f"--hf_dir={settings['hf_dir']}: no config.json there (a Hugging "
                             "Face BERT folder is needed)")
    try:
        finetune_data.read_texts(settings)
    except (ValueError, FileNotFoundError) as e:
        raise app.UsageError(f"--texts: {e}") from None


def _print_ratios(reports: dict, speed: str) -> None:
    for peer in [label for label in reports if label != "ours"]:
        ratio = {"ratio": f"ours/{peer}",
                 speed: round(reports["ours"][speed] / reports[peer][speed], 3),
                 "peak_rss": round(reports["ours"]["peak_rss_mb"] / reports[peer]["peak_rss_mb"],
                                   3)}
        print(json.dumps(ratio) if FLAGS.json else
              f"ours/{peer}: {ratio[speed]:.2f}x {speed.split('_per_')[0]}/s, "
              f"{ratio['peak_rss']:.2f}x peak RSS", flush=True)


def check(fv: flags.FlagValues = FLAGS) -> tuple[object, dict, list[tuple[str, str]]]:
    """The mode's module, its settings and the runs of the parsed flags, checked before any
    worker starts (app.UsageError names a bad flag)."""
    module = MODES[fv.mode]
    settings = module.settings(fv)
    runs = _runs(fv)
    if fv.mode == "finetune":
        _check_finetune_inputs(settings)
    return module, settings, runs


def main(argv):
    del argv
    module, settings, runs = check(FLAGS)
    reports = {}
    for name, dtype in runs:
        label = name if dtype == FLAGS.dtype else f"{name}@{dtype}"
        run_settings = {**settings, "dtype": dtype}
        reports[label] = module.report(_measure_in_subprocess(name, run_settings), run_settings,
                                       FLAGS.peak_flops)
        print(json.dumps(reports[label]) if FLAGS.json else module.line(label, reports[label]),
              flush=True)
    if "ours" in reports:
        _print_ratios(reports, module.SPEED)


if __name__ == "__main__":
    define_flags()
    app.run(main)
