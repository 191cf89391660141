"""flax.core.meta on podlet: boxed variable metadata (``Partitioned``) and ``unbox``.

A box is a pytree node whose one child is the value it wraps, so optimizers, jit and
tree_map see through it; ``Module.param`` stores what the initializer returns (boxed)
and hands ``unbox(value)`` to the module, as Flax does.
"""
import abc
import functools
from typing import Any

from .. import struct
from .. import tree_util
from .._src import sharding as _sharding

PARTITION_NAME = "partition_name"


class AxisMetadata(abc.ABC):
    """flax.core.meta.AxisMetadata: the base of boxed metadata (unbox, replace_boxed,
    add_axis / remove_axis for lifted transformations)."""

    @abc.abstractmethod
    def unbox(self):
        """The wrapped value (not unboxed recursively)."""

    @abc.abstractmethod
    def replace_boxed(self, val):
        """The same box around ``val``."""

    @abc.abstractmethod
    def add_axis(self, index, params):
        """The metadata after a transformation added an axis at ``index``."""

    @abc.abstractmethod
    def remove_axis(self, index, params):
        """The metadata after a transformation removed the axis at ``index``."""


def is_axis_metadata(val) -> bool:
    return isinstance(val, AxisMetadata)


def map_axis_meta(fn, tree):
    """fn applied to every AxisMetadata node of ``tree``."""
    return tree_util.tree_map(lambda x: fn(x) if isinstance(x, AxisMetadata) else x, tree,
                              is_leaf=is_axis_metadata)


def add_axis(tree, index, params):
    return map_axis_meta(lambda x: x.add_axis(index, params), tree)


def remove_axis(tree, index, params):
    return map_axis_meta(lambda x: x.remove_axis(index, params), tree)


def unbox(tree):
    """Strips every AxisMetadata box from a pytree."""
    return map_axis_meta(lambda x: unbox(x.unbox()), tree)


def replace_boxed(tree, updates):
    """The boxes of ``tree`` around the values of ``updates``."""
    def inner(c, v):
        if isinstance(c, AxisMetadata):
            return c.replace_boxed(replace_boxed(c.unbox(), v))
        return v
    return tree_util.tree_map(inner, tree, updates, is_leaf=is_axis_metadata)


def get_global_mesh():
    mesh = _sharding.get_abstract_mesh()
    return None if mesh.empty else mesh


def global_mesh_defined() -> bool:
    return get_global_mesh() is not None


class Partitioned(struct.PyTreeNode, AxisMetadata):
    """flax.core.meta.Partitioned: a value with mesh axis names per dimension (``names``);
    ``unbox`` applies them as a sharding constraint when a mesh is defined."""
    value: Any
    names: Any = struct.field(pytree_node=False)
    mesh: Any = struct.field(default=None, pytree_node=False)

    def unbox(self, apply_constraint=True):
        if apply_constraint and (global_mesh_defined() or self.mesh is not None):
            spec = self.get_partition_spec()
            if self.mesh is not None:
                return _sharding.with_sharding_constraint(self.value, _sharding.NamedSharding(self.mesh, spec))
            return _sharding.with_sharding_constraint(self.value, spec)
        return self.value

    def replace_boxed(self, val):
        return self.replace(value=val)

    def _get_partition_name(self, params):
        if PARTITION_NAME not in params:
            raise ValueError(f"Trying to transform a Partitioned variable but \"partition_name\" is not specified "
                             f"in metadata_params: {self}")
        return params[PARTITION_NAME]

    def add_axis(self, index, params):
        axis_name = self._get_partition_name(params)
        names = list(self.names)
        while len(names) < index:
            names.append(None)
        names.insert(index, axis_name)
        return self.replace(names=tuple(names))

    def remove_axis(self, index, params):
        axis_name = self._get_partition_name(params)
        names = list(self.names)
        removed = names.pop(index)
        if removed != axis_name:
            raise ValueError(f"remove_axis: expected axis {axis_name!r} at position {index} of {self.names}, "
                             f"found {removed!r}")
        return self.replace(names=tuple(names))

    def get_partition_spec(self):
        return _sharding.PartitionSpec(*self.names)

    def get_sharding(self, mesh):
        return _sharding.NamedSharding(mesh, self.get_partition_spec())


def with_partitioning(fn, names, mesh=None):
    """Wraps an initializer: its value comes back as ``Partitioned(value, names, mesh)``."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return Partitioned(fn(*args, **kwargs), names, mesh=mesh)
    return wrapper


def _get_leaf_pspec(x):
    if hasattr(x, "get_partition_spec"):
        return x.get_partition_spec()
    if hasattr(x, "shape"):  # an unboxed array: replicated
        return _sharding.PartitionSpec()
    return None


def get_partition_spec(tree):
    """A PartitionSpec per box (its names), ``P()`` per other array leaf."""
    return tree_util.tree_map(_get_leaf_pspec, tree, is_leaf=is_axis_metadata)


def get_sharding(tree, mesh):
    """A NamedSharding over ``mesh`` per box and per other array leaf (replicated)."""
    def f(x):
        if hasattr(x, "get_sharding"):
            return x.get_sharding(mesh)
        pspec = _get_leaf_pspec(x)
        return None if pspec is None else _sharding.NamedSharding(mesh, pspec)
    return tree_util.tree_map(f, tree, is_leaf=is_axis_metadata)
