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


def test_sentence_embeddings_warns_and_is_embeddings_encode():
    from bert_jax.embeddings import encode
    with pytest.warns(DeprecationWarning, match="bert_jax.embeddings.encode"):
        se = _fresh_import("bert_jax.sentence_embeddings")
    assert se.embed is encode.embed and se.Encoder is encode.Encoder
    from bert_jax.tools import saved_runs
    assert se.load_encoder is saved_runs.load_encoder


def test_retrieval_warns_and_gives_the_embeddings_modules():
    from bert_jax.embeddings import evaluate, metrics
    with pytest.warns(DeprecationWarning, match="bert_jax.embeddings"):
        retrieval = _fresh_import("bert_jax.retrieval")
    assert retrieval.metrics is metrics and retrieval.evaluate is evaluate
    with pytest.raises(AttributeError):
        retrieval.no_such_module  # noqa: B018


def test_checkpointing_warns_and_loads_params_as_the_contract_says(tmp_path):
    from bert_jax.train.checkpoint import params, store
    with pytest.warns(DeprecationWarning, match="bert_jax.train.checkpoint.store"):
        checkpointing = _fresh_import("bert_jax.train.checkpointing")
    assert checkpointing.load_params is params.load_params
    assert checkpointing.checkpoint_dir is store.checkpoint_dir
    assert checkpointing.CheckpointUnreadableError is store.CheckpointUnreadableError
    with pytest.raises(FileNotFoundError):
        checkpointing.load_params(str(tmp_path / "checkpoints"))
