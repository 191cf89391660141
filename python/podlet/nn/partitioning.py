"""flax.linen.partitioning on podlet: logical axis rules (``axis_rules``), the logical
to mesh translation, ``with_sharding_constraint`` in logical names, and the
``param_with_axes`` / ``variable_with_axes`` annotations with ``get_axis_names``.

``scan_with_axes`` / ``vmap_with_axes`` lift nn.scan / nn.vmap and add the new axis to
the sown ``<col>_axes`` metadata, as Flax's. Not here yet: ``remat`` (Flax's
``core_remat_static``; ``nn.remat`` covers the computation).
"""
import re

from .. import struct
from .. import tree_util
from .._src import sharding as _sharding
from . import module as _module
from .frozen_dict import freeze, unfreeze
from .spmd import (logical_axis_rules as axis_rules, set_logical_axis_rules as set_axis_rules,  # noqa: F401
                   get_logical_axis_rules as get_axis_rules, logical_to_mesh, logical_to_mesh_axes, RulesFallback,
                   with_logical_constraint as with_sharding_constraint, _is_logical_spec,
                   _with_sharding_constraint)
from ..traverse_util import flatten_dict, unflatten_dict

__all__ = ["axis_rules", "set_axis_rules", "get_axis_rules", "logical_to_mesh", "logical_to_mesh_axes",
           "RulesFallback", "with_sharding_constraint", "AxisMetadata", "param_with_axes", "variable_with_axes",
           "PartitionedVariable", "get_axis_names", "scan_with_axes", "vmap_with_axes"]


@struct.dataclass
class AxisMetadata:
    """The logical axis names sown next to a variable (``<col>_axes/<name>_axes``)."""
    names: object = struct.field(pytree_node=False)


def _sow_reduce_fn(x, y):
    if not isinstance(y, AxisMetadata):
        raise TypeError(f"Expected newly sown value to be an AxisMetadata, got {y!r}")
    if isinstance(x, AxisMetadata):
        if x != y:
            raise ValueError(f"If axis names are sown twice, expected them to match. Got {x} and {y}.")
    elif x:
        raise AssertionError(f"Non-initial-or-AxisMetadata value encountered: {x}")
    return y


def _current_module(module, what):
    if module is None:
        module = _module._context.module_stack[-1]
        if module is None:
            raise ValueError(f"{what} must be called inside a module's compact method or setup, or be given "
                             f"module=")
    return module


def param_with_axes(name, init_fn, *init_args, axes=None, module=None, **init_kwargs):
    """``module.param`` that also sows the parameter's logical axis names in
    ``params_axes`` and constrains the value by them."""
    module = _current_module(module, "param_with_axes")
    value = module.param(name, init_fn, *init_args, **init_kwargs)
    if axes is not None:
        value = with_sharding_constraint(value, _sharding.PartitionSpec(*axes))
        module.sow("params_axes", f"{name}_axes", AxisMetadata(axes), reduce_fn=_sow_reduce_fn)
    return value


class PartitionedVariable(_module.Variable):
    """A Variable whose value is constrained by its logical axes when read and written."""

    def __init__(self, scope, collection, name, axes=None, fallback=RulesFallback.AXIS_IS_UNSHARDED):
        super().__init__(scope, collection, name)
        self.axes = axes
        self.fallback = fallback

    @property
    def value(self):
        value = self.scope.get_variable(self.collection, self.name)
        if self.axes is not None:
            value = with_sharding_constraint(value, self.axes, fallback=self.fallback)
        return value

    @value.setter
    def value(self, value):
        if self.axes is not None:
            value = with_sharding_constraint(value, self.axes, fallback=self.fallback)
        self.scope.put_variable(self.collection, self.name, value)


def variable_with_axes(collection, name, init_fn, *init_args, axes=None, module=None,
                       fallback=RulesFallback.AXIS_IS_UNSHARDED, **init_kwargs):
    """``module.variable`` that sows the logical axis names in ``<collection>_axes`` and
    returns a :class:`PartitionedVariable`."""
    module = _current_module(module, "variable_with_axes")
    var = module.variable(collection, name, init_fn, *init_args, **init_kwargs)
    if axes is not None:
        if var.is_mutable() and module.is_initializing():
            var.value = with_sharding_constraint(var.value, axes, fallback=fallback)
        module.sow(f"{collection}_axes", f"{name}_axes", AxisMetadata(axes), reduce_fn=_sow_reduce_fn)
    return PartitionedVariable(var.scope, collection, name, axes, fallback)


def get_axis_names(axes_metadata):
    """A ``<col>_axes`` collection as logical PartitionSpecs, keyed like the variables
    (the ``_axes`` suffix removed)."""
    def rewrite(tree):
        return tree_util.tree_map(lambda x: None if x is None else _sharding.PartitionSpec(*x), tree,
                                  is_leaf=_is_logical_spec)
    flat = {re.sub(r"_axes$", "", "/".join(k)): rewrite(v.names)
            for k, v in flatten_dict(unfreeze(axes_metadata)).items()}
    return freeze(unflatten_dict({tuple(k.split("/")): v for k, v in flat.items()}))


def _tree_map_axes(fn, tree):
    return tree_util.tree_map(lambda x: fn(x) if isinstance(x, AxisMetadata) else x, tree,
                              is_leaf=lambda x: isinstance(x, AxisMetadata))


def _is_mutable(axis_col):
    last = _module._context.module_stack[-1]
    return last.is_mutable_collection(axis_col) if last else True


def _add_axis_to_metadata(fn, axis_pos, axis_name, axis_col="params_axes"):
    """map_variables over ``axis_col``: the sown logical names gain ``axis_name`` at
    ``axis_pos`` on the way out and lose it on the way in."""
    from .transforms import map_variables
    if hasattr(axis_pos, "axis"):  # In() / Out() scan axis markers
        axis_pos = axis_pos.axis

    def insert_leaf(names):
        if names is None:
            return names
        names = list(names)
        names.insert(axis_pos, axis_name)
        return tuple(names)

    def remove_leaf(names):
        if names is None:
            return names
        names = list(names)
        if names[axis_pos] != axis_name:
            raise ValueError(f"Expected axis {axis_name} at position {axis_pos} in axis metadata {names}.")
        names.pop(axis_pos)
        return tuple(names)

    def insert_fn(x):
        return x.replace(names=tree_util.tree_map(insert_leaf, x.names, is_leaf=_is_logical_spec))

    def remove_fn(x):
        return x.replace(names=tree_util.tree_map(remove_leaf, x.names, is_leaf=_is_logical_spec))

    return map_variables(fn, axis_col, mutable=_is_mutable(axis_col),
                         trans_in_fn=lambda tree: _tree_map_axes(remove_fn, tree),
                         trans_out_fn=lambda tree: _tree_map_axes(insert_fn, tree))


def scan_with_axes(target, variable_axes={}, variable_broadcast=False, variable_carry=False, split_rngs={},
                   in_axes=0, out_axes=0, length=None, reverse=False, unroll=1, axis_name="layers",
                   axes_collections=("params",), data_transform=None, methods=None):
    """nn.scan whose ``<col>_axes`` metadata gains the scanned axis (``axis_name``)."""
    from .transforms import scan
    variable_broadcast = _module.union_filters(variable_broadcast, tuple(f"{c}_axes" for c in axes_collections))
    scanned = scan(target, variable_axes=variable_axes, variable_broadcast=variable_broadcast,
                   variable_carry=variable_carry, split_rngs=split_rngs, in_axes=in_axes, out_axes=out_axes,
                   length=length, reverse=reverse, unroll=unroll, data_transform=data_transform, methods=methods)
    for col in axes_collections:
        if col in variable_axes:
            scanned = _add_axis_to_metadata(scanned, axis_pos=variable_axes[col], axis_name=axis_name,
                                            axis_col=f"{col}_axes")
    return scanned


def vmap_with_axes(target, variable_axes, split_rngs={}, in_axes=0, out_axes=0, axis_size=None, axis_name=None,
                   partitioning_axis_names={}, spmd_axis_name=None, methods=None):
    """nn.vmap whose ``<col>_axes`` metadata gains the mapped axis
    (``partitioning_axis_names[col]``)."""
    from .transforms import vmap
    variable_axes = dict(variable_axes)
    for name in partitioning_axis_names:
        variable_axes[f"{name}_axes"] = None
    vmapped = vmap(target, variable_axes=variable_axes, split_rngs=split_rngs, in_axes=in_axes, out_axes=out_axes,
                   axis_size=axis_size, axis_name=axis_name, spmd_axis_name=spmd_axis_name, methods=methods)
    for col, axis in variable_axes.items():
        if col in partitioning_axis_names:
            vmapped = _add_axis_to_metadata(vmapped, axis_pos=axis, axis_name=partitioning_axis_names[col],
                                            axis_col=f"{col}_axes")
    return vmapped
