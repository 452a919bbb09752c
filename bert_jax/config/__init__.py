"""What a run is told, typed: the model's hyper-parameters (bert.py: BertConfig, ConfigError;
modernbert.py: ModernBertConfig), the run config's schema (run.py) and its checks (run_keys.py),
the scripts' --help text (help.py) and the typed optimizer and loop settings read from a run
config (settings.py).

`from bert_jax.config import BertConfig, ConfigError` is the public spelling (bert.py's, also
exported by `bert_jax`). The other names of the former module bert_jax/config.py still resolve
here with a DeprecationWarning naming bert_jax.config.bert; import them from there.
"""

from __future__ import annotations

import warnings

from bert_jax.config.bert import BertConfig, ConfigError

__all__ = ["BertConfig", "ConfigError"]

# The former module bert_jax/config.py's other names, now bert_jax.config.bert's.
_MOVED_TO_BERT = frozenset({
    "ACTIVATIONS", "DTYPES", "SHAPE_FIELDS", "REMAT_POLICIES", "LAYER_NORM_POSITIONS",
    "FFN_KINDS", "POSITION_EMBEDDING_TYPES", "MODEL_TYPES", "OFFSET_MODEL_TYPES",
    "ATTENTION_IMPLEMENTATIONS", "PRESETS", "gated_intermediate_size"})


def __getattr__(name: str):
    if name in _MOVED_TO_BERT:
        warnings.warn(f"bert_jax.config.{name} moved to bert_jax.config.bert.{name}; import it "
                      "from there", DeprecationWarning, stacklevel=2)
        from bert_jax.config import bert
        return getattr(bert, name)
    raise AttributeError(f"module 'bert_jax.config' has no attribute {name!r}")
