"""Flattening nested dicts of parameters (flax.traverse_util).

    flat = traverse_util.flatten_dict(params, sep="/")   # {'Dense_0/kernel': ..., ...}
    params = traverse_util.unflatten_dict(flat, sep="/")
    params = traverse_util.path_aware_map(lambda path, x: x * (path[-1] != "bias"), params)

Also Flax's ``Traversal`` family (``t_identity``, ``ModelParamTraversal``, ...), which Flax
deprecates in favour of optax masks: constructing one warns with a DeprecationWarning,
as in Flax. The code follows flax/traverse_util.py (Apache-2.0) function by function.
"""
import abc
import copy
import dataclasses
import warnings
from typing import Any, Callable

from . import struct
from . import tree_util
from .nn.frozen_dict import FrozenDict, unfreeze

__all__ = ["flatten_dict", "unflatten_dict", "path_aware_map", "empty_node", "Traversal", "TraverseId",
           "TraverseMerge", "TraverseCompose", "TraverseFilter", "TraverseAttr", "TraverseItem", "TraverseEach",
           "TraverseTree", "ModelParamTraversal", "t_identity", "PathParts"]

# a path of keys into a nested dict, as flax.typing's
PathParts = tuple[Any, ...]


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


class Traversal(abc.ABC):
    """Base class for all traversals."""

    def __new__(cls, *args, **kwargs):
        # Must override __new__ instead of __init__ since this is an ABC
        warnings.warn(
            '`podlet.traverse_util.Traversal` will be deprecated (as in Flax): select '
            'parameters with `podlet.optim.masked` / `multi_transform` instead.',
            DeprecationWarning,
        )
        return super().__new__(cls)

    @abc.abstractmethod
    def update(self, fn, inputs):
        """Update the focused items.

        Args:
            fn: the callback function that maps each traversed item
                to its updated value.
            inputs: the object that should be traversed.
        Returns:
            A new object with the updated values.
        """
        pass

    @abc.abstractmethod
    def iterate(self, inputs):
        """Iterate over the values selected by this ``Traversal``.

        Args:
            inputs: the object that should be traversed.
        Returns:
            An iterator over the traversed values.
        """
        pass

    def set(self, values, inputs):
        """Overrides the values selected by the ``Traversal``.

        Args:
            values: a list containing the new values.
            inputs: the object that should be traversed.
        Returns:
            A new object with the updated values.
        """

        def update_fn(_):
            if not values:
                raise ValueError('Not enough values provided')
            return values.pop(0)

        y = self.update(update_fn, inputs)
        if values:
            raise ValueError('Too many values provided')
        return y

    def compose(self, other):
        """Compose two traversals."""
        return TraverseCompose(self, other)

    def merge(self, *traversals):
        """Compose an arbitrary number of traversals and merge the results."""
        return self.compose(TraverseMerge(*traversals))

    def each(self):
        """Traverse each item in the selected containers."""
        return self.compose(TraverseEach())

    def tree(self):
        """Traverse each item in a pytree."""
        return self.compose(TraverseTree())

    def filter(self, fn):
        """Filter the selected values."""
        return self.compose(TraverseFilter(fn))

    def __getattr__(self, attr):
        return self.compose(TraverseAttr(attr))

    def __getitem__(self, key):
        return self.compose(TraverseItem(key))


class TraverseId(Traversal):
    """The identity Traversal."""

    def update(self, fn, inputs):
        return fn(inputs)

    def iterate(self, inputs):
        yield inputs


with warnings.catch_warnings():
    warnings.simplefilter('ignore', DeprecationWarning)
    t_identity = TraverseId()


class TraverseMerge(Traversal):
    """Merges the selection from a set of traversals."""

    def __init__(self, *traversals):
        self._traversals = traversals

    def update(self, fn, inputs):
        for traversal in self._traversals:
            inputs = traversal.update(fn, inputs)
        return inputs

    def iterate(self, inputs):
        for traversal in self._traversals:
            yield from traversal.iterate(inputs)


class TraverseCompose(Traversal):
    """Compose two traversals."""

    def __init__(self, x, y):
        self._x = x
        self._y = y

    def update(self, fn, inputs):
        def update_fn(x):
            return self._y.update(fn, x)

        return self._x.update(update_fn, inputs)

    def iterate(self, inputs):
        for x in self._x.iterate(inputs):
            yield from self._y.iterate(x)


class TraverseFilter(Traversal):
    """Filter selected values based on a predicate."""

    def __init__(self, fn):
        self._fn = fn

    def update(self, fn, inputs):
        if self._fn(inputs):
            return fn(inputs)
        else:
            return inputs

    def iterate(self, inputs):
        if self._fn(inputs):
            yield inputs


def _is_namedtuple(t):
    return issubclass(t, tuple) and hasattr(t, '_fields')


class TraverseAttr(Traversal):
    """Traverse the attribute of an object."""

    def __init__(self, attr):
        self._attr = attr

    def update(self, fn, inputs):
        value = fn(getattr(inputs, self._attr))
        if _is_namedtuple(type(inputs)):
            return inputs._replace(**{self._attr: value})
        elif dataclasses.is_dataclass(inputs):
            return dataclasses.replace(inputs, **{self._attr: value})
        else:
            inputs = copy.copy(inputs)
            setattr(inputs, self._attr, value)
            return inputs

    def iterate(self, inputs):
        yield getattr(inputs, self._attr)


class TraverseItem(Traversal):
    """Traverse the item of an object."""

    def __init__(self, key):
        self._key = key

    def update(self, fn, inputs):
        if isinstance(inputs, tuple):
            ty = type(inputs)
            if isinstance(self._key, slice):
                sl = self._key
            else:
                sl = slice(self._key, self._key + 1)
            indices = set(range(*sl.indices(len(inputs))))

            args = [
                fn(inputs[i]) if i in indices else inputs[i] for i in range(len(inputs))
            ]
            if _is_namedtuple(ty):
                return ty(*args)
            else:
                return ty(args)
        else:
            xs = copy.copy(inputs)
            xs[self._key] = fn(xs[self._key])
            return xs

    def iterate(self, inputs):
        if isinstance(self._key, slice):
            yield from inputs[self._key]
        else:
            yield inputs[self._key]


class TraverseEach(Traversal):
    """Traverse each item of a container."""

    def update(self, fn, inputs):
        ty = type(inputs)
        if ty is dict:
            return {key: fn(val) for key, val in inputs.items()}
        if ty not in {list, tuple}:
            raise ValueError('Only the entries of a list or tuple can be traversed.')
        return ty(fn(x) for x in inputs)

    def iterate(self, inputs):
        if isinstance(inputs, dict):
            yield from inputs.values()
        else:
            yield from inputs


class TraverseTree(Traversal):
    """Traverse every item in a pytree."""

    def update(self, fn, inputs):
        return tree_util.tree_map(fn, inputs)

    def iterate(self, inputs):
        yield from tree_util.tree_leaves(inputs)


def _get_params_dict(inputs):
    if isinstance(inputs, (dict, FrozenDict)):
        return unfreeze(inputs)
    else:
        raise ValueError(
            'Can only traverse a flax Model instance or a nested dict, not '
            f'{type(inputs)}'
        )


def _sorted_items(x):
    """Returns items of a dict ordered by keys."""
    return sorted(x.items(), key=lambda x: x[0])


class ModelParamTraversal(Traversal):
    """Select model parameters using a name filter.

    This traversal operates on a nested dictionary of parameters and selects a
    subset based on the ``filter_fn`` argument.
    """

    def __init__(self, filter_fn):
        """Constructor a new ModelParamTraversal.

        Args:
            filter_fn: a function that takes a parameter's full name and its value and
                returns whether this parameter should be selected or not. The name of a
                parameter is determined by the module hierarchy and the parameter name
                (for example: '/module/sub_module/parameter_name').
        """
        self._filter_fn = filter_fn

    def iterate(self, inputs):
        params = _get_params_dict(inputs)
        flat_dict = flatten_dict(params)
        for key, value in _sorted_items(flat_dict):
            path = '/' + '/'.join(key)
            if self._filter_fn(path, value):
                yield value

    def update(self, fn, inputs):
        params = _get_params_dict(inputs)
        flat_dict = flatten_dict(params, keep_empty_nodes=True)
        new_dict = {}
        for key, value in _sorted_items(flat_dict):
            # empty_node is not an actual leave. It's just a stub for empty nodes
            # in the nested dict.
            if value is not empty_node:
                path = '/' + '/'.join(key)
                if self._filter_fn(path, value):
                    value = fn(value)
            new_dict[key] = value
        new_params = unflatten_dict(new_dict)
        if isinstance(inputs, FrozenDict):
            return FrozenDict(new_params)
        else:
            return new_params
