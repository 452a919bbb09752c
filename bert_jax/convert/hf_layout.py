"""Where each tensor of a Hugging Face BERT or RoBERTa checkpoint goes in our parameter trees, and
how.

An `Entry` pairs a Hugging Face tensor name with its path in our tree, its torch-side shape and a
`Layout` (the maps between the two layouts): a torch Linear weight is [out, in], our Dense kernel
[in, out]; our attention projections keep the heads apart: query/key/value kernels
[hidden, heads, head_dim] with biases [heads, head_dim], and the output kernel
[heads, head_dim, hidden]. `encoder_entries` lists a BertModel's tensors, `head_entries` those of
one head.

RoBERTa and XLM-R (`Family`, by BertConfig.model_type) name the encoder's tensors as BERT does,
under `roberta.` in a model with heads, and their heads otherwise: the LM head is `lm_head.dense`,
`lm_head.layer_norm` and `lm_head.bias` (the decoder tied to the word embeddings, as ours), and
RobertaClassificationHead's `classifier.dense` + tanh on the <s> token is our pooler, its
`classifier.out_proj` our classifier (dropout aside, the same computation), so a sequence
classifier's pooler is stored in its head (`pooler_in_encoder`). They have no NSP head.

`ARCHITECTURES` is the one table of which heads make which Hugging Face architecture and which
model of ours; `heads_of`, `encoder_of`, `num_classes` and `architecture_of` read a tree against
it, and `Architecture.hf_class_of` names the class of each family. With the names of a folder's
files and `CheckpointError`, this is what reading (`bert_jax.convert.hf`) and writing
(`bert_jax.convert.hf_export`) share.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Optional

import numpy as np

from bert_jax.config.bert import BertConfig

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


@dataclasses.dataclass(frozen=True)
class Family:
    """How one Hugging Face family (config.json model_type) names our trees in its checkpoints.

    class_prefix: of its transformers classes (BertModel, RobertaModel, XLMRobertaModel).
    encoder_prefix: the encoder's tensor names in a model with heads ("bert.", "roberta.").
    head_keys: head -> the prefix of its tensor names; the heads its checkpoints can hold.
    mlm_bias / mlm_decoder: the LM head's output bias, and its decoder (weight and bias tied to
      the word embeddings and mlm_bias), which some exports store too.
    """

    model_type: str
    class_prefix: str
    encoder_prefix: str
    head_keys: Mapping[str, str]
    mlm_bias: str
    mlm_decoder: str


_BERT_HEAD_KEYS = {"mlm": "cls.predictions.", "nsp": "cls.seq_relationship.",
                   "classifier": "classifier.", "qa_outputs": "qa_outputs."}
_ROBERTA_HEAD_KEYS = {"mlm": "lm_head.", "classifier": "classifier.", "qa_outputs": "qa_outputs."}
FAMILIES = {
    "bert": Family("bert", "Bert", "bert.", _BERT_HEAD_KEYS, "cls.predictions.bias",
                   "cls.predictions.decoder"),
    "roberta": Family("roberta", "Roberta", "roberta.", _ROBERTA_HEAD_KEYS, "lm_head.bias",
                      "lm_head.decoder"),
    "xlm-roberta": Family("xlm-roberta", "XLMRoberta", "roberta.", _ROBERTA_HEAD_KEYS,
                          "lm_head.bias", "lm_head.decoder"),
}
# RobertaForSequenceClassification's head: dense + tanh on <s> (our pooler), then out_proj.
ROBERTA_SEQUENCE_CLASSIFIER = "classifier.out_proj."


def family_of(cfg: BertConfig) -> Family:
    return FAMILIES[cfg.model_type]


def pooler_in_encoder(cfg: BertConfig, heads: tuple[str, ...], pooled: bool) -> bool:
    """Whether a checkpoint of a tree with `heads` (and a pooler or not) keeps our pooler among
    the encoder's tensors (`pooler.dense`): so in BERT; RoBERTa's sequence classifier keeps it
    as its head's `classifier.dense`."""
    return pooled and not (cfg.model_type != "bert" and "classifier" in heads)


def head_entries(cfg: BertConfig, head: str, num_labels: int = 2, pooled: bool = False
                 ) -> list[Entry]:
    """The tensors of one head (`mlm`, `nsp`, `classifier`, `qa_outputs`), with paths from the
    root of a tree with heads, named as cfg.model_type's family names them. pooled: the tree
    has a pooler (a RoBERTa classifier is then a sequence classifier, holding the pooler)."""
    d = cfg.hidden_size
    family = family_of(cfg)
    if head not in family.head_keys:
        raise CheckpointError(
            f"a {family.class_prefix} checkpoint has no {head!r} head; its heads are "
            f"{list(family.head_keys)}" if head in HEADS
            else f"unknown head {head!r}; choose one of {HEADS}")
    if family.model_type == "bert":
        if head == "mlm":
            # The decoder weight is the word embedding matrix (tied): not a tensor of its own.
            return [*_dense("cls.predictions.transform.dense", ("mlm", "transform"), d, d),
                    *_layer_norm("cls.predictions.transform.LayerNorm",
                                 ("mlm", "transform_layer_norm"), d),
                    Entry(family.mlm_bias, ("mlm", "output_bias"), (cfg.vocab_size,), _same())]
        if head == "nsp":
            return _dense("cls.seq_relationship", ("nsp", "dense"), d, 2)
    elif head == "mlm":
        return [*_dense("lm_head.dense", ("mlm", "transform"), d, d),
                *_layer_norm("lm_head.layer_norm", ("mlm", "transform_layer_norm"), d),
                Entry(family.mlm_bias, ("mlm", "output_bias"), (cfg.vocab_size,), _same())]
    elif head == "classifier" and pooled:
        return [*_dense("classifier.dense", ("bert", "pooler", "dense"), d, d),
                *_dense("classifier.out_proj", ("classifier", "dense"), d, num_labels)]
    if head == "classifier":
        return _dense("classifier", ("classifier", "dense"), d, num_labels)
    return _dense("qa_outputs", ("qa_outputs", "dense"), d, 2)


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

    def hf_class_of(self, model_type: str) -> Optional[str]:
        """The transformers class of this row in a family (hf_class is BERT's): RobertaModel,
        XLMRobertaForMaskedLM, ...; None where the family has no such model (RoBERTa: NSP)."""
        family = FAMILIES[model_type]
        if any(head not in family.head_keys for head in self.heads):
            return None
        return family.class_prefix + self.hf_class.removeprefix("Bert")


ARCHITECTURES = (
    # hf_class: BERT's name (hf_class_of gives the other families').
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
