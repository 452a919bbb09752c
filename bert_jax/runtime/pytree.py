"""Names for the leaves of parameter trees, and nested dicts flattened to those names.

One spelling everywhere a leaf is named to a user or matched between two trees (checkpoints,
initial parameters, weight-decay masks, Hugging Face conversion, saved configs).
"""

from __future__ import annotations

from typing import Any, Mapping


def key_name(key: Any) -> str:
    """One element of a jax key path (DictKey, GetAttrKey, SequenceKey) or a plain key as text."""
    for attr in ("key", "name", "idx"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def path_names(path: tuple[Any, ...]) -> list[str]:
    """A jax key path as a list of names: (DictKey('bert'), DictKey('pooler')) -> [bert, pooler]."""
    return [key_name(k) for k in path]


def path_name(path: tuple[Any, ...], sep: str = "/") -> str:
    """A jax key path as one string: 'bert/pooler/dense/kernel'."""
    return sep.join(path_names(path))


def flatten_dict(tree: Mapping[str, Any], prefix: tuple[str, ...] = ()
                 ) -> dict[tuple[str, ...], Any]:
    """Nested mappings -> {(key, subkey, ...): leaf}; empty mappings vanish."""
    flat: dict[tuple[str, ...], Any] = {}
    for name, value in tree.items():
        if isinstance(value, Mapping):
            flat.update(flatten_dict(value, prefix + (name,)))
        else:
            flat[prefix + (name,)] = value
    return flat
