"""ModernBERT's layers scanned in groups that keep the alternating pattern, and the conversion
between the scanned and the unrolled parameter layouts.

Layers differ in kind: layer 0 has no attention norm (an identity), layer i attends globally iff
i % n == 0 (n = global_attn_every_n_layers) and locally otherwise. nn.scan runs one module many
times, so it runs a *group* of n consecutive layers whose kinds are the same in every group:
layer 0 stays unrolled, then groups g = 0, 1, ... hold layers 1 + g*n .. n + g*n (n - 1 local
layers, then a global one), and the layers left over at the end, fewer than n, are unrolled.
ModernBERT-base (22 layers, n = 3) is layer 0 and 7 groups; large (28) is layer 0 and 9 groups.

    unrolled: encoder/layer_0, encoder/layer_1, ..., encoder/layer_{N-1}
    scanned:  encoder/layer_0, encoder/layers/member_0 .. member_{n-1} (each leaf [G, ...],
              leaf g being layer 1 + g*n + j's), encoder/layer_{1+G*n} .. layer_{N-1}

Both hold the same numbers; the layout is how the encoder runs, not what it computes. The
functions are pure: nested mappings in, new dicts out, every `encoder` subtree converted (a bare
ModernBertModel tree or one under `bert` beside the heads).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Optional

import jax.numpy as jnp
import numpy as np

from bert_jax.config.modernbert import ModernBertConfig
from bert_jax.model import scan

ENCODER = "encoder"
LAYERS = "layers"  # the scanned groups' name, and the logical axis of their leading dimension


def layer_name(index: int) -> str:
    return f"layer_{index}"


def member_name(offset: int) -> str:
    return f"member_{offset}"


@dataclasses.dataclass(frozen=True)
class ScanPlan:
    """Which layers run unrolled and which in scanned groups.

    head: the layers before the groups (layer 0); groups, group_size: G groups of n layers,
    group g holding layers first_grouped + g*n + j, j < n; tail: the unrolled layers after them.
    """

    head: tuple[int, ...]
    groups: int
    group_size: int
    tail: tuple[int, ...]

    @property
    def first_grouped(self) -> int:
        return len(self.head)

    def layer_of(self, group: int, offset: int) -> int:
        return self.first_grouped + group * self.group_size + offset


def scan_plan(cfg: ModernBertConfig) -> ScanPlan:
    """Layer 0 alone, as many whole groups of global_attn_every_n_layers as fit, the rest."""
    n, total = cfg.global_attn_every_n_layers, cfg.num_hidden_layers
    groups = (total - 1) // n
    return ScanPlan(head=(0,), groups=groups, group_size=n,
                    tail=tuple(range(1 + groups * n, total)))


def _map_encoders(tree: Any, convert) -> Any:
    if not isinstance(tree, Mapping):
        return tree
    return {name: convert(value) if name == ENCODER and isinstance(value, Mapping)
            else _map_encoders(value, convert) for name, value in tree.items()}


def _stack_arrays(leaves: list[Any]) -> Any:
    """[G] arrays of one shape -> one [G, ...] array (numpy stays numpy)."""
    if all(isinstance(leaf, np.ndarray) for leaf in leaves):
        return np.stack(leaves)
    return jnp.stack(leaves)


def _zip(trees: list[Any], combine: Callable[[list[Any]], Any], where: str) -> Any:
    """Trees of the same keys -> one tree whose leaves are combine([leaf of each tree])."""
    first = trees[0]
    if not isinstance(first, Mapping):
        return combine(list(trees))
    for tree in trees:
        if not isinstance(tree, Mapping) or set(tree) != set(first):
            raise ValueError(f"{where}: the grouped layers do not hold the same parameters")
    return {name: _zip([t[name] for t in trees], combine, f"{where}/{name}") for name in first}


def _take(tree: Any, index: int, take: Callable[[Any, int], Any]) -> Any:
    if isinstance(tree, Mapping):
        return {name: _take(value, index, take) for name, value in tree.items()}
    return take(tree, index)


def stack_layers(params: Any, cfg: ModernBertConfig,
                 stack: Callable[[list[Any]], Any] = _stack_arrays) -> Any:
    """Unrolled -> scanned (see the module doc); a scanned tree comes back as it is.

    `stack(leaves)` makes one stacked leaf of the G groups' leaves (default: the arrays stacked).
    """
    plan = scan_plan(cfg)

    def convert(encoder: Mapping[str, Any]) -> dict:
        if LAYERS in encoder:
            return dict(encoder)
        names = {name for name in encoder if name.startswith("layer_")}
        wanted = {layer_name(i) for i in range(cfg.num_hidden_layers)}
        if names != wanted:
            raise ValueError(f"encoder holds layers {sorted(names)}, expected layer_0 .. "
                             f"layer_{cfg.num_hidden_layers - 1}")
        grouped = {layer_name(plan.layer_of(g, j))
                   for g in range(plan.groups) for j in range(plan.group_size)}
        out = {k: v for k, v in encoder.items() if k not in grouped}
        if plan.groups:
            out[LAYERS] = {member_name(j): _zip([encoder[layer_name(plan.layer_of(g, j))]
                                                 for g in range(plan.groups)], stack,
                                                f"{ENCODER}/{member_name(j)}")
                           for j in range(plan.group_size)}
        return out

    return _map_encoders(params, convert)


def unstack_layers(params: Any, cfg: ModernBertConfig,
                   take: Optional[Callable[[Any, int], Any]] = None) -> Any:
    """Scanned -> unrolled (the inverse of stack_layers); an unrolled tree comes back as it is.

    `take(leaf, g)` is group g's part of a stacked leaf (default: leaf[g], checked to have a
    leading axis of G).
    """
    plan = scan_plan(cfg)

    def convert(encoder: Mapping[str, Any]) -> dict:
        if LAYERS not in encoder:
            return dict(encoder)
        stacked = encoder[LAYERS]
        out = {k: v for k, v in encoder.items() if k != LAYERS}
        for j in range(plan.group_size):
            member = stacked[member_name(j)]
            if take is None:
                _check_stacked(member, plan.groups, f"{ENCODER}/{LAYERS}/{member_name(j)}")
            for g in range(plan.groups):
                out[layer_name(plan.layer_of(g, j))] = _take(
                    member, g, take or (lambda leaf, i: leaf[i]))
        return out

    return _map_encoders(params, convert)


def _check_stacked(tree: Any, groups: int, where: str) -> None:
    if isinstance(tree, Mapping):
        for name, value in tree.items():
            _check_stacked(value, groups, f"{where}/{name}")
    elif tuple(tree.shape[:1]) != (groups,):
        raise ValueError(f"{where} has shape {tuple(tree.shape)}, without a leading axis of "
                         f"{groups} groups")


def is_scanned(tree: Any) -> bool | None:
    """True if the tree's encoder holds scanned groups, False if not (a model too shallow for
    one group has the same tree in both layouts), None if the tree has no encoder."""
    if not isinstance(tree, Mapping):
        return None
    encoder = tree.get(ENCODER)
    if isinstance(encoder, Mapping):
        return LAYERS in encoder
    found = [is_scanned(value) for value in tree.values()]
    return next((layout for layout in found if layout is not None), None)


def to_layout(params: Any, cfg: ModernBertConfig) -> Any:
    """Params (plain or boxed arrays) of either layout in the layout of cfg.scan_layers."""
    import flax.linen as nn
    params = nn.meta.unbox(params)
    return stack_layers(params, cfg) if cfg.scan_layers else unstack_layers(params, cfg)


# ----- shardings of the parameters in either layout --------------------------------------------

def shardings_in_layout(shardings: Any, cfg: ModernBertConfig, scanned: bool) -> Any:
    """A tree of the params' Shardings, for the same params in the asked layout (to load a
    checkpoint of one layout into a sharded model of the other). None or one Sharding for every
    leaf comes back as it is."""
    if not isinstance(shardings, Mapping):
        return shardings
    if scanned:
        return stack_layers(shardings, cfg, stack=scan.stack_shardings)
    return unstack_layers(shardings, cfg, take=scan.unstack_sharding)
