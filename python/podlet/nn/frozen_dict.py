"""flax.core.frozen_dict: ``FrozenDict`` (an immutable, hashable nested mapping that is a
pytree), ``freeze``, ``unfreeze``, ``copy``, ``pop``, ``pretty_repr``.

Flax 0.12's ``init`` returns plain dicts, as podlet's does; FrozenDict remains for the
code that builds one (module attributes such as ``nn.RNN``'s ``split_rngs`` default, and
older scripts calling ``freeze`` / ``unfreeze``). It flattens with its keys sorted, with
``DictKey`` path entries, like a dict.
"""
import collections.abc
from collections.abc import Mapping
from types import MappingProxyType

from .. import tree_util

__all__ = ["FrozenDict", "freeze", "unfreeze", "copy", "pop", "pretty_repr"]


class FrozenKeysView(collections.abc.KeysView):
    def __repr__(self):
        return f"frozen_dict_keys({list(self)})"


class FrozenValuesView(collections.abc.ValuesView):
    def __repr__(self):
        return f"frozen_dict_values({list(self)})"


def _indent(x, num_spaces):
    indent_str = " " * num_spaces
    lines = x.split("\n")
    assert not lines[-1]
    return "\n".join(indent_str + line for line in lines[:-1]) + "\n"


def _pretty_dict(x, num_spaces):
    if not isinstance(x, dict):
        return repr(x)
    rep = "".join(f"{key}: {_pretty_dict(val, num_spaces)},\n" for key, val in x.items())
    return "{\n" + _indent(rep, num_spaces) + "}" if rep else "{}"


@tree_util.register_pytree_with_keys_class
class FrozenDict(Mapping):
    """An immutable variant of the Python dict; nested dicts come back as FrozenDicts."""
    __slots__ = ("_dict", "_hash")

    def __init__(self, *args, __unsafe_skip_copy__=False, **kwargs):  # noqa: N803 (Flax's name)
        xs = dict(*args, **kwargs)
        self._dict = xs if __unsafe_skip_copy__ else _prepare_freeze(xs)
        self._hash = None

    def __getitem__(self, key):
        v = self._dict[key]
        return FrozenDict(v) if isinstance(v, dict) else v

    def __setitem__(self, key, value):
        raise ValueError("FrozenDict is immutable.")

    def __contains__(self, key):
        return key in self._dict

    def __iter__(self):
        return iter(self._dict)

    def __len__(self):
        return len(self._dict)

    def __repr__(self):
        return self.pretty_repr()

    def __reduce__(self):
        return FrozenDict, (self.unfreeze(),)

    def __hash__(self):
        if self._hash is None:
            h = 0
            for key, value in self.items():
                h ^= hash((key, value))
            self._hash = h
        return self._hash

    def get(self, key, default=None):
        return self[key] if key in self._dict else default

    def pretty_repr(self, num_spaces=4):
        """An indented representation of the nested dictionary."""
        return f"FrozenDict({_pretty_dict(self._dict, num_spaces)})"

    def copy(self, add_or_replace=MappingProxyType({})):
        """A new FrozenDict with entries added or replaced."""
        return type(self)({**self, **unfreeze(add_or_replace)})

    def keys(self):
        return FrozenKeysView(self)

    def values(self):
        return FrozenValuesView(self)

    def items(self):
        for key in self._dict:
            yield (key, self[key])

    def pop(self, key):
        """(a new FrozenDict without `key`, the removed value)."""
        value = self[key]
        new_dict = dict(self._dict)
        new_dict.pop(key)
        return type(self)(new_dict), value

    def unfreeze(self):
        """A mutable (nested dict) copy."""
        return unfreeze(self)

    def tree_flatten_with_keys(self):
        sorted_keys = sorted(self._dict)
        return tuple((tree_util.DictKey(k), self._dict[k]) for k in sorted_keys), tuple(sorted_keys)

    @classmethod
    def tree_unflatten(cls, keys, values):
        return cls(dict(zip(keys, values)), __unsafe_skip_copy__=True)


def _prepare_freeze(xs):
    """Deep copy of the nested dicts of `xs` (FrozenDicts contribute their dict)."""
    if isinstance(xs, FrozenDict):
        return xs._dict
    if not isinstance(xs, dict):
        return xs
    return {key: _prepare_freeze(val) for key, val in xs.items()}


def freeze(xs):
    """A nested dict made immutable: ``FrozenDict(xs)``."""
    return FrozenDict(xs)


def unfreeze(x):
    """A mutable nested-dict copy of a FrozenDict (or of a dict); other values as they are."""
    if isinstance(x, FrozenDict):
        return tree_util.tree_map(lambda y: y, x._dict)
    if isinstance(x, dict):
        return {key: unfreeze(value) for key, value in x.items()}
    return x


def copy(x, add_or_replace=FrozenDict({})):
    """``x`` with entries added or replaced (a FrozenDict or a dict, as given)."""
    if isinstance(x, FrozenDict):
        return x.copy(add_or_replace)
    if isinstance(x, dict):
        new_dict = tree_util.tree_map(lambda y: y, x)
        new_dict.update(add_or_replace)
        return new_dict
    raise TypeError(f"Expected FrozenDict or dict, got {type(x)}")


def pop(x, key):
    """(``x`` without `key`, the removed value), for a FrozenDict or a dict."""
    if isinstance(x, FrozenDict):
        return x.pop(key)
    if isinstance(x, dict):
        new_dict = tree_util.tree_map(lambda y: y, x)
        value = new_dict.pop(key)
        return new_dict, value
    raise TypeError(f"Expected FrozenDict or dict, got {type(x)}")


def pretty_repr(x, num_spaces=4):
    """An indented representation of a nested FrozenDict / dict (``repr`` otherwise)."""
    if isinstance(x, FrozenDict):
        return x.pretty_repr(num_spaces)
    return _pretty_dict(x, num_spaces)
