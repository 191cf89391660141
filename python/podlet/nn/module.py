"""flax.linen's module system: ``Module``, ``compact``, ``setup``, ``init`` / ``apply``.

Same semantics, names, defaults and variable layouts as flax 0.12 (``flax.linen.module``
plus the parts of ``flax.core.scope`` it stands on), so a Flax model definition runs
unchanged and its parameter tree is interchangeable with Flax's:

    class MLP(nn.Module):
        features: Sequence[int]

        @nn.compact
        def __call__(self, x):
            for f in self.features[:-1]:
                x = nn.relu(nn.Dense(f)(x))
            return nn.Dense(self.features[-1])(x)

    variables = MLP([16, 4]).init(podlet.random.PRNGKey(0), x)   # {'params': {'Dense_0': ...}}
    y = MLP([16, 4]).apply(variables, x)

How it works (as in Flax):

- Every subclass of :class:`Module` is turned into a dataclass by ``__init_subclass__``,
  with two extra trailing fields ``parent`` and ``name``. A module constructed inside
  another module's ``setup`` or ``@compact`` method attaches itself to that module
  (the innermost module on ``_context.module_stack``) and gets a :class:`Scope`: a
  path in the variable tree. Unnamed submodules are named ``{ClassName}_{i}``, counted
  per class and per parent in call order; submodules assigned to attributes in
  ``setup`` are named by the attribute (``self.layers = [...]`` gives ``layers_0``...).
- ``init`` / ``apply`` clone the top module onto a fresh root :class:`Scope` holding
  the variable dict, the rng streams and the mutability filter, run the method, and
  return the output and/or the mutable collections as plain (nested) dicts.
- ``self.param(name, init_fn, *args)`` reads ``params/<path>/name``; when missing and
  the ``params`` collection is mutable (during ``init``) it calls
  ``init_fn(self.make_rng('params'), *args)`` and stores the result. On ``apply`` the
  stored value's shape is checked against the shape ``init_fn`` would produce.
- ``self.make_rng(name)`` derives a key exactly as Flax does: the stream's root key
  folded (``random.fold_in``) with a SHA-1 hash of the module path and a per-scope,
  per-stream call counter. Because ``podlet.random`` is bit-identical to jax's, a model
  initialised with the same key gets bit-identical parameters to Flax's.

For layer authors (Conv, BatchNorm, Dropout, ... are written on this API):

- parameters: ``self.param('kernel', self.kernel_init, shape, self.param_dtype)``;
  cast to the compute dtype with :func:`podlet.nn.promote_dtype` (see ``linear.py``).
  Declare them in Flax's order (e.g. ``kernel`` before ``bias``; ``scale`` before
  ``bias``): each ``param`` draws the next key of the module's ``params`` counter, so
  the same names, order and initializers give bit-identical ``init`` results to Flax's,
  which is the easiest oracle test for a layer.
- running statistics: ``ra_mean = self.variable('batch_stats', 'mean', lambda s:
  jnp.zeros(s, jnp.float32), shape)``; read ``ra_mean.value``; in training mode assign
  ``ra_mean.value = ...`` only when ``not self.is_initializing()`` (Flax's BatchNorm:
  ``init`` must return the initial statistics). As in Flax, assigning while the
  collection is immutable (``apply`` without ``mutable=['batch_stats']``) raises
  :class:`ModifyScopeVariableError` naming the variable and module path;
  ``self.is_mutable_collection('batch_stats')`` is there for layers that prefer to skip.
- call-time flags: ``use_running_average = merge_param('use_running_average',
  self.use_running_average, use_running_average)`` (module attribute vs call argument).
- randomness: ``rng = self.make_rng('dropout')`` (the ``rngs={'dropout': key}`` stream
  passed to ``apply``; falls back to the ``'params'`` stream when absent, like Flax;
  ``self.has_rng('dropout')`` tells whether it was given). Each call returns a new key.
"""
from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import hashlib
import inspect
import itertools
import threading
import types
import typing
import weakref
from collections.abc import Mapping
from typing import Any, Callable, Optional, TypeVar

import numpy as np

from .. import tree_util
from .._src import core as _core
from .._src.errors import PodletError

T = TypeVar("T")
M = TypeVar("M", bound="Module")

__all__ = [
    "Module", "compact", "compact_name_scope", "share_scope", "nowrap", "Variable", "Scope", "DenyList", "merge_param", "apply", "init",
    "init_with_output", "tabulate", "FlaxError", "intercept_methods", "enable_named_call", "disable_named_call",
    "override_named_call", "named_call",
]


# =====================================================================================
# Errors (flax.errors): same classes and messages, rooted at PodletError.
# =====================================================================================
_ERROR_PAGE = "https://flax.readthedocs.io/en/latest/api_reference/flax.errors.html"


class FlaxError(PodletError):
    """Base of the module-system errors; messages are Flax's, with its documentation link."""

    def __init__(self, message):
        message = f"{message} ({_ERROR_PAGE}#flax.errors.{type(self).__name__})"
        super().__init__(message)


class InvalidRngError(FlaxError):
    pass


class ApplyScopeInvalidVariablesTypeError(FlaxError):
    def __init__(self):
        super().__init__("The first argument passed to an apply function should be a dictionary of "
                         "collections. Each collection should be a dictionary with string keys.")


class ApplyScopeInvalidVariablesStructureError(FlaxError):
    def __init__(self, variables):
        super().__init__('Expect the `variables` (first argument) passed to apply() to be a dict with the '
                         'structure {"params": ...}, but got a dict with an extra params layer, i.e.  '
                         '{"params": {"params": ... } }. You should instead pass in your dict\'s ["params"].')


class ScopeParamNotFoundError(FlaxError):
    def __init__(self, param_name, scope_path):
        super().__init__(f'Could not find parameter named "{param_name}" in scope "{scope_path}".')


class ScopeCollectionNotFound(FlaxError):
    def __init__(self, col_name, var_name, scope_path):
        super().__init__(f'Tried to access "{var_name}" from collection "{col_name}" in "{scope_path}" '
                         "but the collection is empty.")


class ScopeParamShapeError(FlaxError):
    def __init__(self, param_name, scope_path, value_shape, init_shape):
        super().__init__(f'For parameter "{param_name}" in "{scope_path}", the given initializer is expected '
                         f"to generate shape {init_shape}, but the existing parameter it received has shape "
                         f"{value_shape}.")


class ScopeVariableNotFoundError(FlaxError):
    def __init__(self, name, col, scope_path):
        super().__init__(f'No Variable named "{name}" for collection "{col}" exists in "{scope_path}".')


class InvalidFilterError(FlaxError):
    def __init__(self, filter_like):
        super().__init__(f'Invalid Filter: "{filter_like}"')


class InvalidScopeError(FlaxError):
    def __init__(self, scope_name):
        super().__init__(f'The scope "{scope_name}" is no longer valid.')


class ModifyScopeVariableError(FlaxError):
    def __init__(self, col, variable_name, scope_path):
        super().__init__(f'Cannot update variable "{variable_name}" in "{scope_path}" because collection '
                         f'"{col}" is immutable.')


class NameInUseError(FlaxError):
    def __init__(self, key_type, value, module_name):
        super().__init__(f'Could not create {key_type} "{value}" in Module {module_name}: Name in use.')


class AssignSubModuleError(FlaxError):
    def __init__(self, cls):
        super().__init__(f"Submodule {cls} must be defined in `setup()` or in a method wrapped in `@compact`")


class SetAttributeInModuleSetupError(FlaxError):
    def __init__(self):
        super().__init__("Module construction attributes are frozen.")


class SetAttributeFrozenModuleError(FlaxError):
    def __init__(self, module_cls, attr_name, attr_val):
        super().__init__(f"Can't set {attr_name}={attr_val} for Module of type {module_cls}: Module instance "
                         "is frozen outside of setup method.")


class MultipleMethodsCompactError(FlaxError):
    def __init__(self):
        super().__init__("Only one method per class can be @compact")


class ReservedModuleAttributeError(FlaxError):
    def __init__(self, annotations):
        super().__init__(f"properties `parent` and `name` are reserved: {annotations}")


class ApplyModuleInvalidMethodError(FlaxError):
    def __init__(self, method):
        super().__init__(f"Cannot call apply(): {method} is not a valid function for apply().")


class CallShareScopeOnUnboundModuleError(FlaxError):
    def __init__(self):
        super().__init__("Can't call `share_scope` on unbound modules")


class CallCompactUnboundModuleError(FlaxError):
    def __init__(self):
        super().__init__("Can't call compact methods on unbound modules")


class CallSetupUnboundModuleError(FlaxError):
    def __init__(self):
        super().__init__("Can't call compact methods on unbound modules")


class CallUnbindOnUnboundModuleError(FlaxError):
    def __init__(self):
        super().__init__("Can't call `unbind()` on unbound modules")


class InvalidInstanceModuleError(FlaxError):
    def __init__(self):
        super().__init__("Can only call init, init_with_output or apply methods on an instance of the Module "
                         "class, not the Module class itself")


class IncorrectPostInitOverrideError(FlaxError):
    def __init__(self):
        super().__init__("Overrode `.__post_init__()` without calling `super().__post_init__()`")


# `podlet.nn.errors.ScopeParamShapeError` etc., like `flax.errors`.
errors = types.SimpleNamespace(**{k: v for k, v in dict(globals()).items()
                                   if isinstance(v, type) and issubclass(v, FlaxError)})


# =====================================================================================
# Collection filters (flax.core.scope)
# =====================================================================================
@dataclasses.dataclass(frozen=True, eq=True)
class DenyList:
    """An opt-out mutability filter: every collection except those in ``deny``."""
    deny: Any

    def __lt__(self, other):
        if isinstance(other, str):
            return False
        if isinstance(other, DenyList):
            return str(self.deny) < str(other.deny)
        return NotImplemented

    def __gt__(self, other):
        if isinstance(other, str):
            return True
        if isinstance(other, DenyList):
            return str(self.deny) > str(other.deny)
        return NotImplemented


def in_filter(filter_like, col: str) -> bool:
    """Whether collection ``col`` matches ``filter_like`` (bool, str, collection of str, DenyList)."""
    if isinstance(filter_like, str):
        return col == filter_like
    if isinstance(filter_like, DenyList):
        return not in_filter(filter_like.deny, col)
    if isinstance(filter_like, bool):
        return filter_like
    if isinstance(filter_like, typing.Collection):
        return col in filter_like
    raise InvalidFilterError(filter_like)


def is_filter_empty(filter_like) -> bool:
    if isinstance(filter_like, str):
        return False
    if isinstance(filter_like, DenyList):
        return in_filter(filter_like.deny, "__flax_internal_stub__")
    if isinstance(filter_like, bool):
        return not filter_like
    if isinstance(filter_like, typing.Collection):
        return not filter_like
    raise InvalidFilterError(filter_like)


def _filter_to_set(x):
    assert x is not True and not isinstance(x, DenyList), "Infinite set"
    if x is False:
        return set()
    if isinstance(x, str):
        return {x}
    if isinstance(x, typing.Collection):
        return set(x)
    raise InvalidFilterError(x)


def union_filters(a, b):
    if a is True or b is True:
        return True
    if isinstance(a, DenyList) and isinstance(b, DenyList):
        return DenyList(intersect_filters(a.deny, b.deny))
    if isinstance(b, DenyList):
        a, b = b, a
    if isinstance(a, DenyList):
        return DenyList(subtract_filters(a.deny, b))
    return _filter_to_set(a).union(_filter_to_set(b))


def subtract_filters(a, b):
    if b is True:
        return False
    if a is True:
        return DenyList(b)
    if isinstance(a, DenyList) and isinstance(b, DenyList):
        return subtract_filters(b.deny, a.deny)
    if isinstance(a, DenyList):
        return DenyList(union_filters(a.deny, b))
    if isinstance(b, DenyList):
        return intersect_filters(a, b.deny)
    return _filter_to_set(a) - _filter_to_set(b)


def intersect_filters(a, b):
    if a is True:
        return b
    if b is True:
        return a
    if isinstance(a, DenyList) and isinstance(b, DenyList):
        return DenyList(union_filters(b.deny, a.deny))
    if isinstance(b, DenyList):
        b, a = a, b
    if isinstance(a, DenyList):
        return subtract_filters(b, a.deny)
    return _filter_to_set(a).intersection(_filter_to_set(b))


# =====================================================================================
# RNG derivation (flax.core.scope.LazyRng): bit-identical to Flax.
# =====================================================================================
class LazyRng:
    """A root key plus a tuple of static data (module names, counters) folded in on use."""
    __slots__ = ("rng", "suffix")

    def __init__(self, rng, suffix=()):
        self.rng = rng
        self.suffix = tuple(suffix)

    @staticmethod
    def create(rng, *suffix):
        if isinstance(rng, LazyRng):
            return LazyRng(rng.rng, rng.suffix + suffix)
        return LazyRng(rng, suffix)

    def as_jax_rng(self):
        return _fold_in_static(self.rng, self.suffix)


def _fold_in_static(rng, data):
    """fold_in of the first 32 bits (big-endian) of SHA-1 over `data` (strings and ints),
    exactly as flax.core.scope._fold_in_static (flax_fix_rng_separator=False)."""
    if not data:
        return rng
    from .. import random
    m = hashlib.sha1()
    for x in data:
        if isinstance(x, str):
            m.update(x.encode("utf-8"))
        elif isinstance(x, int):
            m.update(x.to_bytes((x.bit_length() + 7) // 8, byteorder="big"))
        else:
            raise ValueError(f"Expected int or string, got: {x}")
    hash_int = int.from_bytes(m.digest()[:4], byteorder="big")
    return random.fold_in(rng, np.uint32(hash_int))


def _is_valid_rng(rng) -> bool:
    if isinstance(rng, LazyRng):
        return True
    if not isinstance(rng, (np.ndarray, _core.Array, _core.Tracer)):
        return False
    return tuple(rng.shape) == (2,) and np.dtype(rng.dtype) == np.uint32


def _is_valid_rngs(rngs) -> bool:
    if not isinstance(rngs, Mapping):
        return False
    return all(isinstance(k, str) and _is_valid_rng(v) for k, v in rngs.items())


def _is_valid_variables(variables) -> bool:
    if not isinstance(variables, Mapping):
        return False
    for name, col in variables.items():
        if not isinstance(name, str) or not isinstance(col, Mapping):
            return False
        if not all(isinstance(k, str) for k in col.keys()):
            return False
    return True


# =====================================================================================
# Shapes of an initializer's output without computing it (Flax uses jax.eval_shape).
# =====================================================================================
_init_shape_cache = weakref.WeakKeyDictionary()  # init_fn -> {(args, kwargs): shapes}


def _init_shapes(init_fn, init_args, init_kwargs):
    """Leaf shapes of ``init_fn(key, *init_args, **init_kwargs)``, traced with an abstract key
    so the random number kernels never run. Cached per initializer object and (hashable)
    arguments: the check runs on every ``param`` read of every ``apply``."""
    try:
        per_fn = _init_shape_cache.get(init_fn)
        ckey = (init_args, tuple(sorted(init_kwargs.items())))
        hit = per_fn.get(ckey) if per_fn is not None else None
    except TypeError:  # unhashable arguments or an initializer that can't be weak-referenced
        per_fn = ckey = hit = None
    if hit is not None:
        return hit
    trace = _core.Trace()
    _core._trace_stack.append(trace)
    try:
        key = trace.new_input("uint32", (2,))
        out = init_fn(key, *init_args, **init_kwargs)
        shapes = [tuple(np.shape(leaf)) for leaf in tree_util.tree_leaves(out)]
    finally:
        trace.active = False
        _core._trace_stack.pop()
    if ckey is not None:
        try:
            _init_shape_cache.setdefault(init_fn, {})[ckey] = shapes
        except TypeError:
            pass
    return shapes


# =====================================================================================
# Variables and scopes (flax.core.scope)
# =====================================================================================
class Variable:
    """Mutable access to one variable of a collection: read and assign ``.value``.

    Assigning raises :class:`ModifyScopeVariableError` unless the collection is mutable
    in the current ``init`` / ``apply``.
    """

    _ids = itertools.count()

    def __init__(self, scope: "Scope", collection: str, name: str, unbox: bool = True):
        self._id = next(Variable._ids)
        self.scope = scope
        self.collection = collection
        self.name = name
        self.unbox = unbox

    @property
    def value(self):
        v = self.scope.get_variable(self.collection, self.name)
        return _unbox(v, f"variable {self.collection}{self.scope.path_text}/{self.name}") if self.unbox else v

    @value.setter
    def value(self, value):
        if self.unbox:  # a boxed variable (nn.Partitioned, ...) keeps its box, as in Flax
            cur = self.scope.get_variable(self.collection, self.name)
            if cur is not None and not hasattr(cur, "shape"):
                from .meta import replace_boxed
                value = replace_boxed(cur, value)
        self.scope.put_variable(self.collection, self.name, value)

    def is_mutable(self) -> bool:
        return self.scope.is_mutable_collection(self.collection)

    def __repr__(self):
        return f"Variable(collection={self.collection!r}, name={self.name!r}, path={self.scope.path_text!r})"


def _unbox(value, where=None):
    """flax.core.meta.unbox: the value without its nn.Partitioned / LogicallyPartitioned
    boxes (arrays, the common case, pass straight through). Under a mesh, unboxing
    applies the box's sharding constraint; a layout podlet cannot honour names the
    variable (``where``)."""
    if hasattr(value, "shape") and not hasattr(value, "unbox"):
        return value
    from .meta import unbox
    try:
        return unbox(value)
    except NotImplementedError as e:
        if where is None:
            raise
        raise NotImplementedError(f"{where}: {e}") from None


class _ChildRNGSentinel:
    pass


_child_rng_token = _ChildRNGSentinel()


def _put_variable(target, key, val):
    if key in target and isinstance(target[key], dict) and isinstance(val, Mapping):
        for k, v in val.items():
            _put_variable(target[key], k, v)
    else:
        target[key] = val


def _unfreeze(x):
    if isinstance(x, Mapping):
        return {k: _unfreeze(v) for k, v in x.items()}
    return x


_EMPTY = types.MappingProxyType({})


class Scope:
    """A node of the variable tree: a path, the variable dicts it sees, rng streams with
    per-stream call counters, the mutability filter and the names reserved in it.

    Variables live in the root scope's dict; child scopes hold references into it.
    """

    def __init__(self, variables, rngs=None, name=None, mutable=False, parent=None, path=(), flags=None):
        self._variables = variables
        self.parent = parent
        self.name = name
        self.path = tuple(path)
        self.rngs = {k: LazyRng.create(v) for k, v in rngs.items()} if rngs else {}
        self.mutable = mutable
        self.flags = dict(flags or {})
        self._root = parent.root if parent else None
        self.rng_counters = {key: 0 for key in self.rngs}
        self.reservations = {}
        self._invalid = False
        self._adoption_cache = weakref.WeakValueDictionary() if parent is None else None

    @property
    def root(self) -> "Scope":
        return self._root or self

    @property
    def path_text(self) -> str:
        return "/" + "/".join(self.path)

    @property
    def invalid(self):
        return self._invalid

    def _check_valid(self):
        if self._invalid:
            raise InvalidScopeError(self.name)

    def invalidate(self):
        self._invalid = True

    def variables(self):
        self._populate_collections()
        return self._variables

    def mutable_variables(self):
        self._populate_collections()
        return {k: v for k, v in self._variables.items() if in_filter(self.mutable, k)}

    def rewound(self, rewind_rngs: bool = False) -> "Scope":
        """The same scope with its name reservations cleared (after a compact call)."""
        self._check_valid()
        scope = Scope(self._variables, None, self.name, self.mutable, self.parent, path=self.path,
                      flags=self.flags)
        scope.rngs = self.rngs
        scope._adoption_cache = self._adoption_cache
        if not rewind_rngs:
            scope.rng_counters = self.rng_counters
        else:
            scope.rng_counters = {key: 0 for key in self.rngs}
        return scope

    def name_reserved(self, name: str, col: str | None = None) -> bool:
        if name in self.reservations:
            r = self.reservations[name]
            if None in r or col is None or col in r:
                return True
        return False

    def reserve(self, name: str, col: str | None = None):
        if not isinstance(name, str):
            raise TypeError(f'The type of scope "{name}" should be string but it is {type(name)}')
        if self.name_reserved(name, col):
            raise ValueError(f'Duplicate use of scope name: "{name}"')
        self.reservations.setdefault(name, set()).add(col)

    def default_name(self, prefix: str) -> str:
        i = 0
        while f"{prefix}{i}" in self.reservations:
            i += 1
        return f"{prefix}{i}"

    def push(self, name: str | None = None, prefix: str = "", reuse=False) -> "Scope":
        """A child scope named `name` (rng streams extended by the name; the child's rng
        counters persist across calls so a reused submodule draws fresh keys)."""
        self._check_valid()
        if name is None:
            name = self.default_name(prefix)
        if not reuse or name not in self.reservations:
            self.reserve(name)
        rngs = {key: LazyRng.create(rng, name) for key, rng in self.rngs.items()}
        rng_key = (_child_rng_token, name)
        if rng_key in self.rng_counters:
            rng_counters = self.rng_counters[rng_key]
        else:
            rng_counters = {key: 0 for key in rngs}
            self.rng_counters[rng_key] = rng_counters
        scope = Scope({}, None, name=name, parent=self, mutable=self.mutable, path=self.path + (name,),
                      flags=self.flags)
        scope.rngs = rngs
        scope.rng_counters = rng_counters
        return scope

    def is_mutable_collection(self, col: str) -> bool:
        return in_filter(self.mutable, col)

    def is_collection_empty(self, col: str) -> bool:
        root_vars = self.root._variables
        if col in root_vars:
            return not root_vars[col]
        return True

    def _mutable_collection(self, col: str):
        assert self.is_mutable_collection(col), f"Collection {col} is not mutable"
        if col not in self._variables:
            if not self.parent:
                self._variables[col] = {}
            else:
                parent_col = self.parent._mutable_collection(col)
                if self.name not in parent_col:
                    parent_col[self.name] = {}
                self._variables[col] = parent_col[self.name]
        return self._variables[col]

    def _collection(self, col: str):
        if col not in self._variables:
            if self.parent:
                parent_col = self.parent._collection(col)
                if self.name not in parent_col:
                    return _EMPTY
                self._variables[col] = parent_col[self.name]
            else:
                return _EMPTY
        return self._variables[col]

    def has_rng(self, name: str) -> bool:
        return name in self.rngs

    def make_rng(self, name: str = "params"):
        if not self.has_rng(name):
            if self.has_rng("params"):
                name = "params"
            else:
                raise InvalidRngError(f'{self.name} needs PRNG for "{name}"')
        self._check_valid()
        self.rng_counters[name] += 1
        return LazyRng.create(self.rngs[name], self.rng_counters[name]).as_jax_rng()

    def get_variable(self, col: str, name: str, default: Any = None) -> Any:
        variables = self._collection(col)
        if name in variables:
            return variables[name]
        return default

    def has_variable(self, col: str, name: str) -> bool:
        return name in self._collection(col)

    def put_variable(self, col: str, name: str, value: Any):
        self._check_valid()
        if not self.is_mutable_collection(col):
            raise ModifyScopeVariableError(col, name, self.path_text)
        _put_variable(self._mutable_collection(col), name, value)

    def variable(self, col: str, name: str, init_fn=None, *init_args, unbox: bool = True, **init_kwargs):
        self.reserve(name, col)
        if not self.has_variable(col, name):
            if not self.is_mutable_collection(col) or init_fn is None:
                if self.is_collection_empty(col):
                    raise ScopeCollectionNotFound(col, name, self.path_text)
                raise ScopeVariableNotFoundError(name, col, self.path_text)
            self.put_variable(col, name, init_fn(*init_args, **init_kwargs))
        return Variable(self, col, name, unbox=unbox)

    def param(self, name: str, init_fn, *init_args, unbox: bool = True, **init_kwargs):
        self.reserve(name, "params")
        if self.has_variable("params", name):
            value = self.get_variable("params", name)
            init_shapes = _init_shapes(init_fn, init_args, init_kwargs)
            value_leaves = tree_util.tree_leaves(value)
            for val, shp in zip(value_leaves, init_shapes):
                if tuple(np.shape(val)) != shp:
                    raise ScopeParamShapeError(name, self.path_text, tuple(np.shape(val)), shp)
        else:
            if not self.is_mutable_collection("params"):
                if self.is_collection_empty("params"):
                    raise ScopeCollectionNotFound("params", name, self.path_text)
                raise ScopeParamNotFoundError(name, self.path_text)
            value = init_fn(self.make_rng("params"), *init_args, **init_kwargs)
            self.put_variable("params", name, value)
        return _unbox(value, f"param params{self.path_text}/{name}") if unbox else value

    def _populate_collections(self):
        for col in list(self.root._variables.keys()):
            self._collection(col)

    def get_flag(self, key, default=None):
        return self.flags.get(key, default)


def _bind_scope(variables, rngs=None, mutable=False, flags=None) -> Scope:
    if not _is_valid_variables(variables):
        raise ApplyScopeInvalidVariablesTypeError()
    if rngs is not None and not _is_valid_rngs(rngs):
        raise InvalidRngError("rngs should be a dictionary mapping strings to `jax.PRNGKey`.")
    new_variables = {k: (_unfreeze(v) if in_filter(mutable, k) else v) for k, v in variables.items()}
    return Scope(new_variables, rngs=rngs, mutable=mutable, flags=flags)


def _core_apply(fn, mutable=False, flags=None):
    """flax.core.apply: runs ``fn(root_scope, *args)``; returns out or (out, mutable collections)."""

    @functools.wraps(fn)
    def wrapper(variables, *args, rngs=None, **kwargs):
        if rngs is not None:
            if not _is_valid_rng(rngs) and not _is_valid_rngs(rngs):
                raise ValueError("The ``rngs`` argument passed to an apply function should be a ``jax.PRNGKey`` "
                                 "or a dictionary mapping strings to ``jax.PRNGKey``.")
            if not isinstance(rngs, Mapping):
                rngs = {"params": rngs}
        if ("params" in variables and isinstance(variables["params"], Mapping)
                and "params" in variables["params"]):
            raise ApplyScopeInvalidVariablesStructureError(variables)
        root = _bind_scope(variables, rngs=rngs, mutable=mutable, flags=flags)
        try:
            y = fn(root, *args, **kwargs)
        finally:
            root.invalidate()
        if mutable is not False:
            return y, root.mutable_variables()
        return y

    return wrapper


def _core_init(fn, mutable=True, flags=None):
    @functools.wraps(fn)
    def wrapper(rngs, *args, **kwargs):
        if not _is_valid_rng(rngs) and not _is_valid_rngs(rngs):
            raise ValueError("First argument passed to an init function should be a ``jax.PRNGKey`` or a "
                             "dictionary mapping strings to ``jax.PRNGKey``.")
        if not isinstance(rngs, Mapping):
            rngs = {"params": rngs}
        init_flags = {**(flags if flags is not None else {}), "initializing": True}
        return _core_apply(fn, mutable=mutable, flags=init_flags)({}, *args, rngs=rngs, **kwargs)

    return wrapper


# =====================================================================================
# Module
# =====================================================================================
class _DynamicContext(threading.local):
    def __init__(self):
        self.module_stack = [None]
        self.capture_stack = []
        self.call_info_stack = []


_context = _DynamicContext()


# =====================================================================================
# Method interceptors (flax.linen.intercept_methods)
# =====================================================================================
@dataclasses.dataclass(frozen=True)
class InterceptorContext:
    """What an interceptor sees: the module whose method is called, the method's name,
    and ``orig_method`` (the bound method; calling it skips the other interceptors)."""
    module: "Module"
    method_name: str
    orig_method: Callable[..., Any]


class _InterceptorStack(threading.local):
    def __init__(self):
        self.stack = []


_interceptors = _InterceptorStack()


@contextlib.contextmanager
def intercept_methods(interceptor):
    """Calls ``interceptor(next_fun, args, kwargs, context)`` instead of every wrapped
    module method while active (Flax semantics: interceptors registered first run
    first; ``next_fun`` continues the chain)."""
    _interceptors.stack.append(interceptor)
    try:
        yield
    finally:
        assert _interceptors.stack.pop() is interceptor


# =====================================================================================
# Named calls (flax.linen.enable_named_call & co.): labels for profile traces
# =====================================================================================
# Flax wraps module methods in ``jax.named_call`` so XLA profiles group ops by module.
# podlet's profiler (podlet.profiler) attributes time per primitive of the plan and has
# no name stack: these keep Flax's switch and its context manager so Flax code runs
# unchanged, and ``named_call`` calls the method as it is.
_use_named_call = False


def enable_named_call():
    """Turns named-call labelling of module methods on (a label only: see above)."""
    global _use_named_call
    _use_named_call = True


def disable_named_call():
    """Turns named-call labelling off."""
    global _use_named_call
    _use_named_call = False


@contextlib.contextmanager
def override_named_call(enable: bool = True):
    """Named-call labelling on (or off) inside the ``with`` block."""
    global _use_named_call
    prev = _use_named_call
    _use_named_call = enable
    try:
        yield
    finally:
        _use_named_call = prev


def named_call(class_fn, force=True):
    """``class_fn`` labelled for profiles (flax.linen.named_call); podlet records no
    labels, so this is ``class_fn`` with its name and docstring."""
    @functools.wraps(class_fn)
    def wrapped_fn(self, *args, **kwargs):
        return class_fn(self, *args, **kwargs)
    return wrapped_fn


def _run_interceptors(orig_method, module, *args, **kwargs):
    fun = functools.partial(orig_method, module)
    context = InterceptorContext(module, getattr(orig_method, "__name__", "unnamed_function"), fun)

    def wrap(interceptor, fun):
        @functools.wraps(fun)
        def wrapped(*args, **kwargs):
            return interceptor(fun, args, kwargs, context)
        return wrapped

    # The innermost wrapper is the newest interceptor, so the oldest runs first.
    for interceptor in reversed(_interceptors.stack):
        fun = wrap(interceptor, fun)
    return fun(*args, **kwargs)


class _Sentinel:
    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        return _get_unspecified_parent, ()

    def __repr__(self):
        return "_unspecified_parent"


_unspecified_parent = _Sentinel()


def _get_unspecified_parent():
    return _unspecified_parent


_ids = itertools.count()


def compact(fun):
    """Marks the method in which submodules (and params) may be defined inline.
    At most one method per Module class may be compact."""
    fun.compact = True
    return fun


def compact_name_scope(fun):
    """Marks a Module method whose submodules and variables live in a child scope named
    after the method (``self.up(x)`` puts ``Dense_0`` under ``up/``), as flax's
    ``nn.compact_name_scope``; callable from inside init / apply and through
    ``method='up'``."""
    @functools.wraps(fun)
    def compact_name_scope_wrapper(self, *args, **kwargs):
        name = fun.__name__
        if "_compact_name_scope_modules" not in self.__dict__:
            self._try_setup()
        if "_compact_name_scope_modules" not in self.__dict__:
            raise ValueError(
                f"Cannot call compact_name_scope method {name!r} on a Module that has not been "
                f"setup. This is likely because you are calling {name!r} "
                "from outside of init or apply.")
        return self.__dict__["_compact_name_scope_modules"][name](*args, **kwargs)

    compact_name_scope_wrapper.compact_name_scope = True
    compact_name_scope_wrapper.inner_fun = fun
    compact_name_scope_wrapper.nowrap = True
    return compact_name_scope_wrapper


_compact_name_scope_cache: dict = {}


def _compact_name_scope_methods(cls):
    """The names of cls's compact_name_scope methods (found once per class)."""
    found = _compact_name_scope_cache.get(cls)
    if found is None:
        found = _compact_name_scope_cache[cls] = tuple(
            n for n in dir(cls) if hasattr(getattr(cls, n, None), "compact_name_scope"))
    return found


def nowrap(fun):
    """Marks a helper method that needs no module state handling (callable on unbound
    modules, e.g. to build submodules)."""
    fun.nowrap = True
    return fun


def merge_param(name: str, a, b):
    """The one of ``a`` (module attribute) and ``b`` (call argument) that is not None."""
    if a is None and b is None:
        raise ValueError(f'Parameter "{name}" must be passed to the constructor or at call time.')
    if a is not None and b is not None:
        raise ValueError(f'Parameter "{name}" was passed to the constructor and at call time. '
                         "Should be passed just once.")
    return b if a is None else a


class _SetupState(enum.IntEnum):
    NEW = 0
    TRANSFORMED = 1
    DONE = 2


@dataclasses.dataclass
class _ModuleInternalState:
    in_compact_method: bool = False
    in_setup: bool = False
    setup_called: _SetupState = _SetupState.NEW
    is_initialized: bool = False
    autoname_cursor: dict = dataclasses.field(default_factory=dict)
    children: dict = dataclasses.field(default_factory=dict)

    def reset(self):
        self.in_compact_method = False
        self.in_setup = False
        self.autoname_cursor = dict()


_uninitialized_module_internal_state = _ModuleInternalState()

_UNDEFINED_COPY_PICKLE_METHODS = ("__getstate__", "__setstate__", "__getnewargs_ex__", "__reduce__",
                                  "__reduce_ex__", "__copy__", "__deepcopy__")


class _ParentDescriptor:
    """Holds the parent module through a weak reference (no reference cycles)."""

    def __get__(self, obj, objtype=None):
        if obj is None:
            return None
        parent = object.__getattribute__(obj, "_parent_ref")
        return parent() if isinstance(parent, weakref.ReferenceType) else parent

    def __set__(self, obj, value):
        maybe_weak = weakref.ref(value) if isinstance(value, Module) else value
        object.__setattr__(obj, "_parent_ref", maybe_weak)


# ---- pytrees of submodules (attributes assigned in setup, dataclass fields) ----
def _map_over_modules_in_tree(fn, tree, suffix=""):
    """Maps ``fn(suffix, leaf)`` over a tree of lists/tuples/dicts; suffixes are Flax's
    ``'_' + '_'.join(keys)`` (``layers`` + ``_0`` -> ``layers_0``)."""
    if isinstance(tree, (list, tuple)) and not hasattr(tree, "_fields") and len(tree):
        out = [_map_over_modules_in_tree(fn, v, f"{suffix}_{i}") for i, v in enumerate(tree)]
        return type(tree)(out) if isinstance(tree, tuple) else out
    if isinstance(tree, tuple) and hasattr(tree, "_fields") and len(tree):
        return type(tree)(*[_map_over_modules_in_tree(fn, v, f"{suffix}_{k}")
                            for k, v in zip(tree._fields, tree)])
    if isinstance(tree, dict) and tree:
        items = sorted(tree.items(), key=lambda kv: str(kv[0]))
        mapped = {k: _map_over_modules_in_tree(fn, v, f"{suffix}_{k}") for k, v in items}
        return type(tree)((k, mapped[k]) for k in tree) if type(tree) is not dict else {k: mapped[k] for k in tree}
    return fn(suffix, tree)


def _freeze_attr(val):
    """Lists become tuples (Flax freezes setup attributes; dicts stay dicts here)."""
    if isinstance(val, dict):
        return {k: _freeze_attr(v) for k, v in val.items()}
    if isinstance(val, tuple):
        if hasattr(val, "_fields"):
            return type(val)(*[_freeze_attr(v) for v in val])
        return tuple(_freeze_attr(v) for v in val)
    if isinstance(val, list):
        return tuple(_freeze_attr(v) for v in val)
    return val


def _map_submodules(fn, tree):
    return _freeze_attr(_map_over_modules_in_tree(lambda _, x: fn(x) if isinstance(x, Module) else x, tree))


def _get_local_method_names(cls, exclude=()):
    out = set()
    for m, v in cls.__dict__.items():
        if callable(v) and not inspect.isclass(v) and type(v) not in (staticmethod, classmethod):
            out.add(m)
    return tuple(out.difference(set(exclude)))


def _wrap_method_once(fun):
    if hasattr(fun, "method_handler_wrapped"):
        return fun

    @functools.wraps(fun)
    def wrapped_module_method(*args, **kwargs):
        if args and isinstance(args[0], Module):
            self, args = args[0], args[1:]
            return self._call_wrapped_method(fun, args, kwargs)
        return fun(*args, **kwargs)

    wrapped_module_method.method_handler_wrapped = True
    return wrapped_module_method


def _wrap_hash(hash_fn):
    @functools.wraps(hash_fn)
    def wrapped(self):
        if self.scope is not None:
            raise TypeError("Can't call __hash__ on modules that hold variables.")
        try:
            return hash_fn(self)
        except TypeError as exc:
            raise TypeError("Failed to hash Flax Module.  The module probably contains unhashable attributes.  "
                            f"Module={self}") from exc

    return wrapped


def _get_unbound_fn(method_or_fn):
    if inspect.ismethod(method_or_fn) and isinstance(method_or_fn.__self__, Module):
        method_or_fn = method_or_fn.__func__
    if not callable(method_or_fn) or len(inspect.signature(method_or_fn).parameters) < 1:
        raise ApplyModuleInvalidMethodError(method_or_fn)
    return method_or_fn


def _attr_repr(value):
    if callable(value) and ((isinstance(value, Module) and value.__dict__.get("__name__", None))
                            or (not isinstance(value, Module) and getattr(value, "__name__", None))):
        return value.__name__
    return repr(value)


def _indent(x: str, num_spaces: int):
    indent_str = " " * num_spaces
    lines = x.split("\n")
    assert not lines[-1]
    return "\n".join(indent_str + line for line in lines[:-1]) + "\n"


def _module_repr(module, num_spaces: int = 4):
    cls = type(module)
    try:
        fields = dataclasses.fields(cls)
    except TypeError:
        return object.__repr__(module)
    rep = ""
    attributes = [f.name for f in fields if f.name not in ("parent", "name") and f.repr]
    child_modules = {k: v for k, v in module._state.children.items() if isinstance(v, Module)}
    if attributes:
        rep += "# attributes\n"
        for attr in attributes:
            rep += f"{attr} = {_attr_repr(module.__dict__.get(attr, None))}\n"
    if child_modules:
        rep += "# children\n"
        for name, child in child_modules.items():
            rep += f"{name} = {_module_repr(child, num_spaces)}\n"
    if rep:
        return f"{cls.__name__}(\n{_indent(rep, num_spaces)})"
    return f"{cls.__name__}()"


@dataclasses.dataclass
class _CallInfo:
    index: int
    path: tuple
    module_type: type
    method: str
    args: tuple
    kwargs: dict
    outputs: Any


class _CallInfos(list):
    """The calls recorded by tabulate, indexed in the order they started."""

    def __init__(self):
        super().__init__()
        self._counter = itertools.count()

    def next_index(self):
        return next(self._counter)


class Module:
    """Base class of all neural network modules (flax.linen.Module).

    Subclasses are dataclasses: declare hyperparameters as annotated fields, define
    submodules in ``setup`` (assigned to attributes) or inline in one ``@compact``
    method, and run them with :meth:`init` and :meth:`apply`. See the module docstring.
    """

    scope: Optional[Scope] = None
    _state: _ModuleInternalState = _uninitialized_module_internal_state
    _parent_ref = None

    def __init_subclass__(cls, kw_only: bool = False, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._customized_dataclass_transform(kw_only)
        cls._wrap_module_attributes()
        cls._state = _uninitialized_module_internal_state
        cls.scope = None
        cls._parent_ref = None
        cls.parent = _ParentDescriptor()

    @classmethod
    def _customized_dataclass_transform(cls, kw_only: bool):
        """Makes `cls` a dataclass whose last fields are ``parent`` and ``name`` (moved after
        the fields of subclasses, as Flax's kw_only_dataclasses does)."""
        annotations = cls.__dict__.get("__annotations__", {})
        if "parent" in annotations or ("name" in annotations and annotations["name"] not in
                                       ("str", str, Optional[str], "Optional[str]")):
            raise ReservedModuleAttributeError(annotations)
        if "__annotations__" not in cls.__dict__:
            cls.__annotations__ = {}
        for field in list(cls.__annotations__):
            field_meta = cls.__dict__.get(field, None)
            if isinstance(field_meta, dataclasses.Field) and not field_meta.init:
                field_meta.compare = False
                field_meta.hash = False
                field_meta.repr = False
        extra = [("parent", Any, dataclasses.field(repr=False, default=_unspecified_parent)),
                 ("name", Optional[str], dataclasses.field(default=None))]
        # Temporarily remove the trailing fields from the dataclass bases so they are
        # re-added after this class's own fields.
        saved = {}
        for base in reversed(cls.__mro__[1:]):
            if dataclasses.is_dataclass(base) and "__dataclass_fields__" in base.__dict__:
                saved[base] = dict(base.__dataclass_fields__)
                for n, _, _ in extra:
                    base.__dataclass_fields__.pop(n, None)
        try:
            for n, ann, default in extra:
                cls.__annotations__.pop(n, None)
                cls.__annotations__[n] = ann
                setattr(cls, n, default)
            dataclasses.dataclass(cls, unsafe_hash="__hash__" not in cls.__dict__, repr=False, kw_only=kw_only)
        finally:
            for base, flds in saved.items():
                base.__dataclass_fields__.clear()
                base.__dataclass_fields__.update(flds)
        cls.__hash__ = _wrap_hash(cls.__hash__)

    @classmethod
    def _wrap_module_attributes(cls):
        exclusions = [f.name for f in dataclasses.fields(cls)] + [
            "__eq__", "__repr__", "__init__", "__hash__", "__post_init__"]
        for key in _get_local_method_names(cls, exclude=exclusions):
            method = getattr(cls, key)
            if hasattr(method, "nowrap"):
                continue
            setattr(cls, key, _wrap_method_once(method))
        return cls

    # ---------------------------------------------------------------- method calls
    def _call_wrapped_method(self, fun, args, kwargs):
        is_compact_method = hasattr(fun, "compact")
        fun_name = getattr(fun, "__name__", "unnamed_function")
        is_setup_method = fun_name == "setup"
        add_call_info = not is_setup_method and len(_context.call_info_stack) > 0
        is_recurrent = False
        if is_setup_method:
            if self.scope is None:
                raise CallSetupUnboundModuleError()
            is_recurrent = self._state.in_setup
            self._state.in_setup = True
        else:
            self._try_setup()
        if is_compact_method:
            if self.scope is None:
                raise CallCompactUnboundModuleError()
            is_recurrent = self._state.in_compact_method
            self._state.in_compact_method = True
        _context.module_stack.append(self)
        try:
            if add_call_info:
                call_index = _context.call_info_stack[-1].next_index()
            if _interceptors.stack:
                y = _run_interceptors(fun, self, *args, **kwargs)
            else:
                y = fun(self, *args, **kwargs)
            if _context.capture_stack:
                filter_fn = _context.capture_stack[-1]
                if filter_fn and filter_fn(self, fun_name):
                    self.sow("intermediates", fun_name, y)
            if add_call_info:
                _context.call_info_stack[-1].append(
                    _CallInfo(call_index, self.scope.path, type(self), fun_name, args, kwargs, y))
            return y
        finally:
            _context.module_stack.pop()
            if is_compact_method:
                object.__setattr__(self, "scope", self.scope.rewound())
            if (is_compact_method or is_setup_method) and not is_recurrent:
                self._state.reset()

    def __setattr__(self, name: str, val: Any):
        fields = self.__dataclass_fields__
        is_dataclass_attr = name in fields and fields[name].init
        if not self._state.in_setup:
            if not self._state.is_initialized:
                object.__setattr__(self, name, val)
                return
            if name.startswith("__"):
                object.__setattr__(self, name, val)
                return
            raise SetAttributeFrozenModuleError(type(self).__name__, name, val)
        if is_dataclass_attr:
            raise SetAttributeInModuleSetupError()
        self._register_submodules(name, val)

    def __getattr__(self, name: str) -> Any:
        if name in _UNDEFINED_COPY_PICKLE_METHODS:
            raise AttributeError()
        self._try_setup()
        if name in self.__dict__:
            return self.__dict__[name]
        msg = f'"{type(self).__name__}" object has no attribute "{name}".'
        if self.scope is None:
            msg += (f' If "{name}" is defined in \'.setup()\', remember these fields are only accessible '
                    "from inside 'init' or 'apply'.")
        raise AttributeError(msg)

    def __dir__(self):
        self._try_setup()
        return object.__dir__(self)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_id", next(_ids))
        object.__setattr__(self, "_state", _ModuleInternalState())
        if self.parent is _unspecified_parent:
            object.__setattr__(self, "parent", _context.module_stack[-1])
        # Top-level / orphan modules stay unbound until init/apply or attachment.
        if self.parent is None:
            return
        if isinstance(self.parent, Module):
            # Unnamed modules built in setup are named when assigned to an attribute.
            if self.parent._state.in_setup and self.name is None:
                return
            if not self.parent._initialization_allowed:
                raise AssignSubModuleError(type(self).__name__)
            if self.name is None:
                prefix = type(self).__name__
                cursor = self.parent._state.autoname_cursor.get(prefix, 0)
                object.__setattr__(self, "name", f"{prefix}_{cursor}")
                self.parent._state.autoname_cursor[prefix] = cursor + 1
            if self.parent._name_taken(self.name):
                raise NameInUseError("submodule", self.name, type(self.parent).__name__)
            self.parent._state.children[self.name] = self
            assert self.parent.scope is not None
            object.__setattr__(self, "scope", self.parent.scope.push(self.name))
        elif isinstance(self.parent, Scope):
            object.__setattr__(self, "scope", self.parent)
        else:
            raise ValueError("parent must be None, Module or Scope")
        if self.scope is not None:
            for field in dataclasses.fields(self):
                if field.name not in ("parent", "name") and field.init:
                    self._register_submodules(field.name, getattr(self, field.name))
        self._state.is_initialized = True

    def __repr__(self) -> str:
        return _module_repr(self)

    def setup(self) -> None:
        """Lazily initialises the module (a lazy ``__init__``): define submodules and
        variables here as attributes. Runs once, when the bound module is first used."""
        pass

    def _register_submodules(self, name, val):
        assert self.scope, "Trying to register submodules on unbound scope."
        cache = self.scope.root._adoption_cache
        queue = []

        def adopt_attr_modules(suffix, subvalue):
            if isinstance(subvalue, Module):
                if subvalue.parent is None:
                    # A module built outside (e.g. passed as an attribute): cloned once per
                    # root so sharing by reference survives, and named by attachment.
                    key = subvalue._id
                    if key in cache:
                        subvalue = cache[key]
                    else:
                        subvalue = subvalue.clone(name=None)
                        cache[key] = subvalue
                if subvalue.name is None:
                    object.__setattr__(subvalue, "parent", self)
                    object.__setattr__(subvalue, "name", f"{name}{suffix}")
                    queue.append(subvalue)
            return subvalue

        val = _freeze_attr(_map_over_modules_in_tree(adopt_attr_modules, val))
        object.__setattr__(self, name, val)
        for x in queue:
            x.__post_init__()

    def _try_setup(self, shallow: bool = False) -> None:
        if self.scope and not self._state.in_setup and self._state.setup_called != _SetupState.DONE:
            try:
                self._state.in_setup = True
                for field in dataclasses.fields(self):
                    if field.name not in ("parent", "name") and field.init:
                        self._register_submodules(field.name, getattr(self, field.name))
                if not shallow:
                    self.setup()
                    # one child per compact_name_scope method, named after it. As in flax, its
                    # parent is the module running when setup happens (this one at the top
                    # level; the caller's module when setup is triggered from its compact
                    # method, so `up/` then sits beside this module's own scope)
                    methods = _compact_name_scope_methods(type(self))
                    if methods:
                        owner = _context.module_stack[-1] or self
                        self._compact_name_scope_modules = {
                            name: CompactNameScope(getattr(type(self), name).inner_fun, lambda: self,
                                                   parent=owner, name=name)
                            for name in methods}
            finally:
                self._state.in_setup = False
                if not shallow:
                    self._state.setup_called = _SetupState.DONE

    def _name_taken(self, name: str, reuse_scopes: bool = False, collection: str | None = None) -> bool:
        assert self.scope is not None
        if reuse_scopes:
            return False
        return self.scope.name_reserved(name, collection)

    @property
    def _initialization_allowed(self):
        return not self._state.is_initialized or self._state.in_setup or self._state.in_compact_method

    @property
    def path(self):
        """The tuple of names from the root module to this one (``()`` for the root)."""
        if self.scope is None:
            raise ValueError("Can't access module paths on unbound modules.")
        return self.scope.path

    def clone(self: M, *, parent=None, _deep_clone=False, _reset_names=False, **updates) -> M:
        """A copy of this module with some attributes replaced (unbound unless `parent`)."""
        attrs = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}
        attrs.update(parent=parent, **updates)
        if _deep_clone is not False:
            cache = weakref.WeakValueDictionary() if isinstance(_deep_clone, bool) else _deep_clone

            def clone_fn(m):
                if hasattr(m, "_id"):
                    key = m._id
                    if key in cache:
                        return cache[key]
                    if _reset_names:
                        c = m.clone(_deep_clone=cache, _reset_names=_reset_names, name=None)
                    else:
                        c = m.clone(_deep_clone=cache)
                    cache[key] = c
                    return c
                return m

            for field_name, value in attrs.items():
                if field_name == "parent":
                    continue
                attrs[field_name] = _map_submodules(clone_fn, value)
        return self.__class__(**attrs)

    def copy(self: M, *, parent=_unspecified_parent, name=None, **updates) -> M:
        return self.clone(parent=parent, name=name, _deep_clone=True, _reset_names=False, **updates)

    # ---------------------------------------------------------------- variables
    def variable(self, col: str, name: str, init_fn=None, *init_args, unbox: bool = True, **init_kwargs) -> Variable:
        """Declares (and, when `col` is mutable and the variable missing, initialises with
        ``init_fn(*init_args)``) the variable ``col/<path>/name``; returns a :class:`Variable`."""
        if not self._initialization_allowed:
            raise ValueError("Variables must be initialized in `setup()` or in a method wrapped in `@compact`")
        if self._name_taken(name, collection=col):
            raise NameInUseError("variable", name, type(self).__name__)
        assert self.scope is not None
        v = self.scope.variable(col, name, init_fn, *init_args, unbox=unbox, **init_kwargs)
        self._state.children[name] = col
        return v

    def param(self, name: str, init_fn, *init_args, unbox: bool = True, **init_kwargs):
        """Declares the parameter ``params/<path>/name``: returns the stored value (checking
        its shape against ``init_fn``'s), or during ``init`` creates it with
        ``init_fn(self.make_rng('params'), *init_args)``."""
        if not self._initialization_allowed:
            raise ValueError("Parameters must be initialized in `setup()` or in a method wrapped in `@compact`")
        if self._name_taken(name, collection="params"):
            raise NameInUseError("param", name, type(self).__name__)
        assert self.scope is not None
        v = self.scope.param(name, init_fn, *init_args, unbox=unbox, **init_kwargs)
        self._state.children[name] = "params"
        return v

    def has_variable(self, col: str, name: str) -> bool:
        if self.scope is None:
            raise ValueError("Can't access variables on unbound modules")
        return self.scope.has_variable(col, name)

    def is_mutable_collection(self, col: str) -> bool:
        """Whether `col` may be written in the current init/apply (``mutable=`` filter)."""
        if self.scope is None:
            raise ValueError("Can't check mutability on unbound modules")
        return self.scope.is_mutable_collection(col)

    def has_rng(self, name: str) -> bool:
        if self.scope is None:
            raise ValueError("Can't query for RNGs on unbound modules")
        return self.scope.has_rng(name)

    def make_rng(self, name: str = "params"):
        """A fresh key from stream `name` (falls back to 'params' when `name` was not given)."""
        if self.scope is None:
            raise ValueError("Can't use RNGs on unbound modules")
        return self.scope.make_rng(name)

    def is_initializing(self) -> bool:
        """True inside ``init`` / ``init_with_output``."""
        if self.scope is None:
            raise ValueError("Can't check if running under init() on unbound modules")
        return bool(self.scope.get_flag("initializing", False))

    @property
    def variables(self):
        if self.scope is None:
            raise ValueError("Can't access variables on unbound modules")
        return self.scope.variables()

    def get_variable(self, col: str, name: str, default=None):
        if self.scope is None:
            raise ValueError("Can't access variables on unbound modules")
        return self.scope.get_variable(col, name, default)

    def put_variable(self, col: str, name: str, value: Any):
        if self.scope is None:
            raise ValueError("Can't access variables on unbound modules")
        self.scope.put_variable(col, name, value)

    def sow(self, col: str, name: str, value, reduce_fn=lambda xs, x: xs + (x,), init_fn=lambda: ()) -> bool:
        """Stores `value` in collection `col` (a tuple per name by default) when `col` is mutable."""
        if self.scope is None:
            raise ValueError("Can't store variables on unbound modules")
        if not self.scope.is_mutable_collection(col):
            return False
        if self.scope.has_variable(col, name):
            xs = self.scope.get_variable(col, name)
        else:
            self.scope.reserve(name, col)
            self._state.children[name] = col
            xs = init_fn()
        self.scope.put_variable(col, name, reduce_fn(xs, value))
        return True

    def perturb(self, name: str, value, collection: str = "perturbations"):
        """Adds a zero-initialised variable of `collection` to `value` (Flax's
        ``Module.perturb``): taking the gradient with respect to that collection gives
        the gradient with respect to the intermediate `value`. A no-op when the
        collection is neither mutable nor passed to ``apply``."""
        if self.scope is None:
            raise ValueError("Can't store variables on unbound modules")
        from .. import numpy as jnp  # podlet.numpy imports nothing of nn; deferred to keep import order free
        if self.is_mutable_collection(collection):
            if not self.scope.has_variable(collection, name):
                self.scope.reserve(name, collection)
                self._state.children[name] = collection
                self.scope.put_variable(collection, name, tree_util.tree_map(jnp.zeros_like, value))
        if collection in self.scope.root._variables:
            if self.scope.has_variable(collection, name):
                value = tree_util.tree_map(jnp.add, value, self.scope.get_variable(collection, name))
            else:
                raise ValueError(f"Perturbation collection {collection} present, but "
                                 f"missing perturbation variable {name}")
        return value

    # ---------------------------------------------------------------- binding
    @staticmethod
    def _module_checks(self):
        if not isinstance(self, Module):
            raise InvalidInstanceModuleError()
        if type(self).__post_init__ is not Module.__post_init__ and "_id" not in self.__dict__:
            raise IncorrectPostInitOverrideError()

    def bind(self: M, variables, *args, rngs=None, mutable=False) -> M:
        """An interactive, bound copy of this module (for notebooks and debugging)."""
        Module._module_checks(self)
        scope = _bind_scope(variables, rngs=rngs, mutable=mutable)
        return self.clone(parent=scope, _deep_clone=True)

    def unbind(self: M):
        if self.scope is None:
            raise CallUnbindOnUnboundModuleError()
        variables = self.variables
        module = self.clone(_deep_clone=True, _reset_names=True, name=None)
        return module, variables

    def _resolve_method(self, method, for_apply):
        if isinstance(method, str):
            attribute_name = method
            method = getattr(self, attribute_name)
            if not callable(method):
                raise TypeError(f"'{type(self).__name__}.{attribute_name}' must be a callable, got {type(method)}.")
            if for_apply and isinstance(method, Module):
                method = lambda self, *args, **kwargs: getattr(self, attribute_name)(*args, **kwargs)  # noqa: E731
        elif method is None:
            method = self.__call__
        return _get_unbound_fn(method)

    def apply(self, variables, *args, rngs=None, method=None, mutable=False, capture_intermediates=False,
              **kwargs):
        """Runs `method` (default ``__call__``) with `variables`.

        Returns the output, or ``(output, updated_collections)`` when `mutable` is not
        False (a collection name, a list of names, True, or a :class:`DenyList`).
        `rngs` is a key (the 'params' stream) or a dict of named streams (e.g. 'dropout').
        """
        Module._module_checks(self)
        if rngs is not None and not isinstance(rngs, Mapping):
            if not _is_valid_rng(rngs):
                raise InvalidRngError(f"RNGs should be of shape (2,) or PRNGKey in Module {type(self).__name__}, "
                                      f"but rngs are: {rngs}")
            rngs = {"params": rngs}
        fn = self._resolve_method(method, True)
        return apply(fn, self, mutable=mutable, capture_intermediates=capture_intermediates)(
            variables, *args, **kwargs, rngs=rngs)

    def init_with_output(self, rngs, *args, method=None, mutable=DenyList("intermediates"),
                         capture_intermediates=False, **kwargs):
        """Like :meth:`init` but returns ``(output, variables)``."""
        Module._module_checks(self)
        if not isinstance(rngs, Mapping):
            if not _is_valid_rng(rngs):
                raise InvalidRngError(f"RNGs should be of shape (2,) or PRNGKey in Module {type(self).__name__}, "
                                      f"but rngs are: {rngs}")
            rngs = {"params": rngs}
        fn = self._resolve_method(method, False)
        return init_with_output(fn, self, mutable=mutable, capture_intermediates=capture_intermediates)(
            rngs, *args, **kwargs)

    def init(self, rngs, *args, method=None, mutable=DenyList("intermediates"), capture_intermediates=False,
             **kwargs):
        """Initialises the variables by running `method` (default ``__call__``) on example
        inputs; returns a plain dict of collections, e.g. ``{'params': ..., 'batch_stats': ...}``."""
        Module._module_checks(self)
        _, v_out = self.init_with_output(rngs, *args, method=method, mutable=mutable,
                                         capture_intermediates=capture_intermediates, **kwargs)
        return v_out

    def tabulate(self, rngs, *args, depth=None, show_repeated=False, mutable=DenyList("intermediates"),
                 console_kwargs=None, table_kwargs=None, column_kwargs=None, compute_flops=False,
                 compute_vjp_flops=False, **kwargs) -> str:
        """A table of every module call during ``init``: path, module, input and output
        shapes, the variables each module owns, per-collection totals and the total
        parameter count (like flax's ``Module.tabulate``, in plain text)."""
        return tabulate(self, rngs, depth=depth, show_repeated=show_repeated, mutable=mutable)(*args, **kwargs)


# =====================================================================================
# Functional entry points (flax.linen.apply / init / init_with_output)
# =====================================================================================
def _capture_call_intermediates(_, method_name):
    return method_name == "__call__"


def apply(fn, module: Module, mutable=False, capture_intermediates=False):
    """``fn(bound_module, *args)`` as a function of ``(variables, *args, rngs=...)``."""

    @functools.wraps(fn)
    def scope_fn(scope, *args, **kwargs):
        _context.capture_stack.append(capture_intermediates)
        try:
            return fn(module.clone(parent=scope, _deep_clone=True), *args, **kwargs)
        finally:
            _context.capture_stack.pop()

    if capture_intermediates is True:
        capture_intermediates = _capture_call_intermediates
    if capture_intermediates:
        mutable = union_filters(mutable, "intermediates")
    return _core_apply(scope_fn, mutable=mutable)


def init_with_output(fn, module: Module, mutable=DenyList("intermediates"), capture_intermediates=False):
    @functools.wraps(fn)
    def scope_fn(scope, *args, **kwargs):
        _context.capture_stack.append(capture_intermediates)
        try:
            return fn(module.clone(parent=scope, _deep_clone=True), *args, **kwargs)
        finally:
            _context.capture_stack.pop()

    if capture_intermediates is True:
        capture_intermediates = _capture_call_intermediates
    if capture_intermediates:
        mutable = union_filters(mutable, "intermediates")
    return _core_init(scope_fn, mutable=mutable)


def init(fn, module: Module, mutable=DenyList("intermediates"), capture_intermediates=False):
    init_fn = init_with_output(fn, module, mutable, capture_intermediates)

    @functools.wraps(init_fn)
    def init_wrapper(*args, **kwargs):
        return init_fn(*args, **kwargs)[1]

    return init_wrapper


# =====================================================================================
# tabulate
# =====================================================================================
def _bytes_repr(num_bytes):
    if num_bytes > 1e9:
        return f"{num_bytes / 1e9:,.1f} GB"
    if num_bytes > 1e6:
        return f"{num_bytes / 1e6:,.1f} MB"
    if num_bytes > 1e3:
        return f"{num_bytes / 1e3:,.1f} KB"
    return f"{num_bytes:,} B"


def _size_and_bytes(tree):
    leaves = [x for x in tree_util.tree_leaves(tree) if hasattr(x, "shape")]
    size = sum(int(np.prod(x.shape, dtype=np.int64)) for x in leaves)
    nbytes = sum(int(np.prod(x.shape, dtype=np.int64)) * np.dtype(x.dtype).itemsize for x in leaves)
    return size, nbytes


def _size_and_bytes_repr(size, nbytes):
    return f"{size:,} ({_bytes_repr(nbytes)})" if size else ""


def _render_value(x):
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return f"{np.dtype(x.dtype).name}[{','.join(str(d) for d in x.shape)}]"
    if isinstance(x, Module):
        return type(x).__name__
    return repr(x)


def _render_tree(t):
    leaves = tree_util.tree_leaves(t)
    if isinstance(t, (tuple, list)) and len(t) == 1:
        leaves = tree_util.tree_leaves(t[0])
    if isinstance(t, dict) and not t:
        return ""
    return "\n".join(_render_value(x) for x in leaves) if leaves else ("" if t is None else repr(t))


def _leaf_rows(tree, prefix=""):
    """'name: dtype[shape]' lines of the direct (non-dict) entries of a module's collection."""
    out = []
    for k in sorted(tree):
        v = tree[k]
        if isinstance(v, Mapping):
            continue
        for x in tree_util.tree_leaves(v):
            out.append(f"{prefix}{k}: {_render_value(x)}")
    return out


def _subtree(col, path):
    for p in path:
        if not isinstance(col, Mapping) or p not in col:
            return {}
        col = col[p]
    return col if isinstance(col, Mapping) else {}


def tabulate(module: Module, rngs, depth=None, show_repeated=False, mutable=DenyList("intermediates"),
             console_kwargs=None, table_kwargs=None, column_kwargs=None, compute_flops=False,
             compute_vjp_flops=False, **kw):
    """``tabulate(module, rngs)(*args, **kwargs)`` -> the summary string (see Module.tabulate)."""

    def _tabulate_fn(*args, **kwargs):
        calls = _CallInfos()
        _context.call_info_stack.append(calls)
        try:
            variables = _abstract_init(module, rngs, mutable, args, kwargs)
        finally:
            _context.call_info_stack.pop()
        calls.sort(key=lambda c: c.index)
        seen = set()
        rows = []
        for c in calls:
            if depth is not None and len(c.path) > depth:
                continue
            if not show_repeated and c.path in seen:
                continue
            seen.add(c.path)
            rows.append(c)
        cols = [k for k in variables]
        header = ["path", "module", "inputs", "outputs"] + cols
        table = []
        totals = {col: [0, 0] for col in cols}
        for c in rows:
            cells = ["/".join(c.path), c.module_type.__name__ + ("" if c.method == "__call__" else f".{c.method}"),
                     _render_tree((c.args, c.kwargs) if c.kwargs else c.args), _render_tree(c.outputs)]
            for col in cols:
                sub = _subtree(variables[col], c.path)
                # a module at the depth limit owns everything below it; otherwise only its own entries
                at_limit = depth is not None and len(c.path) == depth
                own = sub if at_limit else {k: v for k, v in sub.items() if not isinstance(v, Mapping)}
                lines = _leaf_rows(sub) if not at_limit else []
                size, nbytes = _size_and_bytes(own)
                totals[col][0] += size
                totals[col][1] += nbytes
                if size:
                    lines.append("")
                    lines.append(_size_and_bytes_repr(size, nbytes))
                cells.append("\n".join(lines))
            table.append(cells)
        table.append(["", "", "", "Total"] + [_size_and_bytes_repr(*totals[col]) for col in cols])
        total_all = [sum(totals[c][0] for c in cols), sum(totals[c][1] for c in cols)]
        text = _render_table(f"{type(module).__name__} Summary", header, table)
        width = len(text.split("\n")[1])
        footer = f"Total Parameters: {_size_and_bytes_repr(*total_all)}".center(width).rstrip()
        return "\n" + text + "\n\n" + footer + "\n"

    return _tabulate_fn


def _abstract_init(module, rngs, mutable, args, kwargs):
    """``module.init`` traced with abstract rng keys: variables come back as tracers
    carrying shapes and dtypes, and no initializer kernel runs."""
    trace = _core.Trace()
    _core._trace_stack.append(trace)
    try:
        if isinstance(rngs, Mapping):
            keys = {k: trace.new_input("uint32", (2,)) for k in rngs}
        else:
            keys = trace.new_input("uint32", (2,))
        return module.init(keys, *args, mutable=mutable, **kwargs)
    finally:
        trace.active = False
        _core._trace_stack.pop()


def _render_table(title, header, rows):
    cells = [header] + rows
    ncol = len(header)
    split = [[str(c).split("\n") for c in r] for r in cells]
    widths = [max(len(line) for r in split for line in r[i]) for i in range(ncol)]
    sep = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    out = [title.center(len(sep)).rstrip(), sep]
    for ri, r in enumerate(split):
        height = max(len(c) for c in r)
        for li in range(height):
            out.append("| " + " | ".join((r[i][li] if li < len(r[i]) else "").ljust(widths[i])
                                         for i in range(ncol)) + " |")
        out.append(sep)
    return "\n".join(out)


class CompactNameScope(Module):
    """The child module behind a ``compact_name_scope`` method: calls the method's
    function on the parent module inside this child's (compact) scope."""
    fn: Callable
    module_fn: Callable

    @compact
    def __call__(self, *args, **kwargs):
        return self.fn(self.module_fn(), *args, **kwargs)


def share_scope(module: Module, other: Module, /):
    """Makes two bound modules share one scope (flax's ``nn.share_scope``): when
    ``other``'s scope descends from ``module``'s, ``other`` moves into ``module``'s scope;
    otherwise ``module`` uses ``other``'s. Children already created follow the module
    that moves. Typical use, in ``setup``: a LoRA wrapper whose extra parameters sit
    beside the wrapped Dense's ``kernel`` and ``bias``."""
    if module.scope is None or other.scope is None:
        raise CallShareScopeOnUnboundModuleError()

    def is_child_scope(scope, other_scope):
        target = other_scope
        while target is not None:
            if target is scope:
                return True
            target = target.parent
        return False

    if is_child_scope(module.scope, other.scope):
        module_to_update, new_scope = other, module.scope
    else:
        module_to_update, new_scope = module, other.scope
    old_scope = module_to_update.scope
    object.__setattr__(module_to_update, "scope", new_scope)
    for m in module_to_update._state.children.values():
        if isinstance(m, Module) and m.scope is not None and m.scope.parent is old_scope:
            if isinstance(m.scope.name, str):
                new_scope.reserve(m.scope.name)
            m.scope.parent = new_scope
