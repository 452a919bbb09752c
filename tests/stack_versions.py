"""Prints the versions of the stack a test run uses, one `name version` per line (the CI log
keeps them beside the results): `python tests/stack_versions.py [LABEL]`."""

import importlib.metadata
import platform
import sys

PACKAGES = ("jax", "jaxlib", "libtpu", "flax", "optax", "orbax-checkpoint", "grain",
            "tensorflow-datasets", "array-record", "tokenizers", "transformers", "torch", "numpy")


def versions() -> dict[str, str]:
    """Python's version and each of PACKAGES' ('-' where it is not installed)."""
    found = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "-"
    return found


if __name__ == "__main__":
    label = f" ({sys.argv[1]})" if len(sys.argv) > 1 else ""
    print(f"stack{label}: " + ", ".join(f"{k} {v}" for k, v in versions().items()))
