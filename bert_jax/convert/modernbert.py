"""Hugging Face ModernBERT checkpoints <-> (ModernBertConfig, our parameter trees), both ways.

A folder holds `config.json` and `model.safetensors` (read with the safetensors numpy API, no
torch needed). Five architectures are read and written:

  config.json "architectures"            our tree (its model: the same class name in
                                         bert_jax.model.modernbert)
  ModernBertModel                        the bare ModernBertModel tree
  ModernBertForMaskedLM                  {"bert": ..., "mlm": ...}
  ModernBertForSequenceClassification    {"bert": ..., "classifier": ...}
  ModernBertForTokenClassification       {"bert": ..., "classifier": ...}
  ModernBertForQuestionAnswering         {"bert": ..., "classifier": ...} (two labels: start,
                                         end; bert_jax.model.modernbert_qa)

(`load(..., with_heads=False)` returns the bare encoder tree of any of them, and of the other
ModernBERT architectures too.) The three classifiers have the same tensors, so which one a tree
is comes from the folder (`architecture`) when reading and from the caller when writing.

Which tensor goes where (`encoder_entries`, `head_entries`): the torch Linear weights [out, in]
become our kernels [in, out], the fused projections with their parts on an axis of their own:
Wqkv [3*heads*head_dim, hidden] <-> [hidden, 3, heads, head_dim], Wi [2*intermediate, hidden]
<-> [hidden, 2, intermediate] (the first half is the activated input, the second the gate), the
attention's Wo [hidden, heads*head_dim] <-> [heads, head_dim, hidden]. Biases and LayerNorm
biases exist only where the config's flags say. The MLM decoder's weight is the token embedding
matrix (tied): not written, and refused on reading when a stored copy differs.

Refusals are one line (CheckpointError, ConfigError, FileNotFoundError): a folder without the
files, a config that is not ModernBERT's, a tensor missing, of the wrong shape or left over.
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping, Optional, Sequence

import numpy as np
from safetensors import SafetensorError, safe_open
from safetensors import numpy as safetensors_numpy

from bert_jax.config.bert import ConfigError
from bert_jax.config.modernbert import ModernBertConfig
from bert_jax.convert.hf_layout import CONFIG, SAFETENSORS, CheckpointError, Entry, Layout
from bert_jax.model import modernbert_scan
from bert_jax.runtime.pytree import flatten_dict

Params = dict[str, Any]

ENCODER = "bert"  # our composites keep the encoder here, the checkpoints under `model.`
HF_ENCODER_PREFIX = "model."
# Hugging Face class (and ours, in bert_jax.model.modernbert) -> its head in our tree
ARCHITECTURES: dict[str, Optional[str]] = {
    "ModernBertModel": None,
    "ModernBertForMaskedLM": "mlm",
    "ModernBertForSequenceClassification": "classifier",
    "ModernBertForTokenClassification": "classifier",
    "ModernBertForQuestionAnswering": "classifier",  # two labels: start and end
}
TIED_DECODER = "decoder.weight"


# ----- the layouts of one tensor on either side -----------------------------------------------

def _same() -> Layout:
    return Layout(lambda t: t, lambda t: t, lambda s: s)


def _linear(parts: tuple[int, ...] = ()) -> Layout:
    """torch Linear weight [out, in] <-> kernel [in, *parts] (out = prod(parts)), or [in, out]
    without parts."""
    def to_ours(t):
        return t.T.reshape((t.shape[1],) + parts) if parts else t.T

    def to_hf(k):
        return k.reshape(k.shape[0], -1).T

    return Layout(to_ours, to_hf, lambda s: (s[1],) + parts if parts else s[::-1])


def _split(parts: tuple[int, ...]) -> Layout:
    """A fused bias [prod(parts)] <-> [*parts]."""
    return Layout(lambda t: t.reshape(parts), lambda b: b.reshape(-1), lambda s: parts)


def _merge(heads: int, head_dim: int) -> Layout:
    """Attention output weight [hidden, heads*head_dim] <-> kernel [heads, head_dim, hidden]."""
    return Layout(lambda t: t.T.reshape(heads, head_dim, t.shape[0]),
                  lambda k: k.reshape(heads * head_dim, k.shape[-1]).T,
                  lambda s: (heads, head_dim, s[0]))


def _linear_entries(hf: str, path: tuple[str, ...], d_in: int, d_out: int, bias: bool,
                    kernel_layout: Optional[Layout] = None,
                    bias_layout: Optional[Layout] = None) -> list[Entry]:
    entries = [Entry(f"{hf}.weight", path + ("kernel",), (d_out, d_in),
                     kernel_layout or _linear())]
    if bias:
        entries.append(Entry(f"{hf}.bias", path + ("bias",), (d_out,), bias_layout or _same()))
    return entries


def _norm_entries(cfg: ModernBertConfig, hf: str, path: tuple[str, ...]) -> list[Entry]:
    d = cfg.hidden_size
    entries = [Entry(f"{hf}.weight", path + ("scale",), (d,), _same())]
    if cfg.norm_bias:
        entries.append(Entry(f"{hf}.bias", path + ("bias",), (d,), _same()))
    return entries


def encoder_entries(cfg: ModernBertConfig) -> list[Entry]:
    """Every tensor of a ModernBertModel (names without `model.`), in the unrolled tree."""
    d, f = cfg.hidden_size, cfg.intermediate_size
    n, h = cfg.num_attention_heads, cfg.head_dim
    entries = [Entry("embeddings.tok_embeddings.weight",
                     ("embeddings", "tok_embeddings", "embedding"), (cfg.vocab_size, d), _same()),
               *_norm_entries(cfg, "embeddings.norm", ("embeddings", "norm"))]
    for i in range(cfg.num_hidden_layers):
        hf, ours = f"layers.{i}", ("encoder", modernbert_scan.layer_name(i))
        if i > 0:  # layer 0's attention norm is an identity
            entries += _norm_entries(cfg, f"{hf}.attn_norm", ours + ("attn_norm",))
        entries += [
            *_linear_entries(f"{hf}.attn.Wqkv", ours + ("attn", "Wqkv"), d, 3 * n * h,
                             cfg.attention_bias, _linear((3, n, h)), _split((3, n, h))),
            *_linear_entries(f"{hf}.attn.Wo", ours + ("attn", "Wo"), n * h, d,
                             cfg.attention_bias, _merge(n, h)),
            *_norm_entries(cfg, f"{hf}.mlp_norm", ours + ("mlp_norm",)),
            *_linear_entries(f"{hf}.mlp.Wi", ours + ("mlp", "Wi"), d, 2 * f, cfg.mlp_bias,
                             _linear((2, f)), _split((2, f))),
            *_linear_entries(f"{hf}.mlp.Wo", ours + ("mlp", "Wo"), f, d, cfg.mlp_bias),
        ]
    return entries + _norm_entries(cfg, "final_norm", ("encoder", "final_norm"))


def head_entries(cfg: ModernBertConfig, head: str, num_labels: int = 2) -> list[Entry]:
    """The tensors of one head (`mlm` or `classifier`), at the top level of both trees."""
    d = cfg.hidden_size
    entries = [*_linear_entries("head.dense", (head, "head", "dense"), d, d, cfg.classifier_bias),
               *_norm_entries(cfg, "head.norm", (head, "head", "norm"))]
    if head == "mlm":
        if cfg.decoder_bias:
            entries.append(Entry("decoder.bias", ("mlm", "decoder_bias"), (cfg.vocab_size,),
                                 _same()))
        return entries
    if head == "classifier":
        return entries + _linear_entries("classifier", ("classifier", "dense"), d, num_labels,
                                         True)
    raise ValueError(f"unknown ModernBERT head {head!r}; choose 'mlm' or 'classifier'")


# ----- reading ---------------------------------------------------------------------------------

def _read_config(directory: str) -> tuple[str, dict[str, Any]]:
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"{directory}: no such checkpoint folder")
    path = os.path.join(directory, CONFIG)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{directory}: no {CONFIG} in the checkpoint folder")
    try:
        with open(path, encoding="utf-8") as f:
            hf = json.load(f)
    except (ValueError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(hf, dict):
        raise ConfigError(f"{path}: expected a JSON object, got {type(hf).__name__}")
    return path, hf


def architecture(directory: str | os.PathLike) -> str:
    """The Hugging Face class of a ModernBERT folder (config.json "architectures"; a folder
    without it: ModernBertForMaskedLM if it holds the decoder's bias or weight, else
    ModernBertModel)."""
    directory = os.fspath(directory)
    path, hf = _read_config(directory)
    names = hf.get("architectures") or []
    if names:
        if not isinstance(names, list) or len(names) != 1 or not isinstance(names[0], str):
            raise ConfigError(f"{path}: 'architectures' should name one class, got {names!r}")
        return names[0]
    keys = _tensor_keys(directory)
    if any(k.startswith(("decoder.", "head.")) for k in keys):
        if any(k.startswith("classifier.") for k in keys):
            raise ConfigError(f"{path}: no 'architectures', and a classifier could be a sequence "
                              "or a token classifier: name it in config.json")
        return "ModernBertForMaskedLM"
    return "ModernBertModel"


def _weights_path(directory: str) -> str:
    path = os.path.join(directory, SAFETENSORS)
    if not os.path.isfile(path):
        others = [name for name in ("model.safetensors.index.json", "pytorch_model.bin")
                  if os.path.isfile(os.path.join(directory, name))]
        found = f" (it has {others[0]}: re-save it as one {SAFETENSORS})" if others else ""
        raise FileNotFoundError(f"{directory}: no {SAFETENSORS}{found}")
    return path


def _tensor_keys(directory: str) -> set[str]:
    path = _weights_path(directory)
    try:
        with safe_open(path, framework="np") as f:
            return set(f.keys())
    except (SafetensorError, OSError) as e:
        raise CheckpointError(f"{path}: cannot read as safetensors ({e})") from None


def _read_tensors(path: str) -> dict[str, np.ndarray]:
    try:
        return safetensors_numpy.load_file(path)
    except (SafetensorError, OSError, ValueError, TypeError) as e:  # TypeError: a dtype numpy lacks
        raise CheckpointError(f"{path}: cannot read as safetensors ({e})") from None


def _set(tree: Params, path: tuple[str, ...], value: Any) -> None:
    for name in path[:-1]:
        tree = tree.setdefault(name, {})
    tree[path[-1]] = value


def _numpy_dtype(name: str):
    if name == "bfloat16":
        import ml_dtypes
        return ml_dtypes.bfloat16
    return np.dtype(name)


def load(directory: str | os.PathLike, *, with_heads: bool = True,
         **config_overrides: Any) -> tuple[ModernBertConfig, Params]:
    """Read a Hugging Face ModernBERT folder: (ModernBertConfig, plain numpy params).

    The tree is the bare ModernBertModel tree for a ModernBertModel checkpoint or with
    `with_heads=False`, else {"bert": encoder, head: ...} (the module docstring's table), in the
    layout of the config's scan_layers. `config_overrides` replace config fields (e.g.
    dtype="bfloat16", scan_layers=True); the params are cast to the resulting param_dtype.
    """
    directory = os.fspath(directory)
    config_path, hf_config = _read_config(directory)
    cfg = ModernBertConfig.from_hf_dict(hf_config, source=config_path, **config_overrides)
    fit = architecture(directory)
    if fit not in ARCHITECTURES and with_heads:
        raise CheckpointError(f"{config_path}: architecture {fit!r} has no model of ours (we read "
                              f"{', '.join(ARCHITECTURES)}); load it with with_heads=False for "
                              "its encoder")
    weights = _weights_path(directory)
    tensors = _read_tensors(weights)
    prefix = next((p for p in ("", HF_ENCODER_PREFIX)
                   if p + "embeddings.tok_embeddings.weight" in tensors), None)
    if prefix is None:
        raise CheckpointError(f"{weights}: no ModernBERT token embeddings: neither "
                              "'embeddings.tok_embeddings.weight' nor "
                              "'model.embeddings.tok_embeddings.weight' is in the checkpoint")
    head = ARCHITECTURES.get(fit) if with_heads else None
    dtype = _numpy_dtype(cfg.param_dtype)
    used: set[str] = set()

    def read(entries: list[Entry], key_prefix: str) -> Params:
        tree: Params = {}
        for entry in entries:
            key = key_prefix + entry.hf_key
            if key not in tensors:
                raise CheckpointError(f"{weights}: missing tensor {key!r} (expected shape "
                                      f"{list(entry.hf_shape)} from {config_path})")
            value = np.asarray(tensors[key], dtype=np.float32)
            if tuple(value.shape) != entry.hf_shape:
                raise CheckpointError(f"{weights}: tensor {key!r} has shape {list(value.shape)}, "
                                      f"but {config_path} implies {list(entry.hf_shape)}")
            _set(tree, entry.path, np.ascontiguousarray(entry.layout.to_ours(value)).astype(dtype))
            used.add(key)
        return tree

    encoder = read(encoder_entries(cfg), prefix)
    stray = sorted(k for k in tensors if k not in used and k.startswith(prefix)
                   and k.removeprefix(prefix).split(".")[0] in ("embeddings", "layers",
                                                                "final_norm"))
    if stray:
        raise CheckpointError(f"{weights}: tensor {stray[0]!r} is not part of the ModernBERT "
                              f"encoder that {config_path} describes (num_hidden_layers="
                              f"{cfg.num_hidden_layers}, norm_bias={cfg.norm_bias}, "
                              f"attention_bias={cfg.attention_bias}, mlp_bias={cfg.mlp_bias}); "
                              f"{len(stray)} such tensor(s)")
    if head is None:
        params = encoder
    else:
        num_labels = (_num_labels(tensors, hf_config, config_path) if head == "classifier"
                      else 2)
        params = {ENCODER: encoder, **read(head_entries(cfg, head, num_labels), "")}
        if head == "mlm" and TIED_DECODER in tensors:
            table = tensors[prefix + "embeddings.tok_embeddings.weight"]
            if tensors[TIED_DECODER].shape != table.shape or not np.array_equal(
                    np.asarray(tensors[TIED_DECODER], np.float32), np.asarray(table, np.float32)):
                raise CheckpointError(f"{weights}: {TIED_DECODER!r} differs from the token "
                                      "embeddings; our MLM decoder ties them (untied decoders "
                                      "are not supported)")
            used.add(TIED_DECODER)
        leftover = sorted(k for k in tensors if k not in used and not k.startswith(prefix))
        if leftover:
            raise CheckpointError(f"{weights}: tensor {leftover[0]!r} is no part of a {fit} as "
                                  f"{config_path} describes it; {len(leftover)} such tensor(s)")
    return cfg, modernbert_scan.to_layout(params, cfg)


def _num_labels(tensors: Mapping[str, np.ndarray], hf_config: Mapping[str, Any],
                config_path: str) -> int:
    if "classifier.bias" in tensors:
        return int(tensors["classifier.bias"].shape[0])
    labels = hf_config.get("id2label")
    if labels:
        return len(labels)
    raise CheckpointError(f"{config_path}: no id2label, and no 'classifier.bias' to count labels")


# ----- writing ---------------------------------------------------------------------------------

def _plain(params: Mapping[str, Any]) -> Params:
    """Unboxed numpy float32 arrays (accepts boxed Flax params, `model.init`'s variables)."""
    import flax.linen as nn
    params = nn.meta.unbox(params)
    if set(params) == {"params"}:
        params = params["params"]
    return {k: (_plain(v) if isinstance(v, Mapping) else np.asarray(v, dtype=np.float32))
            for k, v in params.items()}


def heads_of(params: Mapping[str, Any]) -> tuple[str, ...]:
    """The heads beside the encoder: () for a bare ModernBertModel tree."""
    if ENCODER not in params:
        return ()
    return tuple(name for name in ("mlm", "classifier") if name in params)


def default_architecture(params: Mapping[str, Any]) -> str:
    """The Hugging Face class of a tree without a classifier (whose kind the tree cannot say)."""
    heads = heads_of(params)
    if heads == ():
        return "ModernBertModel"
    if heads == ("mlm",):
        return "ModernBertForMaskedLM"
    if heads == ("classifier",):
        raise CheckpointError("params: a classifier head may be a sequence or a token classifier: "
                              "pass architecture='ModernBertForSequenceClassification' or "
                              "'ModernBertForTokenClassification'")
    raise CheckpointError(f"params: no ModernBERT architecture has the heads {heads}")


def to_hf_tensors(cfg: ModernBertConfig, params: Mapping[str, Any],
                  architecture: Optional[str] = None) -> dict[str, np.ndarray]:
    """Our tree (either layout) -> the Hugging Face tensors of `architecture` (default: from
    the heads), torch layouts, float32; CheckpointError for a tree that does not fit."""
    params = modernbert_scan.unstack_layers(_plain(params), cfg)
    if set(params) == {ENCODER}:
        params = params[ENCODER]
    architecture = architecture or default_architecture(params)
    if architecture not in ARCHITECTURES:
        raise CheckpointError(f"architecture {architecture!r} is not one we write; choose one of "
                              f"{', '.join(ARCHITECTURES)}")
    head = ARCHITECTURES[architecture]
    if heads_of(params) != (() if head is None else (head,)):
        raise CheckpointError(f"params: a {architecture} needs the heads "
                              f"{() if head is None else (head,)}, the tree has {heads_of(params)}")
    entries = [("" if head is None else HF_ENCODER_PREFIX, () if head is None else (ENCODER,), e)
               for e in encoder_entries(cfg)]
    if head is not None:
        num_labels = (int(np.shape(params["classifier"]["dense"]["bias"])[0])
                      if head == "classifier" else 2)
        entries += [("", (), e) for e in head_entries(cfg, head, num_labels)]
    expected = {root + e.path for _, root, e in entries}
    unknown = sorted(set(flatten_dict(params)) - expected)
    if unknown:
        raise CheckpointError(f"params: {'/'.join(unknown[0])} is not a parameter of the "
                              f"ModernBERT {architecture} that the config describes "
                              f"({len(unknown)} such leaves)")
    tensors = {}
    for key_prefix, root, entry in entries:
        name = "/".join(root + entry.path)
        value = params
        try:
            for part in root + entry.path:
                value = value[part]
        except KeyError:
            raise CheckpointError(f"params: missing {name}") from None
        if tuple(value.shape) != entry.ours_shape:
            raise CheckpointError(f"params: {name} has shape {list(value.shape)}, but the config "
                                  f"implies {list(entry.ours_shape)}")
        tensors[key_prefix + entry.hf_key] = np.ascontiguousarray(entry.layout.to_hf(value))
    return tensors


def save(cfg: ModernBertConfig, params: Mapping[str, Any], directory: str | os.PathLike, *,
         architecture: Optional[str] = None, label_map: Optional[Sequence[str]] = None) -> None:
    """Write a folder that transformers loads (`ModernBertForMaskedLM.from_pretrained(dir)`,
    ...): config.json and model.safetensors (float32, the decoder weight left to the tying).

    architecture: the Hugging Face class (default: ModernBertModel for a bare tree,
    ModernBertForMaskedLM with the MLM head; a classifier must be named). label_map: the
    classifier's class names (id2label; default LABEL_0 ...). Every check runs before the first
    write: a refused save leaves nothing behind.
    """
    directory = os.fspath(directory)
    plain = _plain(params)
    if set(plain) == {ENCODER}:
        plain = plain[ENCODER]
    architecture = architecture or default_architecture(plain)
    tensors = to_hf_tensors(cfg, plain, architecture)
    hf_config = cfg.to_hf_dict()
    hf_config.update(architectures=[architecture], tie_word_embeddings=True)
    if "classifier.bias" in tensors:
        count = tensors["classifier.bias"].shape[0]
        names = ([f"LABEL_{i}" for i in range(count)] if label_map is None
                 else [str(name) for name in label_map])
        if len(names) != count or len(set(names)) != count:
            raise CheckpointError(f"label_map {list(label_map or [])} does not name the {count} "
                                  f"outputs of the classifier once each")
        hf_config["id2label"] = {str(i): name for i, name in enumerate(names)}
        hf_config["label2id"] = {name: i for i, name in enumerate(names)}
    elif label_map is not None:
        raise CheckpointError(f"label_map needs a classifier head; a {architecture} has none")
    os.makedirs(directory, exist_ok=True)
    safetensors_numpy.save_file(tensors, os.path.join(directory, SAFETENSORS),
                                metadata={"format": "pt"})
    with open(os.path.join(directory, CONFIG), "w", encoding="utf-8") as f:
        f.write(json.dumps(hf_config, indent=2, sort_keys=True) + "\n")


def model_for(cfg: ModernBertConfig, params: Mapping[str, Any],
              architecture: Optional[str] = None):
    """The module of bert_jax.model.modernbert that a tree returned by `load` fits
    (architecture: the folder's, `architecture(directory)`; needed for a classifier)."""
    from bert_jax.model import modernbert
    architecture = architecture or default_architecture(params)
    if architecture not in ARCHITECTURES:
        raise CheckpointError(f"architecture {architecture!r} has no model of ours")
    module = getattr(modernbert, architecture)  # our classes have transformers' names
    if ARCHITECTURES[architecture] == "classifier":
        return module(cfg, num_labels=int(np.shape(params["classifier"]["dense"]["bias"])[0]))
    return module(cfg)
