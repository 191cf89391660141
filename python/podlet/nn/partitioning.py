"""flax.linen.partitioning on podlet: logical axis rules (``axis_rules``), the logical
to mesh translation, ``with_sharding_constraint`` in logical names, and the
``param_with_axes`` / ``variable_with_axes`` annotations with ``get_axis_names``.

Not here yet: ``scan_with_axes``, ``vmap_with_axes`` and ``remat`` (Flax's lifted
transformations carrying axis metadata).
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
           "PartitionedVariable", "get_axis_names"]


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
