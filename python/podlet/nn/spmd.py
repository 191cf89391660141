"""flax.linen.spmd (and flax.core.spmd's axis rules) on podlet: logical axis names,
the rules mapping them to mesh axes, and ``LogicallyPartitioned`` boxes.

The rules and the translation are Flax's, name for name; the constraints they produce
go through ``lax.with_sharding_constraint`` (checked, values unchanged: see
``podlet/_src/sharding.py``).
"""
import collections
import contextlib
import enum
import functools
import threading
from typing import Any

from .. import struct
from .. import tree_util
from .._src import sharding as _sharding
from . import meta


class _AxisRules(threading.local):
    rules = ()


_axis_rules = _AxisRules()


def set_logical_axis_rules(rules):
    """Sets the global logical-axis -> mesh-axis rules."""
    _axis_rules.rules = rules


def get_logical_axis_rules():
    """The current logical-axis -> mesh-axis rules (``()`` when none are set)."""
    return _axis_rules.rules


@contextlib.contextmanager
def logical_axis_rules(rules):
    """Context manager: ``rules`` are the logical axis rules inside the block."""
    old = _axis_rules.rules
    try:
        _axis_rules.rules = rules
        yield
    finally:
        _axis_rules.rules = old


class _UnassignedAxis:
    def __repr__(self):
        return "UnassignedAxis"

    def __bool__(self):
        return False


_unassigned_axis = _UnassignedAxis()


def _mesh_assignment_free(new_assignment, existing_assignments):
    new = set(tree_util.tree_leaves(new_assignment))
    existing = set(tree_util.tree_leaves(existing_assignments))
    new.discard(_sharding.PartitionSpec.UNCONSTRAINED)
    new.discard(None)
    return not existing.intersection(new)


def _logical_to_mesh_axes(array_dim_names, rules=None):
    if array_dim_names is None:
        return None
    if rules is None:
        rules = get_logical_axis_rules()
    counts = collections.Counter(array_dim_names)
    dups = tuple(k for k, v in counts.items() if v > 1 and isinstance(k, str))
    if dups:
        raise ValueError(f"Unsupported: Dimensions {dups} occur more than once in array names.")
    if not isinstance(rules, (tuple, list)):
        raise ValueError(f"Unknown axis rule specification type. Expected a sequence of (logical name, mesh "
                         f"axes) pairs, got {rules!r}")
    result = [(_unassigned_axis if isinstance(name, str) else name) for name in array_dim_names]
    for rule in rules:
        if not isinstance(rule, (tuple, list)) or len(rule) != 2:
            raise ValueError(f"Each logical axis rule must be a (logical name, mesh axes) pair, got {rule!r}")
        rule_model_name, rule_mesh_names = rule
        if rule_model_name in array_dim_names:
            pos = list(array_dim_names).index(rule_model_name)
            if _mesh_assignment_free(rule_mesh_names, result) and result[pos] is _unassigned_axis:
                result[pos] = rule_mesh_names
    return result


def logical_to_mesh_axes(array_dim_names, rules=None):
    """The PartitionSpec of an array whose dimensions have these logical names: rules
    in order of precedence, each (logical name, mesh axis) assigning the mesh axis to
    the dimension if both are still free; unassigned dimensions are not sharded."""
    result = _logical_to_mesh_axes(array_dim_names, rules)
    if result is None:
        return None
    return _sharding.PartitionSpec(*[None if x is _unassigned_axis else x for x in result])


def _is_pspec(x):
    return isinstance(x, _sharding.PartitionSpec)


def logical_to_mesh(tree, rules=None):
    """logical_to_mesh_axes over a pytree of logical PartitionSpecs."""
    return tree_util.tree_map(lambda x: logical_to_mesh_axes(x, rules), tree, is_leaf=_is_pspec)


def logical_to_mesh_sharding(tree, mesh, rules=None):
    """A pytree of logical PartitionSpecs as NamedShardings over ``mesh``."""
    return tree_util.tree_map(lambda x: _sharding.NamedSharding(mesh, x), logical_to_mesh(tree, rules),
                              is_leaf=_is_pspec)


class RulesFallback(enum.Enum):
    AXIS_IS_UNSHARDED = "axis_is_unsharded"
    RAISE_ERROR = "raise_error"
    NO_CONSTRAINT = "no_constraint"


def _with_sharding_constraint(x, axis_resources, mesh=None):
    if not meta.global_mesh_defined() and mesh is None:
        return x
    if mesh is not None and axis_resources is not None:
        return _sharding.with_sharding_constraint(x, _sharding.NamedSharding(mesh, axis_resources))
    return _sharding.with_sharding_constraint(x, axis_resources)


def _with_sharding_constraint_one_fallback(axis_resources, x, fallback=RulesFallback.AXIS_IS_UNSHARDED,
                                           rules=None, mesh=None):
    mesh_axes = _logical_to_mesh_axes(axis_resources, rules)
    if mesh_axes is None:
        return _with_sharding_constraint(x, None, mesh=mesh)
    if fallback == RulesFallback.AXIS_IS_UNSHARDED:
        mesh_axes = [None if a is _unassigned_axis else a for a in mesh_axes]
    elif any(a is _unassigned_axis for a in mesh_axes):
        if fallback == RulesFallback.RAISE_ERROR:
            raise ValueError(f"Axis names {axis_resources} did not match a rule")
        return x
    return _with_sharding_constraint(x, _sharding.PartitionSpec(*mesh_axes), mesh=mesh)


def _is_axis_spec(x):
    return isinstance(x, str) or x is _sharding.PartitionSpec.UNCONSTRAINED or x is None


def _is_logical_spec(x):
    return x is None or (isinstance(x, (tuple, _sharding.PartitionSpec)) and all(_is_axis_spec(e) for e in x))


def with_logical_constraint(x, logical_axis_resources, rules=None, mesh=None,
                            fallback=RulesFallback.AXIS_IS_UNSHARDED):
    """with_sharding_constraint in logical axis names (a no-op without rules, or
    without a mesh in context or given)."""
    if rules is None:
        rules = get_logical_axis_rules()
    if not rules or logical_axis_resources is None:
        return x
    return tree_util.tree_map(
        functools.partial(_with_sharding_constraint_one_fallback, fallback=fallback, rules=rules, mesh=mesh),
        logical_axis_resources, x, is_leaf=_is_logical_spec)


class LogicallyPartitioned(meta.Partitioned):
    """A value with logical axis names per dimension (mapped to mesh axes by the rules)."""
    rules: Any = struct.field(default=None, pytree_node=False)

    def __eq__(self, other):
        if self is other:
            return True
        if other.__class__ is self.__class__:
            return (self.value,) == (other.value,)
        return NotImplemented

    def unbox(self, apply_constraint=True):
        if apply_constraint and (meta.global_mesh_defined() or self.mesh is not None):
            return with_logical_constraint(self.value, self.get_partition_spec(), rules=self.rules, mesh=self.mesh)
        return self.value


def with_logical_partitioning(fn, names, mesh=None, rules=None):
    """Wraps an initializer: its value comes back as ``LogicallyPartitioned(value, names,
    mesh=mesh, rules=rules)``."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return LogicallyPartitioned(fn(*args, **kwargs), names, mesh=mesh, rules=rules)
    return wrapper


def add_metadata_axis(target, variable_axes=None, metadata_params=None):
    """flax.linen.add_metadata_axis: the boxes of ``target``'s variables in each
    collection of ``variable_axes`` gain the axis ``metadata_params[PARTITION_NAME]`` at
    the given index on the way out (and lose it on the way in), as lifted vmap / scan do
    to the metadata."""
    from .transforms import map_variables
    variable_axes = {} if variable_axes is None else variable_axes
    metadata_params = {} if metadata_params is None else metadata_params
    for col_name, axis in variable_axes.items():
        target = map_variables(target, col_name,
                               trans_in_fn=lambda x, a=axis: meta.remove_axis(x, a, metadata_params),
                               trans_out_fn=lambda x, a=axis: meta.add_axis(x, a, metadata_params), mutable=True)
    return target
