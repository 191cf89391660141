"""jax.sharding on podlet: meshes, partition specs, named shardings (issue 26).

What is real and what is not. podlet's arrays live on the host, whole. The sharding
annotations (``device_put(x, sharding)``, ``jit``'s ``in_shardings`` /
``out_shardings``, ``lax.with_sharding_constraint``) are checked as JAX checks them —
the mesh axis names exist, no mesh axis is used twice in a spec, a spec is no longer
than the array's rank, a sharded dimension divides evenly by the mesh axes over it —
and then:

* a one-device mesh (every axis of size 1): an exact no-op, as on JAX;
* a data-parallel layout (mesh axes of size > 1 only on dimension 0, the batch axis;
  everything else replicated) in ``jit``'s ``in_shardings``: the work is split. The
  traced global computation is partitioned over the n devices
  (``cpp/podlet/ir/partition.cc``: local batch blocks, replicated parameters, a psum
  where the batch axis is reduced or contracted) and run on the pmap executor, under
  ``mpirun`` across processes too; the results are the global arrays, equal to the
  unsharded jit's up to the order of floating-point sums (see
  ``ShardedJittedFunction``). ``device_put(x, sharding)`` with a split batch axis
  commits the array (``x.sharding``), and any jit called on committed arrays splits by
  them, as JAX's jit follows its arguments' shardings; ``with_sharding_constraint``
  only checks;
* any other layout (a mesh axis of size > 1 on dimension 1 or later: tensor / model
  parallelism) raises ``NotImplementedError`` naming the mesh axis and the array.
"""
import collections
import contextlib
import enum
import warnings

import numpy as np

from .. import tree_util

# ---------------------------------------------------------------------------------
# PartitionSpec
# ---------------------------------------------------------------------------------


class UnconstrainedSingleton:
    def __repr__(self):
        return "UNCONSTRAINED"

    def __reduce__(self):
        return (_get_unconstrained, ())


_UNCONSTRAINED = UnconstrainedSingleton()


def _get_unconstrained():
    return _UNCONSTRAINED


def _canonicalize_partition(p):
    # JAX: a list is a tuple; an empty tuple means None; a 1-tuple is its element.
    if isinstance(p, list):
        p = tuple(p)
    if isinstance(p, tuple):
        if len(p) == 0:
            return None
        if len(p) == 1:
            return p[0]
    return p


class PartitionSpec:
    """jax.sharding.PartitionSpec (``P``): one entry per array dimension, each None (not
    sharded), a mesh axis name, or a tuple of mesh axis names; shorter than the rank
    means the remaining dimensions are not sharded. Compared by value; a pytree leaf."""
    __slots__ = ("_partitions", "unreduced", "reduced")
    UNCONSTRAINED = _UNCONSTRAINED

    def __init__(self, *partitions, unreduced=frozenset(), reduced=frozenset()):
        for what, s in (("unreduced", unreduced), ("reduced", reduced)):
            if not isinstance(s, (set, frozenset)):
                raise TypeError(f"{what} argument of PartitionSpec should of type `frozenset` or `set`. "
                                f"Got type {s}")
        parts = tuple(_canonicalize_partition(p) for p in partitions)
        for p in parts:
            hash(p)  # a set or a dict is no axis name (TypeError: unhashable type, as JAX)
        unreduced, reduced = frozenset(unreduced), frozenset(reduced)
        if None in unreduced or None in reduced:
            raise ValueError("unreduced/reduced cannot contain None. All elements should refer to the mesh axes.")
        if unreduced & reduced:
            raise ValueError("`unreduced` and `reduced` argument to PartitionSpec cannot overlap. "
                             f"Got unreduced: {unreduced} and reduced: {reduced}")
        object.__setattr__(self, "_partitions", parts)
        object.__setattr__(self, "unreduced", unreduced)
        object.__setattr__(self, "reduced", reduced)

    def __setattr__(self, name, value):
        raise AttributeError(f"PartitionSpec is immutable (cannot set {name!r})")

    @property
    def partitions(self):
        return self._partitions

    def __repr__(self):
        pr = repr(self._partitions)[1:-1]
        extra = []
        if self.unreduced:
            extra.append(f"unreduced={set(self.unreduced)!r}")
        if self.reduced:
            extra.append(f"reduced={set(self.reduced)!r}")
        if not extra:
            return f"P({pr})"
        pr = "" if not pr else f"{pr} " if pr.endswith(",") else f"{pr}, "
        return f"P({pr}{', '.join(extra)})"

    __str__ = __repr__

    def __eq__(self, other):
        if not isinstance(other, PartitionSpec):
            return NotImplemented
        return (self._partitions, self.unreduced, self.reduced) == (other._partitions, other.unreduced,
                                                                    other.reduced)

    def __hash__(self):
        return hash(("PartitionSpec", self._partitions, self.unreduced, self.reduced))

    def __getitem__(self, i):
        return self._partitions[i]

    def __iter__(self):
        return iter(self._partitions)

    def __len__(self):
        return len(self._partitions)

    def __add__(self, other):
        if isinstance(other, PartitionSpec):
            return PartitionSpec(*self._partitions, *other._partitions, unreduced=self.unreduced | other.unreduced,
                                 reduced=self.reduced | other.reduced)
        if isinstance(other, tuple):
            return PartitionSpec(*self._partitions, *other)
        return NotImplemented

    def __radd__(self, other):
        if isinstance(other, tuple):
            return PartitionSpec(*other, *self._partitions)
        return NotImplemented

    def __reduce__(self):
        return (_make_spec, (self._partitions, self.unreduced, self.reduced))

    def index(self, value):
        return self._partitions.index(_canonicalize_partition(value))

    def count(self, value):
        return self._partitions.count(_canonicalize_partition(value))

    def update(self, partitions=None, unreduced=None, reduced=None):
        return PartitionSpec(*(self._partitions if partitions is None else partitions),
                             unreduced=self.unreduced if unreduced is None else unreduced,
                             reduced=self.reduced if reduced is None else reduced)


def _make_spec(partitions, unreduced, reduced):
    return PartitionSpec(*partitions, unreduced=unreduced, reduced=reduced)


P = PartitionSpec


def _spec_axes(entry):
    """The mesh axis names one spec entry names (None / UNCONSTRAINED: none)."""
    if entry is None or entry is _UNCONSTRAINED:
        return ()
    return entry if isinstance(entry, tuple) else (entry,)


# ---------------------------------------------------------------------------------
# Meshes
# ---------------------------------------------------------------------------------
class AxisType(enum.Enum):
    Auto = enum.auto()
    Explicit = enum.auto()
    Manual = enum.auto()

    def __repr__(self):
        return self.name


class AbstractMesh:
    """jax.sharding.AbstractMesh: axis names and sizes without devices."""

    def __init__(self, axis_sizes, axis_names, axis_types=None):
        self.axis_sizes = tuple(int(s) for s in axis_sizes)
        self.axis_names = tuple(axis_names)
        if len(self.axis_sizes) != len(self.axis_names):
            raise ValueError(f"AbstractMesh needs one size per axis name, got sizes {self.axis_sizes} and "
                             f"names {self.axis_names}")
        self.axis_types = _axis_types(axis_types, len(self.axis_names), AxisType.Auto)

    @property
    def shape(self):
        return collections.OrderedDict(zip(self.axis_names, self.axis_sizes))

    @property
    def shape_tuple(self):
        return tuple(zip(self.axis_names, self.axis_sizes))

    @property
    def size(self):
        return int(np.prod(self.axis_sizes, dtype=np.int64)) if self.axis_sizes else 0

    @property
    def empty(self):
        return len(self.axis_names) == 0

    @property
    def are_all_axes_auto(self):
        return all(t == AxisType.Auto for t in self.axis_types)

    @property
    def are_all_axes_explicit(self):
        return all(t == AxisType.Explicit for t in self.axis_types)

    def __eq__(self, other):
        return (isinstance(other, AbstractMesh) and not isinstance(other, Mesh)
                and (self.axis_sizes, self.axis_names, self.axis_types)
                == (other.axis_sizes, other.axis_names, other.axis_types))

    def __hash__(self):
        return hash((self.axis_sizes, self.axis_names, self.axis_types))

    def __repr__(self):
        return f"AbstractMesh({', '.join(f'{n!r}: {s}' for n, s in self.shape_tuple)}, axis_types={self.axis_types})"


def _axis_types(axis_types, n, default):
    if axis_types is None:
        return (default,) * n
    if isinstance(axis_types, AxisType):
        axis_types = (axis_types,) * n
    axis_types = tuple(axis_types)
    if len(axis_types) != n or not all(isinstance(t, AxisType) for t in axis_types):
        raise ValueError(f"axis_types must be {n} AxisType values (one per mesh axis), got {axis_types}")
    return axis_types


_EMPTY_ABSTRACT = AbstractMesh((), ())


class Mesh(AbstractMesh):
    """jax.sharding.Mesh: an ndarray of podlet devices with a name per axis. As a context
    manager it is the mesh PartitionSpecs refer to (like ``podlet.set_mesh``)."""

    def __init__(self, devices, axis_names, axis_types=None):
        from .pmap import Device
        if isinstance(axis_names, str):
            axis_names = (axis_names,)
        axis_names = tuple(axis_names)
        devs = np.empty(np.shape(devices), dtype=object) if not isinstance(devices, np.ndarray) else None
        if devs is not None:
            for idx in np.ndindex(devs.shape):
                devs[idx] = np.asarray(devices, dtype=object)[idx]
        else:
            devs = devices.astype(object)
        if devs.ndim != len(axis_names):
            raise ValueError("Mesh requires the ndim of its first argument (`devices`) to equal the length of its "
                             f"second argument (`axis_names`), but got devices.ndim == {devs.ndim} and "
                             f"len(axis_names) == {len(axis_names)}.")
        for d in devs.flat:
            if not isinstance(d, Device):
                raise TypeError(f"Mesh devices must be podlet devices (podlet.devices()), got {d!r}")
        ids = [d.id for d in devs.flat]
        if len(set(ids)) != len(ids):
            raise ValueError(f"Mesh devices must be distinct, got device ids {ids}")
        dup = [n for n, c in collections.Counter(axis_names).items() if c > 1]
        if dup:
            raise ValueError(f"Mesh axis names must be unique, got {axis_names} ({dup[0]!r} repeats)")
        super().__init__(devs.shape, axis_names, axis_types)
        devs.flags.writeable = False
        self.devices = devs
        self._previous = []

    @property
    def device_ids(self):
        return np.vectorize(lambda d: d.id, otypes=[int])(self.devices)

    @property
    def local_devices(self):
        return list(self.devices.flat)

    @property
    def abstract_mesh(self):
        return AbstractMesh(self.axis_sizes, self.axis_names, self.axis_types)

    @property
    def is_multi_process(self):
        return len({d.process_index for d in self.devices.flat}) > 1

    def __eq__(self, other):
        return (isinstance(other, Mesh) and self.axis_names == other.axis_names
                and self.axis_types == other.axis_types and self.devices.shape == other.devices.shape
                and [d.id for d in self.devices.flat] == [d.id for d in other.devices.flat])

    def __hash__(self):
        return hash((self.axis_names, self.axis_types, self.devices.shape, tuple(d.id for d in self.devices.flat)))

    def __enter__(self):
        # jax 0.10's ``with mesh:``: the legacy resource environment, which only
        # with_sharding_constraint's PartitionSpecs read (set_mesh sets the mesh that
        # device_put, jit and get_abstract_mesh see)
        warnings.warn("`with mesh:` context manager has been deprecated. Please use `with podlet.set_mesh(mesh):` "
                      "instead.", DeprecationWarning, stacklevel=2)
        self._previous.append(_state.legacy_mesh)
        _state.legacy_mesh = self
        return self

    def __exit__(self, *exc):
        _state.legacy_mesh = self._previous.pop()
        return False

    def __repr__(self):
        return (f"Mesh(axis_sizes={self.axis_sizes}, axis_names={self.axis_names}, "
                f"axis_types={self.axis_types})")

    def __str__(self):
        return f"Mesh({', '.join(f'{n!r}: {s}' for n, s in self.shape_tuple)}, axis_types={self.axis_types})"


class _State:
    mesh = None          # set_mesh / use_abstract_mesh
    legacy_mesh = None   # ``with mesh:``


_state = _State()


class set_mesh:
    """jax.set_mesh: makes ``mesh`` the current mesh; as a context manager, until the
    block ends (PartitionSpecs given to device_put / jit / with_sharding_constraint refer
    to it)."""

    def __init__(self, mesh):
        if mesh is not None and not isinstance(mesh, Mesh):
            raise TypeError(f"set_mesh expects a podlet.sharding.Mesh, got {mesh!r}")
        self._prev = _state.mesh
        _state.mesh = mesh

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        _state.mesh = self._prev
        return False


@contextlib.contextmanager
def use_abstract_mesh(mesh):
    """jax.sharding.use_abstract_mesh: the abstract mesh get_abstract_mesh returns."""
    if not isinstance(mesh, AbstractMesh):
        raise TypeError(f"use_abstract_mesh expects an AbstractMesh, got {mesh!r}")
    prev = _state.mesh
    _state.mesh = mesh
    try:
        yield
    finally:
        _state.mesh = prev


def get_mesh():
    """jax.sharding.get_mesh: the concrete mesh set by set_mesh / ``with mesh`` (an empty
    mesh when none)."""
    m = _state.mesh
    return m if isinstance(m, Mesh) else _EMPTY_MESH


def get_abstract_mesh():
    """jax.sharding.get_abstract_mesh: the current mesh's axes (``.empty`` when none)."""
    m = _state.mesh
    if m is None:
        return _EMPTY_ABSTRACT
    return m.abstract_mesh if isinstance(m, Mesh) else m


def _context_mesh(what):
    m = _state.mesh
    if not isinstance(m, Mesh) and what == "with_sharding_constraint":
        m = _state.legacy_mesh
    if not isinstance(m, Mesh):
        raise RuntimeError(f"{what} requires a non-empty mesh in context if you are passing `PartitionSpec`s. "
                           "You can define a context mesh via `podlet.set_mesh(mesh)`. Alternatively, provide "
                           "`Sharding`s and then the mesh context manager is not required.")
    return m


def create_device_mesh(mesh_shape, devices=None, *, contiguous_submeshes=False, allow_split_physical_axes=False):
    """jax.experimental.mesh_utils.create_device_mesh: the devices (default
    ``podlet.devices()``) as an ndarray of ``mesh_shape`` (in device order: podlet's
    devices have no physical topology to follow)."""
    from .pmap import devices as all_devices
    if devices is None:
        devices = all_devices()
    devices = list(np.asarray(devices, dtype=object).flat)
    shape = tuple(int(s) for s in mesh_shape)
    if int(np.prod(shape, dtype=np.int64)) != len(devices):
        raise ValueError(f"Number of devices {len(devices)} must equal the product of mesh_shape {shape}")
    out = np.empty(len(devices), dtype=object)
    out[:] = devices
    return out.reshape(shape)


def make_mesh(axis_shapes, axis_names, axis_types=None, *, devices=None):
    """jax.make_mesh: a Mesh of the first prod(axis_shapes) devices (axis types Explicit
    by default, as jax 0.10)."""
    from .pmap import devices as all_devices
    shape = tuple(int(s) for s in axis_shapes)
    names = tuple(axis_names)
    if len(shape) != len(names):
        raise ValueError(f"Number of axis names should match the number of axes. Got axis_shapes={shape} and "
                         f"axis_names={names}")
    devs = list(all_devices() if devices is None else devices)
    n = int(np.prod(shape, dtype=np.int64))
    if n > len(devs):
        raise ValueError(f"Number of devices {len(devs)} must be >= the product of mesh_shape {shape}")
    return Mesh(create_device_mesh(shape, devs[:n]), names, _axis_types(axis_types, len(names), AxisType.Explicit))


# ---------------------------------------------------------------------------------
# Shardings
# ---------------------------------------------------------------------------------
class Sharding:
    """jax.sharding.Sharding: how an array is laid out over devices."""

    @property
    def device_set(self):
        raise NotImplementedError(f"{type(self).__name__} does not define device_set")

    @property
    def num_devices(self):
        return len(self.device_set)

    @property
    def addressable_devices(self):
        from .pmap import process_index
        return {d for d in self.device_set if d.process_index == process_index()}

    @property
    def is_fully_addressable(self):
        return self.addressable_devices == self.device_set

    @property
    def memory_kind(self):
        return getattr(self, "_memory_kind", None) or "device"

    def with_memory_kind(self, kind):
        raise NotImplementedError(f"podlet has one memory kind ('device'); with_memory_kind({kind!r})")

    def is_equivalent_to(self, other, ndim):
        return (isinstance(other, Sharding) and self.device_set == other.device_set
                and self.shard_shape((1,) * ndim) == other.shard_shape((1,) * ndim)
                and self._normalized(ndim) == other._normalized(ndim))

    def _normalized(self, ndim):
        return ((),) * ndim


class SingleDeviceSharding(Sharding):
    """jax.sharding.SingleDeviceSharding: the whole array on one device."""

    def __init__(self, device, *, memory_kind=None):
        from .pmap import Device
        if not isinstance(device, Device):
            raise TypeError(f"SingleDeviceSharding expects a podlet device, got {device!r}")
        self._device = device
        self._memory_kind = memory_kind

    @property
    def device_set(self):
        return {self._device}

    @property
    def is_fully_replicated(self):
        return True

    def shard_shape(self, global_shape):
        return tuple(global_shape)

    def devices_indices_map(self, global_shape):
        return {self._device: tuple(slice(None) for _ in global_shape)}

    def __eq__(self, other):
        return isinstance(other, SingleDeviceSharding) and other._device == self._device

    def __hash__(self):
        return hash(("SingleDeviceSharding", self._device))

    def __repr__(self):
        return f"SingleDeviceSharding(device={self._device!r}, memory_kind={self.memory_kind})"


def make_single_device_sharding(device):
    return SingleDeviceSharding(device)


class NamedSharding(Sharding):
    """jax.sharding.NamedSharding(mesh, spec): dimension i of an array is split over the
    mesh axes ``spec[i]`` names, and replicated over the others."""

    def __init__(self, mesh, spec, *, memory_kind=None):
        if not isinstance(mesh, AbstractMesh):
            raise TypeError(f"NamedSharding expects a Mesh as its first argument, got {mesh!r}")
        if not isinstance(spec, PartitionSpec):
            raise TypeError(f"NamedSharding expects a PartitionSpec as spec, got {spec!r} of type "
                            f"{type(spec).__name__}")
        seen = set()
        for entry in spec:
            for ax in _spec_axes(entry):
                if ax not in mesh.axis_names:
                    raise ValueError(f"Resource axis: {ax} of {spec} is not found in mesh: {mesh.axis_names}.")
                if ax in seen:
                    raise ValueError("A single NamedSharding spec specification can map every mesh axis to at "
                                     f"most one positional dimension, but {spec} has duplicate entries for `{ax}`")
                seen.add(ax)
        self.mesh = mesh
        self.spec = spec
        self._memory_kind = memory_kind

    @property
    def device_set(self):
        if not isinstance(self.mesh, Mesh):
            raise ValueError("a NamedSharding over an AbstractMesh has no devices")
        return set(self.mesh.devices.flat)

    @property
    def num_devices(self):
        return self.mesh.size

    def _factors(self, ndim):
        sizes = self.mesh.shape
        out = [1] * max(ndim, len(self.spec))
        for i, entry in enumerate(self.spec):
            for ax in _spec_axes(entry):
                out[i] *= sizes[ax]
        return out

    @property
    def is_fully_replicated(self):
        return all(f == 1 for f in self._factors(len(self.spec)))

    def _normalized(self, ndim):
        sizes = self.mesh.shape
        return tuple(tuple(a for a in _spec_axes(self.spec[i] if i < len(self.spec) else None) if sizes[a] > 1)
                     for i in range(ndim))

    def shard_shape(self, global_shape):
        shape = tuple(global_shape)
        check_spec(self, shape, "shard_shape")
        return tuple(d // f for d, f in zip(shape, self._factors(len(shape))))

    def devices_indices_map(self, global_shape):
        shape = tuple(global_shape)
        check_spec(self, shape, "devices_indices_map")
        names = self.mesh.axis_names
        out = {}
        for idx in np.ndindex(self.mesh.devices.shape):
            coord = dict(zip(names, idx))
            sl = []
            for i, n in enumerate(shape):
                axes = _spec_axes(self.spec[i]) if i < len(self.spec) else ()
                k, parts = 0, 1
                for ax in axes:
                    k = k * self.mesh.shape[ax] + coord[ax]
                    parts *= self.mesh.shape[ax]
                step = n // parts
                sl.append(slice(None) if parts == 1 else slice(k * step, (k + 1) * step))
            out[self.mesh.devices[idx]] = tuple(sl)
        return out

    def update(self, mesh=None, spec=None, memory_kind=None):
        return NamedSharding(self.mesh if mesh is None else mesh, self.spec if spec is None else spec,
                             memory_kind=self._memory_kind if memory_kind is None else memory_kind)

    def __eq__(self, other):
        return isinstance(other, NamedSharding) and self.mesh == other.mesh and self.spec == other.spec

    def __hash__(self):
        return hash(("NamedSharding", self.mesh, self.spec))

    def __repr__(self):
        return f"NamedSharding(mesh={self.mesh}, spec={self.spec}, memory_kind={self.memory_kind})"


# ---------------------------------------------------------------------------------
# Checks shared by device_put, jit and with_sharding_constraint
# ---------------------------------------------------------------------------------
def _as_sharding(s, what):
    if isinstance(s, PartitionSpec):
        return NamedSharding(_context_mesh(what), s)
    if s is None or isinstance(s, Sharding):
        return s
    raise TypeError(f"{what}: expected a podlet.sharding.Sharding or PartitionSpec, got {s!r} of type "
                    f"{type(s).__name__}")


def check_spec(sharding, shape, what, name=None):
    """Raises as JAX does when ``sharding`` cannot lay out an array of ``shape``, and
    NotImplementedError for a layout podlet cannot honour (a mesh axis of size > 1 on a
    dimension other than 0)."""
    if not isinstance(sharding, NamedSharding):
        return
    spec, sizes = sharding.spec, sharding.mesh.shape
    arr = f" {name}" if name else ""
    if len(spec) > len(shape):
        extra = " For scalars the PartitionSpec should be P()" if len(shape) == 0 else ""
        raise ValueError(f"One of {what} arguments{arr} is incompatible with its sharding annotation {sharding}: "
                         f"Sharding {sharding} is only valid for values of rank at least {len(spec)}, but was "
                         f"applied to a value of rank {len(shape)}.{extra}")
    factors = sharding._factors(len(shape))
    for i, (n, f) in enumerate(zip(shape, factors)):
        if n % f:
            raise ValueError(f"{what}: Sharding {sharding} implies that array{arr} axis {i} is partitioned {f} "
                             f"times, but the dimension size is {n} (full shape: {tuple(shape)}, per-dimension "
                             f"tiling factors: {factors} should evenly divide the shape)")
    for i, entry in enumerate(spec):
        if i == 0:
            continue
        for ax in _spec_axes(entry):
            if sizes[ax] > 1:
                raise NotImplementedError(
                    f"{what}: array{arr} of shape {tuple(shape)} is sharded over mesh axis {ax!r} (size "
                    f"{sizes[ax]}) on dimension {i} by {spec}: podlet supports data-parallel layouts only (mesh "
                    f"axes of size > 1 on dimension 0, the batch axis; everything else replicated), not "
                    f"model / tensor parallelism")


def _is_spec_leaf(x):
    return x is None or isinstance(x, (Sharding, PartitionSpec))


def _broadcast_prefix(prefix, tree, what):
    """(path, leaf, sharding) for every leaf of ``tree``, ``prefix`` being a tree prefix
    of it whose leaves are shardings, PartitionSpecs or None (unspecified)."""
    if _is_spec_leaf(prefix):
        return [(tuple(path), leaf, prefix) for path, leaf in tree_util.tree_flatten_with_path(tree)[0]]
    p_flat, p_def = tree_util.tree_flatten_with_path(prefix, is_leaf=_is_spec_leaf)
    try:
        subtrees = p_def.flatten_up_to(tree)
    except (ValueError, TypeError) as e:
        why = str(e).split("; value:")[0]
        why = why if len(why) < 400 else why[:400] + "..."
        raise ValueError(f"{what} specification must be a tree prefix of the corresponding value, got a "
                         f"specification of structure {p_def} for a value of structure "
                         f"{tree_util.tree_structure(tree)}: {why}") from None
    out = []
    for (ppath, s), sub in zip(p_flat, subtrees):
        for path, leaf in tree_util.tree_flatten_with_path(sub)[0]:
            out.append((tuple(ppath) + tuple(path), leaf, s))
    return out


def check_tree(prefix, tree, what, base=""):
    """Checks every leaf of ``tree`` against its sharding in ``prefix``."""
    for path, leaf, s in _broadcast_prefix(prefix, tree, what):
        s = _as_sharding(s, what)
        if s is None:
            continue
        shape = tuple(np.shape(leaf)) if not hasattr(leaf, "shape") else tuple(leaf.shape)
        check_spec(s, shape, what, name=(base + tree_util.keystr(tuple(path))) or None)


def _empty_mesh():
    m = object.__new__(Mesh)
    AbstractMesh.__init__(m, (), ())
    m.devices = np.empty((), dtype=object)
    m._previous = []
    return m


_EMPTY_MESH = _empty_mesh()


# ---------------------------------------------------------------------------------
# The entry points: device_put, with_sharding_constraint, reshard, jit's shardings
# ---------------------------------------------------------------------------------
def device_put_checked(x, sharding):
    """device_put(x, sharding-or-tree-of-them): checks each leaf against its sharding
    (podlet arrays live on the host: the values do not move)."""
    if isinstance(sharding, PartitionSpec) and not isinstance(_state.mesh, Mesh):
        raise ValueError("Please set a mesh via `podlet.set_mesh` if a PartitionSpec is passed to device_put")
    check_tree(sharding, x, "device_put")


_committed = [False]  # whether any array was ever committed to a split sharding


def _split_factor(sh, ndim):
    if isinstance(sh, NamedSharding) and ndim > 0 and isinstance(sh.mesh, Mesh):
        return sh._factors(ndim)[0]
    return 1


def commit(x, sharding):
    """The leaves of ``x`` (podlet Arrays, after device_put's conversion) whose sharding
    splits dimension 0 over several devices come back as new Arrays (same buffer) that
    remember it, as JAX's committed arrays do: a later ``jit`` without ``in_shardings``
    splits its work by them (``Array.sharding`` reports it)."""
    from .core import Array, Tracer
    marks = {}
    for path, leaf, sh in _broadcast_prefix(sharding, x, "device_put"):
        if isinstance(sh, PartitionSpec) and not isinstance(_state.mesh, Mesh):
            continue
        sh = _as_sharding(sh, "device_put")
        if isinstance(leaf, Array) and not isinstance(leaf, Tracer) and _split_factor(sh, leaf.ndim) > 1:
            marks[tuple(path)] = sh
    if not marks:
        return x
    from . import core
    core.committed_hook[0] = committed_call  # from now on plain jit calls look for them
    from .. import numpy as jnp

    def mark(path, leaf):
        sh = marks.get(tuple(path))
        if sh is None:
            return leaf
        out = jnp.reshape(leaf, leaf.shape)  # a new Array over the same buffer
        out.weak_type = getattr(leaf, "weak_type", False)
        out._sharding = sh
        return out
    return tree_util.tree_map_with_path(mark, x)


def _array_sharding(self):
    """jax.Array.sharding: the sharding the array was committed to by device_put (or a
    split jit output), else the one device's SingleDeviceSharding."""
    sh = getattr(self, "_sharding", None)
    if sh is not None:
        return sh
    from .pmap import devices
    return SingleDeviceSharding(devices()[0])


def with_sharding_constraint(x, shardings):
    """jax.lax.with_sharding_constraint: checks each leaf of ``x`` against its sharding
    (rank, mesh axes, even division; model-parallel layouts raise NotImplementedError)
    and returns ``x`` unchanged — podlet computes the global array on the host."""
    check_tree(shardings, x, "with_sharding_constraint")
    from .environment import device_put
    return device_put(x)  # NumPy leaves become Arrays, as in JAX


def reshard(xs, out_shardings):
    """jax.sharding.reshard: as with_sharding_constraint (values unchanged)."""
    check_tree(out_shardings, xs, "reshard")
    return xs


def check_jit_args(in_shardings, dyn_args, what="jit in_shardings"):
    """jit's in_shardings against the positional (non-static) arguments."""
    if in_shardings is None:
        return
    if _is_spec_leaf(in_shardings):
        check_tree(in_shardings, list(dyn_args), what, base="args")
        return
    if isinstance(in_shardings, list):
        in_shardings = tuple(in_shardings)
    if not isinstance(in_shardings, tuple) or len(in_shardings) != len(dyn_args):
        n = len(in_shardings) if isinstance(in_shardings, tuple) else type(in_shardings).__name__
        raise ValueError(f"{what} must be a tree prefix of the positional arguments tuple: either a Sharding, a "
                         f"PartitionSpec, or a tuple of length equal to the number of positional arguments. But "
                         f"in_shardings is the wrong length: got {n} for an args tuple of length {len(dyn_args)}.")
    for i, (s, a) in enumerate(zip(in_shardings, dyn_args)):
        for path, leaf, sh in _broadcast_prefix(s, a, what):
            sh = _as_sharding(sh, what)
            if sh is not None:
                check_spec(sh, tuple(np.shape(leaf)) if not hasattr(leaf, "shape") else tuple(leaf.shape), what,
                           name=f"args[{i}]{tree_util.keystr(tuple(path))}")


from .core import JittedFunction  # noqa: E402  (core is loaded first; it imports this module lazily)


_DP_AXIS = "__mesh_batch__"  # the collectives' axis name inside a partitioned graph


class _Partitioned:
    """A sharded jit's per-device graph (cpp/podlet/ir/partition.cc) for one trace."""

    def __init__(self, graph, n, out_dims, fallbacks):
        self.graph = graph
        self.n = n
        self.out_dims = out_dims
        self.fallbacks = dict(fallbacks)


class ShardedJittedFunction(JittedFunction):
    """``jit(f, in_shardings=..., out_shardings=...)``. The positional arguments and the
    outputs are checked against their shardings on every call (as JAX checks them at
    dispatch). When some argument is split over n > 1 devices along its batch axis (a
    data-parallel layout), the traced global computation is partitioned
    (``cpp/podlet/ir/partition.cc``) and each of the n devices runs its share on the pmap
    executor: local blocks of the batch, replicated parameters, a psum where the batch
    axis is reduced or contracted (loss means, weight gradients, BatchNorm statistics).
    The results are the global arrays, equal to the unsharded jit's up to the order of
    floating-point sums. Under ``mpirun`` a mesh over every process's devices runs each
    process's devices there and gathers the results on every process.
    ``partition_report(*args)`` says which primitives could not be split and ran whole.
    Without ``in_shardings`` (any jit), arguments committed by ``device_put(x,
    sharding)`` decide the split the same way."""

    def __init__(self, fun, static_argnums, static_argnames, donate_argnums, in_shardings, out_shardings):
        super().__init__(fun, static_argnums, static_argnames, donate_argnums)
        self._in_shardings = in_shardings
        self._out_shardings = out_shardings

    def _dyn_args(self, args):
        n = len(args)
        static_pos = {i if i >= 0 else n + i for i in self._static_argnums}
        return [a for i, a in enumerate(args) if i not in static_pos]

    def _split_dims(self, dyn_args, kwargs):
        """(n, dims, sharding): the number of devices the batch is split over, per
        flattened leaf of (args, kwargs) 0 when it is split along dimension 0 and -1 when
        replicated, and the batch axis's sharding; None when nothing is split (or the
        layout mixes device counts)."""
        shardings = self._in_shardings
        if _is_spec_leaf(shardings):
            per_arg = [shardings] * len(dyn_args)
        else:
            per_arg = list(shardings) if isinstance(shardings, (tuple, list)) else None
            if per_arg is None or len(per_arg) != len(dyn_args):
                return None
        pairs = [(leaf, _as_sharding(sh, "jit in_shardings")) for s, a in zip(per_arg, dyn_args)
                 for _, leaf, sh in _broadcast_prefix(s, a, "jit in_shardings")]
        pairs += [(leaf, None) for leaf in tree_util.tree_leaves(kwargs)]
        return _batch_split(pairs)

    def _plan(self, args, kwargs):
        split = self._split_dims(self._dyn_args(args), kwargs) if self._in_shardings is not None else None
        if split is None:
            return committed_plan(self, args, kwargs)
        return _plan(self, args, kwargs, split)

    def partition_report(self, *args, **kwargs):
        """For these arguments (None when the call is not partitioned)::

            {"devices": n,                        # the batch is split over n devices
             "unsplit": {primitive: count},       # nodes that gathered their inputs and
                                                  # ran on whole arrays
             "flops": (per_device, global)}       # FLOPs of one device's graph and of
                                                  # the unsplit computation
        """
        return partition_report(self, *args, **kwargs)

    def __call__(self, *args, **kwargs):
        if self._in_shardings is not None:
            check_jit_args(self._in_shardings, self._dyn_args(args))
        plan = self._plan(args, kwargs)
        if plan is not None:
            out = _run_partitioned(plan)
        else:
            out = JittedFunction._call_whole(self, args, kwargs)
        if self._out_shardings is not None:
            check_tree(self._out_shardings, out, "jit out_shardings", base="output")
        return out


def partition_report(jf, *args, **kwargs):
    """ShardedJittedFunction.partition_report for any jitted function (a plain jit
    splits by committed arguments)."""
    plan = jf._plan(args, kwargs) if isinstance(jf, ShardedJittedFunction) else committed_plan(jf, args, kwargs)
    if plan is None:
        return None
    entry, part = plan[0], plan[3]
    return {"devices": part.n, "unsplit": dict(part.fallbacks), "flops": (part.graph.flops(), entry.graph.flops())}


def _plan(jf, args, kwargs, split):
    """(entry, converted leaves, dims, partitioned graph, batch sharding) for a call of
    the JittedFunction ``jf`` whose leaves are split as ``split`` = (n, dims, sharding)
    says; None when the call must run whole (inside a trace, disable_jit, a function
    calling Python at run time, host callbacks, a closure over tracers)."""
    from . import core, pmap
    if core._trace_stack or core._flags["disable_jit"]:
        return None
    n, dims, batch_sharding = split
    nproc = pmap.process_count()
    nl = pmap.local_device_count()
    if (nproc == 1 and n > nl) or (nproc > 1 and n != nl * nproc):
        raise ValueError(f"jit in_shardings split the batch over {n} devices, but podlet has {nl} local "
                         f"device(s) x {nproc} process(es); make the mesh from podlet.devices() "
                         "(podlet.config.update('num_devices', n) sets the local count)")
    entry, conv = jf._get(args, kwargs)
    if entry is core._OP_BY_OP or entry.effects or entry.captures:
        return None
    cache = jf.__dict__.setdefault("_partitioned", {})
    key = (id(entry), tuple(dims), n, nproc)
    part = cache.get(key)
    if part is None:
        g, out_dims, fb = entry.graph.partition(dims, n, _DP_AXIS, nproc > 1)
        part = _Partitioned(g, n, out_dims, fb)
        cache[key] = part
    return entry, conv, dims, part, batch_sharding


def committed_plan(jf, args, kwargs):
    """The plan of a call whose arguments include arrays committed to a split sharding
    by device_put (or returned split by a partitioned jit); None when none is."""
    from . import core
    if core.committed_hook[0] is None:
        return None
    dyn_args, dyn_kwargs, _, _ = jf._split(args, kwargs)
    split = _batch_split([(leaf, getattr(leaf, "_sharding", None))
                          for leaf in tree_util.tree_leaves((dyn_args, dyn_kwargs))])
    return None if split is None else _plan(jf, args, kwargs, split)


def _batch_split(pairs):
    """(n, dims, batch sharding) for (leaf, sharding or None) pairs in flattening order:
    dims[i] = 0 when leaf i is split along dimension 0, else -1; None unless exactly one
    device count n > 1 occurs."""
    dims, counts, batch = [], set(), None
    for leaf, sh in pairs:
        f = _split_factor(sh, np.ndim(leaf)) if sh is not None else 1
        dims.append(0 if f > 1 else -1)
        if f > 1:
            counts.add(f)
            batch = batch or NamedSharding(sh.mesh, PartitionSpec(sh.spec[0]))
    return (counts.pop(), dims, batch) if len(counts) == 1 else None


NOT_SPLIT = object()


def committed_call(jf, args, kwargs):
    """core.JittedFunction.__call__'s hook once some array was committed to a split
    sharding: the partitioned run, or NOT_SPLIT."""
    plan = committed_plan(jf, args, kwargs)
    return NOT_SPLIT if plan is None else _run_partitioned(plan)


def _run_partitioned(plan):
    from .. import _core
    from .. import numpy as jnp
    from . import fusion, pmap
    entry, conv, dims, part, batch_sharding = plan
    n, nproc = part.n, pmap.process_count()
    nl = n // nproc
    lo = pmap.process_index() * nl
    vals, flags = [], []
    for x, d in zip(conv, dims):
        if d < 0:
            vals.append(x)
            flags.append(True)
            continue
        blocks = jnp.reshape(x, (n, x.shape[0] // n) + tuple(x.shape[1:]))
        vals.append(blocks if nproc == 1 else blocks[lo:lo + nl])
        flags.append(False)
    outs, reps = _core.run_pmap(fusion.pmap_graph(part), vals, flags, nl)
    res = []
    for o, r, d, w in zip(outs, reps, part.out_dims, entry.out_weak):
        if d >= 0:  # [n, ..., block along d, ...] -> the global array
            o = jnp.moveaxis(o, 0, d)
            s = tuple(o.shape)
            o = jnp.reshape(o, s[:d] + (s[d] * s[d + 1],) + s[d + 2:])
            if d == 0:  # split along the batch: it stays committed, as JAX's outputs do
                o._sharding = batch_sharding
        elif not r:  # equal on every device (a psum's result): one copy
            o = o[0]
        if w:
            o.weak_type = True
        res.append(o)
    return tree_util.tree_unflatten(entry.out_tree, res)


from .core import Array as _Array  # noqa: E402

_Array.sharding = property(_array_sharding)
