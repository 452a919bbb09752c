"""bert_jax.runtime.xla_options: the compiler options of the step and the initialiser, less
those that the installed jaxlib does not know (XLA's options come and go between releases;
jax.jit fails on an unknown one)."""

import jax
import numpy as np
import pytest

from bert_jax.runtime import xla_options


def test_the_host_backends_options_are_known_here():
    """The options we pass on this jaxlib are all accepted: none is left out silently, on
    either end of the tested jax range."""
    assert xla_options.compiler_options("cpu") == xla_options.CPU_OPTIONS
    assert xla_options.one_off_options("cpu") == {**xla_options.CPU_OPTIONS,
                                                  **xla_options.ONE_OFF_OPTIONS["cpu"]}
    compiled = jax.jit(lambda x: x * 2, compiler_options=xla_options.compiler_options("cpu"))
    assert float(compiled(np.float32(3))) == 6.0


def test_an_option_this_jaxlib_does_not_know_is_left_out_with_a_warning(caplog):
    unknown = {"xla_option_no_jaxlib_has": "true"}
    with pytest.raises(Exception, match="No such compile option"):  # what jax.jit would do
        jax.jit(lambda x: x, compiler_options=unknown).lower(np.float32(0)).compile()
    with caplog.at_level("WARNING"):
        kept = xla_options.known("cpu", {**xla_options.CPU_OPTIONS, **unknown})
    assert kept == xla_options.CPU_OPTIONS
    assert "xla_option_no_jaxlib_has=true is unknown" in caplog.text
    assert xla_options.known("cpu", unknown) is None
    # another platform's options cannot be tried on this host: kept for its compiler to judge
    assert xla_options.known("tpu", unknown) == unknown
