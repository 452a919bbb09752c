"""A run's inputs are part of its identity: `<workdir>/inputs.json` holds a fingerprint of every
file the run reads (its tokenizer files, its fine-tuning data files, each file of its prepared
corpus), recorded when the run starts; a resume, evaluate.py, predict.py and embed.py compare
the files with it and stop with one line naming the file and what changed, unless told to go on
(`allow_changed_inputs`), and then the record keeps what changed, when and by whom.

    {"format": 1, "files": {"<path>": {"role": "tokenizer", "size": 231508,
                                        "blake2b": "<hex>", "sampled": false}, ...},
     "folders": {"<corpus folder>": "corpus"}, "changes": [...]}

A fingerprint is the size and a BLAKE2b-128 digest (`fingerprint`). Tokenizer and fine-tuning
data files are hashed whole, whatever their size (a 100 MB TSV: 0.08-0.2 s). A corpus file is
hashed whole up to SAMPLE_ABOVE (4 MiB) and sampled above it: SAMPLE_BLOCKS (16) blocks of
SAMPLE_BYTES (64 KiB) spread evenly from its first byte to its last, 1 MiB read per file whatever
its size. TFDS writes a prepared corpus in files of ~36 MB, so a 1 GB corpus is ~28 sampled files
and a 10 GB one ~280: one stat each and ~280 MiB read (docs/results.md, "Input fingerprints",
has the measured cost). What a sample misses: a change that keeps the file's size and lies
wholly between the sampled blocks (bytes flipped in place, records of equal length swapped inside
one file); a truncated, extended, replaced or re-prepared file is found (its size or a sampled
block differs), and so is a file added to or gone from the corpus folder. Token shards also keep
their own per-shard size and BLAKE2b in their manifest, which is hashed whole here.

Which files (`run_files`): tokenizer.path (a file, or the tokenizer files of a folder, the folder
recorded too: a tokenizer file added to it later, e.g. a tokenizer.json that the loader prefers
to the vocab.txt the run was trained with, is a change), else
init.hf_dir's tokenizer files, else the vocabulary a pre-training run trained for its demo or
text: corpus; data.train_path and data.eval_path; every file of the prepared corpus folder of a
demo or text: corpus (TFDS array_record) or of a shards:DIR corpus. A path on object storage is
not fingerprinted (an object is rewritten whole, and reading it to hash it costs a download).

Recorded from process 0 when the run starts training (`check_and_record`, after its data is
prepared, before its first step): the first time, and anew while the workdir holds no checkpoint
(nothing trained yet). A run made before this record has none: its resume says so in one line and
records its inputs from then on; evaluate.py, predict.py and embed.py on it say so in one line
and go on (a change before the record cannot be seen).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
import time
from typing import TYPE_CHECKING, Any, Iterable, Optional

import jax
from absl import logging
from etils import epath

from bert_jax.config import settings
from bert_jax.config.run_keys import value_at
from bert_jax.config.settings import RunSettings
from bert_jax.runtime import multiprocess, outputs, paths

if TYPE_CHECKING:  # the data pipeline loads where a pre-training run's data is built
    from bert_jax.data.pretraining.data_config import PretrainingDataConfig

INPUTS_FILE = outputs.INPUTS_RECORD  # "inputs.json"
FORMAT = 1
SAMPLE_ABOVE = 4 << 20  # a corpus file larger than this is sampled, not hashed whole
SAMPLE_BLOCKS = 16
SAMPLE_BYTES = 64 << 10  # 1 MiB read per sampled file
_CHUNK = 8 << 20
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json",
                   "special_tokens_map.json", "vocab.json", "merges.txt", "spiece.model",
                   "sentencepiece.bpe.model")
TOKENIZER, TRAIN_DATA, EVAL_DATA, CORPUS = ("tokenizer", "training data (data.train_path)",
                                            "held-out data (data.eval_path)", "corpus")


class InputsChangedError(ValueError):
    """A file a run depends on changed since the run started."""


def fingerprint(path: str, sampled: bool = False) -> dict:
    """{"size", "blake2b", "sampled"} of a local file: the whole file, or (sampled=True and the
    file over SAMPLE_ABOVE bytes) SAMPLE_BLOCKS blocks spread from its start to its end."""
    size = os.path.getsize(path)
    hasher = hashlib.blake2b(digest_size=16)
    sample = sampled and size > SAMPLE_ABOVE
    with open(path, "rb") as f:
        if sample:
            last = size - SAMPLE_BYTES
            for i in range(SAMPLE_BLOCKS):
                f.seek(last * i // (SAMPLE_BLOCKS - 1))
                hasher.update(f.read(SAMPLE_BYTES))
        else:
            while chunk := f.read(_CHUNK):
                hasher.update(chunk)
    return {"size": size, "blake2b": hasher.hexdigest(), "sampled": sample}


def _local(path: Optional[str]) -> Optional[str]:
    if not path or paths.is_remote(path):
        return None
    return os.path.abspath(os.path.expanduser(path))


def _tokenizer_files(path: Optional[str]) -> list[str]:
    path = _local(path)
    if path is None or not os.path.exists(path):
        return []
    if os.path.isdir(path):
        return [os.path.join(path, n) for n in TOKENIZER_FILES
                if os.path.isfile(os.path.join(path, n))]
    return [path]


def pretraining_data_config(run: RunSettings, workdir: str) -> PretrainingDataConfig:
    """The PretrainingDataConfig of a pre-training run (bert_jax.data.pretraining.pipeline):
    every field that is a run setting set from `run`, data.data_dir defaulting to
    <workdir>/data (local or gs://). What pre-training builds its data from, and where this
    module finds a run's corpus and vocabulary."""
    from bert_jax.data.pretraining.data_config import PretrainingDataConfig
    data, tokenizer = run.data, run.tokenizer
    return PretrainingDataConfig(
        corpus=data.corpus, document_delimiter=data.document_delimiter,
        data_dir=data.data_dir or os.fspath(epath.Path(workdir) / "data"),
        vocab_path=tokenizer.path, lowercase=tokenizer.lowercase,
        demo_vocab_size=tokenizer.vocab_size, seq_len=run.max_seq_len,
        max_predictions=data.max_predictions, mask_rate=data.mask_rate,
        whole_word_masking=data.whole_word_masking, sentence_pairs=data.sentence_pairs,
        seed=run.seed, num_workers=data.num_workers,
        batch_warmup_tokens=data.batch_warmup_tokens,
        batch_warmup_start=data.batch_warmup_start)


@functools.cache
def _schema_defaults() -> PretrainingDataConfig:
    from bert_jax.config import run as run_config
    return pretraining_data_config(settings.typed(run_config.pretrain_config()), "")


def schema_data_config(**fields: Any) -> PretrainingDataConfig:
    """The PretrainingDataConfig of a pre-training run of the schema's defaults
    (bert_jax/config/run.py: corpus "demo", 128-token rows, 15% masked, ...), `fields` replacing
    any of its fields (checked as always): for what drives the pipeline without a run (tests,
    benchmarks). Its data_dir is the schema's default with no workdir, "data" under the current
    folder: name one where the pipeline reads or writes files."""
    return dataclasses.replace(_schema_defaults(), **fields)


def _data_config(config: Any, workdir: str) -> PretrainingDataConfig:
    """`pretraining_data_config` of a run's config (config.json's dict, or a ConfigDict: keys
    it lacks read as the schema's defaults)."""
    return pretraining_data_config(settings.typed(config), workdir)


def corpus_folder(config: Any, workdir: str) -> Optional[str]:
    """The folder of a pre-training run's prepared corpus files, None for none (synthetic, a
    fine-tuning run, a corpus on object storage or not prepared)."""
    corpus = value_at(config, "data", "corpus")
    if not isinstance(corpus, str) or value_at(config, "recipe") == "finetune":
        return None
    if corpus.startswith("shards:"):
        return _local(corpus[len("shards:"):])
    if corpus != "demo" and not corpus.startswith("text:"):
        return None
    data = _data_config(config, workdir)
    if _local(data.data_dir) is None:
        return None
    from bert_jax.data.corpora import catalog
    builder = catalog.builder_for(corpus, data.data_dir, **data.text_options())
    folder = os.fspath(builder.data_dir)
    return folder if os.path.isdir(folder) else None


def _pretraining_vocab(config: Any, workdir: str) -> Optional[str]:
    corpus = value_at(config, "data", "corpus")
    if not isinstance(corpus, str) or not (corpus == "demo" or corpus.startswith("text:")):
        return None
    from bert_jax.data.pretraining import vocab as pretraining_vocab
    try:
        return pretraining_vocab.resolve_vocab_path(_data_config(config, workdir))
    except (ValueError, OSError):
        return None


def run_files(config: Any, workdir: str) -> tuple[dict[str, str], dict[str, str]]:
    """({file: role}, {corpus folder: role}) of the local files the run reads (module doc)."""
    files: dict[str, str] = {}
    tokenizer = value_at(config, "tokenizer", "path") or value_at(config, "init", "hf_dir")
    if not tokenizer and value_at(config, "recipe") != "finetune":
        tokenizer = _pretraining_vocab(config, workdir)
    for file in _tokenizer_files(tokenizer):
        files[file] = TOKENIZER
    folder = _local(tokenizer)
    folders = {folder: TOKENIZER} if folder and os.path.isdir(folder) else {}
    for role, key in ((TRAIN_DATA, "train_path"), (EVAL_DATA, "eval_path")):
        path = _local(value_at(config, "data", key))
        if path and os.path.isfile(path):
            files.setdefault(path, role)
    folder = corpus_folder(config, workdir)
    if folder:
        folders[folder] = CORPUS
        for path in corpus_inputs(folder):
            files.setdefault(path, CORPUS)
    return files, folders


# The token-shard reader's per-document token counts (document_tokens.<split>.npy): derived from
# the shards, checked against the manifest whenever a folder is opened and written again when
# they disagree, and written by the first run on a folder prepared without them: not an input.
_DERIVED = re.compile(r"document_tokens\.[^.]+\.npy")


def corpus_inputs(folder: str) -> list[str]:
    """The files of a prepared corpus folder that are inputs of a run: every regular file, less
    hidden ones and the token-shard reader's derived counts (`_DERIVED`)."""
    return [os.path.join(folder, name) for name in sorted(os.listdir(folder))
            if os.path.isfile(os.path.join(folder, name)) and not name.startswith(".")
            and not _DERIVED.fullmatch(name)]


def fingerprints(files: dict[str, str]) -> dict[str, dict]:
    return {path: {"role": role, **fingerprint(path, sampled=role == CORPUS)}
            for path, role in sorted(files.items())}


def _folder_inputs(folder: str, role: str) -> list[str]:
    """The files of a recorded folder that are inputs: a corpus folder's (`corpus_inputs`), a
    tokenizer folder's tokenizer files."""
    return corpus_inputs(folder) if role == CORPUS else _tokenizer_files(folder)


def differences(recorded: dict, roles: Optional[Iterable[str]] = None) -> list[str]:
    """One phrase per recorded file (of `roles`, default all) that changed, and per input file
    new in a recorded folder (corpus, tokenizer): '<file> (<role>): <what changed>'."""
    roles = None if roles is None else set(roles)
    found = []
    for path, saved in sorted(recorded.get("files", {}).items()):
        if roles is not None and saved.get("role") not in roles:
            continue
        where = f"{path} ({saved.get('role')})"
        if not os.path.isfile(path):
            found.append(f"{where} is gone")
            continue
        now = fingerprint(path, sampled=saved.get("sampled", False) or (
            saved.get("role") == CORPUS and os.path.getsize(path) > SAMPLE_ABOVE))
        if now["size"] != saved["size"]:
            found.append(f"{where} has {now['size']} bytes, and {saved['size']} when the run "
                         "started")
        elif now["blake2b"] != saved["blake2b"]:
            found.append(f"{where} has other content than when the run started (same size, "
                         f"blake2b {saved['blake2b'][:12]}... -> {now['blake2b'][:12]}..."
                         f"{', sampled' if now['sampled'] else ''})")
    for folder, role in sorted(recorded.get("folders", {}).items()):
        if (roles is not None and role not in roles) or not os.path.isdir(folder):
            continue
        for path in _folder_inputs(folder, role):
            if path not in recorded.get("files", {}):
                found.append(f"{path} ({role}) is new in the {role} folder")
    return found


def read_record(workdir: str) -> Optional[dict]:
    file = epath.Path(workdir) / INPUTS_FILE
    return paths.read_json(file) if file.exists() else None


def _write(workdir: str, record: dict) -> None:
    paths.write_text_atomically(epath.Path(workdir) / INPUTS_FILE,
                                json.dumps(record, indent=1, sort_keys=True))


def _refusal(workdir: str, found: list[str], what: str, flag: str) -> str:
    more = f"; and {len(found) - 1} more" if len(found) > 1 else ""
    return (f"an input of the run in {workdir} changed since the run started "
            f"({os.path.join(workdir, INPUTS_FILE)}): {found[0]}{more}; {what}: restore the "
            f"file, or {flag} to go on with it (the run's {INPUTS_FILE} then records the change)")


def _not_fingerprinted(workdir: str, what: str) -> None:
    logging.warning("the run in %s was made before its inputs were fingerprinted (it has no %s): "
                    "%s", workdir, INPUTS_FILE, what)


def _note(record: dict, found: list[str], by: str, files: Optional[dict] = None) -> dict:
    record.setdefault("changes", []).append(
        {"at": time.strftime("%Y-%m-%d %H:%M:%S"), "by": by, "changed": found})
    if files is not None:
        record["files"] = files
    return record


def check_and_record(config: Any, workdir: str, has_checkpoint: bool) -> None:
    """At the start of training (module doc): record the inputs; on a resume (`has_checkpoint`)
    first compare them with the record and raise InputsChangedError naming the first changed
    file, unless config.allow_changed_inputs (a warning, and the change recorded)."""
    def run() -> None:
        if paths.is_remote(workdir):
            return
        files, folders = run_files(config, workdir)
        record = read_record(workdir)
        current = fingerprints(files)
        if record is None and has_checkpoint:
            _not_fingerprinted(workdir, "they are recorded now, and a resume checks them from "
                               "now on; a change before now cannot be seen")
        if record is None or not has_checkpoint:
            _write(workdir, {"format": FORMAT, "files": current, "folders": folders,
                             "recorded_at": time.strftime("%Y-%m-%d %H:%M:%S")})
            return
        found = differences(record)
        if not found:
            return
        if not value_at(config, "allow_changed_inputs"):
            raise InputsChangedError(_refusal(workdir, found, "the resumed run would train on "
                                              "other data than it started with",
                                              "--config.allow_changed_inputs=true"))
        logging.warning("the run's inputs changed since it started, and allow_changed_inputs "
                        "says to go on: %s (recorded in %s)", "; ".join(found),
                        os.path.join(workdir, INPUTS_FILE))
        record["folders"] = folders
        _write(workdir, _note(record, found, "training (resumed)", current))

    multiprocess.agree(lambda: run() if jax.process_index() == 0 else None,
                       f"checking the inputs recorded in {workdir}")


def check_run(workdir: str, script: str, roles: Optional[Iterable[str]] = None,
              allow: bool = False) -> None:
    """For evaluate.py, predict.py, embed.py on a run's workdir: InputsChangedError naming the
    first recorded file (of `roles`) that changed, unless `allow` (a warning, and the change
    recorded in the run's inputs.json). A run without a record (made before inputs were
    fingerprinted) is not checked, and one warning line says so."""
    if paths.is_remote(workdir):
        return
    record = read_record(workdir)
    if record is None:
        _not_fingerprinted(workdir, f"{script} cannot tell whether its tokenizer or data changed "
                           "since it was trained (a resume records them)")
        return
    found = differences(record, roles)
    if not found:
        return
    if not allow:
        raise InputsChangedError(_refusal(workdir, found, f"{script} would answer with other "
                                          "inputs than the run was trained with",
                                          "--allow_changed_inputs"))
    logging.warning("the run's inputs changed since it started, and --allow_changed_inputs says "
                    "to go on: %s (recorded in %s)", "; ".join(found),
                    os.path.join(workdir, INPUTS_FILE))
    try:
        _write(workdir, _note(record, found, script))
    except OSError as e:  # a read-only run folder: the warning above is the record
        logging.warning("could not record the change in %s: %s", workdir, e)
