"""Device mesh and the one table of logical-axis rules.

Every parameter and key activation names its axes logically (`embed`, `heads`, `activation_batch`, ...);
`RULES` maps each name to mesh axes (`data`, `fsdp`, `tensor`). A new mesh shape is a config change, never a
model change. Multi-host: meshes are built over `jax.devices()` (all hosts' devices), and
`maybe_initialize_distributed` calls `jax.distributed.initialize()` when the config asks for it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable, Mapping, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from jaxwebrl.fields import FieldError

MESH_AXES: tuple[str, ...] = ("data", "fsdp", "tensor")

# logical axis -> mesh axis (or tuple of mesh axes, or None = replicated). The only such table.
RULES: dict[str, str | tuple[str, ...] | None] = {
    # parameters
    "vocab": "tensor",
    "embed": "fsdp",
    "mlp": "tensor",
    "heads": "tensor",
    "kv_heads": "tensor",
    "head_dim": None,
    "layers": None,
    "norm": None,
    "qkv": None,  # the q/k/v index of a fused projection (vision encoder)
    "vision_patch": None,  # pixels of one patch (channels x frames x patch x patch)
    "vision_positions": None,  # rows of the learned vision position grid
    # activations
    "activation_batch": ("data", "fsdp"),
    "activation_length": None,
    "activation_embed": None,
    "activation_heads": "tensor",
    "activation_mlp": "tensor",
    "activation_vocab": "tensor",
    # KV cache of the sampler: slots over data, heads over tensor
    "cache_batch": "data",
    "cache_length": None,
    "cache_pages": None,  # the prefix cache's page pool (engines/page_pool.py): pages replicated, heads split
}


class ShardingError(ValueError):
    """A mesh that cannot shard a tensor, or a mesh that does not fit the devices."""


@dataclasses.dataclass(frozen=True)
class MeshConfig:
    """The `mesh` config section: devices per mesh axis; one axis may be -1 (all remaining devices)."""

    data: int = 1
    fsdp: int = -1
    tensor: int = 1

    def __post_init__(self) -> None:
        sizes = dataclasses.asdict(self)
        if list(sizes.values()).count(-1) > 1:
            raise FieldError("", f"{sizes} has more than one -1", "set at most one axis to -1")
        if any(v == 0 or v < -1 for v in sizes.values()):
            raise FieldError("", f"{sizes} has a non-positive size", "use positive sizes or one -1")

    def sizes(self, num_devices: int) -> dict[str, int]:
        return resolve_mesh(dataclasses.asdict(self), num_devices)


def resolve_mesh(shape: Mapping[str, int], num_devices: int) -> dict[str, int]:
    """Axis sizes with -1 filled in from the device count; ShardingError when the mesh cannot fit."""
    unknown = set(shape) - set(MESH_AXES)
    if unknown:
        raise ShardingError(f"mesh axes {sorted(unknown)} are unknown; use {MESH_AXES}")
    sizes = {a: int(shape.get(a, 1)) for a in MESH_AXES}
    if list(sizes.values()).count(-1) > 1:
        raise ShardingError(f"mesh {sizes} has more than one -1; set at most one axis to -1")
    known = math.prod(s for s in sizes.values() if s != -1)
    if known > num_devices:
        raise ShardingError(f"mesh {sizes} needs {known} devices but only {num_devices} exist; "
                            "shrink the mesh or set one axis to -1 (all remaining devices)")
    for axis, size in sizes.items():
        if size == -1:
            if num_devices % known:
                raise ShardingError(f"mesh {sizes}: {num_devices} devices are not divisible by {known}; "
                                    "make the other axes divide the device count")
            sizes[axis] = num_devices // known
    return sizes


def make_mesh(shape: Mapping[str, int] | MeshConfig, devices: Sequence[jax.Device] | None = None) -> Mesh:
    """Mesh over (data, fsdp, tensor); one size may be -1 = all remaining devices."""
    devices = list(devices if devices is not None else jax.devices())
    if isinstance(shape, MeshConfig):
        shape = dataclasses.asdict(shape)
    sizes = list(resolve_mesh(shape, len(devices)).values())
    grid = np.asarray(devices[: math.prod(sizes)]).reshape(sizes)
    return Mesh(grid, MESH_AXES)


def logical_to_spec(
    logical: Iterable[str | None], rules: Mapping[str, Any] = RULES
) -> P:
    """PartitionSpec for a tuple of logical names; a mesh axis is used at most once (first wins)."""
    used: set[str] = set()
    out: list[Any] = []
    for name in logical:
        target = rules.get(name) if name is not None else None
        axes = (target,) if isinstance(target, str) else tuple(target or ())
        axes = tuple(a for a in axes if a not in used)
        used.update(axes)
        out.append(None if not axes else axes[0] if len(axes) == 1 else axes)
    return P(*out)


def _axis_size(mesh: Mesh | Any, entry: Any) -> int:
    if entry is None:
        return 1
    names = (entry,) if isinstance(entry, str) else entry
    return math.prod(mesh.shape[n] for n in names)


def check_divisible(name: str, shape: Sequence[int], spec: P, mesh: Mesh) -> None:
    """Raise naming the param, the dimension and the mesh axis when a sharded dim does not divide."""
    for dim, (size, entry) in enumerate(zip(shape, tuple(spec) + (None,) * len(shape))):
        n = _axis_size(mesh, entry)
        if size % n:
            raise ShardingError(
                f"param {name!r}: dimension {dim} of size {size} is not divisible by mesh axis {entry!r} "
                f"of size {n}; change config.mesh or the rule for that logical axis"
            )


def _path_name(path: tuple[Any, ...]) -> str:
    return "/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)


def tree_shardings(
    shapes: Any, axes: Any, mesh: Mesh, rules: Mapping[str, Any] = RULES
) -> Any:
    """NamedShardings for a tree of arrays/ShapeDtypeStructs given a same-structured tree of logical axes."""

    def one(path: tuple[Any, ...], leaf: Any, logical: tuple[str, ...]) -> NamedSharding:
        spec = logical_to_spec(logical, rules)
        check_divisible(_path_name(path), leaf.shape, spec, mesh)
        return NamedSharding(mesh, spec)

    return jax.tree_util.tree_map_with_path(one, shapes, axes)


def shard_tree(tree: Any, axes: Any, mesh: Mesh, rules: Mapping[str, Any] = RULES) -> Any:
    """Place a tree of (host or device) arrays with the shardings its logical axes give."""
    return jax.device_put(tree, tree_shardings(tree, axes, mesh, rules))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def batch_sharding(mesh: Mesh, ndim: int = 2) -> NamedSharding:
    """Sharding of a [batch, ...] input array: batch over data x fsdp."""
    return NamedSharding(mesh, logical_to_spec(("activation_batch",) + (None,) * (ndim - 1)))


def batch_spec_sharding(mesh: Mesh) -> NamedSharding:
    """A step's [accum, micro_batch, T] input: micro-batch rows over data x fsdp."""
    return NamedSharding(mesh, logical_to_spec((None, "activation_batch", None)))


def constrain(x: jax.Array, logical: Sequence[str | None], rules: Mapping[str, Any] = RULES) -> jax.Array:
    """`with_sharding_constraint` by logical names under the current mesh; a no-op without one.

    Dimensions the mesh axis does not divide (e.g. a batch of 1 in the sampler) stay replicated.
    """
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty:
        return x
    spec = list(logical_to_spec(logical, rules))
    spec += [None] * (x.ndim - len(spec))
    for i, entry in enumerate(spec):
        if entry is not None and x.shape[i] % _axis_size(mesh, entry):
            spec[i] = None
    return jax.lax.with_sharding_constraint(x, P(*spec))


def optimizer_state_shardings(opt_state_shapes: Any, params_shapes: Any, params_shardings: Any, mesh: Mesh) -> Any:
    """Shardings for optimizer state: a leaf whose path ends with a param's path and has its shape (Adam's
    mu, nu, ...) takes that param's sharding; everything else (step counts) is replicated."""
    params = [
        (_path_name(path), leaf.shape, sh)
        for (path, leaf), sh in zip(jax.tree_util.tree_leaves_with_path(params_shapes), jax.tree.leaves(params_shardings))
    ]

    def one(path: tuple[Any, ...], leaf: Any) -> NamedSharding:
        name = _path_name(path)
        for pname, shape, sh in params:
            if name.endswith(pname) and tuple(leaf.shape) == tuple(shape):
                return sh
        return replicated(mesh)

    return jax.tree_util.tree_map_with_path(one, opt_state_shapes)


def maybe_initialize_distributed(cfg: Any) -> None:
    """Call `jax.distributed.initialize()` for multi-host runs (TPU pods, GPU clusters) when configured.

    `cfg.multihost` may be False, True (auto-detect coordinator from the environment, as on Cloud TPU)
    or a dict with coordinator_address / num_processes / process_id.
    """
    setting = getattr(cfg, "multihost", False)
    if not setting:
        return
    if isinstance(setting, Mapping) or hasattr(setting, "to_dict"):
        kwargs = dict(setting.to_dict() if hasattr(setting, "to_dict") else setting)
        kwargs.pop("enabled", None)
        jax.distributed.initialize(**{k: v for k, v in kwargs.items() if v not in (None, "")})
    else:
        jax.distributed.initialize()
