"""pmap over virtual devices: one trace, every replica run in lockstep by the C++
executor (cpp/podlet/exec/pmap.cc), collectives reduced in replica order.

podlet's devices are virtual: N replicas of the step (default 8, like a TPU v5e-8;
``podlet.config.update("num_devices", n)`` or ``PODLET_NUM_DEVICES``), times the number
of processes under ``mpirun`` after ``podlet.distributed.initialize()``. A value pmap
can prove is the same on every replica (arguments made by ``jax_utils.replicate``,
results of psum/pmean, and anything computed only from those) is stored and computed
once: it comes back as a :class:`ReplicatedArray`, which looks like an array with a
leading device axis but holds one buffer.
"""
import functools
import os

import numpy as np

from .. import _core
from .. import tree_util
from . import dtypes
from . import fusion
from .core import Array, Tracer, _Traced, _abstractify, _trace_stack, to_array, bind, _hashable_static
from .errors import PodletError, ShapeError

_DEFAULT_DEVICES = 8


def _env_devices():
    v = os.environ.get("PODLET_NUM_DEVICES")
    if v is None:
        return _DEFAULT_DEVICES
    try:
        n = int(v)
    except ValueError:
        raise ValueError(f"PODLET_NUM_DEVICES must be a positive integer, got {v!r}") from None
    if n < 1:
        raise ValueError(f"PODLET_NUM_DEVICES must be a positive integer, got {v!r}")
    return n


_num_local = None


def set_local_device_count(n):
    global _num_local
    n = int(n)
    if n < 1:
        raise ValueError(f"num_devices must be >= 1, got {n}")
    _num_local = n


def local_device_count():
    global _num_local
    if _num_local is None:
        _num_local = _env_devices()
    return _num_local


def process_count():
    return _core.process_count()


def process_index():
    return _core.process_index()


def device_count():
    return local_device_count() * process_count()


class Device:
    """A virtual CPU device: one replica of a pmap'd computation."""
    platform = "cpu"
    device_kind = "cpu"

    def __init__(self, id, process_index=0):
        self.id = id
        self.process_index = process_index

    def __repr__(self):
        return f"CpuDevice(id={self.id})"

    def __eq__(self, other):
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self):
        return hash(("podlet.Device", self.id))


def devices(backend=None):
    n, p = local_device_count(), process_count()
    return [Device(i, i // n) for i in range(n * p)]


def local_devices(process_index=None, backend=None):
    n = local_device_count()
    pi = _core.process_index() if process_index is None else process_index
    return [Device(pi * n + i, pi) for i in range(n)]


# ---------------------------------------------------------------------------------
# Replicated values
# ---------------------------------------------------------------------------------
class ReplicatedArray:
    """An array with a leading device axis whose slices are all equal, stored once.

    ``x[i]`` is the shared podlet Array; NumPy conversion materialises the
    (devices, ...) array. Passing it back into pmap keeps it stored once."""
    __slots__ = ("_value", "_n", "weak_type")
    __array_priority__ = 100
    _is_replicated = True

    def __init__(self, value, n):
        self._value = value
        self._n = int(n)
        self.weak_type = getattr(value, "weak_type", False)

    @property
    def shape(self):
        return (self._n,) + tuple(self._value.shape)

    @property
    def dtype(self):
        return self._value.dtype

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))

    def __len__(self):
        return self._n

    def __array__(self, dtype=None, copy=None):
        v = np.asarray(self._value)
        out = np.broadcast_to(v, self.shape)
        return np.array(out, dtype=dtype) if dtype is not None or copy else np.ascontiguousarray(out)

    def __getitem__(self, idx):
        if isinstance(idx, (int, np.integer)):
            if not -self._n <= idx < self._n:
                raise IndexError(f"index {idx} is out of bounds for the device axis of size {self._n}")
            return self._value
        return np.asarray(self)[idx]

    def __iter__(self):
        return (self._value for _ in range(self._n))

    def __repr__(self):
        return f"ReplicatedArray({self._n} x {np.asarray(self._value)!r})"

    def block_until_ready(self):
        return self

    def item(self):
        if self.size != 1:
            raise ValueError(f"item() needs a single element, the array has shape {self.shape}")
        return np.asarray(self._value).item()

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def tolist(self):
        return np.asarray(self).tolist()

    def __getattr__(self, name):
        # NumPy's reductions and conversions (mean, sum, astype, reshape, ...) on the
        # materialised array, for host-side code such as metric logging.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(np.asarray(self), name)


def _np_binop(name):
    def f(self, other):
        return getattr(np.asarray(self), name)(np.asarray(other) if isinstance(other, ReplicatedArray) else other)
    f.__name__ = name
    return f


for _op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "lt", "le", "gt", "ge", "eq", "ne"):
    for _n in (f"__{_op}__", f"__r{_op}__"):
        if hasattr(np.ndarray, _n):
            setattr(ReplicatedArray, _n, _np_binop(_n))
ReplicatedArray.__neg__ = lambda self: -np.asarray(self)
ReplicatedArray.__hash__ = None


# ---------------------------------------------------------------------------------
# Axis environment (which pmap axes are being traced)
# ---------------------------------------------------------------------------------
_axis_env = []   # [(axis_name, size, depth of the pmap's trace in _trace_stack)]


def _lookup_axis(axis_name, what):
    names = axis_name if isinstance(axis_name, (tuple, list)) else (axis_name,)
    if len(names) != 1:
        raise NotImplementedError(f"{what} over several axes {tuple(names)} is not supported (one pmap axis)")
    name = names[0]
    for n, size, depth in reversed(_axis_env):
        if n == name:
            return name, size, _trace_stack[depth]
    bound = [n for n, _, _ in _axis_env]
    raise NameError(f"unbound axis name: {name!r}. {what} is only valid inside pmap with a matching "
                    f"axis_name" + (f" (axes in scope: {bound})" if bound else " (no pmap is being traced)"))


def _lift(x, trace):
    """x as a value of the traced computation (constants become graph constants)."""
    if isinstance(x, Tracer):
        return x
    arr = to_array(x)
    vid = trace.value_of(arr)
    return Tracer(trace, vid, arr._dtype_name, arr.shape, isinstance(x, (int, float)) and not isinstance(x, bool))


def collective(prim, x, axis_name, **attrs):
    name, size, trace = _lookup_axis(axis_name, prim)

    def one(leaf):
        return bind(prim, _lift(leaf, trace), axis_name=str(name), axis_size=size, **attrs)
    return tree_util.tree_map(one, x)


def axis_index(axis_name):
    name, size, trace = _lookup_axis(axis_name, "axis_index")
    (vid, d, s), = trace.graph.add("axis_index", [], {"axis_name": str(name), "axis_size": size})
    return Tracer(trace, vid, d, s)


def axis_size(axis_name):
    return _lookup_axis(axis_name, "axis_size")[1]


# ---------------------------------------------------------------------------------
# pmap
# ---------------------------------------------------------------------------------
def _axes_per_leaf(in_axes, args, what="pmap in_axes", whose="arguments"):
    """in_axes (an int/None or a tree prefix of args) -> one axis (int or None) per leaf
    (pmap's in_axes, vmap's in_axes and out_axes)."""
    if in_axes is None or isinstance(in_axes, int):
        return [in_axes] * len(tree_util.tree_leaves(args))
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)
    prefix = tree_util.tree_structure(in_axes, is_leaf=lambda x: x is None)
    specs = tree_util.tree_leaves(in_axes, is_leaf=lambda x: x is None)
    try:
        subtrees = prefix.flatten_up_to(args)
    except ValueError as e:
        raise ValueError(f"{what} {in_axes!r} is not a tree prefix of the {whose}: {e}") from None
    out = []
    for spec, sub in zip(specs, subtrees):
        if spec is not None and not isinstance(spec, int):
            raise TypeError(f"{what} entries must be int or None, got {spec!r}")
        out.extend([spec] * len(tree_util.tree_leaves(sub)))
    return out


class PmappedFunction:
    def __init__(self, fun, axis_name, in_axes, out_axes, static_broadcasted_argnums, donate_argnums):
        functools.update_wrapper(self, fun)
        self._fun = fun
        self.axis_name = axis_name
        self._in_axes = in_axes
        self._out_axes = out_axes
        if isinstance(static_broadcasted_argnums, int):
            static_broadcasted_argnums = (static_broadcasted_argnums,)
        self._static = tuple(static_broadcasted_argnums)
        self._cache = {}
        self.trace_count = 0

    def _prepare(self, args, kwargs, n):
        nargs = len(args)
        static_pos = {i % nargs for i in self._static} if nargs else set()
        dyn = tuple(None if i in static_pos else a for i, a in enumerate(args))
        statics = tuple((i, _hashable_static(args[i], f"#{i}")) for i in sorted(static_pos))
        in_axes = self._in_axes
        if isinstance(in_axes, (tuple, list)):
            if len(in_axes) != nargs:
                raise ValueError(f"pmap in_axes has {len(in_axes)} entries for {nargs} positional arguments")
            in_axes = tuple(None if i in static_pos else ax for i, ax in enumerate(in_axes))
        axes = _axes_per_leaf(in_axes, dyn) + [0] * len(tree_util.tree_leaves(kwargs))
        leaves, in_tree = tree_util.tree_flatten((dyn, kwargs))
        paths = [p for p, _ in tree_util.tree_flatten_with_path((dyn, kwargs))[0]]
        vals, flags, sig = [], [], []
        for leaf, ax, path in zip(leaves, axes, paths):
            where = tree_util.keystr(path)
            if ax is None:
                v, s = _abstractify(leaf)
                vals.append(v)
                flags.append(True)
                sig.append(s)
                continue
            if isinstance(leaf, ReplicatedArray):
                if leaf._n != n or ax != 0:
                    raise ShapeError(f"pmap argument {where} is replicated over {leaf._n} devices; "
                                     f"this pmap runs on {n} local devices")
                v, s = _abstractify(leaf._value)
                vals.append(v)
                flags.append(True)
                sig.append((s[0], s[1], leaf.weak_type))
                continue
            if isinstance(leaf, Tracer):
                raise NotImplementedError("pmap inside jit/grad tracing is not supported; call pmap at top level")
            if isinstance(leaf, (int, float, bool)) or np.ndim(leaf) == 0:
                raise ShapeError(f"pmap argument {where} is a scalar; mapped arguments need a leading axis of "
                                 f"size {n} (the local device count). Use in_axes=None to broadcast it.")
            if ax != 0:
                leaf = np.moveaxis(np.asarray(leaf), ax, 0)
            shape = tuple(np.shape(leaf))
            if shape[0] != n:
                raise ShapeError(f"pmap argument {where} has shape {shape}: its leading axis {shape[0]} must equal "
                                 f"the local device count {n} (reshape the batch to ({n}, batch // {n}, ...), "
                                 "e.g. with podlet.shard)")
            v, s = _abstractify(leaf)
            vals.append(v)
            flags.append(False)
            sig.append((s[0], tuple(s[1][1:]), s[2]))
        return vals, flags, sig, in_tree, statics, static_pos

    def __call__(self, *args, **kwargs):
        if _trace_stack:
            raise NotImplementedError("pmap inside jit/grad/another pmap is not supported; call it at top level")
        n = local_device_count()
        vals, flags, sig, in_tree, statics, static_pos = self._prepare(args, kwargs, n)
        key = (in_tree, tuple(sig), statics)
        entry = self._cache.get(key)
        if entry is None:
            entry = self._trace(args, sig, in_tree, static_pos, n)
            self._cache[key] = entry
        try:
            # [perf] the fused AdamW step absorbs apply_updates and an EMA (_src/fusion.py)
            outs, reps = _core.run_pmap(fusion.pmap_graph(entry), vals, flags, n)
        except PodletError as e:
            raise type(e)(str(e)).with_traceback(None) from None
        res = []
        skeleton = tree_util.tree_unflatten(entry.out_tree, [0] * len(outs))
        axes = _axes_per_leaf(self._out_axes, skeleton, "pmap out_axes", "outputs")
        paths = [tree_util.keystr(p) for p, _ in tree_util.tree_flatten_with_path(skeleton)[0]]
        for o, r, w, ax, where in zip(outs, reps, entry.out_weak, axes, paths):
            if w:
                o.weak_type = True
            if ax is None:
                if not r:
                    raise ValueError(f"pmap out_axes=None for output {where or '(the result)'} needs a value that "
                                     "is equal on every device (e.g. a result of psum/pmean, or computed only "
                                     "from in_axes=None arguments)")
                res.append(o)
            elif ax == 0:
                res.append(ReplicatedArray(o, n) if r else o)
            else:
                from .. import numpy as jnp  # the per-device axis moved to position ax
                o = jnp.broadcast_to(o, (n,) + tuple(o.shape)) if r else o
                res.append(jnp.moveaxis(o, 0, ax))
        return tree_util.tree_unflatten(entry.out_tree, res)

    def _trace(self, args, sig, in_tree, static_pos, n):
        full = list(args)

        def fun(dargs, dkwargs):
            a = [full[i] if i in static_pos else x for i, x in enumerate(dargs)]
            return self._fun(*a, **dkwargs)

        # _Traced pushes the pmap's trace at this depth of the trace stack.
        _axis_env.append((self.axis_name, n * process_count(), len(_trace_stack)))
        try:
            entry = _Traced(fun, sig, in_tree)
        finally:
            _axis_env.pop()
        if entry.captures:
            raise NotImplementedError("a pmap'd function closing over values of an enclosing jit/grad trace "
                                      "is not supported")
        entry.graph.dce()
        self.trace_count += 1
        return entry


def pmap(fun=None, axis_name=None, *, in_axes=0, out_axes=0, static_broadcasted_argnums=(), devices=None,
         backend=None, axis_size=None, donate_argnums=(), global_arg_shapes=None):
    """jax.pmap: map `fun` over the leading axis of its arguments, one slice per device."""
    if fun is None:
        return functools.partial(pmap, axis_name=axis_name, in_axes=in_axes, out_axes=out_axes,
                                 static_broadcasted_argnums=static_broadcasted_argnums,
                                 donate_argnums=donate_argnums)
    return PmappedFunction(fun, axis_name, in_axes, out_axes, static_broadcasted_argnums, donate_argnums)
