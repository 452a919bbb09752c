"""Device groups of a collective, from each of XLA's spellings of them, as partition ids.

    replica_groups={{0,1},{2,3}}                          explicit ({} : every device)
    replica_groups=[2,4]<=[4,2]T(1,0)                     iota: iota(8).reshape(4,2).T -> 2 x 4
    replica_groups=mesh['a'=2,'b'=4], device_ids=([2,4]T(1,0)) {'b'}
                                                          mesh: devices that differ only along
                                                          the named axes (or sub-axes 'b':(1)2)
    source_target_pairs={{0,1},{1,0}}                     collective-permute: (source, target)

With `use_global_device_ids` (SPMD programs) the ids are partition ids: indices into the
program's device assignment, which for a jit over a Mesh is `mesh.devices.flat`.
"""

from __future__ import annotations

import math
import re
from typing import Optional

import numpy as np

from bert_jax.tools.scaling.hlo import HloParseError, closing

Groups = tuple[tuple[int, ...], ...]


def parse_groups(attributes: str, num_devices: int) -> Groups:
    """The device groups of a collective's attributes (partition ids, every spelling)."""
    pairs = re.search(r"source_target_pairs=(\{.*)", attributes)
    if pairs:
        text = pairs.group(1)
        return tuple((int(a), int(b)) for a, b in
                     re.findall(r"\{(\d+),(\d+)\}", text[:closing(text, 0, "{}") + 1]))
    spec = re.search(r"replica_groups=(.*)", attributes)
    if spec is None:
        return (tuple(range(num_devices)),)
    spec_text = spec.group(1)
    if spec_text.startswith("{"):
        body = spec_text[1:closing(spec_text, 0, "{}")]
        groups = tuple(tuple(int(i) for i in g.split(",") if i)
                       for g in re.findall(r"\{([\d,]*)\}", body))
        return groups or (tuple(range(num_devices)),)
    iota = re.match(r"\[(\d+),(\d+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?", spec_text)
    if iota:
        ids = _iota_ids(iota.group(3), iota.group(4))
        return tuple(map(tuple, ids.reshape(int(iota.group(1)), int(iota.group(2))).tolist()))
    if spec_text.startswith("mesh["):
        return _mesh_groups(spec_text)
    raise HloParseError(f"unknown replica_groups spelling: {spec_text[:120]!r}")


def _iota_ids(dims: str, permutation: Optional[str]) -> np.ndarray:
    """iota(prod(dims)) reshaped to dims, transposed by `permutation`, flattened."""
    shape = [int(d) for d in dims.split(",")]
    ids = np.arange(math.prod(shape)).reshape(shape)
    if permutation:
        ids = ids.transpose([int(p) for p in permutation.split(",")])
    return ids.reshape(-1)


def _mesh_groups(spec: str) -> Groups:
    """Groups of `mesh['a'=2,'b'=4](, device_ids=(...)) {'b'}`: the devices that differ only
    along the named axes (or sub-axes `'b':(pre)size`) of the mesh."""
    match = re.match(r"mesh\[([^\]]*)\](?:, device_ids=\(([^)]*\)?)\))? \{([^}]*)\}", spec)
    if not match:
        raise HloParseError(f"unknown mesh replica_groups spelling: {spec[:120]!r}")
    axes = [(name, int(size)) for name, size in re.findall(r"'([^']+)'=(\d+)", match.group(1))]
    ids = np.arange(math.prod(size for _, size in axes))
    if match.group(2):
        iota = re.fullmatch(r"\[([\d,]+)\](?:T\(([\d,]+)\))?", match.group(2))
        ids = (_iota_ids(iota.group(1), iota.group(2)) if iota
               else np.array([int(i) for i in re.findall(r"\d+", match.group(2))]))
        if ids.size != math.prod(size for _, size in axes):
            raise HloParseError(f"unknown mesh device_ids spelling: {spec[:120]!r}")
    # Split every mesh axis into pieces, major to minor (a sub-axis 'b':(pre)size of an axis of
    # size n is the middle piece of [pre, size, n / (pre size)]), then move the grouped pieces
    # last: each row is one group.
    refs: dict[str, list[tuple[int, int]]] = {}
    for name, pre, sub in re.findall(r"'([^']+)'(?::\((\d+)\)(\d+))?", match.group(3)):
        if name not in dict(axes):
            raise HloParseError(f"replica group axis {name!r} is not in the mesh {spec[:120]!r}")
        refs.setdefault(name, []).append((int(pre), int(sub)) if pre else (1, dict(axes)[name]))
    pieces: list[int] = []
    grouped: list[int] = []
    for name, size in axes:
        covered = 1
        for pre, sub in sorted(refs.get(name, [])):
            if pre > covered:
                pieces.append(pre // covered)
            grouped.append(len(pieces))
            pieces.append(sub)
            covered = pre * sub
        if covered < size:
            pieces.append(size // covered)
    grid = ids.reshape(pieces)
    kept = [i for i in range(len(pieces)) if i not in grouped]
    grid = grid.transpose(kept + grouped).reshape(-1, math.prod(pieces[i] for i in grouped))
    return tuple(map(tuple, grid.tolist()))
