"""The two layouts of the encoder layers' parameters, and conversion between them.

Unrolled (BertConfig.scan_layers=False): one subtree per layer, `encoder/layer_0`, ...,
`encoder/layer_{N-1}`. Scanned (scan_layers=True, `nn.scan` over the layers): one subtree
`encoder/layers` whose every leaf has a leading axis of N (the logical axis `layers`), leaf i
being layer i's. Both hold the same numbers, so a checkpoint trained in either layout loads into
a model of the other once converted here; the layout is how the model runs, not what it computes.

The functions are pure: nested mappings in, new nested dicts out, with any encoder in the tree
converted (a bare BertModel tree, or one under `bert` beside the heads, or the moments of an
optimizer state shaped like the params). A tree already in the asked layout comes back unchanged.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence

import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from bert_jax.config.bert import BertConfig
from bert_jax.runtime.pytree import flatten_dict

ENCODER = "encoder"
LAYERS = "layers"  # the scanned stack's name, and the logical axis of its leading dimension


def layer_name(index: int) -> str:
    return f"layer_{index}"


def _map_encoders(tree: Any, convert: Callable[[Mapping[str, Any]], dict]) -> Any:
    """`tree` with convert() applied to every mapping stored under the key `encoder`."""
    if not isinstance(tree, Mapping):
        return tree
    return {name: convert(value) if name == ENCODER and isinstance(value, Mapping)
            else _map_encoders(value, convert) for name, value in tree.items()}


def _zip_trees(trees: Sequence[Any], combine: Callable[[list[Any]], Any], where: str) -> Any:
    """Nested mappings of the same keys -> one tree whose leaves are combine([leaf of each])."""
    first = trees[0]
    if not isinstance(first, Mapping):
        return combine(list(trees))
    for i, tree in enumerate(trees):
        if not isinstance(tree, Mapping) or set(tree) != set(first):
            raise ValueError(f"{where}: layer_{i} does not hold the parameters of layer_0")
    return {name: _zip_trees([t[name] for t in trees], combine, f"{where}/{name}")
            for name in first}


def _map_leaves(tree: Any, fn: Callable[[Any], Any]) -> Any:
    if isinstance(tree, Mapping):
        return {name: _map_leaves(value, fn) for name, value in tree.items()}
    return fn(tree)


def _stack_arrays(leaves: list[Any]) -> Any:
    """[N] arrays of one shape -> one [N, ...] array (numpy stays numpy)."""
    if all(isinstance(leaf, np.ndarray) for leaf in leaves):
        return np.stack(leaves)
    return jnp.stack(leaves)


def _check_layer_names(encoder: Mapping[str, Any], num_layers: int) -> None:
    names = {name for name in encoder if name.startswith("layer_")}
    wanted = {layer_name(i) for i in range(num_layers)}
    if names != wanted:
        raise ValueError(f"encoder holds layers {sorted(names)}, expected layer_0 .. "
                         f"layer_{num_layers - 1} (num_layers={num_layers})")


def _check_stacked(stacked: Mapping[str, Any], num_layers: int) -> None:
    for path, leaf in flatten_dict(stacked).items():
        if tuple(leaf.shape[:1]) != (num_layers,):
            raise ValueError(f"encoder/{LAYERS}/{'/'.join(path)} has shape {tuple(leaf.shape)}, "
                             f"without a leading axis of num_layers={num_layers}")


def stack_layers(params: Any, num_layers: int,
                 stack: Callable[[list[Any]], Any] = _stack_arrays) -> Any:
    """encoder/layer_0 .. layer_{N-1}/... -> encoder/layers/... with a leading [N] axis.

    `stack` combines the N leaves at one path (default: arrays stacked on a new first axis).
    """
    def convert(encoder: Mapping[str, Any]) -> dict:
        if LAYERS in encoder:
            return dict(encoder)
        _check_layer_names(encoder, num_layers)
        layers = [encoder[layer_name(i)] for i in range(num_layers)]
        rest = {k: v for k, v in encoder.items() if not k.startswith("layer_")}
        return {**rest, LAYERS: _zip_trees(layers, stack, ENCODER)}
    return _map_encoders(params, convert)


def unstack_layers(params: Any, num_layers: int,
                   take: Optional[Callable[[Any, int], Any]] = None) -> Any:
    """encoder/layers/... [N, ...] -> encoder/layer_0 .. layer_{N-1}/... (inverse of stack_layers).

    `take(leaf, i)` is layer i's part of a stacked leaf (default: leaf[i]).
    """
    def convert(encoder: Mapping[str, Any]) -> dict:
        if LAYERS not in encoder:
            return dict(encoder)
        stacked = encoder[LAYERS]
        if take is None:
            _check_stacked(stacked, num_layers)
        pick = take or (lambda leaf, i: leaf[i])
        rest = {k: v for k, v in encoder.items() if k != LAYERS}
        return {**rest, **{layer_name(i): _map_leaves(stacked, lambda x, i=i: pick(x, i))
                           for i in range(num_layers)}}
    return _map_encoders(params, convert)


def is_scanned(tree: Any) -> Optional[bool]:
    """True if the tree's encoder is stacked (`layers`), False if unrolled (`layer_0`, ...),
    None if the tree has no encoder (or is not a tree of mappings)."""
    if not isinstance(tree, Mapping):
        return None
    encoder = tree.get(ENCODER)
    if isinstance(encoder, Mapping):
        return LAYERS in encoder
    found = [is_scanned(value) for value in tree.values()]
    return next((layout for layout in found if layout is not None), None)


def relayout(params: Any, scanned: bool, num_layers: int) -> Any:
    """Params (plain arrays) in the asked layout: stacked if `scanned`, else unrolled."""
    if scanned:
        return stack_layers(params, num_layers)
    return unstack_layers(params, num_layers)


def to_layout(params: Any, cfg: BertConfig) -> Any:
    """Params of any layout (plain or boxed arrays) in the layout of `cfg` (cfg.scan_layers).

    A tree already in that layout is returned as it is (boxes included).
    """
    if is_scanned(params) in (None, cfg.scan_layers):
        return params
    import flax.linen as nn
    return relayout(nn.meta.unbox(params), cfg.scan_layers, cfg.num_hidden_layers)


# ----- shardings of the parameters in either layout --------------------------------------------

def stack_shardings(shardings: list[Any]) -> Any:
    """The first layer's sharding with a replicated leading axis (`layers` maps to no mesh
    axis); for any stacked layout (also ModernBERT's groups)."""
    first = shardings[0]
    if isinstance(first, NamedSharding):
        return NamedSharding(first.mesh, PartitionSpec(None, *first.spec))
    return first


def unstack_sharding(stacked: Any, _: int) -> Any:
    """A stacked leaf's sharding without its leading `layers` axis."""
    if isinstance(stacked, NamedSharding):
        return NamedSharding(stacked.mesh, PartitionSpec(*stacked.spec[1:]))
    return stacked


def shardings_in_layout(shardings: Any, scanned: bool, num_layers: int) -> Any:
    """A tree of Shardings of the params, for the same params in the asked layout.

    None or one Sharding for every leaf is returned as it is.
    """
    if not isinstance(shardings, Mapping):
        return shardings
    if scanned:
        return stack_layers(shardings, num_layers, stack=stack_shardings)
    return unstack_layers(shardings, num_layers, take=unstack_sharding)


def wanted_layout(scan_layers: Optional[bool], shardings: Any, saved_scanned: bool) -> bool:
    """The layout asked of a load: `scan_layers` if given, else that of a tree of `shardings`
    (the model the params are loaded into), else the saved one."""
    if scan_layers is not None:
        return scan_layers
    tree_layout = is_scanned(shardings)
    return saved_scanned if tree_layout is None else tree_layout
