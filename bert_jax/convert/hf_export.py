"""Our parameter trees -> Hugging Face BERT / RoBERTa / XLM-R folders: the export side of
`bert_jax.convert.hf`.

`save` writes what transformers needs to use the model: config.json and model.safetensors
(float32; the architecture from the tree's heads, `hf_layout.ARCHITECTURES`, in the family of
BertConfig.model_type: BertForMaskedLM, RobertaForMaskedLM, XLMRobertaForMaskedLM, ...); with
`tokenizer=`, the tokenizer files (`AutoTokenizer.from_pretrained(out)` then tokenizes as ours
does); with `label_map=` / `problem_type=`, the classifier's id2label / label2id and problem type,
which transformers' pipelines read. A BertConfig option that the Hugging Face format cannot hold
is refused (`check_exportable`, against the list of fields HF BERT knows, `HF_BERT_FIELDS`, and
the position offset each family computes).

`bert_jax.convert.hf` re-exports every public name here: callers use `hf.save`,
`hf.to_hf_tensors`, `hf.check_exportable`. This module imports nothing from hf (what both sides
share is in `hf_layout`), so either can be imported first.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

import numpy as np
from etils import epath
from safetensors import numpy as safetensors_numpy

from bert_jax.config.bert import OFFSET_MODEL_TYPES, BertConfig
from bert_jax.convert.hf_layout import (
    CONFIG,
    SAFETENSORS,
    CheckpointError,
    architecture_of,
    encoder_entries,
    encoder_of,
    family_of,
    head_entries,
    heads_of,
    num_classes,
    pooler_in_encoder,
)
from bert_jax.runtime.pytree import flatten_dict

if TYPE_CHECKING:
    from bert_jax.data.tokenizers.subword import SubwordTokenizer

# BertConfig fields that transformers' BertConfig holds under the same name and meaning.
HF_BERT_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                  "intermediate_size", "hidden_act", "hidden_dropout_prob",
                  "attention_probs_dropout_prob", "max_position_embeddings", "type_vocab_size",
                  "initializer_range", "layer_norm_eps", "pad_token_id")
# BertConfig fields that say how we compute, not what: the export is float32 weights whatever
# they are, and transformers picks its own precision and memory policy.
RUNTIME_FIELDS = ("dtype", "param_dtype", "remat_policy", "scan_layers", "attention")
# BertConfig fields that say which family the checkpoint is: config.json's model_type, and the
# position offset that family computes (`check_exportable` checks they agree).
FAMILY_FIELDS = ("model_type", "position_offset")
# config.json "problem_type" values of BertForSequenceClassification.
PROBLEM_TYPES = ("single_label_classification", "regression", "multi_label_classification")

Params = dict[str, Any]


def _plain(params: Mapping[str, Any]) -> Params:
    """Unboxed numpy float32 arrays (accepts boxed Flax params and sharded jax arrays)."""
    try:
        import flax.linen as nn
        params = nn.meta.unbox(params)
    except ImportError:  # pragma: no cover - flax is a dependency, kept for numpy-only use
        pass
    if set(params) == {"params"}:  # variables as returned by `model.init`
        params = params["params"]
    if set(params) == {"bert"}:  # a composite tree without heads is the encoder alone
        params = params["bert"]
    return {k: (_plain(v) if isinstance(v, Mapping) else np.asarray(v, dtype=np.float32))
            for k, v in params.items()}


def _get(tree: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    """The leaf of `tree` at `path` (KeyError when it has none)."""
    for name in path:
        tree = tree[name]
    return tree


def to_hf_tensors(cfg: BertConfig, params: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Our tree -> Hugging Face tensors (torch layouts, float32), checked against the config
    (and the config against what the Hugging Face BERT format holds: `check_exportable`)."""
    check_exportable(cfg)
    from bert_jax.model import scan
    params = scan.unstack_layers(_plain(params), cfg.num_hidden_layers)  # HF's layout: unrolled
    heads = heads_of(params)
    family = family_of(cfg)
    if "mlm" in heads and family.model_type != "bert" and cfg.hidden_act != "gelu":
        raise CheckpointError(
            f"BertConfig.hidden_act={cfg.hidden_act!r} cannot be exported with an MLM head as "
            f"{family.class_prefix}: its LM head applies gelu whatever hidden_act says")
    prefix = family.encoder_prefix if heads else ""
    pooled = "pooler" in encoder_of(params)
    entries = [(prefix, ("bert",) if heads else (), e)
               for e in encoder_entries(cfg, with_pooler=pooler_in_encoder(cfg, heads, pooled))]
    for head in heads:
        num_labels = num_classes(params) if head == "classifier" else 2
        entries += [("", (), e) for e in head_entries(cfg, head, num_labels, pooled=pooled)]

    expected = {root + e.path for _, root, e in entries}
    unknown = sorted(set(flatten_dict(params)) - expected)
    if unknown:
        raise CheckpointError(f"params: {'/'.join(unknown[0])} is not a parameter of the BERT "
                              f"model that the config describes ({len(unknown)} such leaves)")
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
    (or RoBERTa, by model_type) cannot: a position_offset other than the family's (BERT 0,
    RoBERTa and XLM-R pad_token_id + 1), or a field outside HF_BERT_FIELDS, RUNTIME_FIELDS and
    FAMILY_FIELDS (a model option added to BertConfig since) that is not at its default."""
    expected_offset = cfg.pad_token_id + 1 if cfg.model_type in OFFSET_MODEL_TYPES else 0
    if cfg.position_offset != expected_offset:
        rule = ("pad_token_id + 1" if expected_offset else "0")
        raise CheckpointError(
            f"BertConfig.position_offset={cfg.position_offset} cannot be exported as "
            f"model_type={cfg.model_type!r}: transformers' {family_of(cfg).class_prefix}Model "
            f"reads positions from row {rule} = {expected_offset} on")
    for field in dataclasses.fields(cfg):
        if field.name in (*HF_BERT_FIELDS, *RUNTIME_FIELDS, *FAMILY_FIELDS):
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
    """config.json keys of `cfg`: the fields HF BERT knows (others are at their defaults) and
    model_type."""
    # position_embedding_type is a config.json key too; check_exportable lets only "absolute" by.
    ours_only = ({f.name for f in dataclasses.fields(cfg)} - set(HF_BERT_FIELDS)
                 - {"position_embedding_type", "model_type"})
    return {k: v for k, v in cfg.to_hf_dict().items() if k not in ours_only}


def _label_entries(fit_class: str, num_labels: Optional[int], label_map: Optional[Sequence[str]],
                   problem_type: Optional[str]) -> dict[str, Any]:
    """id2label / label2id (and problem_type) of a classifier head of `num_labels` outputs
    (None: no classifier); CheckpointError when the labels do not fit the head."""
    sequence = fit_class.endswith("ForSequenceClassification")
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


def _max_length(asked: Optional[int], model_limit: int) -> int:
    """The tokenizer's model_max_length: `asked` (a run's max_seq_len), within what the model
    reads; the model's limit when not asked."""
    if asked is None:
        return model_limit
    if not 0 < int(asked) <= model_limit:
        raise CheckpointError(f"model_max_length={asked} is outside 1..{model_limit}, the "
                              "tokens the model reads")
    return int(asked)


def save(cfg: BertConfig, params: Mapping[str, Any], directory: str | os.PathLike, *,
         tokenizer: Optional[SubwordTokenizer] = None,
         label_map: Optional[Sequence[str]] = None,
         problem_type: Optional[str] = None,
         model_max_length: Optional[int] = None) -> None:
    """Write a folder that transformers loads: `config.json` and `model.safetensors` (float32),
    plus the tokenizer files when `tokenizer` is given.

    A bare BertModel tree gives a `BertModel` checkpoint; a tree with heads gives the matching
    architecture (BertForPreTraining, BertForMaskedLM, ...) with the encoder under `bert.`; with
    cfg.model_type "roberta" / "xlm-roberta", RobertaModel, RobertaForMaskedLM, ... (XLMRoberta*)
    with the encoder under `roberta.` (`hf_layout.FAMILIES`). The MLM decoder weight is not
    written: transformers ties it to the word embeddings on load.

    tokenizer: a bert_jax.data.tokenizers.subword.SubwordTokenizer (WordPiece, BPE or Unigram),
      written by `hf_tokenizer.save_hf` (tokenizer.json, tokenizer_config.json with
      model_max_length, special_tokens_map.json; vocab.txt for
      WordPiece); its vocabulary must fit cfg.vocab_size, and for RoBERTa its pad id must be
      cfg.pad_token_id (from which transformers computes positions).
    label_map: the class names of a classifier head, index = output (id2label / label2id);
      default LABEL_0 ... LABEL_{C-1}.
    problem_type: of a sequence classifier: "single_label_classification", "regression" (one
      output) or "multi_label_classification" (sigmoid per label); None leaves it to
      transformers (single-label for C > 1 outputs, regression for 1).
    model_max_length: the tokenizer's (what transformers' pipelines truncate to): the length a
      run trained and predicts at; default cfg.max_sequence_length, all the model can read.
    Every check runs before the first write (CheckpointError, or ValueError for a tokenizer that
    HF's BertTokenizer cannot express): a refused save leaves nothing behind.
    """
    directory = os.fspath(directory)
    tensors = to_hf_tensors(cfg, params)
    plain = _plain(params)
    heads, fit = heads_of(plain), architecture_of(plain)
    hf_class = fit.hf_class_of(cfg.model_type) if fit is not None else None
    if hf_class is None:
        raise CheckpointError(f"no single Hugging Face {family_of(cfg).class_prefix} "
                              f"architecture has the heads {heads}")
    hf_config = _hf_config(cfg)
    hf_config["architectures"] = [hf_class]
    hf_config["tie_word_embeddings"] = True
    num_labels = num_classes(plain) if "classifier" in heads else None
    hf_config.update(_label_entries(hf_class, num_labels, label_map, problem_type))
    if tokenizer is not None:
        from bert_jax.data.tokenizers import hf_folder as hf_tokenizer
        if tokenizer.vocab_size > cfg.vocab_size:
            raise CheckpointError(f"tokenizer {tokenizer.source} has {tokenizer.vocab_size} tokens "
                                  f"but the model's vocab_size is {cfg.vocab_size}")
        if cfg.model_type in OFFSET_MODEL_TYPES:
            if tokenizer.pad_id != cfg.pad_token_id:
                raise CheckpointError(
                    f"tokenizer {tokenizer.source} pads with id {tokenizer.pad_id} but the "
                    f"model's pad_token_id is {cfg.pad_token_id}, from which "
                    f"{family_of(cfg).class_prefix} computes positions")
            hf_config.update(bos_token_id=tokenizer.cls_id, eos_token_id=tokenizer.sep_id)
        # First: it checks everything before its first write, and the weights cannot fail.
        hf_tokenizer.save_hf(tokenizer, directory,
                             model_max_length=_max_length(model_max_length,
                                                          cfg.max_sequence_length))
    folder = epath.Path(directory)  # a local folder or gs://: safetensors' bytes, written whole
    folder.mkdir(parents=True, exist_ok=True)
    (folder / SAFETENSORS).write_bytes(safetensors_numpy.save(tensors, metadata={"format": "pt"}))
    (folder / CONFIG).write_bytes(
        (json.dumps(hf_config, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode())

