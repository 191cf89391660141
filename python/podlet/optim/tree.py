"""podlet.optim.tree: optax.tree (0.2.8), arithmetic and queries on pytrees of arrays.

    import podlet.optim as optax
    optax.tree.norm(grads)                          # global L2 norm
    optax.tree.add_scale(params, -lr, grads)        # params - lr * grads
    optax.tree.get(opt_state, "count")              # a field found anywhere in a state

Leafwise maps use ``podlet.tree_util``; reductions add leaf results in leaf order, as
optax does. ``get``/``set``/``get_all_with_path`` look through dicts and NamedTuples
(a NamedTuple's fields are addressed by name, and a NamedTuple by its class name).
"""
import builtins as _bi
import dataclasses as _dc
import functools as _ft
import operator as _op
from typing import Callable, Optional

from .. import numpy as jnp
from .. import random as _random
from .. import tree_util as _tu
from ._base import tree_cast as cast, tree_cast_like as cast_like, tree_norm as norm, tree_sum as _tree_sum
from .transform import bias_correction, update_moment, update_moment_per_elem_norm

__all__ = ["add", "add_scale", "allclose", "batch_shape", "bias_correction", "cast", "cast_like", "clip", "conj",
           "div", "dtype", "full_like", "get", "get_all_with_path", "map_params", "max", "min", "mul", "norm",
           "ones_like", "random_like", "real", "scale", "set", "size", "split_key_like", "sub", "sum",
           "unwrap_random_key_data", "update_infinity_moment", "update_moment", "update_moment_per_elem_norm",
           "vdot", "where", "zeros_like"]


def _none(x):
    return x is None


# ---------------------------------------------------------------------------------
# arithmetic
# ---------------------------------------------------------------------------------
def add(tree_x, tree_y, *other_trees):
    """Leafwise sum of two or more trees."""
    return _tu.tree_map(lambda *leaves: _bi.sum(leaves), tree_x, tree_y, *other_trees)


def sub(tree_x, tree_y):
    """Leafwise ``x - y``."""
    return _tu.tree_map(_op.sub, tree_x, tree_y)


def mul(tree_x, tree_y):
    """Leafwise ``x * y``."""
    return _tu.tree_map(_op.mul, tree_x, tree_y)


def div(tree_x, tree_y):
    """Leafwise ``x / y``."""
    return _tu.tree_map(_op.truediv, tree_x, tree_y)


def scale(scalar, tree):
    """``scalar * leaf`` for every leaf."""
    return _tu.tree_map(lambda x: scalar * x, tree)


def add_scale(tree_x, scalar, tree_y):
    """Leafwise ``x + scalar * y`` (None leaves of ``x`` stay None)."""
    scalar = jnp.asarray(scalar)
    return _tu.tree_map(lambda x, y: None if x is None else x + scalar * y, tree_x, tree_y, is_leaf=_none)


def vdot(tree_x, tree_y):
    """Sum over leaves of the inner products ``sum(x * y)`` (a scalar)."""
    vdots = _tu.tree_map(lambda a, b: jnp.tensordot(jnp.asarray(a), jnp.asarray(b), jnp.ndim(a)), tree_x, tree_y)
    return _ft.reduce(_op.add, _tu.tree_leaves(vdots), 0)


def sum(tree, associative_reduction: bool = False):  # noqa: A001 - optax's name
    """Sum of all elements of all leaves."""
    del associative_reduction  # one order on one CPU backend
    return _tree_sum(tree)


def max(tree):  # noqa: A001
    """Largest element over all leaves (``-inf`` for an empty tree)."""
    maxes = [jnp.max(x) for x in _tu.tree_leaves(tree) if jnp.size(x)]
    return _ft.reduce(jnp.maximum, maxes, -float("inf"))


def min(tree):  # noqa: A001
    """Smallest element over all leaves (``inf`` for an empty tree)."""
    mins = [jnp.min(x) for x in _tu.tree_leaves(tree) if jnp.size(x)]
    return _ft.reduce(jnp.minimum, mins, float("inf"))


def size(tree) -> int:
    """Total number of elements."""
    return _bi.sum(int(jnp.size(x)) for x in _tu.tree_leaves(tree))


def conj(tree):
    """Complex conjugate (the identity: podlet has no complex dtypes)."""
    return tree


def real(tree):
    """Real part (the identity: podlet has no complex dtypes)."""
    return tree


def clip(tree, min_value=None, max_value=None):
    """Leafwise ``clip(x, min_value, max_value)``."""
    return _tu.tree_map(lambda g: jnp.clip(g, min_value, max_value), tree)


def where(condition, tree_x, tree_y):
    """Leafwise ``where(condition, x, y)``."""
    return _tu.tree_map(lambda x, y: jnp.where(condition, x, y), tree_x, tree_y)


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan: bool = False):
    """True when every pair of leaves is ``allclose``."""
    leaves = _tu.tree_leaves(_tu.tree_map(lambda x, y: jnp.allclose(x, y, rtol=rtol, atol=atol,
                                                                      equal_nan=equal_nan), a, b))
    return _ft.reduce(_op.and_, leaves, True)


def batch_shape(tree, shape=()):
    """Broadcasts every leaf to ``(*shape, *leaf.shape)``."""
    return _tu.tree_map(lambda x: jnp.broadcast_to(x, (*shape, *jnp.shape(x))), tree)


def update_infinity_moment(updates, moments, decay, eps):
    """Adamax's infinity norm: ``max(|g| + eps, decay * m)`` leafwise."""
    return _tu.tree_map(lambda g, t: jnp.maximum(jnp.abs(g) + eps, decay * t) if g is not None else g,
                        updates, moments, is_leaf=_none)


# ---------------------------------------------------------------------------------
# creation
# ---------------------------------------------------------------------------------
def zeros_like(tree, dtype=None):  # noqa: F811 - optax's argument name
    """Zeros with each leaf's shape (and dtype unless given)."""
    return _tu.tree_map(lambda x: jnp.zeros_like(jnp.asarray(x), dtype=dtype), tree)


def ones_like(tree, dtype=None):
    """Ones with each leaf's shape (and dtype unless given)."""
    return _tu.tree_map(lambda x: jnp.ones_like(jnp.asarray(x), dtype=dtype), tree)


def full_like(tree, fill_value, dtype=None):
    """``fill_value`` with each leaf's shape (and dtype unless given)."""
    return _tu.tree_map(lambda x: jnp.full_like(jnp.asarray(x), fill_value, dtype=dtype), tree)


def split_key_like(rng_key, target_tree):
    """One key per leaf of ``target_tree`` (``random.split`` into as many)."""
    treedef = _tu.tree_structure(target_tree)
    n = treedef.num_leaves
    keys = _random.split(rng_key, n)
    return _tu.tree_unflatten(treedef, [keys[i] for i in range(n)])


def random_like(rng_key, target_tree, sampler=_random.normal, dtype=None):
    """Random leaves shaped like ``target_tree``'s, one split key per leaf.

    Args:
      rng_key: a PRNG key.
      target_tree: the tree to imitate.
      sampler: ``(key, shape, dtype) -> array`` (``random.normal`` by default).
      dtype: the leaves' dtype (default: each target leaf's).
    """
    keys_tree = split_key_like(rng_key, target_tree)
    return _tu.tree_map(lambda leaf, key: sampler(key, leaf.shape, dtype or leaf.dtype), target_tree, keys_tree)


def unwrap_random_key_data(input_tree):
    """The raw data of typed keys (the identity: podlet keys are raw uint32[2])."""
    return input_tree


# ---------------------------------------------------------------------------------
# dtypes
# ---------------------------------------------------------------------------------
def _lower_dtype(d1, d2):
    p = jnp.promote_types(d1, d2)
    if p == d1:
        return d2
    if p == d2:
        return d1
    raise ValueError(f"Cannot compare dtype of dtype1={d1} and dtype2={d2}. Neither {d1} nor {d2} can be "
                     "promoted to the other.")


def _higher_dtype(d1, d2):
    return d2 if _lower_dtype(d1, d2) == d1 else d1


def dtype(tree, mixed_dtype_handler: Optional[str] = None):
    """The dtype of a tree's leaves.

    Args:
      tree: a pytree of arrays.
      mixed_dtype_handler: None (all leaves must share one dtype), ``'promote'``,
        ``'highest'`` or ``'lowest'``.

    Returns:
      A dtype (float32 for an empty tree).
    """
    leaves = _tu.tree_leaves(tree)
    if not leaves:
        return jnp.dtype(jnp.float32)
    dts = [jnp.asarray(x).dtype for x in leaves]
    if mixed_dtype_handler is None:
        bad = [f"Expected dtype={dts[0]} for {_tu.keystr(p)} but got {jnp.asarray(x).dtype}."
               for p, x in _tu.tree_leaves_with_path(tree) if jnp.asarray(x).dtype != dts[0]]
        if bad:
            raise ValueError("\n".join(bad))
        return dts[0]
    if mixed_dtype_handler == "promote":
        return _ft.reduce(jnp.promote_types, dts)
    if mixed_dtype_handler == "highest":
        return _ft.reduce(_higher_dtype, dts)
    if mixed_dtype_handler == "lowest":
        return _ft.reduce(_lower_dtype, dts)
    raise ValueError(f"Invalid value for mixed_dtype_handler={mixed_dtype_handler!r}, possible values are: None, "
                     '"promote", "highest", "lowest".')


# ---------------------------------------------------------------------------------
# state queries: get / set / map_params
# ---------------------------------------------------------------------------------
@_dc.dataclass(frozen=True)
class NamedTupleKey:
    """A path entry naming a NamedTuple field (``ScaleByAdamState.count``)."""
    tuple_name: str
    name: str

    def __str__(self):
        return f"{self.tuple_name}.{self.name}"


def _is_named_tuple(x):
    return isinstance(x, tuple) and hasattr(x, "_fields")


def _has_keys(node, keys):
    if _is_named_tuple(node) and (any(k in node._fields for k in keys) or type(node).__name__ in keys):
        return True
    return isinstance(node, dict) and any(k in node for k in keys)


def _leaves_with_nt_path(tree, is_leaf=None):
    """(path, leaf-or-subtree) pairs, with NamedTuple fields as NamedTupleKey."""
    is_leaf_ = is_leaf or (lambda _: False)
    out = []
    for path, node in _tu.tree_leaves_with_path(tree, is_leaf=lambda x: is_leaf_(x) or _is_named_tuple(x)):
        if is_leaf_(node) or not _is_named_tuple(node):
            out.append((tuple(path), node))
            continue
        for field in node._fields:
            for child_path, child in _leaves_with_nt_path(getattr(node, field), is_leaf):
                out.append(((*path, NamedTupleKey(type(node).__name__, field), *child_path), child))
    return out


def _children_with_path(path, node):
    if _is_named_tuple(node):
        return [((*path, NamedTupleKey(type(node).__name__, f)), getattr(node, f)) for f in node._fields]
    if isinstance(node, dict):
        return [((*path, _tu.DictKey(k)), v) for k, v in node.items()]
    raise ValueError(f"Subtree must be a dict or a NamedTuple. Got {type(node)}")


def _get_all(tree, key):
    has_key = lambda n: _has_keys(n, (key,))  # noqa: E731
    subtrees = [(p, n) for p, n in _leaves_with_nt_path(tree, is_leaf=has_key) if has_key(n)]
    found = []
    for p, n in subtrees:
        if _is_named_tuple(n):
            found.append((p, n) if key == type(n).__name__ else
                         ((*p, NamedTupleKey(type(n).__name__, key)), getattr(n, key)))
        else:
            found.append(((*p, _tu.DictKey(key)), n[key]))
    for p, n in subtrees:
        for child_path, child in _children_with_path(p, n):
            found += [((*child_path, *new_path), v) for new_path, v in _get_all(child, key)]
    return found


def get_all_with_path(tree, key, filtering: Optional[Callable] = None):
    """Every ``(path, value)`` whose dict key, NamedTuple field or NamedTuple class
    name is ``key``, optionally kept by ``filtering(path, value)``."""
    found = _get_all(tree, key)
    if filtering:
        found = [(p, v) for p, v in found if filtering(p, v)]
    return found


def get(tree, key, default=None, filtering: Optional[Callable] = None):
    """The one value named ``key`` in ``tree`` (``default`` if none; KeyError if
    several), e.g. ``get(opt_state, 'count')``."""
    found = get_all_with_path(tree, key, filtering=filtering)
    if len(found) > 1:
        raise KeyError(f"Found multiple values for '{key}' in {tree}.")
    return found[0][1] if found else default


def _entry_key(k):
    if isinstance(k, _tu.DictKey):
        return k.key
    if isinstance(k, _tu.FlattenedIndexKey):
        return k.key
    if isinstance(k, _tu.GetAttrKey):
        return k.name
    if isinstance(k, _tu.SequenceKey):
        return k.idx
    if isinstance(k, NamedTupleKey):
        return k.name
    raise KeyError(f"Tree key '{k}' of type '{type(k)}' not valid.")


def set(tree, filtering: Optional[Callable] = None, /, **kwargs):  # noqa: A001
    """A copy of ``tree`` with the values named by ``kwargs`` replaced, e.g.
    ``set(opt_state, learning_rate=0.1)`` on an ``inject_hyperparams`` state.

    Raises:
      KeyError: when a key is found nowhere.
    """
    for key in kwargs:
        if not get_all_with_path(tree, key, filtering):
            if filtering:
                raise KeyError(f"Found no values matching '{key}' given the filtering operation in {tree}")
            raise KeyError(f"Found no values matching '{key}' in {tree}")
    keys = tuple(kwargs)
    has_any = lambda n: _has_keys(n, keys)  # noqa: E731

    def _replace(path, node):
        if not has_any(node):
            return node
        if _is_named_tuple(node) and type(node).__name__ in kwargs and (filtering is None or filtering(path, node)):
            return kwargs[type(node).__name__]
        new = {}
        for child_path, child in _children_with_path(path, node):
            k = _entry_key(child_path[-1])
            if k in kwargs and (filtering is None or filtering(child_path, child)):
                new[k] = kwargs[k]
            elif isinstance(child, (dict, list, tuple)):
                new[k] = _replace(child_path, child)
            else:
                new[k] = child
        if _is_named_tuple(node):
            return node._replace(**new)
        return type(node)(new) if type(node) is not dict else new

    _, treedef = _tu.tree_flatten(tree, is_leaf=has_any)
    pairs = _leaves_with_nt_path(tree, is_leaf=has_any)
    return _tu.tree_unflatten(treedef, [_replace(p, n) for p, n in pairs])


class _ParamsPlaceholder:
    """Marks where params sit in a state built by ``init(placeholder)``."""


_tu.register_pytree_node(_ParamsPlaceholder, lambda x: ((), None), lambda aux, children: _ParamsPlaceholder())


def map_params(initable, f: Callable, state, /, *rest, transform_non_params: Optional[Callable] = None,
               is_leaf: Optional[Callable] = None):
    """Maps ``f`` over the parts of an optimizer state that mirror the params (e.g.
    Adam's ``mu`` and ``nu``), leaving counters alone (or mapping
    ``transform_non_params`` over them).

    Args:
      initable: the optimizer (or its ``init``), re-run on a placeholder to find
        where params sit in the state.
      f: the function for param-shaped subtrees (leafwise).
      state: the optimizer state.
      *rest: more trees passed to ``f`` alongside.
      transform_non_params: a function for the other leaves.
      is_leaf: passed to the leafwise map.
    """
    placeholder = _ParamsPlaceholder()
    init = initable.init if hasattr(initable, "init") else initable
    with_placeholders = init(placeholder)

    def map_one(maybe_placeholder, value):
        if isinstance(maybe_placeholder, _ParamsPlaceholder):
            return _tu.tree_map(f, value, *rest, is_leaf=is_leaf)
        if transform_non_params is not None:
            return transform_non_params(value)
        return value

    return _tu.tree_map(map_one, with_placeholders, state, is_leaf=lambda v: isinstance(v, _ParamsPlaceholder))

