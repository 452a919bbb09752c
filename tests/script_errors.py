"""What a script prints for a user's mistake, checked in the test's own process: the one line
of `bert_jax.cli.run_or_exit`'s SystemExit (a script prints it on stderr and exits 1)."""

import pytest

from bert_jax import cli


def one_line(fn, script: str) -> str:
    """cli.run_or_exit(script, fn)'s message: one line, starting `script: error: `."""
    with pytest.raises(SystemExit) as exit_:
        cli.run_or_exit(script, fn)
    message = exit_.value.code
    assert isinstance(message, str) and "\n" not in message, message
    assert message.startswith(f"{script}: error: "), message
    return message
