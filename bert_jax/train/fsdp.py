"""The gradients of a step with the FSDP collectives written out, one of each per parameter.

Left to the SPMD partitioner, an fsdp-split step does not always communicate what FSDP should:
XLA:TPU gathers shards of a few rows by all-reducing full-size zero-padded buffers, and reduces
gradients by full-size all-reduces followed by a slice (docs/results.md, "FSDP on 64 chips"),
up to 2.8x the bytes of the ideal. Here the batch axes (`data`, `fsdp`) are manual
(`jax.shard_map`; `tensor`, if any, stays with the partitioner) and each device, per step:

    all-gathers every fsdp-split parameter over `fsdp`, once   (storage dtype, (n-1)/n of it)
    computes its own rows' loss sums and their gradients       (accumulation steps included:
                                                                micro-batches reuse the gather)
    reduce-scatters those gradients over `fsdp`                (the transposed gather)
    all-reduces them over `data`, and every gradient of a parameter that is not fsdp-split
    over (`data`, `fsdp`)

which is the ideal that bert_jax.tools.scaling.roofline.fsdp_ideal_bytes counts. Where the fsdp axis
is a whole TPU slice of more than 8 chips, each gather and reduce-scatter runs in two levels
(`two_level_mesh`: XLA:TPU would run one over the whole torus as an all-reduce). The gathered
parameters live for the whole step (what XLA's own fsdp program keeps as well, unless remat).

Results equal the partitioner's step up to the order of floating-point sums, with one
difference: the dropout bits. Each device draws its rows' bits from the step's key folded with
its index along the batch axes, so a run on another batch split draws other (equally random)
masks; with dropout off the two steps agree (tests/train/test_fsdp_collectives.py).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from bert_jax.config.settings import CHOICES
from bert_jax.runtime import platform

BATCH_AXES = ("data", "fsdp")  # the manual axes: the batch's rows are split over both
# fsdp axes of more devices than TWO_LEVEL_ABOVE that span a whole slice of these platforms run
# their collectives in two levels (two_level_mesh).
TWO_LEVEL_ABOVE, TWO_LEVEL_PLATFORMS = 8, ("tpu",)


def uses_explicit(choice: str, mesh: Mesh) -> bool:
    """Whether a step on `mesh` takes this module's gradients: `explicit` and a split fsdp axis."""
    if choice not in CHOICES:
        raise ValueError(f"config.fsdp_collectives={choice!r}: choose one of {CHOICES}")
    return choice == "explicit" and mesh.shape["fsdp"] > 1


def _names(axes: Any) -> tuple[str, ...]:
    """The mesh axes of one PartitionSpec entry (None, a name, or a tuple of names)."""
    return (axes,) if isinstance(axes, str) else tuple(axes or ())


def _fsdp_dim(spec: P) -> Optional[int]:
    """The dimension a parameter's spec splits over `fsdp` (None: not split over it)."""
    for dim, axes in enumerate(spec):
        names = _names(axes)
        if "fsdp" in names:
            if names != ("fsdp",):
                raise ValueError(f"a parameter split over {names} in one dimension: explicit "
                                 "fsdp collectives need fsdp alone there")
            return dim
    return None


def _manual_spec(spec: P, fsdp_axes: tuple[str, ...]) -> P:
    """The part of a spec over the manual axes (the partitioner keeps `tensor`), with `fsdp`
    spelled as `fsdp_axes` (two_level_mesh)."""
    def keep(axes):
        kept = tuple(b for a in _names(axes) if a in BATCH_AXES
                     for b in (fsdp_axes if a == "fsdp" else (a,)))
        return kept[0] if len(kept) == 1 else (kept or None)
    return P(*(keep(axes) for axes in spec))


def two_level_mesh(mesh: Mesh) -> tuple[Mesh, tuple[str, ...]]:
    """The mesh the step's shard_map runs on, and the axes `fsdp` is spelled as there.

    When the fsdp axis holds every device of a TPU slice of more than 8 chips, XLA:TPU (libtpu
    0.0.42) runs collectives over the whole torus as all-reduces, even gathers and
    reduce-scatters written as such (docs/history.md). Such an fsdp axis is split here into
    (`fsdp_outer`, `fsdp_inner`) groups of the same devices in the same order, and each
    collective runs in two levels (the bytes of one: (k-1)/k B + (m-1)/m B/k for n = m k).
    Otherwise the mesh is kept and `fsdp` is one axis.
    """
    n = mesh.shape["fsdp"]
    whole_slice = n == mesh.devices.size and platform.platform_of(mesh) in TWO_LEVEL_PLATFORMS
    if n <= TWO_LEVEL_ABOVE or not whole_slice:
        return mesh, ("fsdp",)
    inner = max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0)
    grid = mesh.devices.reshape(mesh.shape["data"], n // inner, inner, mesh.shape["tensor"])
    return Mesh(grid, ("data", "fsdp_outer", "fsdp_inner", "tensor")), ("fsdp_outer", "fsdp_inner")


# Collectives move each shard as whole TPU tiles of (8 rows, 128 lanes): [shards, rows, 128].
# A shard of a few rows or lanes along a minor dimension fills no tile, and XLA:TPU then turns
# its gather or reduce-scatter into an all-reduce of full-size, zero-padded buffers (twice the
# bytes). The padding added here is < 1024 elements per parameter (< 128 for one under 1024).
TILE_ROWS, TILE_LANES = 8, 128


def _to_tiles(shards: jax.Array) -> jax.Array:
    """[k, *shard] -> [k, rows, 128]: each shard flattened and zero-padded to whole tiles (a
    shard of less than one tile to whole rows of 128: its bytes matter less than the padding's)."""
    flat = shards.reshape(shards.shape[0], -1)
    tile = TILE_ROWS * TILE_LANES if flat.shape[1] >= TILE_ROWS * TILE_LANES else TILE_LANES
    padded = -(-flat.shape[1] // tile) * tile
    flat = jnp.pad(flat, ((0, 0), (0, padded - flat.shape[1])))
    return flat.reshape(flat.shape[0], padded // TILE_LANES, TILE_LANES)


def _from_tiles(tiles: jax.Array, shard_shape: tuple[int, ...]) -> jax.Array:
    """[k, rows, 128] -> [k, *shard_shape]: what `_to_tiles` was given."""
    size = math.prod(shard_shape)
    return tiles.reshape(tiles.shape[0], -1)[:, :size].reshape((tiles.shape[0],) + shard_shape)


def gradients(compute: Callable[[Any, Any, jax.Array, Callable], tuple[Any, Any]],
              params: Any, batch: Any, rng: jax.Array, param_shardings: Any,
              mesh: Mesh) -> tuple[Any, Any]:
    """(gradients sharded like `params`, sums over the whole batch), by the module docstring.

    compute(full_params, local_batch, rng, global_sum) -> (local gradients, local sums) is the
    step's own gradient computation on one device's rows: `global_sum` adds a pytree over every
    device's rows (for the loss weights of the whole batch). Its sums (loss terms and metrics)
    are added over the devices here.
    """
    step_mesh, fsdp_axes = two_level_mesh(mesh)
    batch_axes, n = ("data",) + fsdp_axes, mesh.shape["fsdp"]
    specs = jax.tree.map(lambda s: s.spec, param_shardings,
                         is_leaf=lambda s: isinstance(s, NamedSharding))
    dims = jax.tree.map(_fsdp_dim, specs, is_leaf=lambda s: isinstance(s, P))
    manual_specs = jax.tree.map(lambda spec: _manual_spec(spec, fsdp_axes), specs,
                                is_leaf=lambda s: isinstance(s, P))
    # A None leaf is no pytree leaf: carry each dimension as a one-element tuple.
    dims = jax.tree.map(lambda d: (d,), dims, is_leaf=lambda d: d is None or isinstance(d, int))

    def gather(shard, dim):
        (dim,) = dim
        if dim is None:
            return shard
        stacked = _to_tiles(shard[None])
        for axis in reversed(fsdp_axes):  # the inner groups first: shard index outer x inner
            stacked = jax.lax.all_gather(stacked, axis, axis=0, tiled=True)
        full_shape = shard.shape[:dim] + (-1,) + shard.shape[dim + 1:]
        return jnp.moveaxis(_from_tiles(stacked, shard.shape), 0, dim).reshape(full_shape)

    def reduce(grad, dim):
        (dim,) = dim
        if dim is None:
            return jax.lax.psum(grad, batch_axes)
        split = grad.shape[:dim] + (n, grad.shape[dim] // n) + grad.shape[dim + 1:]
        shards = jnp.moveaxis(grad.reshape(split), dim, 0)  # [n, *one shard's shape]
        tiles = _to_tiles(shards)
        for axis in fsdp_axes:  # the outer groups first, the transpose of `gather`
            tiles = jax.lax.psum_scatter(tiles, axis, scatter_dimension=0, tiled=True)
        return jax.lax.psum(_from_tiles(tiles, shards.shape[1:])[0], "data")

    def global_sum(tree):
        return jax.tree.map(lambda x: jax.lax.psum(x, batch_axes), tree)

    def local(param_shards, local_batch, key):
        key = jax.random.fold_in(key, jax.lax.axis_index(batch_axes))
        full = jax.tree.map(gather, param_shards, dims)
        grads, sums = compute(full, local_batch, key, global_sum)
        return jax.tree.map(reduce, grads, dims), global_sum(sums)

    batch_specs = jax.tree.map(lambda _: P(batch_axes), batch)
    step = jax.shard_map(local, mesh=step_mesh, in_specs=(manual_specs, batch_specs, P()),
                         out_specs=(manual_specs, P()), axis_names=set(batch_axes),
                         check_vma=False)
    if step_mesh is mesh:
        return step(params, batch, rng)
    with jax.sharding.use_abstract_mesh(step_mesh.abstract_mesh):  # the mesh in context must be
        return step(params, batch, rng)                             # the shard_map's
