"""Our checkpoints <-> Hugging Face BERT, RoBERTa, XLM-R and ModernBERT folders, for whole runs:

    hf_to_ours(hf_dir, checkpoint_dir, encoder_only)   an HF folder -> an ordinary step-0 checkpoint
                                                      (params and model config, no optimizer state)
    ours_to_hf(checkpoint_dir, hf_dir, step, encoder_only, workdir=None, tokenizer=None)
                                                      a checkpoint -> a folder transformers loads,
                                                      with the run's tokenizer (or `tokenizer`)
                                                      and labels
        folder_format="sentence_transformers"        ... the encoder alone, plus the files that
                                                      SentenceTransformer(path) reads (pooling,
                                                      normalisation, length: embedding_settings)
    hf_to_sentence_transformers(model_dir, out_dir)   an HF folder -> a sentence-transformers one

An export never leaves a folder without a tokenizer unless told to (`tokenizer="none"`):
transformers 5's AutoTokenizer builds an empty tokenizer from the config.json of such a folder,
without an error, and everything downstream of it reads unrelated ids.

An export folder holds one export (bert_jax.runtime.outputs): it is written whole beside its
target (`.<name>.partial-<pid>`), read back there, marked (EXPORT_MARKER: which checkpoint it
came from) and swapped into place, so a killed or failed export leaves the previous one whole and
a stale file of an earlier export never stays beside a new one. It is refused, before anything is
written, when it is a symbolic link, equals or holds the run's files or the checkpoint, or holds
anything that is not an earlier export of ours (another model, a run). The tokenizer says the
run's max_seq_len as model_max_length: what transformers' pipelines then truncate to is what the
run trained and predicts at.

Heads travel with the weights (bert/, mlm/, nsp/, classifier/, qa_outputs/); encoder_only keeps
the encoder alone; a run without heads (contrastive: the encoder under bert/) exports the bare
encoder. Each direction reads its output back and compares it with what was written,
tensor by tensor: a difference is a bug (RuntimeError), a user's mistake a ValueError naming
the file.
"""

from __future__ import annotations

import os
from typing import Optional

import jax
import numpy as np
from absl import logging
from etils import epath

from bert_jax.convert import hf, hf_layout
from bert_jax.convert import sentence_transformers_folder as sentence_folder
from bert_jax.runtime import outputs, paths
from bert_jax.tools import saved_runs
from bert_jax.train.checkpoint import params as params_loading
from bert_jax.train.checkpoint import store as checkpointing

# task kind (task.json) -> config.json problem_type of its sequence-classification head
PROBLEM_TYPES = {"classification": "single_label_classification", "regression": "regression",
                 "multi_label": "multi_label_classification"}


EXPORT_MARKER = "bert_jax_export.json"  # in every export folder: where it came from
HF_FORMAT = "hf"  # a folder transformers loads
SENTENCE_TRANSFORMERS = "sentence_transformers"  # ... that SentenceTransformer(path) loads too
FORMATS = (HF_FORMAT, SENTENCE_TRANSFORMERS)


class OutputFolderError(ValueError):
    """The output folder cannot be written: it already holds checkpoints, or it is a file."""


def _count(params) -> int:
    return sum(int(np.prod(np.shape(leaf))) for leaf in jax.tree.leaves(params))


def _assert_same(written, read_back, where: str) -> None:
    written_leaves = jax.tree_util.tree_leaves_with_path(written)
    read_leaves = jax.tree_util.tree_leaves_with_path(read_back)
    if [p for p, _ in written_leaves] != [p for p, _ in read_leaves]:
        raise RuntimeError(f"{where}: the tree read back differs from the tree written")
    for (path, a), (_, b) in zip(written_leaves, read_leaves):
        if not np.array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32)):
            raise RuntimeError(f"{where}: {jax.tree_util.keystr(path)} differs after reading back")


def hf_to_ours(hf_dir: str, checkpoint_dir: str, encoder_only: bool) -> None:
    fault = outputs.fault(checkpoint_dir, "--checkpoint_dir",
                          [("the Hugging Face folder read (--hf_dir)", hf_dir)], folder=True)
    if fault:
        raise OutputFolderError(fault)
    cfg, params = hf.load(hf_dir, with_heads=not encoder_only)
    if _is_file(checkpoint_dir):
        raise OutputFolderError(f"--checkpoint_dir={checkpoint_dir} is a file, not a folder; "
                                "give an empty or new folder")
    manager = checkpointing.make_manager(checkpoint_dir, keep=1, async_saves=False)
    try:
        if manager.latest_step() is not None:
            raise OutputFolderError(f"--checkpoint_dir={checkpoint_dir} already holds checkpoints; "
                                "give an empty or new folder")
        checkpointing.save(manager, 0, {"params": params}, model_config=cfg,
                           extra_metadata={"converted_from": os.fspath(paths.path(hf_dir)),
                                           "heads": list(hf.heads_of(params))})
        manager.wait_until_finished()
    finally:
        manager.close()
    cfg_back, params_back = params_loading.load_params(checkpoint_dir, step=0)
    if cfg_back != cfg:
        raise RuntimeError(f"{checkpoint_dir}: the config read back differs: {cfg_back} vs {cfg}")
    _assert_same(params, params_back, checkpoint_dir)
    logging.info("wrote %s: %d parameters (%d in the encoder), heads %s, %s",
                 checkpoint_dir, _count(params), _count(hf_layout.encoder_of(params)),
                 list(hf.heads_of(params)) or "none", cfg)


def _is_file(location: str) -> bool:
    """True if `location` (a local path or gs://) is a file rather than a folder or nothing."""
    path = epath.Path(location)
    return path.exists() and not path.is_dir()


def find_workdir(checkpoint_dir: str) -> str | None:
    """The run that `checkpoint_dir` (<workdir>/checkpoints, or one step folder in it) belongs
    to: the folder above it that holds the run's config.json; None if there is none."""
    path = paths.path(checkpoint_dir)  # a local folder or gs://
    candidates = [path.parent]
    if path.name.isdigit():  # a step folder
        candidates.append(path.parent.parent)
    return next((os.fspath(c) for c in candidates if (c / "config.json").is_file()), None)


NO_TOKENIZER = "none"


def _named_tokenizer(tokenizer: str | None):
    """The tokenizer a caller named: a path (tokenizer.json, vocab.txt or a folder), None for
    the run's own, NO_TOKENIZER for none."""
    if tokenizer in (None, NO_TOKENIZER):
        return None
    from bert_jax.data.tokenizers import load as tokenizer_lib
    return tokenizer_lib.load_tokenizer(tokenizer)


def run_export_options(workdir: str | None, params, tokenizer: str | None = None) -> dict:
    """hf.save's tokenizer, label_map and problem_type for a run's params (labels none without a
    run). `tokenizer` as in `ours_to_hf`; ValueError when there is none to write and none was
    asked for."""
    options = {"tokenizer": _named_tokenizer(tokenizer)}
    if workdir is None:
        missing = "no run's config.json beside the checkpoint (give --workdir=RUN)"
    else:
        if tokenizer is None:
            options["tokenizer"] = saved_runs.run_tokenizer(workdir)
        missing = f"the run {workdir} has no vocabulary (a synthetic corpus)"
    if options["tokenizer"] is None and tokenizer != NO_TOKENIZER:
        raise ValueError(f"no tokenizer to write beside the weights: {missing}; give "
                         "--tokenizer=PATH (a tokenizer.json, vocab.txt or Hugging Face folder), "
                         f"or --tokenizer={NO_TOKENIZER} for a folder of weights alone (from "
                         "which transformers 5's AutoTokenizer builds an empty tokenizer)")
    if workdir is None:
        logging.warning("no run's config.json beside the checkpoint: writing no labels (give "
                        "--workdir)")
        return options
    from bert_jax.recipes.finetune.task_data import read_task_file
    task = read_task_file(workdir) or {}
    if "classifier" in hf.heads_of(params):
        options["label_map"] = task.get("label_map") or None
        options["problem_type"] = PROBLEM_TYPES.get(task.get("task"))
        # ModernBERT's span-QA head is a two-label classifier: the task says which it is
        options["question_answering"] = task.get("task") == "span_qa"
    logging.info("run %s (task %s): labels %s, problem_type %s", workdir, task.get("task", "none"),
                 options.get("label_map"), options.get("problem_type"))
    return options


def _run_config(workdir: str | None) -> dict:
    if workdir is None:
        return {}
    try:
        return paths.read_json(epath.Path(workdir) / "config.json")
    except (OSError, ValueError):
        return {}


def export_fault(hf_dir: str, checkpoint_dir: str, workdir: str | None,
                 tokenizer: str | None) -> str | None:
    """What keeps `hf_dir` from being an export folder (module docstring); None if nothing."""
    run = _run_config(workdir)
    protected = [("the checkpoint folder (--checkpoint_dir)", checkpoint_dir)]
    protected += outputs.run_files(workdir)
    protected += [("the tokenizer (--tokenizer)",
                   tokenizer if tokenizer != NO_TOKENIZER else None),
                  ("the run's tokenizer", (run.get("tokenizer") or {}).get("path")),
                  ("the model folder the run started from", (run.get("init") or {}).get("hf_dir"))]
    return (outputs.fault(hf_dir, "--hf_dir", protected, folder=True)
            or outputs.foreign_folder_fault(hf_dir, "--hf_dir", marker=EXPORT_MARKER))


def ours_to_hf(checkpoint_dir: str, hf_dir: str, step: int | None, encoder_only: bool,
               workdir: str | None = None, tokenizer: str | None = None,
               folder_format: str = HF_FORMAT, embedding: Optional[dict] = None) -> None:
    """Export a checkpoint (module docstring); `tokenizer`: None for the run's own, a path to
    write that one instead, or "none" for the weights alone. folder_format
    SENTENCE_TRANSFORMERS writes the encoder alone with the sentence-transformers files
    (`embedding_settings`; `embedding` overrides pooling / normalize / similarity)."""
    if folder_format not in FORMATS:
        raise ValueError(f"format {folder_format!r} is unknown; choose one of {FORMATS}")
    sentence_model = folder_format == SENTENCE_TRANSFORMERS
    if sentence_model:
        encoder_only = True
        if tokenizer == NO_TOKENIZER:
            raise ValueError("a sentence-transformers folder needs its tokenizer: drop "
                             f"--tokenizer={NO_TOKENIZER}")
    if workdir is not None and not (epath.Path(workdir) / "config.json").is_file():
        raise FileNotFoundError(f"--workdir={workdir} holds no config.json: it is not the workdir "
                                "of a training run")
    run = workdir or find_workdir(checkpoint_dir)
    fault = export_fault(hf_dir, checkpoint_dir, run, tokenizer)
    if fault:
        raise OutputFolderError(fault)
    if _is_file(hf_dir):  # on object storage (a local path is checked above)
        raise OutputFolderError(f"--hf_dir={hf_dir} is a file, not a folder")
    try:
        cfg, params = params_loading.load_params(checkpoint_dir, step=step, scan_layers=False)
    except ValueError as e:  # some (Orbax's JSON metadata) name no file: say which checkpoint
        if os.path.normpath(checkpoint_dir) in str(e) or os.fspath(
                paths.path(checkpoint_dir)) in str(e):
            raise
        raise ValueError(f"--checkpoint_dir={checkpoint_dir}: cannot read the checkpoint "
                         f"({type(e).__name__}: {e})") from e
    params = jax.tree.map(np.asarray, params)
    if encoder_only:
        params = hf_layout.encoder_of(params)
    if set(params) == {"bert"}:  # an encoder without heads (a contrastive run): the bare tree
        params = params["bert"]
    options = run_export_options(run, params, tokenizer)
    max_seq_len = _run_config(run).get("max_seq_len")
    if isinstance(max_seq_len, int) and max_seq_len > 0:
        options["model_max_length"] = max_seq_len
    settings = None
    if sentence_model:
        settings = embedding_settings(run, cfg, embedding)
        options["model_max_length"] = settings["max_seq_len"]

    def write(folder: str) -> None:
        hf.save(cfg, params, folder, **options)
        if settings is not None:
            sentence_folder.write_modules(folder, hidden_size=cfg.hidden_size, **settings)
        _, params_back = hf.load(folder, with_heads=not encoder_only)
        written = params
        if hf.heads_of(written) == ("mlm",) and "pooler" in written.get("bert", {}):
            written = {**written, "bert": {k: v for k, v in written["bert"].items()
                                           if k != "pooler"}}
        _assert_same(written, params_back, hf_dir)

    outputs.replace_folder(hf_dir, write, EXPORT_MARKER, {
        "checkpoint_dir": os.fspath(paths.path(checkpoint_dir)), "step": step,
        "run": os.fspath(paths.path(run)) if run else None, "encoder_only": encoder_only,
        "model_max_length": options.get("model_max_length"), "format": folder_format,
        **({"sentence_embedding": settings} if settings else {})})
    logging.info("wrote %s: %d parameters, heads %s", hf_dir, _count(params),
                 list(hf.heads_of(params)) or "none")


# ----- sentence-transformers folders ------------------------------------------------------------

def embedding_settings(run: str | None, cfg, overrides: Optional[dict] = None) -> dict:
    """How the exported sentence-transformers model pools: a contrastive run's own settings
    (task.json pooling, L2-normalised, cosine: what it trained and evaluated with), otherwise
    mean pooling without normalisation (embed.py's defaults); max_seq_len the run's (else the
    model's max_sequence_length). `overrides` (pooling, normalize, similarity, max_seq_len; a
    None value changes nothing) win over both."""
    settings = {"pooling": "mean", "normalize": False, "similarity": "cosine",
                "max_seq_len": cfg.max_sequence_length}
    if run is not None:
        from bert_jax.recipes.finetune.task_data import read_task_file
        task = read_task_file(run) or {}
        if task.get("task") == "contrastive":
            settings.update(pooling=task.get("pooling", "mean"), normalize=True)
        max_seq_len = _run_config(run).get("max_seq_len")
        if isinstance(max_seq_len, int) and max_seq_len > 0:
            settings["max_seq_len"] = max_seq_len
    settings.update({k: v for k, v in (overrides or {}).items() if v is not None})
    if not 3 <= settings["max_seq_len"] <= cfg.max_sequence_length:
        raise ValueError(f"max_seq_len={settings['max_seq_len']} must be in "
                         f"3..{cfg.max_sequence_length} (the model's max_sequence_length)")
    return settings


def hf_to_sentence_transformers(model_dir: str, out_dir: str,
                                embedding: Optional[dict] = None) -> None:
    """A Hugging Face encoder folder (BERT, RoBERTa/XLM-R, ModernBERT; heads dropped) -> a
    sentence-transformers folder, written and swapped in as ours_to_hf writes. Settings: those
    of the folder's own modules.json when it has one, else mean pooling without normalisation;
    max_seq_len the tokenizer's model_max_length when the model can read that many tokens, else
    the model's; `embedding` overrides them."""
    from bert_jax.data.tokenizers import load as tokenizer_lib
    fault = (outputs.fault(out_dir, "--hf_dir", [("the model folder read (--model)", model_dir)],
                           folder=True)
             or outputs.foreign_folder_fault(out_dir, "--hf_dir", marker=EXPORT_MARKER))
    if fault:
        raise OutputFolderError(fault)
    cfg, params = hf.load(model_dir, with_heads=False)
    params = jax.tree.map(np.asarray, params)
    if set(params) == {"bert"}:
        params = params["bert"]
    tokenizer = tokenizer_lib.load_tokenizer(model_dir)
    found = sentence_folder.read_settings(model_dir) or {}
    if found.get("max_seq_len") is None:
        found["max_seq_len"] = _tokenizer_max_length(model_dir, cfg.max_sequence_length)
    settings = embedding_settings(None, cfg, {**found, **{
        k: v for k, v in (embedding or {}).items() if v is not None}})

    def write(folder: str) -> None:
        hf.save(cfg, params, folder, tokenizer=tokenizer,
                model_max_length=settings["max_seq_len"])
        sentence_folder.write_modules(folder, hidden_size=cfg.hidden_size, **settings)
        _, params_back = hf.load(folder, with_heads=False)
        written = params
        if set(params_back) == {"bert"}:
            params_back = params_back["bert"]
        _assert_same(written, params_back, out_dir)

    outputs.replace_folder(out_dir, write, EXPORT_MARKER, {
        "model": os.fspath(paths.path(model_dir)), "format": SENTENCE_TRANSFORMERS,
        "model_max_length": settings["max_seq_len"], "sentence_embedding": settings})
    logging.info("wrote %s: a sentence-transformers folder of %s (%s)", out_dir, model_dir,
                 settings)


def _tokenizer_max_length(model_dir: str, limit: int) -> int:
    """tokenizer_config.json's model_max_length when it is a length the model reads, else
    `limit` (transformers writes a huge number for 'no limit')."""
    path = os.path.join(model_dir, "tokenizer_config.json")
    try:
        length = paths.read_json(epath.Path(path)).get("model_max_length")
    except (OSError, ValueError):
        return limit
    return length if isinstance(length, int) and 3 <= length <= limit else limit
