"""Immutable dataclasses that are pytrees (flax.struct).

    @struct.dataclass
    class Model:
        params: Any
        apply_fn: Callable = struct.field(pytree_node=False)   # static: part of the treedef

    m2 = m.replace(params=new_params)

Fields are pytree children (in declaration order) unless declared with
``field(pytree_node=False)``, in which case their values are auxiliary data of the
treedef (compared, and hashed by ``jit``'s cache, like jax's ``register_dataclass``).
Unflattening calls the class constructor with every field, as jax does.
"""
import dataclasses
import functools

from . import tree_util

__all__ = ["dataclass", "field", "PyTreeNode"]


def field(pytree_node=True, *, metadata=None, **kwargs):
    """``dataclasses.field`` that records whether the field is a pytree child."""
    return dataclasses.field(metadata=(metadata or {}) | {"pytree_node": pytree_node}, **kwargs)


def dataclass(clz=None, **kwargs):
    """Makes `clz` a frozen dataclass registered as a pytree node, with ``replace``."""
    if clz is None:
        return functools.partial(dataclass, **kwargs)
    if "_flax_dataclass" in clz.__dict__:
        return clz
    if "frozen" not in kwargs:
        kwargs["frozen"] = True
    data_clz = dataclasses.dataclass(**kwargs)(clz)
    meta_fields, data_fields = [], []
    for field_info in dataclasses.fields(data_clz):
        if field_info.metadata.get("pytree_node", True):
            data_fields.append(field_info.name)
        else:
            meta_fields.append(field_info.name)

    def replace(self, **updates):
        """A new object with the given fields replaced."""
        return dataclasses.replace(self, **updates)

    data_clz.replace = replace
    _register_dataclass(data_clz, tuple(data_fields), tuple(meta_fields))
    data_clz._flax_dataclass = True
    return data_clz


def _register_dataclass(nodetype, data_fields, meta_fields):
    """jax.tree_util.register_dataclass: children = data fields, aux = meta field values."""
    init_fields = {f.name for f in dataclasses.fields(nodetype) if f.init}
    if {*meta_fields, *data_fields} != init_fields:
        missing = init_fields - {*meta_fields, *data_fields}
        unexpected = {*meta_fields, *data_fields} - init_fields
        raise ValueError("data_fields and meta_fields must include all dataclass fields with ``init=True`` and "
                         f"only them. Missing fields: {missing or None}. Unexpected fields: {unexpected or None}.")

    def flatten_with_keys(x):
        children = [(tree_util.GetAttrKey(name), getattr(x, name)) for name in data_fields]
        return children, tuple(getattr(x, name) for name in meta_fields)

    def flatten(x):
        return [getattr(x, name) for name in data_fields], tuple(getattr(x, name) for name in meta_fields)

    def unflatten(meta, data):
        kwargs = dict(zip(meta_fields, meta))
        kwargs.update(zip(data_fields, data))
        return nodetype(**kwargs)

    tree_util.register_pytree_with_keys(nodetype, flatten_with_keys, unflatten, flatten)


class PyTreeNode:
    """Base class form of :func:`dataclass`: subclasses are frozen pytree dataclasses.

        class TrainState(struct.PyTreeNode):
            step: int
            apply_fn: Callable = struct.field(pytree_node=False)
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__()
        dataclass(cls, **kwargs)

    def __init__(self, *args, **kwargs):
        raise NotImplementedError

    def replace(self, **overrides):
        raise NotImplementedError
