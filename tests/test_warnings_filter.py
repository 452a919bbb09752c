"""The session's warning filter (filterwarnings in pyproject.toml's [tool.pytest.ini_options]):
a DeprecationWarning attributed to our own code (bert_jax, experiments, benchmarks, the tests) is
an error, one that a library attributes to itself is not."""

import warnings

import pytest


def _deprecated_api():
    """A library's deprecated function: it warns with stacklevel=2, as jax's deprecations do, so
    the warning is attributed to the module that calls it."""
    warnings.warn("deprecated_api is deprecated; use new_api", DeprecationWarning, stacklevel=2)


def _call_from(module_name: str) -> None:
    """Call _deprecated_api from a frame whose module is `module_name`."""
    exec("_deprecated_api()", {"__name__": module_name, "_deprecated_api": _deprecated_api})


@pytest.mark.parametrize("module", ["bert_jax", "bert_jax.model.layers", "experiments.pretrain",
                                    "benchmarks.harness.worker",
                                    "test_model", "faults.test_run_faults", "tests.test_model",
                                    "pretrain_runs"])
def test_a_deprecated_call_from_our_code_is_an_error(module):
    with pytest.raises(DeprecationWarning, match="use new_api"):
        _call_from(module)


@pytest.mark.parametrize("module", ["flax.linen.attention", "jax._src.numpy", "bert_jaxx_other",
                                    "orbax.checkpoint"])
def test_a_library_s_own_deprecation_warning_is_not(module):
    with warnings.catch_warnings(record=True) as caught:  # the session's filters stay in force
        warnings.warn_explicit(f"a warning of {module}", DeprecationWarning, "lib.py", 1,
                               module=module, registry={})
    assert [str(w.message) for w in caught] == [f"a warning of {module}"]
