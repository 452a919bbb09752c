"""ModernBertConfig: the hyper-parameters of a ModernBERT encoder, its presets and its size.

ModernBERT (Warner et al., 2024, "Smarter, Better, Faster, Longer") is a pre-norm encoder with
rotary positions, a GeGLU feed-forward, no biases, and attention that alternates between global
layers (every `global_attn_every_n_layers`-th, from layer 0) and layers that see a window of
`local_attention` tokens around each query. It is a family of its own beside BERT
(bert_jax.config.bert.BertConfig): the two share no config, only building blocks.

Field names are those of ModernBERT's Hugging Face `config.json` (transformers'
`ModernBertConfig`), so a config converts both ways without a renaming table; the fields after
`classifier_activation` say how we compute (dtypes, rematerialisation, scanned layers, the
attention kernel) and have no config.json key. The base and large presets are the published
sizes; tiny .. medium are ours, at the published width ratio (FFN 1.5 x hidden) and with layer
counts that are multiples of 3, so that the alternating pattern repeats whole.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, ClassVar, Mapping

from bert_jax.config.bert import (
    ACTIVATIONS,
    ATTENTION_IMPLEMENTATIONS,
    DTYPES,
    REMAT_POLICIES,
    ConfigError,
)

CLASSIFIER_POOLINGS = ("cls", "mean")
# The fields that fix the parameter tree (its paths and shapes).
SHAPE_FIELDS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                "num_attention_heads", "norm_bias", "attention_bias", "mlp_bias", "decoder_bias",
                "classifier_bias")
# Our fields that config.json has no key for.
OURS_ONLY = ("dtype", "param_dtype", "remat_policy", "scan_layers", "attention")
# config.json keys of transformers' ModernBertConfig that say how transformers runs (flash
# attention, torch.compile, sparse MLM logits), not what the model computes: read and ignored.
HF_RUNTIME_KEYS = ("deterministic_flash_attn", "sparse_prediction", "sparse_pred_ignore_index",
                   "reference_compile", "repad_logits_with_grad")

# name: (num_hidden_layers, hidden_size, num_attention_heads, intermediate_size)
PRESETS: dict[str, tuple[int, int, int, int]] = {
    "tiny": (3, 128, 2, 192),
    "mini": (6, 256, 4, 384),
    "small": (6, 512, 8, 768),
    "medium": (9, 512, 8, 768),
    "base": (22, 768, 12, 1152),  # answerdotai/ModernBERT-base
    "large": (28, 1024, 16, 2624),  # answerdotai/ModernBERT-large
}


@dataclasses.dataclass(frozen=True)
class ModernBertConfig:
    """Hyper-parameters of a ModernBERT encoder (defaults: ModernBERT-base).

    Layer i attends globally iff i % global_attn_every_n_layers == 0, with RoPE base
    `global_rope_theta`; every other layer lets query i see key j iff |i - j| <=
    local_attention // 2, with RoPE base `local_rope_theta`. The bias flags drop the biases of
    the attention projections (`attention_bias`), the feed-forward (`mlp_bias`), every
    LayerNorm (`norm_bias`; the scale stays), the prediction head's dense layer
    (`classifier_bias`) and the MLM decoder (`decoder_bias`); the classifier's own output layer
    always has a bias, as in transformers. `classifier_pooling`: the sequence classifier reads
    the first token ("cls") or the mean over the real tokens ("mean").

    How we compute (not in config.json): `dtype` (activations and matmuls), `param_dtype`
    (storage), `remat_policy` (what each layer keeps for the backward pass, as in BertConfig),
    `scan_layers` (the layers as nn.scan over groups of global_attn_every_n_layers layers:
    bert_jax.model.modernbert_scan) and `attention` (the kernel: bert_jax.model.attention).
    """

    family: ClassVar[str] = "modernbert"

    vocab_size: int = 50368
    hidden_size: int = 768
    intermediate_size: int = 1152
    num_hidden_layers: int = 22
    num_attention_heads: int = 12
    hidden_activation: str = "gelu"
    max_position_embeddings: int = 8192
    initializer_range: float = 0.02
    initializer_cutoff_factor: float = 2.0
    norm_eps: float = 1e-5
    norm_bias: bool = False
    pad_token_id: int = 50283
    eos_token_id: int = 50282
    bos_token_id: int = 50281
    cls_token_id: int = 50281
    sep_token_id: int = 50282
    global_rope_theta: float = 160000.0
    attention_bias: bool = False
    attention_dropout: float = 0.0
    global_attn_every_n_layers: int = 3
    local_attention: int = 128
    local_rope_theta: float = 10000.0
    embedding_dropout: float = 0.0
    mlp_bias: bool = False
    mlp_dropout: float = 0.0
    decoder_bias: bool = True
    classifier_pooling: str = "cls"
    classifier_dropout: float = 0.0
    classifier_bias: bool = False
    classifier_activation: str = "gelu"
    # ours only
    dtype: str = "float32"
    param_dtype: str = "float32"
    remat_policy: str = "none"
    scan_layers: bool = False
    attention: str = "auto"

    def __post_init__(self):
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                     "num_attention_heads", "max_position_embeddings",
                     "global_attn_every_n_layers", "local_attention"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(
                    f"ModernBertConfig.{name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"ModernBertConfig.hidden_size={self.hidden_size} is not divisible by "
                f"num_attention_heads={self.num_attention_heads}")
        if self.head_dim % 2:
            raise ConfigError(f"ModernBertConfig: rotary positions need an even head_dim, got "
                              f"hidden_size / num_attention_heads = {self.head_dim}")
        for name in ("hidden_activation", "classifier_activation"):
            if getattr(self, name) not in ACTIVATIONS:
                raise ConfigError(f"ModernBertConfig.{name}={getattr(self, name)!r} is unknown; "
                                  f"choose one of {ACTIVATIONS}")
        for name in ("attention_dropout", "embedding_dropout", "mlp_dropout",
                     "classifier_dropout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not 0.0 <= value < 1.0:
                raise ConfigError(f"ModernBertConfig.{name} must be in [0, 1), got {value!r}")
        for name in ("initializer_range", "initializer_cutoff_factor", "norm_eps",
                     "global_rope_theta", "local_rope_theta"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ConfigError(f"ModernBertConfig.{name} must be a positive number, "
                                  f"got {value!r}")
        for name in ("norm_bias", "attention_bias", "mlp_bias", "decoder_bias",
                     "classifier_bias", "scan_layers"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(
                    f"ModernBertConfig.{name} must be a bool, got {getattr(self, name)!r}")
        if not isinstance(self.pad_token_id, int) or not 0 <= self.pad_token_id < self.vocab_size:
            raise ConfigError(f"ModernBertConfig.pad_token_id={self.pad_token_id!r} is outside "
                              f"the vocabulary of {self.vocab_size}")
        for name, choices in (("classifier_pooling", CLASSIFIER_POOLINGS), ("dtype", DTYPES),
                              ("param_dtype", DTYPES), ("remat_policy", REMAT_POLICIES),
                              ("attention", ATTENTION_IMPLEMENTATIONS)):
            if getattr(self, name) not in choices:
                raise ConfigError(f"ModernBertConfig.{name}={getattr(self, name)!r}; choose one "
                                  f"of {choices}")

    # ----- derived --------------------------------------------------------------------------

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def max_sequence_length(self) -> int:
        """The longest row the model takes (BertConfig's name for it): max_position_embeddings,
        rotary positions having no offset."""
        return self.max_position_embeddings

    def is_global(self, layer: int) -> bool:
        """Whether layer `layer` (0-based) attends globally; the others see the local window."""
        return layer % self.global_attn_every_n_layers == 0

    def window_of(self, layer: int) -> int | None:
        """The attention window of a layer: None (global) or local_attention."""
        return None if self.is_global(layer) else self.local_attention

    def rope_theta_of(self, layer: int) -> float:
        return self.global_rope_theta if self.is_global(layer) else self.local_rope_theta

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> ModernBertConfig:
        """The named preset (tiny, mini, small, medium, base, large), with fields overridden."""
        if name not in PRESETS:
            raise ConfigError(
                f"unknown ModernBERT preset {name!r}; choose one of {sorted(PRESETS)}")
        layers, hidden, heads, ffn = PRESETS[name]
        return cls(**{"num_hidden_layers": layers, "hidden_size": hidden,
                      "num_attention_heads": heads, "intermediate_size": ffn, **overrides})

    def replace(self, **changes: Any) -> ModernBertConfig:
        return dataclasses.replace(self, **changes)

    def num_params(self) -> int:
        """Parameters of the encoder (transformers' ModernBertModel; no task head): token
        embeddings and their norm, per layer the attention (fused QKV, output) and the GeGLU
        (fused input-and-gate, output) with their norms (layer 0 has no attention norm), and the
        final norm."""
        d, f, n = self.hidden_size, self.intermediate_size, self.num_hidden_layers
        norm = d * (2 if self.norm_bias else 1)
        attention = 3 * d * d + d * d + (4 * d if self.attention_bias else 0)
        mlp = d * 2 * f + f * d + (2 * f + d if self.mlp_bias else 0)
        layers = n * (attention + mlp + 2 * norm) - norm  # layer 0: no attention norm
        return self.vocab_size * d + norm + layers + norm

    # ----- Hugging Face config.json ---------------------------------------------------------

    def to_hf_dict(self) -> dict[str, Any]:
        """The `config.json` dict of the equivalent `transformers.ModernBertModel`."""
        out = {k: v for k, v in dataclasses.asdict(self).items() if k not in OURS_ONLY}
        out.update(model_type="modernbert", architectures=["ModernBertModel"],
                   torch_dtype="float32")
        return out

    @classmethod
    def from_hf_dict(cls, hf: Mapping[str, Any], source: str = "config.json",
                     **overrides: Any) -> ModernBertConfig:
        """A ModernBertConfig from a Hugging Face `config.json` dict; `source` names it in
        errors. Keys of other transformers settings (labels, dtype, version) are ignored; what
        would change the model and we do not compute (rope_scaling) is refused."""
        model_type = hf.get("model_type", "modernbert")
        if model_type != "modernbert":
            raise ConfigError(f"{source}: model_type={model_type!r}, expected 'modernbert'")
        if hf.get("rope_scaling") not in (None, {}, {"rope_type": "default"}):
            raise ConfigError(f"{source}: rope_scaling={hf['rope_scaling']!r} is not supported "
                              "(only plain RoPE, as ModernBERT was trained)")
        fields = {f.name for f in dataclasses.fields(cls)} - set(OURS_ONLY)
        kwargs = {k: hf[k] for k in fields if k in hf and hf[k] is not None}
        if "global_rope_theta" not in kwargs and hf.get("rope_theta") is not None:
            kwargs["global_rope_theta"] = hf["rope_theta"]  # transformers' alias
        if hf.get("local_rope_theta", 0) is None:  # transformers: local layers use the global base
            kwargs["local_rope_theta"] = kwargs.get("global_rope_theta", cls.global_rope_theta)
        try:
            kwargs.update(_v5_layout(hf))
        except ConfigError as e:
            raise ConfigError(f"{source}: {e}") from None
        kwargs.update(overrides)
        try:
            return cls(**kwargs)
        except ConfigError as e:
            raise ConfigError(f"{source}: {e}") from None
        except TypeError as e:  # an override that is no field
            raise ConfigError(f"{source}: {e}") from None

    @classmethod
    def from_json_file(cls, path: str | os.PathLike, **overrides: Any) -> ModernBertConfig:
        path = os.fspath(path)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no ModernBERT config file at {path}")
        try:
            with open(path, encoding="utf-8") as f:
                hf = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ConfigError(f"{path}: not valid JSON ({e})") from None
        if not isinstance(hf, dict):
            raise ConfigError(f"{path}: expected a JSON object, got {type(hf).__name__}")
        return cls.from_hf_dict(hf, source=path, **overrides)


# transformers 5 writes a layer's kind per layer and one RoPE setting per kind (what 4.x wrote as
# global_attn_every_n_layers, global_rope_theta and local_rope_theta); a folder saved by either
# reads as the same model.
_V5_KINDS = {"full_attention": "global_rope_theta", "sliding_attention": "local_rope_theta"}


def _v5_layout(hf: Mapping[str, Any]) -> dict[str, Any]:
    """ModernBertConfig fields from transformers 5's `layer_types` and `rope_parameters` (where
    present, they decide, as in transformers 5). ConfigError for a layer pattern that is not
    "global every n-th layer from layer 0" or a RoPE that is not plain."""
    out: dict[str, Any] = {}
    layer_types = hf.get("layer_types")
    if layer_types is not None:
        if (not isinstance(layer_types, list) or not layer_types
                or any(kind not in _V5_KINDS for kind in layer_types)):
            raise ConfigError(f"layer_types={layer_types!r}: expected a list of "
                              f"{sorted(_V5_KINDS)}")
        full = [i for i, kind in enumerate(layer_types) if kind == "full_attention"]
        every = full[1] if len(full) > 1 else len(layer_types)
        if full[:1] != [0] or any((i % every == 0) != (kind == "full_attention")
                                  for i, kind in enumerate(layer_types)):
            raise ConfigError(f"layer_types={layer_types!r}: only full attention in every n-th "
                              "layer from layer 0, sliding windows between, is supported")
        out["global_attn_every_n_layers"] = every
    rope = hf.get("rope_parameters")
    if rope is not None:
        if not isinstance(rope, Mapping) or set(rope) - set(_V5_KINDS):
            raise ConfigError(f"rope_parameters={rope!r}: expected an object keyed by "
                              f"{sorted(_V5_KINDS)}")
        for kind, field in _V5_KINDS.items():
            setting = rope.get(kind) or {}
            if setting.get("rope_type", "default") != "default":
                raise ConfigError(f"rope_parameters[{kind!r}]={setting!r} is not supported "
                                  "(only plain RoPE, as ModernBERT was trained)")
            if setting.get("rope_theta") is not None:
                out[field] = setting["rope_theta"]
    return out
