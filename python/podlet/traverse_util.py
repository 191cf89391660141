"""Flattening nested dicts of parameters (flax.traverse_util).

    flat = traverse_util.flatten_dict(params, sep="/")   # {'Dense_0/kernel': ..., ...}
    params = traverse_util.unflatten_dict(flat, sep="/")
    params = traverse_util.path_aware_map(lambda path, x: x * (path[-1] != "bias"), params)

Flax's deprecated ``Traversal`` / ``ModelParamTraversal`` classes (its docs point to
optax masks instead) are not mirrored.
"""
from typing import Any, Callable

from . import struct
from .nn.frozen_dict import FrozenDict

__all__ = ["flatten_dict", "unflatten_dict", "path_aware_map", "empty_node"]


@struct.dataclass
class _EmptyNode:
    pass


empty_node = _EmptyNode()


def _flatten(xs, prefix, keep_empty_nodes, is_leaf, sep):
    def _key(path):
        return path if sep is None else sep.join(path)

    if not isinstance(xs, (FrozenDict, dict)) or (is_leaf and is_leaf(prefix, xs)):
        return {_key(prefix): xs}
    result = {}
    is_empty = True
    for key, value in xs.items():
        is_empty = False
        result.update(_flatten(value, prefix + (key,), keep_empty_nodes, is_leaf, sep))
    if keep_empty_nodes and is_empty:
        if prefix == ():  # the whole input is empty
            return {}
        return {_key(prefix): empty_node}
    return result


def flatten_dict(xs, keep_empty_nodes=False, is_leaf=None, sep=None):
    """Flattens a nested (frozen) dict into one dict keyed by key paths.

    Args:
      xs: a nested dictionary.
      keep_empty_nodes: replace empty dictionaries by ``empty_node`` (else they are dropped,
        and ``unflatten_dict`` does not restore them).
      is_leaf: ``is_leaf(path, value)`` -> True stops flattening at that nested dict.
      sep: keys are ``sep``-joined strings if given, tuples of keys if None.
    Returns:
      The flattened dictionary.
    """
    assert isinstance(xs, (FrozenDict, dict)), f"expected (frozen)dict; got {type(xs)}"
    return _flatten(xs, (), keep_empty_nodes, is_leaf, sep)


def unflatten_dict(xs, sep=None):
    """The nested dict of a ``flatten_dict`` result (``empty_node`` values become ``{}``).

    Args:
      xs: a flattened dictionary.
      sep: the separator given to ``flatten_dict`` (None: keys are tuples).
    """
    assert isinstance(xs, dict), f"input is not a dict; it is a {type(xs)}"
    result = {}
    for path, value in xs.items():
        if sep is not None:
            path = path.split(sep)
        if value is empty_node:
            value = {}
        cursor = result
        for key in path[:-1]:
            if key not in cursor:
                cursor[key] = {}
            cursor = cursor[key]
        cursor[path[-1]] = value
    return result


def path_aware_map(f: Callable[[tuple, Any], Any], nested_dict):
    """Maps ``f(path, leaf)`` over a nested dict, `path` being the tuple of keys to the leaf.

        >>> path_aware_map(lambda path, x: x + 5 if 'x' in path else -x, {'a': {'x': 10, 'y': 3}})
        {'a': {'x': 15, 'y': -3}}
    """
    flat = flatten_dict(nested_dict, keep_empty_nodes=True)
    return unflatten_dict({k: f(k, v) if v is not empty_node else v for k, v in flat.items()})
