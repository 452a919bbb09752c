"""The public names keep working where they were before the packages by layer: the contract's
spellings without a warning, the other former module paths with a DeprecationWarning that names
the new one (docs/architecture.md, "Layout")."""

import importlib
import sys
import warnings

import pytest


def _fresh_import(name: str):
    """Import `name` anew (its first import is the one that warns)."""
    sys.modules.pop(name, None)
    parent, _, leaf = name.rpartition(".")
    if parent in sys.modules and hasattr(sys.modules[parent], leaf):
        delattr(sys.modules[parent], leaf)
    return importlib.import_module(name)


def test_contract_names_import_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from bert_jax import BertConfig, BertModel  # noqa: F401
        from bert_jax.config import BertConfig as config_bert_config
        from bert_jax.config import ConfigError  # noqa: F401
        from bert_jax.config.bert import BertConfig as bert_config
    assert config_bert_config is bert_config is BertConfig


def test_former_config_module_names_warn_and_resolve():
    from bert_jax.config import bert
    with pytest.warns(DeprecationWarning, match="bert_jax.config.bert.PRESETS"):
        from bert_jax.config import PRESETS
    assert PRESETS is bert.PRESETS
    with pytest.raises(ImportError):
        from bert_jax.config import no_such_name  # noqa: F401
