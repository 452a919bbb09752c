"""BertConfig: the hyper-parameters of a BERT encoder, its presets and its parameter count.

Field names follow the Hugging Face `config.json` of `BertModel`, so that a config converts both
ways without a renaming table. Sizes of the presets are those of the BERT paper (base, large) and of
Turc et al. 2019, "Well-Read Students Learn Better" (tiny .. medium).

RoBERTa (Liu et al., 2019) and XLM-R (Conneau et al., 2020) are BERT's architecture with one
token type and learned positions read from row pad_token_id + 1 on (a fairseq convention kept by
their checkpoints): the same BertConfig with `model_type` "roberta" / "xlm-roberta" and
`position_offset` = pad_token_id + 1 (`from_hf_dict` sets both from their config.json).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Mapping

ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu", "tanh")
DTYPES = ("float32", "bfloat16", "float16")
# The fields that fix the parameter tree (its paths and shapes): a checkpoint fits a model only if
# these agree; the others (dropout, dtypes, remat, initialisation) may change between runs.
# scan_layers changes the paths, not the parameters: weights loaded into another run are
# converted to its layout (bert_jax.model.scan); a resumed run keeps its own. position_offset is
# not one either: it moves the row a position reads, not the table's shape, so (like hidden_act
# or layer_norm_eps) it is part of what the weights mean and travels in their config, which a run
# that starts from them keeps (run configs have no key for it), but a checkpoint of either offset
# fits the same tree.
SHAPE_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                "intermediate_size", "max_position_embeddings", "type_vocab_size",
                "layer_norm_position", "ffn_kind", "use_bias", "position_embedding_type")
REMAT_POLICIES = ("none", "full", "dots", "dots_no_batch")
LAYER_NORM_POSITIONS = ("post", "pre")
FFN_KINDS = ("dense", "geglu", "swiglu")
POSITION_EMBEDDING_TYPES = ("absolute", "rotary")
# The Hugging Face families whose config.json this config reads and writes (`model_type`).
MODEL_TYPES = ("bert", "roberta", "xlm-roberta")
# Families that read positions from row pad_token_id + 1 on, and their config.json defaults
# where those differ from BERT's (transformers.RobertaConfig: <pad> is id 1).
OFFSET_MODEL_TYPES = ("roberta", "xlm-roberta")
_HF_DEFAULTS = {"roberta": {"pad_token_id": 1}, "xlm-roberta": {"pad_token_id": 1}}
# How attention runs (bert_jax.model.attention.choose): auto picks by platform.
ATTENTION_IMPLEMENTATIONS = ("auto", "xla", "splash", "cudnn")

# name: (num_hidden_layers, hidden_size, num_attention_heads, intermediate_size)
PRESETS: dict[str, tuple[int, int, int, int]] = {
    "tiny": (2, 128, 2, 512),
    "mini": (4, 256, 4, 1024),
    "small": (4, 512, 8, 2048),
    "medium": (8, 512, 8, 2048),
    "base": (12, 768, 12, 3072),
    "large": (24, 1024, 16, 4096),
}


class ConfigError(ValueError):
    """A BertConfig (or the config.json it came from) is not a valid BERT configuration."""


def gated_intermediate_size(hidden_size: int, dense_intermediate_size: int,
                            multiple_of: int = 1) -> int:
    """The width of a gated FFN (ffn_kind "geglu"/"swiglu") with the parameters of a dense one.

    A dense FFN holds 2 * hidden * F weights, a gated one 3 * hidden * G (gate, up, down), so
    G = 2F/3 matches the budget (biases aside), rounded to a multiple of `multiple_of`:
    gated_intermediate_size(768, 3072) = 2048.
    """
    del hidden_size  # the ratio does not depend on it; kept so that call sites read naturally
    if multiple_of <= 0:
        raise ConfigError(f"multiple_of={multiple_of} must be positive")
    width = round(2 * dense_intermediate_size / 3 / multiple_of) * multiple_of
    return max(width, multiple_of)


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """Hyper-parameters of a BERT encoder.

    Architecture fields are those of the paper; `dtype` is the compute dtype of activations and
    matmuls, `param_dtype` the storage dtype of parameters, `remat_policy` what each encoder layer
    keeps for the backward pass ("none": everything, "full": nothing, "dots": matmul outputs,
    "dots_no_batch": matmul outputs without a batch dimension, i.e. the cheapest to keep).

    Encoder options (defaults: BERT as published, which Hugging Face's BertModel computes; any
    other value is refused by the Hugging Face export):
    - `layer_norm_position`: "post" (x = LN(x + f(x))) or "pre" (x = x + f(LN(x)), the residual
      stream never normalised in place, and one more LayerNorm, `final_layer_norm`, after the
      last layer).
    - `ffn_kind`: "dense" (act(x W1) W2 with `hidden_act`) or a gated FFN, act(x W_gate) * (x W_up)
      then W_down, with act = gelu ("geglu") or silu ("swiglu"); `intermediate_size` is then the
      gated width: `gated_intermediate_size(hidden, F)` (2F/3) keeps the parameters of a dense
      FFN of width F.
    - `use_bias`: False drops the bias of every dense layer and LayerNorm (LayerNorm keeps its
      scale) and the MLM decoder's output bias.
    - `position_embedding_type`: "absolute" (a learned table of max_position_embeddings rows) or
      "rotary" (RoPE, base 10000, on queries and keys of each head, at the same position ids;
      no position table). max_position_embeddings still bounds the sequence length.

    Positions (RoBERTa / XLM-R):
    - `position_offset`: position p (0 at each sequence's first token, [CLS] / <s>) reads row
      p + position_offset of the learned position table, so a sequence holds at most
      max_position_embeddings - position_offset tokens (`max_sequence_length`). 0 for BERT;
      pad_token_id + 1 for RoBERTa-style checkpoints, whose table of 514 rows then serves 512
      tokens. transformers computes those positions from input_ids != pad_token_id, which is the
      same on right-padded rows (the padding itself aside, which attention masks out). Only
      with absolute positions (rotary positions have no table and are relative).
    - `model_type`: the Hugging Face family the weights come from and export to ("bert",
      "roberta", "xlm-roberta"); it names tensors and classes in config.json and
      model.safetensors, and computes nothing (position_offset does). A RoBERTa-family export
      needs position_offset = pad_token_id + 1, a BERT one 0 (bert_jax.convert.hf_export).

    `scan_layers` says how the encoder runs, not what it computes: True runs the layers as one
    `nn.scan` (one compiled layer, parameters stacked on a leading `layers` axis under
    `encoder/layers`), False unrolls them (`encoder/layer_0`, ...). Not a shape field: a
    checkpoint of either layout loads into the other (bert_jax.model.scan converts), and the
    Hugging Face export is the same.

    `attention` says how attention runs, not what it computes: "xla" (XLA's composition, the
    reference), "splash" (the Pallas flash-attention kernel of TPUs; interpret mode elsewhere),
    "cudnn" (cuDNN's fused attention; GPUs only) or "auto" (splash on TPU, cuDNN on GPU where
    it computes what xla does, xla on CPU). Where a kernel cannot run the model (attention
    dropout in training, a sequence length or a mask it does not take), xla runs: the rule is
    `bert_jax.model.attention.choose`. Not a shape field, and not in the Hugging Face config.
    """

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    dtype: str = "float32"
    param_dtype: str = "float32"
    remat_policy: str = "none"
    layer_norm_position: str = "post"
    ffn_kind: str = "dense"
    use_bias: bool = True
    position_embedding_type: str = "absolute"
    scan_layers: bool = False
    attention: str = "auto"
    position_offset: int = 0
    model_type: str = "bert"

    def __post_init__(self):
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", "max_position_embeddings", "type_vocab_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"BertConfig.{name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"BertConfig.hidden_size={self.hidden_size} is not divisible by "
                f"num_attention_heads={self.num_attention_heads}")
        if self.hidden_act not in ACTIVATIONS:
            raise ConfigError(f"BertConfig.hidden_act={self.hidden_act!r} is unknown; "
                              f"choose one of {ACTIVATIONS}")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ConfigError(f"BertConfig.{name} must be in [0, 1), got {value!r}")
        if self.layer_norm_eps <= 0 or self.initializer_range <= 0:
            raise ConfigError("BertConfig.layer_norm_eps and initializer_range must be positive")
        for name in ("dtype", "param_dtype"):
            if getattr(self, name) not in DTYPES:
                raise ConfigError(
                    f"BertConfig.{name}={getattr(self, name)!r}; choose one of {DTYPES}")
        if self.remat_policy not in REMAT_POLICIES:
            raise ConfigError(
                f"BertConfig.remat_policy={self.remat_policy!r}; choose one of {REMAT_POLICIES}")
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise ConfigError(
                f"BertConfig.pad_token_id={self.pad_token_id} is outside the vocabulary")
        for name, choices in (("layer_norm_position", LAYER_NORM_POSITIONS),
                              ("ffn_kind", FFN_KINDS),
                              ("position_embedding_type", POSITION_EMBEDDING_TYPES),
                              ("attention", ATTENTION_IMPLEMENTATIONS)):
            if getattr(self, name) not in choices:
                raise ConfigError(
                    f"BertConfig.{name}={getattr(self, name)!r}; choose one of {choices}")
        for name in ("use_bias", "scan_layers"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"BertConfig.{name} must be a bool, got {getattr(self, name)!r}")
        if (not isinstance(self.position_offset, int) or isinstance(self.position_offset, bool)
                or not 0 <= self.position_offset < self.max_position_embeddings):
            raise ConfigError(
                f"BertConfig.position_offset={self.position_offset!r} must be an integer in "
                f"[0, max_position_embeddings={self.max_position_embeddings})")
        if self.position_offset and self.position_embedding_type != "absolute":
            raise ConfigError(
                f"BertConfig.position_offset={self.position_offset} moves rows of the learned "
                f"position table; position_embedding_type={self.position_embedding_type!r} has "
                "none (use 0)")
        if self.model_type not in MODEL_TYPES:
            raise ConfigError(
                f"BertConfig.model_type={self.model_type!r}; choose one of {MODEL_TYPES}")
        if self.position_embedding_type == "rotary" and self.head_dim % 2:
            raise ConfigError(
                f"BertConfig.position_embedding_type='rotary' needs an even head_dim, got "
                f"hidden_size / num_attention_heads = {self.head_dim}")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def max_sequence_length(self) -> int:
        """The most tokens a row takes: max_position_embeddings - position_offset (512 for BERT
        and for RoBERTa's 514-row table)."""
        return self.max_position_embeddings - self.position_offset

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> BertConfig:
        """The named preset (tiny, mini, small, medium, base, large), with fields overridden."""
        if name not in PRESETS:
            raise ConfigError(f"unknown BERT preset {name!r}; choose one of {sorted(PRESETS)}")
        layers, hidden, heads, ffn = PRESETS[name]
        return cls(**{"num_hidden_layers": layers, "hidden_size": hidden,
                      "num_attention_heads": heads, "intermediate_size": ffn, **overrides})

    def replace(self, **changes: Any) -> BertConfig:
        return dataclasses.replace(self, **changes)

    def num_params(self, with_pooler: bool = True) -> int:
        """Number of parameters of the encoder (no task heads): the published formula, with
        the options' terms (no position table with rotary positions, a third FFN matrix when
        gated, no biases without use_bias, a final LayerNorm with pre-LN)."""
        d, f = self.hidden_size, self.intermediate_size
        b = 1 if self.use_bias else 0
        layer_norm = (1 + b) * d  # scale (and bias)
        rotary = self.position_embedding_type == "rotary"
        positions = 0 if rotary else self.max_position_embeddings  # the learned table's rows
        embeddings = (self.vocab_size + positions + self.type_vocab_size) * d + layer_norm
        attention = 4 * (d * d + b * d) + layer_norm  # Q, K, V, output projections; LayerNorm
        matrices = 2 if self.ffn_kind == "dense" else 3  # (gate,) intermediate, output
        feed_forward = matrices * d * f + b * ((matrices - 1) * f + d) + layer_norm
        final = layer_norm if self.layer_norm_position == "pre" else 0
        pooler = d * d + b * d
        total = embeddings + self.num_hidden_layers * (attention + feed_forward) + final
        return total + (pooler if with_pooler else 0)

    # ----- Hugging Face config.json ------------------------------------------------------------
    # Our fields that config.json has no key for (position_embedding_type it has: HF BERT knows
    # "absolute" and relative kinds, which from_hf_dict refuses; "rotary" never exports;
    # position_offset follows from model_type and pad_token_id).
    _HF_ONLY_KEYS = ("dtype", "param_dtype", "remat_policy", "layer_norm_position", "ffn_kind",
                     "use_bias", "scan_layers", "attention", "position_offset")

    @property
    def hf_class_prefix(self) -> str:
        """The prefix of the model_type's transformers classes: Bert, Roberta, XLMRoberta."""
        return {"bert": "Bert", "roberta": "Roberta", "xlm-roberta": "XLMRoberta"}[
            self.model_type]

    def to_hf_dict(self) -> dict[str, Any]:
        """The `config.json` dict of the equivalent transformers BertModel / RobertaModel /
        XLMRobertaModel (by model_type)."""
        out = {k: v for k, v in dataclasses.asdict(self).items() if k not in self._HF_ONLY_KEYS}
        out.update(architectures=[f"{self.hf_class_prefix}Model"], torch_dtype="float32")
        return out

    @classmethod
    def from_hf_dict(cls, hf: Mapping[str, Any], source: str = "config.json",
                     **overrides: Any) -> BertConfig:
        """A BertConfig from a Hugging Face `config.json` dict; `source` names it in errors.

        model_type "bert", "roberta" or "xlm-roberta"; for the latter two, position_offset is
        pad_token_id + 1 (as transformers computes their positions), and keys the file lacks
        take transformers' RobertaConfig defaults where they differ from BERT's.
        """
        model_type = hf.get("model_type", "bert")
        if model_type not in MODEL_TYPES:
            raise ConfigError(f"{source}: model_type={model_type!r}, expected one of "
                              f"{MODEL_TYPES}")
        position_type = hf.get("position_embedding_type", "absolute")
        if position_type != "absolute":
            raise ConfigError(f"{source}: position_embedding_type={position_type!r} is not "
                              "supported (only 'absolute', as in the BERT paper)")
        fields = {f.name for f in dataclasses.fields(cls)} - set(cls._HF_ONLY_KEYS)
        kwargs = dict(_HF_DEFAULTS.get(model_type, {}))
        kwargs.update({k: hf[k] for k in fields if k in hf and hf[k] is not None})
        if model_type in OFFSET_MODEL_TYPES and isinstance(kwargs["pad_token_id"], int):
            kwargs["position_offset"] = kwargs["pad_token_id"] + 1
        kwargs.update(overrides)
        try:
            return cls(**kwargs)
        except ConfigError as e:
            raise ConfigError(f"{source}: {e}") from None

    @classmethod
    def from_json_file(cls, path: str | os.PathLike, **overrides: Any) -> BertConfig:
        path = os.fspath(path)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no BERT config file at {path}")
        try:
            with open(path, encoding="utf-8") as f:
                hf = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ConfigError(f"{path}: not valid JSON ({e})") from None
        return cls.from_hf_dict(hf, source=path, **overrides)
