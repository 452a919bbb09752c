"""Device mesh and the one table that maps logical axis names onto it.

Parameters carry logical names (`vocab`, `embed`, `heads`, `kv`, `mlp`, `layers` for a scanned
stack), batches and activations (`batch`, `length`, and the parameters' names). LOGICAL_AXIS_RULES
maps them onto the mesh axes `data`, `fsdp`, `tensor`; a dimension that a mesh axis does not
divide is replicated instead of failing. A one-device mesh is the same code path as a pod.

Activations are pinned where their layout matters (`constrain`, called by the model) only while
a step is traced under `activation_sharding(mesh)` (`with_activation_sharding` wraps a step
function so): elsewhere, e.g. a plain `model.apply`, the constraints are no-ops.
"""

from __future__ import annotations

import contextlib
import functools
import gc
from typing import Any, Callable, Iterator, Mapping, Sequence

import flax.linen as nn
import jax
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from bert_jax.runtime import platform, xla_options

MESH_AXES = ("data", "fsdp", "tensor")

LOGICAL_AXIS_RULES: tuple[tuple[str, Any], ...] = (
    ("batch", ("data", "fsdp")),
    ("length", None),
    ("vocab", "tensor"),
    ("embed", "fsdp"),
    ("heads", "tensor"),
    ("kv", None),
    ("mlp", "tensor"),
    ("layers", None),
)


def mesh_shape(data: int = -1, fsdp: int = 1, tensor: int = 1,
               num_devices: int | None = None) -> tuple[int, int, int]:
    """Resolve one -1 in (data, fsdp, tensor) to the remaining devices; check the product."""
    num_devices = jax.device_count() if num_devices is None else num_devices
    shape = [data, fsdp, tensor]
    if shape.count(-1) > 1:
        raise ValueError(f"mesh (data, fsdp, tensor)={tuple(shape)}: at most one axis may be -1")
    if any(s == 0 or s < -1 for s in shape):
        raise ValueError(f"mesh (data, fsdp, tensor)={tuple(shape)}: sizes must be positive or -1")
    known = int(np.prod([s for s in shape if s != -1]))
    if -1 in shape:
        if num_devices % known:
            raise ValueError(f"mesh (data, fsdp, tensor)={tuple(shape)}: {num_devices} devices are "
                             f"not divisible by {known}")
        shape[shape.index(-1)] = num_devices // known
    if int(np.prod(shape)) != num_devices:
        raise ValueError(f"mesh (data, fsdp, tensor)={tuple(shape)} needs {int(np.prod(shape))} "
                         f"devices, but {num_devices} are available")
    return tuple(shape)  # type: ignore[return-value]


def make_mesh(data: int = -1, fsdp: int = 1, tensor: int = 1,
              devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A Mesh with axes (data, fsdp, tensor) over all devices (of every process) by default."""
    devices = list(jax.devices() if devices is None else devices)
    shape = mesh_shape(data, fsdp, tensor, len(devices))
    # All devices, or a whole TPU slice described by jax.experimental.topologies: laid out by
    # the interconnect (neighbouring mesh positions on neighbouring chips).
    if len(devices) == jax.device_count() or platform.platform_of(devices) == "tpu":
        device_grid = mesh_utils.create_device_mesh(shape, devices=devices)
    else:
        device_grid = np.asarray(devices).reshape(shape)
    return Mesh(device_grid, MESH_AXES)


def mesh_axes_for(logical_axes: Sequence[str | None] | None, shape: Sequence[int], mesh: Mesh,
                  rules: Sequence[tuple[str, Any]] = LOGICAL_AXIS_RULES) -> P:
    """PartitionSpec for one array: logical names -> mesh axes, replicating what doesn't divide."""
    if logical_axes is None:
        return P()
    rule_table = dict(rules)
    # Axes that are manual here (inside a jax.shard_map over them, as bert_jax.train.fsdp's
    # step is) are already split by hand: the partitioner may be told only about the others.
    spec, used = [], set(getattr(mesh, "manual_axes", ()))
    for name, size in zip(logical_axes, shape):
        target = rule_table.get(name) if name is not None else None
        axes = (target,) if isinstance(target, str) else tuple(target or ())
        axes = tuple(a for a in axes if a not in used and mesh.shape.get(a, 1) > 1)
        if axes and size % int(np.prod([mesh.shape[a] for a in axes])) == 0:
            used.update(axes)
            spec.append(axes[0] if len(axes) == 1 else axes)
        else:
            spec.append(None)
    return P(*spec)


def logical_specs(boxed_tree: Any) -> Any:
    """The logical axis names of every leaf of a tree of (possibly) nn.Partitioned params."""
    return nn.get_partition_spec(boxed_tree)


def shardings_for(shapes: Any, specs: Any, mesh: Mesh) -> Any:
    """NamedShardings for a tree of arrays (or ShapeDtypeStructs) given their logical specs."""
    def one(spec, x):
        axes = tuple(spec) if isinstance(spec, P) else spec
        return NamedSharding(mesh, mesh_axes_for(axes, x.shape, mesh))
    return jax.tree.map(one, specs, shapes, is_leaf=lambda s: isinstance(s, P) or s is None)


def param_shardings(abstract_boxed: Any, mesh: Mesh) -> Any:
    """NamedShardings for every parameter, from a tree of boxed abstract params.

    abstract_boxed: what `jax.eval_shape(init_fn, rng)` gives for an init_fn returning
    `model.init(...)["params"]` (nn.Partitioned leaves carry the logical axis names).
    """
    return shardings_for(nn.meta.unbox(abstract_boxed), logical_specs(abstract_boxed), mesh)


def init_sharded(init_fn: Callable[[], Any], mesh: Mesh) -> tuple[Any, Any]:
    """Run `init_fn` (returns boxed params) under jit so that every leaf is born sharded.

    Returns (unboxed params placed on `mesh`, their NamedShardings).
    """
    shardings = param_shardings(jax.eval_shape(init_fn), mesh)
    # XLA:CPU keeps an executable's scratch buffers for as long as the executable lives (hundreds
    # of MB for BERT-base's initialiser), so the one-off initialiser is dropped once it has run:
    # wait for it, then collect the reference cycles that hold it.
    options = xla_options.one_off_options(platform.platform_of(mesh))
    initialize = jax.jit(lambda: nn.meta.unbox(init_fn()), out_shardings=shardings,
                         compiler_options=options)
    params = jax.block_until_ready(initialize())
    del initialize
    gc.collect()
    return params, shardings


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Batches are split along their first dimension as the `batch` rule says ((data, fsdp)).

    Every axis is kept, also those of size 1, so that the spec is the same on every mesh.
    """
    return NamedSharding(mesh, P(dict(LOGICAL_AXIS_RULES)["batch"]))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def data_parallel_size(mesh: Mesh) -> int:
    return mesh.shape["data"] * mesh.shape["fsdp"]


def device_put_batch(host_batch: Mapping[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
    """Host-local numpy batch (this process's rows) -> global jax.Arrays sharded over
    (data, fsdp)."""
    sharding = batch_sharding(mesh)
    return {k: jax.make_array_from_process_local_data(sharding, np.asarray(v))
            for k, v in host_batch.items()}


# ----- activations -------------------------------------------------------------------------------

def constrain(x: jax.Array, logical_axes: Sequence[str | None]) -> jax.Array:
    """x pinned to the layout its logical axes name, under the rules and mesh in context.

    A no-op unless both are in context (`activation_sharding`). Names map as the parameters' do
    (`mesh_axes_for`): a dimension that its mesh axes do not divide stays whole, so an activation
    and the weight it meets agree (flax's nn.with_logical_constraint would shard it unevenly).
    """
    rules = nn.get_logical_axis_rules()
    mesh = jax.sharding.get_abstract_mesh()
    if not rules or mesh.empty:
        return x
    return jax.lax.with_sharding_constraint(x, mesh_axes_for(logical_axes, x.shape, mesh, rules))


@contextlib.contextmanager
def activation_sharding(mesh: Mesh, rules: Sequence[tuple[str, Any]] = LOGICAL_AXIS_RULES
                        ) -> Iterator[None]:
    """While open (also inside jit), `constrain` pins activations to `mesh` by `rules`, and
    platform-dependent choices follow the mesh's devices (`bert_jax.runtime.platform.current`)."""
    with (jax.sharding.use_abstract_mesh(mesh.abstract_mesh), nn.logical_axis_rules(rules),
          platform.compiling_for(platform.platform_of(mesh))):
        yield


def with_activation_sharding(fn: Callable[..., Any], mesh: Mesh) -> Callable[..., Any]:
    """fn, which when traced (by jax.jit) runs under activation_sharding(mesh)."""
    @functools.wraps(fn)
    def constrained(*args, **kwargs):
        with activation_sharding(mesh):
            return fn(*args, **kwargs)
    return constrained
