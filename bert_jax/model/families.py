"""The encoder families, and the one place that picks a family's classes.

    bert        BertConfig (BERT as published, its options, RoBERTa / XLM-R weights)
    modernbert  ModernBertConfig (bert_jax.config.modernbert)

Each family has its config class and presets, the fields that fix its parameter tree, its
models in the same interfaces (an encoder like BertModel, a masked-LM model like
BertForPreTraining, sequence and token classifiers) and the conversion of its parameters
between the unrolled and the scanned layer layouts. Recipes, checkpoints, loading and export
ask this module which of them a config belongs to instead of naming BertConfig.

A config saved as a dict (a checkpoint's metadata, a run's model config) carries its family
under FAMILY_KEY; a dict without the key is BERT's, so every checkpoint written before
ModernBERT reads as it did.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

from bert_jax.config import bert as bert_config
from bert_jax.config import modernbert as modernbert_config
from bert_jax.config.bert import BertConfig, ConfigError
from bert_jax.config.modernbert import ModernBertConfig

FAMILY_KEY = "family"
BERT, MODERNBERT = "bert", "modernbert"
NAMES = (BERT, MODERNBERT)

AnyConfig = BertConfig | ModernBertConfig


@dataclasses.dataclass(frozen=True)
class Family:
    """What differs between encoder families, behind one interface.

    masked_lm(cfg, with_nsp) -> a model called like BertForPreTraining; sequence_classifier /
    token_classifier(cfg, num_labels) and encoder(cfg, add_pooler) as the BERT classes.
    relayout(params, scanned, cfg): plain params in the scanned (True) or unrolled layout;
    shardings_in_layout(shardings, cfg, scanned): a tree of Shardings of the params, for the
    same params in the asked layout.
    """

    name: str
    config_class: type
    presets: Mapping[str, tuple[int, ...]]
    shape_fields: tuple[str, ...]
    encoder: Callable[..., Any]
    masked_lm: Callable[..., Any]
    sequence_classifier: Callable[..., Any]
    token_classifier: Callable[..., Any]
    question_answerer: Callable[..., Any]  # cfg -> (start_logits, end_logits) per token
    relayout: Callable[[Any, bool, Any], Any]
    shardings_in_layout: Callable[[Any, Any, bool], Any]

    def preset(self, name: str, **overrides: Any) -> AnyConfig:
        """The family's preset `name` with fields overridden; a field the family does not
        have is a ConfigError naming it.

        ModernBERT's special-token ids (pad, cls, sep, bos, eos; those of its own BPE
        vocabulary by default) that fall outside a smaller vocab_size become 0: the model
        computes nothing with them, they are only written to an exported config.json, and the
        tokenizer saved beside it says which tokens are special."""
        unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(self.config_class)})
        if unknown:
            raise ConfigError(f"model fields {unknown} are not fields of the {self.name} family "
                              f"({self.config_class.__name__})")
        if self.name == MODERNBERT and "vocab_size" in overrides:
            for field in _MODERNBERT_SPECIAL_IDS:
                if field not in overrides and getattr(ModernBertConfig, field) >= \
                        overrides["vocab_size"]:
                    overrides[field] = 0
        return self.config_class.preset(name, **overrides)


_MODERNBERT_SPECIAL_IDS = ("pad_token_id", "cls_token_id", "sep_token_id", "bos_token_id",
                           "eos_token_id")


def _bert() -> Family:
    from bert_jax.model import scan
    from bert_jax.model.encoder import BertModel
    from bert_jax.model.heads import (
        BertForPreTraining,
        BertForQuestionAnswering,
        BertForSequenceClassification,
        BertForTokenClassification,
    )
    return Family(
        name=BERT, config_class=BertConfig, presets=bert_config.PRESETS,
        shape_fields=bert_config.SHAPE_FIELDS, encoder=BertModel,
        masked_lm=lambda cfg, with_nsp=False: BertForPreTraining(cfg, with_nsp=with_nsp),
        sequence_classifier=BertForSequenceClassification,
        token_classifier=BertForTokenClassification,
        question_answerer=BertForQuestionAnswering,
        relayout=lambda params, scanned, cfg: scan.relayout(params, scanned,
                                                           cfg.num_hidden_layers),
        shardings_in_layout=lambda shardings, cfg, scanned: scan.shardings_in_layout(
            shardings, scanned, cfg.num_hidden_layers))


def _modernbert_masked_lm(cfg: ModernBertConfig, with_nsp: bool = False):
    from bert_jax.model.modernbert import ModernBertForMaskedLM
    if with_nsp:
        raise ValueError("ModernBERT has no next-sentence head: pre-train it with "
                         "data.sentence_pairs=False")
    return ModernBertForMaskedLM(cfg)


def _modernbert() -> Family:
    from bert_jax.model import modernbert, modernbert_qa, modernbert_scan

    def relayout(params, scanned, cfg):
        return (modernbert_scan.stack_layers(params, cfg) if scanned
                else modernbert_scan.unstack_layers(params, cfg))

    return Family(
        name=MODERNBERT, config_class=ModernBertConfig, presets=modernbert_config.PRESETS,
        shape_fields=modernbert_config.SHAPE_FIELDS, encoder=modernbert.ModernBertModel,
        masked_lm=_modernbert_masked_lm,
        sequence_classifier=modernbert.ModernBertForSequenceClassification,
        token_classifier=modernbert.ModernBertForTokenClassification,
        question_answerer=modernbert_qa.ModernBertForQuestionAnswering,
        relayout=relayout, shardings_in_layout=modernbert_scan.shardings_in_layout)


_BUILDERS = {BERT: _bert, MODERNBERT: _modernbert}


def get(name: str) -> Family:
    """The family called `name` (bert | modernbert); another name is a ConfigError."""
    if name not in _BUILDERS:
        raise ConfigError(f"unknown model family {name!r}; choose one of {NAMES}")
    return _BUILDERS[name]()


def name_of(cfg: AnyConfig) -> str:
    """The family name of a config object (BertConfig: bert)."""
    return getattr(cfg, "family", BERT)


def of(cfg: AnyConfig) -> Family:
    """The family of a config object."""
    return get(name_of(cfg))


def config_to_dict(cfg: AnyConfig) -> dict[str, Any]:
    """The config's fields and its family (FAMILY_KEY): what a checkpoint saves."""
    return {**dataclasses.asdict(cfg), FAMILY_KEY: name_of(cfg)}


def config_from_dict(fields: Mapping[str, Any], where: str = "the model config") -> AnyConfig:
    """The config saved by config_to_dict (a dict without FAMILY_KEY is a BertConfig). A field
    this version does not know is a ValueError naming `where`."""
    fields = dict(fields)
    family = get(fields.pop(FAMILY_KEY, BERT))
    try:
        return family.config_class(**fields)
    except TypeError as e:
        raise ValueError(f"{where}: the model config does not fit this version of bert_jax "
                         f"({e})") from None


def shape_defaults(cfg: AnyConfig) -> dict[str, Any]:
    """The defaults of the config class's fields (what a checkpoint written before a field
    existed holds)."""
    return {f.name: f.default for f in dataclasses.fields(type(cfg))}


def to_layout(params: Any, cfg: AnyConfig) -> Any:
    """Params of either layer layout (plain or boxed) in the layout of cfg.scan_layers; a tree
    already in it (or without an encoder) comes back as it is."""
    from bert_jax.model import scan
    if scan.is_scanned(params) in (None, cfg.scan_layers):
        return params
    import flax.linen as nn
    return of(cfg).relayout(nn.meta.unbox(params), cfg.scan_layers, cfg)

