"""Where each tensor of a Hugging Face BERT checkpoint goes in our parameter trees, and how.

An `Entry` pairs a Hugging Face tensor name with its path in our tree, its torch-side shape and a
`Layout` (the maps between the two layouts): a torch Linear weight is [out, in], our Dense kernel
[in, out]; our attention projections keep the heads apart: query/key/value kernels
[hidden, heads, head_dim] with biases [heads, head_dim], and the output kernel
[heads, head_dim, hidden]. `encoder_entries` lists a BertModel's tensors, `head_entries` those of
one head.

`ARCHITECTURES` is the one table of which heads make which Hugging Face architecture and which
model of ours; `heads_of`, `encoder_of`, `num_classes` and `architecture_of` read a tree against
it. With the names of a folder's files and `CheckpointError`, this is what reading
(`bert_jax.convert.hf`) and writing (`bert_jax.convert.hf_export`) share.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Optional

import numpy as np

from bert_jax.config import BertConfig

HEADS = ("mlm", "nsp", "classifier", "qa_outputs")

# The files of a Hugging Face folder that hold the config and the weights.
SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
PYTORCH_BIN = "pytorch_model.bin"
CONFIG = "config.json"


class CheckpointError(ValueError):
    """A checkpoint folder or a parameter tree does not hold what the config says it should."""


@dataclasses.dataclass(frozen=True)
class Layout:
    """How one tensor is stored on each side: a torch-side shape and the maps between the two."""

    to_ours: Callable[[np.ndarray], np.ndarray]
    to_hf: Callable[[np.ndarray], np.ndarray]
    ours_shape: Callable[[tuple[int, ...]], tuple[int, ...]]


def _same() -> Layout:
    return Layout(lambda t: t, lambda t: t, lambda s: s)


def _linear() -> Layout:
    """torch Linear weight [out, in] <-> Dense kernel [in, out]."""
    return Layout(lambda t: t.T, lambda k: k.T, lambda s: s[::-1])


def _head_projection(heads: int, head_dim: int) -> Layout:
    """query/key/value weight [heads*head_dim, hidden] <-> kernel [hidden, heads, head_dim]."""
    return Layout(lambda t: t.T.reshape(t.shape[1], heads, head_dim),
                  lambda k: k.reshape(k.shape[0], heads * head_dim).T,
                  lambda s: (s[1], heads, head_dim))


def _head_bias(heads: int, head_dim: int) -> Layout:
    """query/key/value bias [heads*head_dim] <-> [heads, head_dim]."""
    return Layout(lambda t: t.reshape(heads, head_dim), lambda b: b.reshape(heads * head_dim),
                  lambda s: (heads, head_dim))


def _head_merge(heads: int, head_dim: int) -> Layout:
    """attention output weight [hidden, heads*head_dim] <-> kernel [heads, head_dim, hidden]."""
    return Layout(lambda t: t.T.reshape(heads, head_dim, t.shape[0]),
                  lambda k: k.reshape(heads * head_dim, k.shape[-1]).T,
                  lambda s: (heads, head_dim, s[0]))


@dataclasses.dataclass(frozen=True)
class Entry:
    """One parameter: its Hugging Face name (without the `bert.` prefix for encoder tensors),
    its path in our tree, its torch-side shape, and the layout map."""

    hf_key: str
    path: tuple[str, ...]
    hf_shape: tuple[int, ...]
    layout: Layout

    @property
    def ours_shape(self) -> tuple[int, ...]:
        return tuple(self.layout.ours_shape(self.hf_shape))


def _layer_norm(hf_prefix: str, path: tuple[str, ...], d: int) -> list[Entry]:
    return [Entry(f"{hf_prefix}.weight", path + ("scale",), (d,), _same()),
            Entry(f"{hf_prefix}.bias", path + ("bias",), (d,), _same())]


def _dense(hf_prefix: str, path: tuple[str, ...], d_in: int, d_out: int) -> list[Entry]:
    return [Entry(f"{hf_prefix}.weight", path + ("kernel",), (d_out, d_in), _linear()),
            Entry(f"{hf_prefix}.bias", path + ("bias",), (d_out,), _same())]


def encoder_entries(cfg: BertConfig, with_pooler: bool = True) -> list[Entry]:
    """Every tensor of a BertModel, in the BertModel tree (no `bert` prefix)."""
    d, f = cfg.hidden_size, cfg.intermediate_size
    n, h = cfg.num_attention_heads, cfg.head_dim
    entries = [
        Entry("embeddings.word_embeddings.weight", ("embeddings", "word_embeddings", "embedding"),
              (cfg.vocab_size, d), _same()),
        Entry("embeddings.position_embeddings.weight",
              ("embeddings", "position_embeddings", "embedding"), (cfg.max_position_embeddings, d),
              _same()),
        Entry("embeddings.token_type_embeddings.weight",
              ("embeddings", "token_type_embeddings", "embedding"), (cfg.type_vocab_size, d),
              _same()),
        *_layer_norm("embeddings.LayerNorm", ("embeddings", "layer_norm"), d),
    ]
    for i in range(cfg.num_hidden_layers):
        hf, ours = f"encoder.layer.{i}", ("encoder", f"layer_{i}")
        for name in ("query", "key", "value"):
            entries += [
                Entry(f"{hf}.attention.self.{name}.weight", ours + ("attention", name, "kernel"),
                      (n * h, d), _head_projection(n, h)),
                Entry(f"{hf}.attention.self.{name}.bias", ours + ("attention", name, "bias"),
                      (n * h,), _head_bias(n, h)),
            ]
        entries += [
            Entry(f"{hf}.attention.output.dense.weight", ours + ("attention", "output", "kernel"),
                  (d, n * h), _head_merge(n, h)),
            Entry(f"{hf}.attention.output.dense.bias", ours + ("attention", "output", "bias"), (d,),
                  _same()),
            *_layer_norm(f"{hf}.attention.output.LayerNorm", ours + ("attention_layer_norm",), d),
            *_dense(f"{hf}.intermediate.dense", ours + ("feed_forward", "intermediate"), d, f),
            *_dense(f"{hf}.output.dense", ours + ("feed_forward", "output"), f, d),
            *_layer_norm(f"{hf}.output.LayerNorm", ours + ("output_layer_norm",), d),
        ]
    if with_pooler:
        entries += _dense("pooler.dense", ("pooler", "dense"), d, d)
    return entries


def head_entries(cfg: BertConfig, head: str, num_labels: int = 2) -> list[Entry]:
    """The tensors of one head (`mlm`, `nsp`, `classifier`, `qa_outputs`), at the top level."""
    d = cfg.hidden_size
    if head == "mlm":
        # The decoder weight is the word embedding matrix (tied), so it is not a tensor of its own.
        return [*_dense("cls.predictions.transform.dense", ("mlm", "transform"), d, d),
                *_layer_norm("cls.predictions.transform.LayerNorm",
                             ("mlm", "transform_layer_norm"), d),
                Entry("cls.predictions.bias", ("mlm", "output_bias"), (cfg.vocab_size,), _same())]
    if head == "nsp":
        return _dense("cls.seq_relationship", ("nsp", "dense"), d, 2)
    if head == "classifier":
        return _dense("classifier", ("classifier", "dense"), d, num_labels)
    if head == "qa_outputs":
        return _dense("qa_outputs", ("qa_outputs", "dense"), d, 2)
    raise ValueError(f"unknown head {head!r}; choose one of {HEADS}")


@dataclasses.dataclass(frozen=True)
class Architecture:
    """A tree with exactly `heads` (in HEADS order) and a pooler or not (None: either way).

    hf_class: the Hugging Face class its checkpoint is (config.json "architectures").
    our_class: the module of bert_jax.model it fits (None: no model of ours has these heads),
      built as our_class(cfg, **{option: ...}) with `options` read from the tree: add_pooler
      (a pooler is present), with_nsp (an NSP head is present), num_labels (classifier width).
    """

    heads: tuple[str, ...]
    pooler: Optional[bool]
    hf_class: str
    our_class: Optional[str]
    options: tuple[str, ...] = ()


ARCHITECTURES = (
    Architecture((), None, "BertModel", "BertModel", ("add_pooler",)),
    Architecture(("mlm", "nsp"), None, "BertForPreTraining", "BertForPreTraining", ("with_nsp",)),
    Architecture(("mlm",), None, "BertForMaskedLM", "BertForPreTraining", ("with_nsp",)),
    Architecture(("nsp",), None, "BertForNextSentencePrediction", None),
    # A classifier on the pooled output classifies sequences; without a pooler, every token.
    Architecture(("classifier",), True, "BertForSequenceClassification",
                 "BertForSequenceClassification", ("num_labels",)),
    Architecture(("classifier",), False, "BertForTokenClassification",
                 "BertForTokenClassification", ("num_labels",)),
    Architecture(("qa_outputs",), None, "BertForQuestionAnswering", "BertForQuestionAnswering"),
)


def architecture(heads: tuple[str, ...], with_pooler: bool) -> Optional[Architecture]:
    """The row of ARCHITECTURES for a tree with these heads (HEADS order); None if none fits."""
    return next((a for a in ARCHITECTURES
                 if a.heads == tuple(heads) and a.pooler in (None, with_pooler)), None)


def heads_of(params: Mapping[str, Any]) -> tuple[str, ...]:
    """The heads present in a tree: () for a bare BertModel tree."""
    if "bert" not in params:
        return ()
    return tuple(h for h in HEADS if h in params)


def encoder_of(params: Mapping[str, Any]) -> Mapping[str, Any]:
    """The BertModel tree inside a tree with heads, or the tree itself."""
    return params["bert"] if heads_of(params) else params


def num_classes(params: Mapping[str, Any]) -> int:
    """The width of the classifier head of a tree that has one."""
    return params["classifier"]["dense"]["bias"].shape[0]


def architecture_of(params: Mapping[str, Any]) -> Optional[Architecture]:
    """The row of ARCHITECTURES that a tree fits (its heads, its pooler); None if none does."""
    return architecture(heads_of(params), "pooler" in encoder_of(params))
