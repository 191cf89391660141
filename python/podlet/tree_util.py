"""Pytrees: a pure-Python subset of ``jax.tree_util`` (jax 0.10.2 semantics).

Node types: ``dict`` (keys sorted), ``list``, ``tuple``, ``None`` (a node with no
children, not a leaf), namedtuples (any tuple subclass with ``_fields``),
``collections.OrderedDict`` (insertion order), ``collections.defaultdict`` (keys
sorted), and anything registered with :func:`register_pytree_node`. Everything
else, including subclasses of the above that are not registered, is a leaf.

Treedefs print, compare and fail the way jax's do, so messages read the same:

    >>> tree_structure({'b': [1, 2], 'a': 3})
    PyTreeDef({'a': *, 'b': [*, *]})

This module must stay importable without ``podlet._core``: jit flattens every call's
arguments through it, and the tests compare it with jax before the C++ is built.

Internals: a treedef holds one nested tuple per node, ``(kind, aux, children)``,
where ``kind`` is one of the ``_Kind`` singletons below or a ``_Custom``
registration, ``aux`` is the node data (dict keys, namedtuple type, custom aux) and
``children`` a tuple of child nodes. Leaves share a single node object, so
flattening allocates nothing per leaf beyond the list slot.
"""

from __future__ import annotations

import collections
import dataclasses
import difflib
import functools
import textwrap
from typing import Any, Callable, Hashable, Iterable, TypeVar

__all__ = [
    "PyTreeDef", "DictKey", "SequenceKey", "GetAttrKey", "FlattenedIndexKey",
    "tree_flatten", "tree_unflatten", "tree_leaves", "tree_structure", "tree_map",
    "tree_reduce", "tree_all", "all_leaves", "treedef_children", "treedef_is_leaf",
    "treedef_tuple", "register_pytree_node", "register_pytree_node_class",
    "register_pytree_with_keys", "register_pytree_with_keys_class",
    "tree_flatten_with_path", "tree_leaves_with_path", "tree_map_with_path", "keystr",
    "registry", "default_registry", "KeyEntry", "KeyPath", "Partial", "register_dataclass",
    "register_static", "tree_broadcast", "tree_reduce_associative", "tree_transpose",
    "flatten_one_level", "flatten_one_level_with_keys", "is_tree_node",
]


# --------------------------------------------------------------------------- kinds

class _Kind:
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"<pytree kind {self.name}>"

    def __reduce__(self):  # singletons: pickle by module-level name
        return "_K_" + ("NAMEDTUPLE" if self.name == "namedtuple" else self.name.upper())


_K_LEAF = _Kind("leaf")
_K_NONE = _Kind("None")
_K_TUPLE = _Kind("tuple")
_K_LIST = _Kind("list")
_K_DICT = _Kind("dict")
_K_NAMEDTUPLE = _Kind("namedtuple")


class _Custom:
    """A registered node type: the registry's value and a treedef node's kind."""

    __slots__ = ("type", "flatten", "unflatten", "flatten_with_keys")

    def __init__(self, nodetype, flatten, unflatten, flatten_with_keys):
        self.type = nodetype
        self.flatten = flatten
        self.unflatten = unflatten
        self.flatten_with_keys = flatten_with_keys

    def __repr__(self):
        return f"<pytree node {self.type!r}>"

    def __reduce__(self):  # pickle by node type; unpickling needs it registered
        return (_custom_for, (self.type,))


def _custom_for(nodetype):
    return registry[nodetype]


# Shared node objects.
_LEAF = (_K_LEAF, None, ())
_NONE = (_K_NONE, None, ())

# The registry of custom node types: type -> _Custom. Other podlet modules (e.g.
# struct dataclasses, train states) add to it through register_pytree_node.
registry: dict[type, _Custom] = {}

# type -> kind, filled lazily; unknown types are classified once and cached.
_BUILTIN_KINDS = {type(None): _K_NONE, tuple: _K_TUPLE, list: _K_LIST, dict: _K_DICT}
_kind_cache: dict[type, Any] = dict(_BUILTIN_KINDS)
_KIND_CACHE_MAX = 4096


def _classify(t):
    k = registry.get(t)
    if k is None:
        if issubclass(t, tuple) and hasattr(t, "_fields"):
            k = _K_NAMEDTUPLE
        else:
            k = _K_LEAF
    if len(_kind_cache) > _KIND_CACHE_MAX:
        _kind_cache.clear()
        _kind_cache.update(_BUILTIN_KINDS)
        _kind_cache.update(registry)
    _kind_cache[t] = k
    return k


def _sorted_keys(d):
    try:
        return tuple(sorted(d))
    except TypeError:
        raise ValueError(
            "Comparator raised exception while sorting pytree dictionary keys.") from None


# ------------------------------------------------------------------- registration

def register_pytree_node(nodetype, flatten_func, unflatten_func,
                         flatten_with_keys_func=None):
    """Registers ``nodetype`` as an internal pytree node.

    ``flatten_func(x) -> (children, aux_data)``; ``unflatten_func(aux_data, children)
    -> x`` receives the children as a tuple. ``flatten_with_keys_func(x) ->
    (((key, child), ...), aux_data)`` gives key paths; without it, paths use
    :class:`FlattenedIndexKey`.
    """
    if not isinstance(nodetype, type):
        raise TypeError(f"register_pytree_node: expected a type, got {nodetype!r}")
    if not callable(flatten_func) or not callable(unflatten_func):
        raise TypeError("register_pytree_node: flatten_func and unflatten_func must be callable")
    if nodetype in registry or nodetype in _BUILTIN_KINDS:
        raise ValueError(f"Duplicate custom PyTreeDef type registration for {nodetype}.")
    registry[nodetype] = _Custom(nodetype, flatten_func, unflatten_func,
                                 flatten_with_keys_func)
    _kind_cache.pop(nodetype, None)


def register_pytree_node_class(cls):
    """Class decorator: registers ``cls`` using its ``tree_flatten`` method and
    ``tree_unflatten`` classmethod."""
    register_pytree_node(cls, lambda x: x.tree_flatten(), cls.tree_unflatten)
    return cls


def register_pytree_with_keys(nodetype, flatten_with_keys, unflatten_func,
                              flatten_func=None):
    """Like :func:`register_pytree_node`, from a key-aware flatten function."""
    if not flatten_func:
        def flatten_func(tree):
            key_children, aux = flatten_with_keys(tree)
            return [c for _, c in key_children], aux
    register_pytree_node(nodetype, flatten_func, unflatten_func, flatten_with_keys)


def register_pytree_with_keys_class(cls):
    """Class decorator: ``tree_flatten_with_keys`` method + ``tree_unflatten`` classmethod."""
    flatten_func = (
        (lambda x: x.tree_flatten()) if hasattr(cls, "tree_flatten") else None)
    register_pytree_with_keys(cls, lambda x: x.tree_flatten_with_keys(),
                              cls.tree_unflatten, flatten_func)
    return cls


def _od_flatten(x):
    return list(x.values()), tuple(x.keys())


def _od_unflatten(keys, children):
    return collections.OrderedDict(zip(keys, children))


def _od_flatten_with_keys(x):
    return [(DictKey(k), v) for k, v in x.items()], tuple(x.keys())


def _dd_flatten(x):
    keys = _sorted_keys(x)
    return [x[k] for k in keys], (x.default_factory, keys)


def _dd_unflatten(aux, children):
    return collections.defaultdict(aux[0], zip(aux[1], children))


def _dd_flatten_with_keys(x):
    keys = _sorted_keys(x)
    return [(DictKey(k), x[k]) for k in keys], (x.default_factory, keys)


register_pytree_node(collections.OrderedDict, _od_flatten, _od_unflatten,
                     _od_flatten_with_keys)
register_pytree_node(collections.defaultdict, _dd_flatten, _dd_unflatten,
                     _dd_flatten_with_keys)


# ------------------------------------------------------------------------ flatten

def _flat(x, leaves):
    t = type(x)
    k = _kind_cache.get(t)
    if k is None:
        k = _classify(t)
    if k is _K_LEAF:
        leaves.append(x)
        return _LEAF
    # Leaf children are handled inline: no call, no allocation per leaf.
    get = _kind_cache.get
    append = leaves.append
    nodes = []
    push = nodes.append
    if k is _K_DICT:
        try:
            aux = tuple(sorted(x))
        except TypeError:
            aux = _sorted_keys(x)
        for key in aux:
            c = x[key]
            if get(type(c)) is _K_LEAF:
                append(c)
                push(_LEAF)
            else:
                push(_flat(c, leaves))
        return (k, aux, tuple(nodes))
    if k is _K_TUPLE or k is _K_LIST:
        aux = None
        children = x
    elif k is _K_NONE:
        return _NONE
    elif k is _K_NAMEDTUPLE:
        aux = t
        children = x
    else:
        children, aux = k.flatten(x)
    for c in children:
        if get(type(c)) is _K_LEAF:
            append(c)
            push(_LEAF)
        else:
            push(_flat(c, leaves))
    return (k, aux, tuple(nodes))


def _flat_is_leaf(x, leaves, is_leaf):
    if is_leaf(x):
        leaves.append(x)
        return _LEAF
    t = type(x)
    k = _kind_cache.get(t)
    if k is None:
        k = _classify(t)
    if k is _K_LEAF:
        leaves.append(x)
        return _LEAF
    if k is _K_DICT:
        keys = _sorted_keys(x)
        return (k, keys, tuple([_flat_is_leaf(x[key], leaves, is_leaf) for key in keys]))
    if k is _K_TUPLE or k is _K_LIST:
        return (k, None, tuple([_flat_is_leaf(c, leaves, is_leaf) for c in x]))
    if k is _K_NONE:
        return _NONE
    if k is _K_NAMEDTUPLE:
        return (k, t, tuple([_flat_is_leaf(c, leaves, is_leaf) for c in x]))
    children, aux = k.flatten(x)
    return (k, aux, tuple([_flat_is_leaf(c, leaves, is_leaf) for c in children]))


def tree_flatten(tree, is_leaf: Callable[[Any], bool] | None = None):
    """Returns ``(leaves, treedef)``."""
    leaves = []
    if is_leaf is None:
        node = _flat(tree, leaves)
    else:
        node = _flat_is_leaf(tree, leaves, is_leaf)
    return leaves, PyTreeDef(node)


def tree_leaves(tree, is_leaf: Callable[[Any], bool] | None = None) -> list:
    leaves = []
    if is_leaf is None:
        _flat(tree, leaves)
    else:
        _flat_is_leaf(tree, leaves, is_leaf)
    return leaves


def tree_structure(tree, is_leaf: Callable[[Any], bool] | None = None) -> "PyTreeDef":
    return tree_flatten(tree, is_leaf)[1]


def tree_unflatten(treedef: "PyTreeDef", leaves: Iterable[Any]):
    return treedef.unflatten(leaves)


# ---------------------------------------------------------------------- unflatten

def _unflat(node, it):
    k, aux, children = node
    if k is _K_LEAF:
        return next(it)
    if k is _K_NONE:
        return None
    vals = [next(it) if c is _LEAF else _unflat(c, it) for c in children]
    if k is _K_DICT:
        return dict(zip(aux, vals))
    if k is _K_LIST:
        return vals
    if k is _K_TUPLE:
        return tuple(vals)
    if k is _K_NAMEDTUPLE:
        return aux(*vals)
    return k.unflatten(aux, tuple(vals))


_COMPILE_MAX_LEAVES = 100_000


def _compile_unflatten(node):
    """A function ``leaves -> tree`` for this structure, written as one Python
    expression (``{'a': l[0], 'b': [l[1], l[2]]}``) and compiled: several times
    faster than walking the treedef. Returns False when the tree is too deep for
    the compiler, so callers fall back to the walk."""
    consts = []
    counter = [0]

    def const(v):
        consts.append(v)
        return f"C[{len(consts) - 1}]"

    def expr(nd):
        k, aux, children = nd
        if k is _K_LEAF:
            i = counter[0]
            counter[0] = i + 1
            return f"l[{i}]"
        if k is _K_NONE:
            return "None"
        parts = [expr(c) for c in children]
        if k is _K_LIST:
            return "[" + ", ".join(parts) + "]"
        if k is _K_TUPLE:
            return "(" + "".join(p + ", " for p in parts) + ")"
        if k is _K_DICT:
            return "{" + ", ".join(
                f"{const(key)}: {p}" for key, p in zip(aux, parts)) + "}"
        if k is _K_NAMEDTUPLE:
            return f"{const(aux)}(" + ", ".join(parts) + ")"
        return (f"{const(k.unflatten)}({const(aux)}, ("
                + "".join(p + ", " for p in parts) + "))")

    try:
        src = f"lambda l: {expr(node)}"
        return eval(compile(src, "<podlet.tree_util unflatten>", "eval"), {"C": consts})
    except (RecursionError, SyntaxError, MemoryError, ValueError):
        return False


def _count(node):
    """(num_leaves, num_nodes)."""
    if node[0] is _K_LEAF:
        return 1, 1
    nl, nn = 0, 1
    for c in node[2]:
        a, b = _count(c)
        nl += a
        nn += b
    return nl, nn


def _hash_node(node):
    k, aux, children = node
    if k is _K_LEAF or k is _K_NONE:
        return hash(k)
    if isinstance(k, _Custom):
        try:
            h = hash(aux)
        except TypeError:  # jax does not hash custom node data either
            h = 0
    else:
        h = hash(aux)
    return hash((k, h, len(children), tuple([_hash_node(c) for c in children])))


def _type_name(t):
    return getattr(t, "__name__", str(t))


def _repr_node(node):
    k, aux, children = node
    if k is _K_LEAF:
        return "*"
    if k is _K_NONE:
        return "None"
    if k is _K_LIST:
        return "[" + ", ".join([_repr_node(c) for c in children]) + "]"
    if k is _K_TUPLE:
        if len(children) == 1:
            return "(" + _repr_node(children[0]) + ",)"
        return "(" + ", ".join([_repr_node(c) for c in children]) + ")"
    if k is _K_DICT:
        return "{" + ", ".join(
            [f"{key!r}: {_repr_node(c)}" for key, c in zip(aux, children)]) + "}"
    inner = "[" + ", ".join([_repr_node(c) for c in children]) + "]"
    if k is _K_NAMEDTUPLE:
        return f"CustomNode(namedtuple[{_type_name(aux)}], {inner})"
    return f"CustomNode({_type_name(k.type)}[{aux}], {inner})"


def _node_type(node):
    k = node[0]
    if k is _K_NAMEDTUPLE:
        return node[1]
    if isinstance(k, _Custom):
        return k.type
    return {_K_DICT: dict, _K_LIST: list, _K_TUPLE: tuple, _K_NONE: type(None)}.get(k)


_NONE_PREFIX_HINT = (
    "\n\nIn previous releases of JAX, flatten-up-to used to consider None to be a "
    "tree-prefix of non-None values. To obtain the previous behavior, you can "
    "usually write:\n  jax.tree.map(lambda x, y: None if x is None else f(x, y), "
    "a, b, is_leaf=lambda x: x is None)")


def _flat_up_to(node, x, out):
    k, aux, children = node
    if k is _K_LEAF:
        out.append(x)
        return
    t = type(x)
    if k is _K_DICT:
        if t is not dict:
            raise ValueError(f"Expected dict, got {x!r}.")
        keys = _sorted_keys(x)
        if keys != aux:
            raise ValueError(f"Dict key mismatch; expected keys: {list(aux)!r}; "
                             f"present keys: {list(keys)!r}.")
        for key, c in zip(aux, children):
            _flat_up_to(c, x[key], out)
        return
    if k is _K_LIST or k is _K_TUPLE:
        name = "list" if k is _K_LIST else "tuple"
        if t is not (list if k is _K_LIST else tuple):
            raise ValueError(f"Expected {name}, got {x!r}.")
        if len(x) != len(children):
            raise ValueError(f"{name.capitalize()} arity mismatch: {len(x)} != "
                             f"{len(children)}; {name}: {x!r}.")
        for c, v in zip(children, x):
            _flat_up_to(c, v, out)
        return
    if k is _K_NONE:
        if x is not None:
            raise ValueError(f"Expected None, got {x!r}.{_NONE_PREFIX_HINT}")
        return
    if k is _K_NAMEDTUPLE:
        if not (isinstance(x, tuple) and hasattr(t, "_fields")):
            raise ValueError(f"Expected named tuple, got {x!r}.")
        if t is not aux:
            raise ValueError(f"Named tuple type mismatch: expected type: {aux!r}, "
                             f"tuple: {x!r}.")
        if len(x) != len(children):
            raise ValueError(f"Named tuple arity mismatch: {len(x)} != "
                             f"{len(children)}; tuple: {x!r}.")
        for c, v in zip(children, x):
            _flat_up_to(c, v, out)
        return
    if t is not k.type:
        raise ValueError(f"Custom node type mismatch: expected type: {k.type!r}, "
                         f"value: {x!r}.")
    xs, x_aux = k.flatten(x)
    xs = list(xs)
    if not (x_aux is aux or x_aux == aux):
        raise ValueError(f"Mismatch custom node data: {aux!r} != {x_aux!r}; "
                         f"value: {x!r}.")
    if len(xs) != len(children):
        raise ValueError(f"Custom type arity mismatch: {len(xs)} != {len(children)}; "
                         f"value: {x!r}.")
    for c, v in zip(children, xs):
        _flat_up_to(c, v, out)


# ------------------------------------------------------------------------ PyTreeDef

class PyTreeDef:
    """The structure of a pytree: everything but its leaves."""

    __slots__ = ("_node", "_counts", "_hash", "_build", "_uses")

    def __init__(self, node):
        self._node = node
        self._counts = None
        self._hash = None
        self._build = None  # compiled unflatten, made on the second use
        self._uses = 0

    @property
    def num_leaves(self) -> int:
        if self._counts is None:
            self._counts = _count(self._node)
        return self._counts[0]

    @property
    def num_nodes(self) -> int:
        if self._counts is None:
            self._counts = _count(self._node)
        return self._counts[1]

    def unflatten(self, leaves: Iterable[Any]):
        leaves = leaves if type(leaves) is list else list(leaves)
        n = self.num_leaves
        if len(leaves) != n:
            if len(leaves) < n:
                raise ValueError(f"Too few leaves for PyTreeDef; expected {n}, "
                                 f"got {len(leaves)}")
            raise ValueError(f"Too many leaves for PyTreeDef; expected {n}.")
        if self._node is _LEAF:
            return leaves[0]
        build = self._build
        if build is None:
            self._uses += 1
            if self._uses == 2 and n <= _COMPILE_MAX_LEAVES:
                build = self._build = _compile_unflatten(self._node)
        if build:
            return build(leaves)
        return _unflat(self._node, iter(leaves))

    def flatten_up_to(self, xs) -> list:
        """The subtrees of ``xs`` at this treedef's leaves (``xs`` must have this
        treedef as a prefix)."""
        out = []
        _flat_up_to(self._node, xs, out)
        return out

    def compose(self, inner: "PyTreeDef") -> "PyTreeDef":
        """This structure with every leaf replaced by ``inner``."""
        def sub(node):
            if node[0] is _K_LEAF:
                return inner._node
            return (node[0], node[1], tuple([sub(c) for c in node[2]]))
        return PyTreeDef(sub(self._node))

    def children(self) -> list["PyTreeDef"]:
        return [PyTreeDef(c) for c in self._node[2]]

    def node_data(self):
        """``(type, aux_data)`` of the root, or None for a leaf (as in jax)."""
        if self._node[0] is _K_LEAF:
            return None
        return _node_type(self._node), self._node[1]

    def __eq__(self, other):
        if not isinstance(other, PyTreeDef):
            return NotImplemented
        return self._node is other._node or self._node == other._node

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self):
        if self._hash is None:
            try:  # nested tuples of kinds and aux data: hashed in C
                self._hash = hash(self._node)
            except TypeError:  # unhashable custom aux data
                self._hash = _hash_node(self._node)
        return self._hash

    def __repr__(self):
        return f"PyTreeDef({_repr_node(self._node)})"

    __str__ = __repr__

    def __reduce__(self):
        return (PyTreeDef, (self._node,))


def treedef_children(treedef: PyTreeDef) -> list[PyTreeDef]:
    return treedef.children()


def treedef_is_leaf(treedef: PyTreeDef) -> bool:
    return treedef.num_nodes == 1


def treedef_tuple(treedefs: Iterable[PyTreeDef]) -> PyTreeDef:
    return PyTreeDef((_K_TUPLE, None, tuple([t._node for t in treedefs])))


def all_leaves(iterable: Iterable[Any],
               is_leaf: Callable[[Any], bool] | None = None) -> bool:
    """True when every element of ``iterable`` is itself a leaf."""
    if is_leaf is None:
        for x in iterable:
            t = type(x)
            k = _kind_cache.get(t)
            if k is None:
                k = _classify(t)
            if k is not _K_LEAF:
                return False
        return True
    items = list(iterable)
    leaves = tree_leaves(items, is_leaf)
    return len(leaves) == len(items) and all(a is b for a, b in zip(items, leaves))


# ---------------------------------------------------------------------------- map

class _Unspecified:
    def __repr__(self):
        return "Unspecified"


_UNSPECIFIED = _Unspecified()


def tree_map(f: Callable[..., Any], tree: Any, *rest: Any,
             is_leaf: Callable[[Any], bool] | None = None) -> Any:
    """Maps ``f`` over the leaves of ``tree`` (and the matching subtrees of ``rest``)."""
    leaves = []
    node = _flat(tree, leaves) if is_leaf is None else _flat_is_leaf(tree, leaves, is_leaf)
    treedef = PyTreeDef(node)
    if not rest:
        return treedef.unflatten([f(x) for x in leaves])
    all_leaves_ = [leaves]
    for r in rest:
        try:
            all_leaves_.append(treedef.flatten_up_to(r))
        except Exception as e:
            err = next(_prefix_error((), tree, r, is_leaf), None)
            raise (err("tree_map tree") if err is not None else e) from None
    return treedef.unflatten([f(*xs) for xs in zip(*all_leaves_)])


def tree_reduce(function: Callable[[Any, Any], Any], tree: Any,
                initializer: Any = _UNSPECIFIED,
                is_leaf: Callable[[Any], bool] | None = None) -> Any:
    if initializer is _UNSPECIFIED:
        return functools.reduce(function, tree_leaves(tree, is_leaf=is_leaf))
    return functools.reduce(function, tree_leaves(tree, is_leaf=is_leaf), initializer)


def tree_all(tree: Any, *, is_leaf: Callable[[Any], bool] | None = None) -> bool:
    return all(tree_leaves(tree, is_leaf=is_leaf))


# -------------------------------------------------------------------------- paths

class _KeyEntry:
    __slots__ = ()
    _field = ""

    def __eq__(self, other):
        return type(other) is type(self) and getattr(other, self._field) == getattr(
            self, self._field)

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return hash((type(self).__name__, getattr(self, self._field)))

    def __repr__(self):
        return f"{type(self).__name__}({self._field}={getattr(self, self._field)!r})"

    def __reduce__(self):
        return (type(self), (getattr(self, self._field),))


class DictKey(_KeyEntry):
    """Key of a dict entry; prints as ``['name']``."""
    __slots__ = ("key",)
    __match_args__ = ("key",)
    _field = "key"

    def __init__(self, key):
        self.key = key

    def __str__(self):
        return f"[{self.key!r}]"


class SequenceKey(_KeyEntry):
    """Index into a list or tuple; prints as ``[0]``."""
    __slots__ = ("idx",)
    __match_args__ = ("idx",)
    _field = "idx"

    def __init__(self, idx):
        self.idx = idx

    def __str__(self):
        return f"[{self.idx!r}]"


class GetAttrKey(_KeyEntry):
    """Attribute (namedtuple field, dataclass field); prints as ``.name``."""
    __slots__ = ("name",)
    __match_args__ = ("name",)
    _field = "name"

    def __init__(self, name):
        self.name = name

    def __str__(self):
        return f".{self.name}"


class FlattenedIndexKey(_KeyEntry):
    """Child index of a custom node registered without keys."""
    __slots__ = ("key",)
    __match_args__ = ("key",)
    _field = "key"

    def __init__(self, key):
        self.key = key

    def __str__(self):
        return f"[<flat index {self.key}>]"


def _simple_entrystr(key) -> str:
    if isinstance(key, (DictKey, FlattenedIndexKey)):
        return str(key.key)
    if isinstance(key, SequenceKey):
        return str(key.idx)
    if isinstance(key, GetAttrKey):
        return str(key.name)
    return str(key)


def keystr(keys, *, simple: bool = False, separator: str = "") -> str:
    """Pretty-prints a key path, e.g. ``['params']['Dense_0']['kernel']``."""
    str_fn = _simple_entrystr if simple else str
    return separator.join(map(str_fn, keys))


def _flatten_one_level_with_keys(x, k):
    """(children with keys, aux) of a non-leaf node of kind k."""
    if k is _K_DICT:
        keys = _sorted_keys(x)
        return [(DictKey(key), x[key]) for key in keys], keys
    if k is _K_LIST or k is _K_TUPLE:
        return [(SequenceKey(i), c) for i, c in enumerate(x)], None
    if k is _K_NONE:
        return [], None
    if k is _K_NAMEDTUPLE:
        return [(GetAttrKey(name), c) for name, c in zip(type(x)._fields, x)], type(x)
    if k.flatten_with_keys is not None:
        keyed, aux = k.flatten_with_keys(x)
        return list(keyed), aux
    children, aux = k.flatten(x)
    return [(FlattenedIndexKey(i), c) for i, c in enumerate(children)], aux


def _flat_path(x, path, out, is_leaf):
    if is_leaf is not None and is_leaf(path, x):
        out.append((path, x))
        return _LEAF
    t = type(x)
    k = _kind_cache.get(t)
    if k is None:
        k = _classify(t)
    if k is _K_LEAF:
        out.append((path, x))
        return _LEAF
    if k is _K_NONE:
        return _NONE
    keyed, aux = _flatten_one_level_with_keys(x, k)
    return (k, aux, tuple([_flat_path(c, path + (key,), out, is_leaf) for key, c in keyed]))


def tree_flatten_with_path(tree: Any, is_leaf: Callable[..., bool] | None = None,
                           is_leaf_takes_path: bool = False):
    """Returns ``([(key_path, leaf), ...], treedef)``."""
    fn = is_leaf
    if is_leaf is not None and not is_leaf_takes_path:
        fn = lambda _, x: is_leaf(x)  # noqa: E731
    out = []
    node = _flat_path(tree, (), out, fn)
    return out, PyTreeDef(node)


def tree_leaves_with_path(tree: Any, is_leaf: Callable[..., bool] | None = None,
                          is_leaf_takes_path: bool = False):
    return tree_flatten_with_path(tree, is_leaf, is_leaf_takes_path)[0]


def tree_map_with_path(f: Callable[..., Any], tree: Any, *rest: Any,
                       is_leaf: Callable[..., bool] | None = None,
                       is_leaf_takes_path: bool = False) -> Any:
    """Like :func:`tree_map`, with ``f(key_path, leaf, *rest_leaves)``."""
    keypath_leaves, treedef = tree_flatten_with_path(tree, is_leaf, is_leaf_takes_path)
    cols = list(zip(*keypath_leaves)) or [(), ()]
    for r in rest:
        try:
            cols.append(treedef.flatten_up_to(r))
        except Exception as e:
            err = next(_prefix_error((), tree, r,
                                     None if is_leaf_takes_path else is_leaf), None)
            raise (err("tree_map_with_path tree") if err is not None else e) from None
    return treedef.unflatten([f(*xs) for xs in zip(*cols)])


# ------------------------------------------------------------ structure errors

def _prefix_error(key_path, prefix_tree, full_tree, is_leaf=None):
    """Yields at most one factory of a jax-style ValueError describing where
    ``prefix_tree`` stops being a prefix of ``full_tree``."""
    # A leaf is a valid prefix of any tree.
    if is_leaf is not None and is_leaf(prefix_tree):
        return
    k = _kind_cache.get(type(prefix_tree)) or _classify(type(prefix_tree))
    if k is _K_LEAF:
        return
    if type(prefix_tree) != type(full_tree):
        yield lambda name: ValueError(
            "pytree structure error: different types at key path\n"
            f"    {name}{keystr(key_path)}\n"
            f"At that key path, the prefix pytree {name} has a subtree of type\n"
            f"    {type(prefix_tree)}\n"
            f"but at the same key path the full pytree has a subtree of different type\n"
            f"    {type(full_tree)}.")
        return
    p_keyed, p_meta = _flatten_one_level_with_keys(prefix_tree, k)
    f_keyed, f_meta = _flatten_one_level_with_keys(full_tree, k)
    p_keys = tuple(key for key, _ in p_keyed)
    f_keys = tuple(key for key, _ in f_keyed)
    if isinstance(prefix_tree, (list, tuple)):
        if len(prefix_tree) != len(full_tree):
            ty = type(prefix_tree)
            yield lambda name: ValueError(
                f"pytree structure error: different lengths of {ty.__name__} at key path\n"
                f"    {name}{keystr(key_path)}\n"
                f"At that key path, the prefix pytree {name} has a subtree of type "
                f"{ty.__name__} of length {len(prefix_tree)}, but the full pytree "
                f"has a subtree of the same type but of length {len(full_tree)}.")
            return
    else:
        try:
            diff = set(p_keys).symmetric_difference(set(f_keys))
        except TypeError:
            diff = None
        if len(p_keyed) != len(f_keyed):
            def _keys(ks):
                return " ".join(str(getattr(key, "key", key)) for key in ks)
            yield lambda name: ValueError(
                "pytree structure error: different numbers of pytree children at key path\n"
                f"    {name}{keystr(key_path)}\n"
                f"At that key path, the prefix pytree {name} has a subtree of type\n"
                f"    {type(prefix_tree)}\n"
                f"with {len(p_keyed)} child keys\n"
                f"    {_keys(p_keys)}\n"
                f"but at the same key path the full pytree has a subtree of the same "
                f"type but with {len(f_keyed)} child keys\n"
                f"    {_keys(f_keys)}\n"
                + ("" if diff is None else
                   f"so the symmetric difference on key sets is\n"
                   f"    {_keys(diff)}"))
            return
    if p_meta != f_meta:
        p_str, f_str = str(p_meta), str(f_meta)
        metadata_diff = textwrap.indent(
            "\n".join(difflib.ndiff(p_str.splitlines(), f_str.splitlines())),
            prefix="    ")
        yield lambda name: ValueError(
            "pytree structure error: different pytree metadata at key path\n"
            f"    {name}{keystr(key_path)}\n"
            f"At that key path, the prefix pytree {name} has a subtree of type\n"
            f"    {type(prefix_tree)}\n"
            f"with metadata\n"
            f"    {p_str}\n"
            f"but at the same key path the full pytree has a subtree of the same "
            f"type but with metadata\n"
            f"    {f_str}\n"
            f"so the diff in the metadata at these pytree nodes is\n"
            f"{metadata_diff}")
        return
    for (key, c1), (_, c2) in zip(p_keyed, f_keyed):
        yield from _prefix_error((*key_path, key), c1, c2, is_leaf)


# ------------------------------------------------------ one level, registry, types

KeyEntry = TypeVar("KeyEntry", bound=Any)
KeyPath = tuple[KeyEntry, ...]


def _node_kind(t):
    k = _kind_cache.get(t)
    return _classify(t) if k is None else k


def is_tree_node(typ: type) -> bool:
    """True for a registered node type (built-in or custom) or a namedtuple type."""
    return _node_kind(typ) is not _K_LEAF


def flatten_one_level(tree: Any) -> tuple[Iterable[Any], Hashable]:
    """``(children, node data)`` of a pytree node, one level deep (dict keys sorted;
    namedtuples give their type, custom nodes their aux data)."""
    k = _node_kind(type(tree))
    if k is _K_LEAF:
        raise ValueError(f"can't tree-flatten type: {type(tree)}")
    if k is _K_DICT:
        keys = _sorted_keys(tree)
        return tuple(tree[key] for key in keys), keys
    if k is _K_NONE:
        return (), None
    if k is _K_LIST:
        return list(tree), None
    if k is _K_TUPLE:
        return tuple(tree), None
    if k is _K_NAMEDTUPLE:
        return list(tree), type(tree)
    children, aux = k.flatten(tree)
    return list(children), aux


def flatten_one_level_with_keys(tree: Any) -> tuple[Iterable[Any], Hashable]:
    """Like :func:`flatten_one_level`, with ``(key, child)`` pairs.

    jax 0.10.2 labels every namedtuple child with the first field's name
    (``GetAttrKey('x')`` twice for ``P(x, y)``); podlet gives each its own field, as
    ``tree_flatten_with_path`` does in both."""
    k = _node_kind(type(tree))
    if k is _K_LEAF:
        raise ValueError(f"can't tree-flatten type: {type(tree)}")
    if k is _K_NONE:
        return (), None
    keyed, aux = _flatten_one_level_with_keys(tree, k)
    builtin = k is _K_DICT or k is _K_LIST or k is _K_TUPLE
    return (tuple(keyed) if builtin else list(keyed)), aux


class _Registry:
    """podlet's one pytree registry, shaped like jax's ``default_registry``."""

    __module__ = __name__

    def flatten(self, tree, leaf_predicate=None):
        return tree_flatten(tree, leaf_predicate)

    def flatten_with_path(self, tree, leaf_predicate=None):
        return tree_flatten_with_path(tree, leaf_predicate)

    def flatten_one_level(self, tree):
        """None for a leaf (jax's registry does not raise)."""
        return None if _node_kind(type(tree)) is _K_LEAF else flatten_one_level(tree)

    def flatten_one_level_with_keys(self, tree):
        if _node_kind(type(tree)) is _K_LEAF:
            return None
        return flatten_one_level_with_keys(tree)

    def is_node(self, typ):
        return is_tree_node(typ)

    def register_node(self, nodetype, to_iterable, from_iterable, to_iterable_with_keys=None):
        register_pytree_node(nodetype, to_iterable, from_iterable, to_iterable_with_keys)

    def register_dataclass_node(self, nodetype, data_fields, meta_fields):
        register_dataclass(nodetype, data_fields, meta_fields)

    def __repr__(self):
        return "<podlet.tree_util.default_registry>"

    def __reduce__(self):
        return "default_registry"


default_registry = _Registry()


# --------------------------------------------------------- registration helpers

def register_dataclass(nodetype, data_fields=None, meta_fields=None, drop_fields=()):
    """Registers a dataclass-like type: ``data_fields`` are children (leaves under
    jit), ``meta_fields`` node data (static). For a dataclass both default to its
    init fields, static where ``field(metadata=dict(static=True))``."""
    if data_fields is None or meta_fields is None:
        if (data_fields is None) != (meta_fields is None):
            raise TypeError(
                "register_dataclass: data_fields and meta_fields must both be specified"
                f" when either is specified. Got {data_fields=} {meta_fields=}.")
        if not dataclasses.is_dataclass(nodetype):
            raise TypeError(
                "register_dataclass: data_fields and meta_fields are required when"
                f" nodetype is not a dataclass. Got {nodetype=}.")
        fields = dataclasses.fields(nodetype)
        data_fields = [f.name for f in fields if not f.metadata.get("static", False)]
        meta_fields = [f.name for f in fields if f.metadata.get("static", False)]
    meta_fields, data_fields = tuple(meta_fields), tuple(data_fields)
    if dataclasses.is_dataclass(nodetype):
        init_fields = {f.name for f in dataclasses.fields(nodetype) if f.init}
        init_fields.difference_update(drop_fields)
        if {*meta_fields, *data_fields} != init_fields:
            msg = ("data_fields and meta_fields must include all dataclass fields with"
                   " ``init=True`` and only them.")
            if missing := init_fields - {*meta_fields, *data_fields}:
                msg += (f" Missing fields: {missing}. Add them to drop_fields to suppress"
                        " this error.")
            if unexpected := {*meta_fields, *data_fields} - init_fields:
                msg += f" Unexpected fields: {unexpected}."
            raise ValueError(msg)
    if overlap := set(data_fields) & set(meta_fields):
        raise ValueError("data_fields and meta_fields must not overlap. Overlapping fields:"
                         f" {overlap}.")
    if nodetype in registry:
        raise ValueError(
            f"Duplicate custom dataclass PyTreeDef type registration for {nodetype}.")

    def flatten(x):
        return (tuple(getattr(x, n) for n in data_fields),
                tuple(getattr(x, n) for n in meta_fields))

    def flatten_with_keys(x):
        return ([(GetAttrKey(n), getattr(x, n)) for n in data_fields],
                tuple(getattr(x, n) for n in meta_fields))

    def unflatten(meta, data):
        return nodetype(**dict(zip(meta_fields, meta)), **dict(zip(data_fields, data)))

    register_pytree_node(nodetype, flatten, unflatten, flatten_with_keys)
    return nodetype


def register_static(cls):
    """Registers ``cls`` as a node with no children: instances are static under jit
    (part of the treedef, so they must be hashable)."""
    register_pytree_with_keys(cls, lambda obj: ((), obj), lambda obj, _: obj)
    return cls


class _HashableCallableShim:
    """Delegates ``__call__``, ``__hash__`` and ``__eq__`` to ``fun`` (a partial
    wrapped by :class:`Partial`, so its arguments stay out of the pytree)."""

    def __init__(self, fun):
        self.fun = fun

    def __call__(self, *args, **kw):
        return self.fun(*args, **kw)

    def __hash__(self):
        return hash(self.fun)

    def __eq__(self, other):
        if isinstance(other, _HashableCallableShim):
            return self.fun == other.fun
        return self.fun == other

    def __repr__(self):
        return f"_HashableCallableShim({self.fun!r})"


class Partial(functools.partial):
    """``functools.partial`` as a pytree: the bound arguments are its children (traced
    under jit), the function its node data. ``Partial(f)`` makes ``f`` passable to a
    jitted function."""

    def __new__(klass, func, *args, **kw):
        # functools.partial would merge a partial func's arguments into this one;
        # only the arguments given here belong to the pytree.
        if isinstance(func, functools.partial):
            original = func
            func = _HashableCallableShim(original)
            out = super().__new__(klass, func, *args, **kw)
            func.func = original.func
            func.args = original.args
            func.keywords = original.keywords
            return out
        return super().__new__(klass, func, *args, **kw)


register_pytree_node(
    Partial,
    lambda p: ((p.args, p.keywords), p.func),
    lambda func, xs: Partial(func, *xs[0], **xs[1]),
)


# ---------------------------------------------------------- structural operations

def tree_broadcast(prefix_tree: Any, full_tree: Any,
                   is_leaf: Callable[[Any], bool] | None = None) -> Any:
    """``full_tree``'s structure with each leaf of ``prefix_tree`` repeated over the
    subtree it stands for."""
    out = []

    def add(x, subtree):
        out.extend([x] * tree_structure(subtree).num_leaves)

    try:
        tree_map(add, prefix_tree, full_tree, is_leaf=is_leaf)
    except ValueError:
        err = next(_prefix_error((), prefix_tree, full_tree, is_leaf), None)
        if err is None:
            raise
        raise err("broadcast_prefix prefix_tree") from None
    return tree_structure(full_tree).unflatten(out)


def _parallel_reduce(seq, operation, identity):
    if not seq:
        if identity is _UNSPECIFIED:
            raise TypeError("Must specify identity for parallel reduction of empty sequence.")
        return identity
    if len(seq) == 1:
        return seq[0]
    mid = len(seq) // 2
    return operation(_parallel_reduce(seq[:mid], operation, identity),
                     _parallel_reduce(seq[mid:], operation, identity))


def tree_reduce_associative(operation: Callable[[Any, Any], Any], tree: Any, *,
                            identity: Any = _UNSPECIFIED,
                            is_leaf: Callable[[Any], bool] | None = None) -> Any:
    """Reduces the leaves with an associative ``operation`` as a balanced tree
    (halves first: ``((1+2)+(3+(4+5)))``)."""
    return _parallel_reduce(tree_leaves(tree, is_leaf=is_leaf), operation, identity)


def tree_transpose(outer_treedef: PyTreeDef, inner_treedef: PyTreeDef | None,
                   pytree_to_transpose: Any) -> Any:
    """Turns an outer-of-inner pytree into inner-of-outer (e.g. a list of dicts into
    a dict of lists). ``inner_treedef=None`` infers it from the first outer leaf."""
    flat, treedef = tree_flatten(pytree_to_transpose)
    if inner_treedef is None:
        inner_treedef = tree_structure(outer_treedef.flatten_up_to(pytree_to_transpose)[0])
    inner_size, outer_size = inner_treedef.num_leaves, outer_treedef.num_leaves
    if treedef.num_leaves != inner_size * outer_size:
        raise TypeError(f"Mismatch\n{treedef}\n != \n{outer_treedef.compose(inner_treedef)}")
    it = iter(flat)
    rows = [[next(it) for _ in range(inner_size)] for _ in range(outer_size)]
    return inner_treedef.unflatten([outer_treedef.unflatten(list(col)) for col in zip(*rows)])
