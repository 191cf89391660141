"""The only Python that talks to the C++ engine: bind, tracers, jit, grad/vjp.

Every op is ``bind(prim, *args, **attrs)``. On concrete Arrays it runs the kernel now
(eager, for notebooks). With tracers it appends a node to the Graph being traced; the
C++ shape rule gives the result's shape and dtype, so shape errors surface at trace time
with the user's source line. ``jit`` traces once per (function, static args, shapes,
dtypes) and runs the cached Graph in C++ with the GIL released; ``grad`` traces, asks
the C++ autodiff for the backward graph, and runs or inlines it.
"""
import functools
import inspect
import itertools
import logging
import os
import sys
import warnings

import numpy as np

from .. import _core
from .. import tree_util
from . import dtypes
from . import fusion  # [perf] elementwise fusion of executed graphs
from .config import flags as _flags
from .errors import PodletError, ShapeError, DTypeError, ConcretizationError, UnexpectedTracerError

Array = _core.Array
log = logging.getLogger("podlet.jit")

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---------------------------------------------------------------------------------
# Arrays
# ---------------------------------------------------------------------------------
def _array_dtype(self):
    return dtypes.SUPPORTED[self._dtype_name]


def _array_array(self, dtype=None, copy=None):
    v = self._numpy_view()
    if self._dtype_name == "bfloat16":
        v = v.view(dtypes.bfloat16)
    if dtype is not None and np.dtype(dtype) != v.dtype:
        return v.astype(dtype)
    if copy:
        return v.copy()
    return v


Array.dtype = property(_array_dtype)
Array.__array__ = _array_array
Array.__array_priority__ = 100
Array.weak_type = False


def to_array(x, dtype=None):
    """A concrete podlet Array from an Array, NumPy array or Python scalar (copies
    only when it has to: NumPy arrays that are C-contiguous, 64-byte aligned and already
    of the target dtype are wrapped, not copied)."""
    if isinstance(x, Array):
        if dtype is not None and np.dtype(dtype) != x.dtype:
            return bind("convert_element_type", x, new_dtype=np.dtype(dtype).name)
        return x
    if isinstance(x, Tracer):
        raise TypeError("to_array got a tracer")
    if isinstance(x, (bool, int, float)) and dtype is None:
        dtype = dtypes.bool_ if isinstance(x, bool) else (dtypes.int32 if isinstance(x, int) else dtypes.float32)
    a = np.asarray(x)
    target = dtypes.canonicalize(dtype if dtype is not None else a.dtype)
    if a.dtype != target:
        a = a.astype(target)
    return Array.from_numpy(a, copy=False)


# ---------------------------------------------------------------------------------
# Tracing
# ---------------------------------------------------------------------------------
class Tracer:
    """An abstract value in a Graph being traced: shape and dtype, no data."""
    __slots__ = ("_trace", "_vid", "shape", "_dtype_name", "weak_type", "__weakref__")
    __array_priority__ = 100

    def __init__(self, trace, vid, dtype_name, shape, weak_type=False):
        self._trace = trace
        self._vid = vid
        self._dtype_name = dtype_name
        self.shape = tuple(shape)
        self.weak_type = weak_type

    @property
    def dtype(self):
        return dtypes.SUPPORTED[self._dtype_name]

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))

    def __repr__(self):
        return f"Traced<{self._dtype_name}{list(self.shape)}>"

    def _concrete_error(self, what):
        raise ConcretizationError(
            f"{what} of an abstract traced value {self!r}: its value is only known when the "
            "compiled function runs. Use podlet.numpy.where / lax ops instead of Python control "
            "flow, or mark the argument static (static_argnums).")

    def __array__(self, dtype=None, copy=None):
        self._concrete_error("NumPy conversion")

    def __bool__(self):
        self._concrete_error("bool()")

    def __float__(self):
        self._concrete_error("float()")

    def __int__(self):
        self._concrete_error("int()")

    def __index__(self):
        self._concrete_error("index")

    def item(self):
        self._concrete_error("item()")

    def tolist(self):
        self._concrete_error("tolist()")


class Trace:
    _levels = itertools.count(1)

    def __init__(self):
        self.graph = _core.Graph()
        self.level = next(Trace._levels)
        self.active = True
        self.const_ids = {}      # id(obj) -> value id
        self.keepalive = []
        self.captures = []       # outer tracers, in the order they became inputs
        self.capture_ids = {}    # id(outer tracer) -> value id
        self.effects = []        # host callbacks (podlet.debug): [(callback, values)], in program order

    def new_input(self, dtype_name, shape, weak_type=False):
        vid = self.graph.add_input(dtype_name, list(shape))
        return Tracer(self, vid, dtype_name, shape, weak_type)

    def value_of(self, x):
        if isinstance(x, Tracer):
            if x._trace is self:
                return x._vid
            if not x._trace.active:
                raise UnexpectedTracerError(
                    f"{x!r} escaped the transformation that created it (it was stored in a global "
                    "or returned through a side channel); pass it as an argument instead")
            vid = self.capture_ids.get(id(x))
            if vid is None:  # closure over an outer trace's value: becomes an extra input
                vid = self.graph.add_input(x._dtype_name, list(x.shape))
                self.capture_ids[id(x)] = vid
                self.captures.append(x)
            return vid
        vid = self.const_ids.get(id(x))
        if vid is None:
            arr = to_array(x)
            vid = self.graph.add_const(arr)
            self.const_ids[id(x)] = vid
            self.keepalive.append(x)
        return vid


_trace_stack = []


def record_effect(callback, values):
    """A host callback on ``values`` (a list of arrays): called now when nothing is
    being traced, else recorded on the innermost trace to run with that graph."""
    if _trace_stack:
        _trace_stack[-1].effects.append((callback, list(values)))
    else:
        callback(list(values))


def replay_effects(effects, values):
    """Hands a graph run's effect outputs (``values``, in the order of ``effects``) to
    their callbacks: now if concrete, else to the enclosing trace."""
    it = iter(values)
    for callback, vals in effects:
        record_effect(callback, [next(it) for _ in vals])


class HostCallbackError(PodletError, TypeError):
    """A Python callback whose result feeds the computation (pure_callback) met traced
    values: podlet's graphs cannot call Python. jit catches it and runs op by op."""

    def __init__(self, message, vmap_method=None):
        super().__init__(message)
        self.vmap_method = vmap_method


def _top_trace(args):
    best = None
    for a in args:
        if isinstance(a, Tracer):
            t = a._trace
            if not t.active:
                raise UnexpectedTracerError(
                    f"{a!r} escaped the transformation that created it (it was stored in a global or a "
                    "list and used after the traced function returned); return it instead")
            if best is None or t.level > best.level:
                best = t
    return best


def _user_frame():
    """'file:line (function)' of the innermost frame outside podlet's own package."""
    f = sys._getframe(1)
    while f is not None:
        fn = f.f_code.co_filename
        if not os.path.abspath(fn).startswith(_PKG_DIR):
            return f"{fn}:{f.f_lineno} ({f.f_code.co_name})"
        f = f.f_back
    return "<unknown>"


def _reraise_with_location(e):
    loc = _user_frame()
    msg = f"{e} [at {loc}]"
    raise type(e)(msg).with_traceback(None) from None


def _refuse_execution(what):
    raise RuntimeError(f"podlet tried to execute {what}, but the no_execution config option is set")


def bind(prim, *args, **attrs):
    """Applies primitive `prim`: eagerly on concrete values, or appended to the graph of
    the innermost trace that owns one of the arguments. Python scalars take the dtype of
    the first array argument (weak typing)."""
    if any(isinstance(a, (int, float, bool)) and not isinstance(a, (Array,)) for a in args):
        ref = next((a for a in args if isinstance(a, (Array, Tracer, np.ndarray))), None)
        d = ref.dtype if ref is not None else None
        args = tuple(to_array(a, d) if isinstance(a, (int, float, bool)) else a for a in args)
    trace = _top_trace(args)
    try:
        if trace is None:
            if _flags["no_execution"]:
                _refuse_execution(prim)
            outs = _core.apply(prim, [to_array(a) for a in args], attrs)
            if _flags["debug_nans"] or _flags["debug_infs"]:
                check_floats(prim, outs)
        else:
            vids = [trace.value_of(a) for a in args]
            res = trace.graph.add(prim, vids, attrs)
            outs = [Tracer(trace, vid, d, s) for vid, d, s in res]
    except PodletError as e:
        _reraise_with_location(e)
    return outs[0] if len(outs) == 1 else tuple(outs)


def bind_like(ref, prim, *args, **attrs):
    """bind, staged into the trace of `ref` when `ref` is a tracer even if every argument
    is concrete (jnp.zeros_like(tracer) is a broadcast node of a scalar constant in the
    graph, as in JAX, not an activation-sized constant computed at trace time)."""
    if isinstance(ref, Tracer) and _top_trace(args) is None:
        trace = _top_trace([ref])
        try:
            vids = [trace.value_of(a) for a in args]
            res = trace.graph.add(prim, vids, attrs)
        except PodletError as e:
            _reraise_with_location(e)
        outs = [Tracer(trace, vid, d, s) for vid, d, s in res]
        return outs[0] if len(outs) == 1 else tuple(outs)
    return bind(prim, *args, **attrs)


def call_graph(graph, args):
    """Runs a traced graph on `args`, or inlines it into the trace that owns them."""
    trace = _top_trace(args)
    if trace is None:
        if _flags["no_execution"]:
            _refuse_execution("a traced graph")
        return list(graph.run([to_array(a) for a in args]))
    vids = [trace.value_of(a) for a in args]
    return [Tracer(trace, vid, d, s) for vid, d, s in trace.graph.inline(graph, vids)]


def _abstractify(x):
    """(dtype name, shape, weak) of a leaf, converting NumPy/scalars to Arrays."""
    if isinstance(x, Tracer):
        return x, (x._dtype_name, x.shape, x.weak_type)
    weak = (isinstance(x, (int, float)) and not isinstance(x, bool)) or getattr(x, "weak_type", False)
    if not isinstance(x, Array):
        try:
            x = to_array(x)
        except (TypeError, ValueError) as e:
            if np.iscomplexobj(x):  # complex values are pairs of real arrays (_src/complex.py)
                raise TypeError(f"argument of type {type(x).__name__} and dtype {np.asarray(x).dtype} is not a "
                                "valid podlet value: convert complex NumPy data with podlet.numpy.asarray "
                                "before passing it to a transformed function") from None
            raise TypeError(f"argument of type {type(x).__name__} is not a valid podlet value: {e}") from None
    return x, (x._dtype_name, x.shape, weak)


def _abstractify_all(leaves):
    """Concrete values and (dtype, shape, weak) signatures of flattened arguments."""
    conv, sig = [], []
    for leaf in leaves:
        v, s = _abstractify(leaf)
        conv.append(v)
        sig.append(s)
    return conv, sig


class _Traced:
    """A function traced into a Graph: graph inputs are the flattened leaves followed by
    any outer-trace values the function closed over.

    ``effects``: the host callbacks (podlet.debug.print / callback) the function made,
    with ``effect_vids`` the values they read. A transformation that runs the graph
    (jit, vmap, grad) passes ``effects=True``, adds ``effect_vids`` to the graph's
    outputs and hands their values to :func:`replay_effects`; anywhere else they are
    dropped with a warning (eval_shape and make_jaxpr, which run nothing, drop them
    silently as jax does)."""

    def __init__(self, fun, leaves_sig, in_tree, out_postprocess=None, effects=False):
        trace = Trace()
        _trace_stack.append(trace)
        try:
            in_tracers = [trace.new_input(d, s, w) for d, s, w in leaves_sig]
            args, kwargs = tree_util.tree_unflatten(in_tree, in_tracers)
            out = fun(args, kwargs)
            out_leaves, self.out_tree = tree_util.tree_flatten(out)
            self.out_vids = [trace.value_of(_leaf_value(o)) for o in out_leaves]
            self.out_weak = [isinstance(o, Tracer) and o.weak_type for o in out_leaves]
            self.effects = trace.effects
            self.effect_vids = [trace.value_of(v) for _, vals in trace.effects for v in vals]
        finally:
            trace.active = False
            _trace_stack.pop()
        if self.effects and not effects:
            warnings.warn(f"podlet: {len(self.effects)} podlet.debug callback(s) inside "
                          f"{getattr(fun, '__qualname__', 'a traced function')} are dropped: "
                          "podlet runs host callbacks from eager code, jit, vmap, grad and vjp, "
                          "not from pmap, jvp or the bodies of scan / while_loop / cond / remat / "
                          "custom rules (its C++ graphs cannot call Python)", stacklevel=3)
        trace.graph.outputs = self.out_vids
        self.graph = trace.graph
        self.captures = trace.captures
        self.out_leaves_raw = out_leaves


def _leaf_value(o):
    if isinstance(o, (Tracer, Array, np.ndarray, np.generic, int, float, bool)):
        return o
    raise TypeError(f"traced function returned a leaf of type {type(o).__name__}; "
                    "outputs must be arrays or pytrees of arrays")


# ---------------------------------------------------------------------------------
# jit
# ---------------------------------------------------------------------------------
def _hashable_static(v, name):
    try:
        hash(v)
    except TypeError:
        raise ValueError(f"static argument {name} has unhashable type {type(v).__name__}; "
                         "static arguments must be hashable (use a tuple instead of a list)") from None
    return v


class JittedFunction:
    def __init__(self, fun, static_argnums=(), static_argnames=(), donate_argnums=()):
        functools.update_wrapper(self, fun)
        self._fun = fun
        if isinstance(static_argnums, int):
            static_argnums = (static_argnums,)
        if isinstance(static_argnames, str):
            static_argnames = (static_argnames,)
        self._static_argnums = tuple(static_argnums)
        self._static_argnames = tuple(static_argnames)
        self._cache = {}
        self._last_key = None
        try:
            self._param_names = list(inspect.signature(fun).parameters)
        except (TypeError, ValueError):
            self._param_names = []
        self.trace_count = 0

    def __get__(self, obj, objtype=None):  # support methods
        if obj is None:
            return self
        return functools.partial(self, obj)

    def _split(self, args, kwargs):
        n = len(args)
        static_pos = {i if i >= 0 else n + i for i in self._static_argnums}
        dyn_args = tuple(None if i in static_pos else a for i, a in enumerate(args))
        statics = tuple((i, _hashable_static(args[i], f"#{i}")) for i in sorted(static_pos) if i < n)
        dyn_kwargs = {k: v for k, v in kwargs.items() if k not in self._static_argnames}
        statics += tuple((k, _hashable_static(kwargs[k], k)) for k in sorted(kwargs) if k in self._static_argnames)
        return dyn_args, dyn_kwargs, statics, static_pos

    def _arg_name(self, path):
        return tree_util.keystr(path) if path else "argument"

    def lower(self, *args, **kwargs):
        """Traces (or fetches from the cache) and returns the _Traced entry."""
        return self._get(args, kwargs)[0]

    def _get(self, args, kwargs):
        dyn_args, dyn_kwargs, statics, static_pos = self._split(args, kwargs)
        leaves, in_tree = tree_util.tree_flatten((dyn_args, dyn_kwargs))
        conv, sig = _abstractify_all(leaves)
        key = (in_tree, tuple(sig), statics)
        if user_contexts:  # jax.make_user_context: their values are part of the key
            key += (tuple(c.value for c in user_contexts),)
        entry = self._cache.get(key)
        if entry is None:
            if self._last_key is not None:
                self._log_retrace(self._last_key, key, dyn_args, dyn_kwargs)
            full_args = list(args)

            def fun(dargs, dkwargs):
                a = [full_args[i] if i in static_pos else x for i, x in enumerate(dargs)]
                kw = dict(dkwargs)
                kw.update({k: kwargs[k] for k in self._static_argnames if k in kwargs})
                return self._fun(*a, **kw)

            if _flags["no_tracing"]:
                code = getattr(self._fun, "__code__", None)
                where = f" at {code.co_filename}:{code.co_firstlineno}" if code else ""
                raise RuntimeError(f"re-tracing function {getattr(self._fun, '__qualname__', self._fun)}"
                                   f"{where} for `jit`, but 'no_tracing' is set")
            if _flags["log_compiles"]:
                log.warning("Finished tracing + transforming %s for jit",
                            getattr(self._fun, "__qualname__", repr(self._fun)))
            try:
                entry = _Traced(lambda d, k: fun(d, k), sig, in_tree, effects=True)
            except HostCallbackError:
                if _trace_stack:  # inside another transformation: it decides
                    raise
                # pure_callback met tracers: this signature runs op by op (same bits)
                log.info("podlet.jit: %s calls Python at run time (pure_callback); running it op by op",
                         getattr(self._fun, "__qualname__", repr(self._fun)))
                self._cache[key] = _OP_BY_OP
                self._last_key = key
                return _OP_BY_OP, conv
            entry.graph.outputs = entry.out_vids + entry.effect_vids
            entry.graph.dce()
            self.trace_count += 1
            if not entry.captures:  # a closure over outer tracers is traced per call
                self._cache[key] = entry
        self._last_key = key
        return entry, conv

    def _log_retrace(self, old, new, dyn_args, dyn_kwargs):
        name = getattr(self._fun, "__qualname__", repr(self._fun))
        reasons = []
        if old[0] != new[0]:
            reasons.append(f"argument structure changed from {old[0]} to {new[0]}")
        elif old[1] != new[1]:
            paths = [p for p, _ in tree_util.tree_flatten_with_path((dyn_args, dyn_kwargs))[0]]
            for p, a, b in zip(paths, old[1], new[1]):
                if a != b:
                    fa = f"{a[0]}{list(a[1])}" + (" (weakly typed)" if a[2] else "")
                    fb = f"{b[0]}{list(b[1])}" + (" (weakly typed)" if b[2] else "")
                    reasons.append(f"{self._describe_path(p)} changed from {fa} to {fb}")
        if old[2] != new[2]:
            reasons.append(f"static arguments changed from {old[2]} to {new[2]}")
        log.warning("podlet.jit: retracing %s because %s", name, "; ".join(reasons) or "of a new signature")

    def _describe_path(self, path):
        # path[0] is (args, kwargs) index; path[1] the position or keyword.
        try:
            if path[0].idx == 0:
                i = path[1].idx
                nm = self._param_names[i] if i < len(self._param_names) else f"#{i}"
                rest = tree_util.keystr(tuple(path[2:]))
                return f"argument '{nm}'{rest}"
            return f"argument '{path[1].key}'{tree_util.keystr(tuple(path[2:]))}"
        except (AttributeError, IndexError):
            return tree_util.keystr(path)

    def __call__(self, *args, **kwargs):
        if committed_hook[0] is not None and not _trace_stack and not _flags["disable_jit"]:
            out = committed_hook[0](self, args, kwargs)  # arrays device_put to a split sharding
            if out is not _sharding_mod().NOT_SPLIT:
                return out
        return self._call_whole(args, kwargs)

    def partition_report(self, *args, **kwargs):
        """How a call with these arguments is split over devices (see
        ShardedJittedFunction.partition_report); None when it runs whole."""
        return _sharding_mod().partition_report(self, *args, **kwargs)

    def _call_whole(self, args, kwargs):
        if _flags["disable_jit"]:
            return self._fun(*args, **kwargs)
        entry, conv = self._get(args, kwargs)
        if entry is _OP_BY_OP:
            return self._fun(*args, **kwargs)
        # [perf] concrete calls run the graph with elementwise chains fused (_src/fusion.py;
        # PODLET_FUSION=0 disables); a trace inlines the unfused graph.
        traced = _top_trace(conv + list(entry.captures))
        graph = entry.graph if traced else fusion.executable_graph(entry)
        outs = call_graph(graph, conv + list(entry.captures))
        if entry.effects:
            n = len(entry.out_vids)
            outs, effect_values = outs[:n], outs[n:]
            replay_effects(entry.effects, effect_values)
        for o, w in zip(outs, entry.out_weak):
            if w:  # Python-scalar-derived outputs stay weakly typed, as in JAX
                o.weak_type = True
        if not traced and (_flags["debug_nans"] or _flags["debug_infs"]):
            self._check_floats(outs, args, kwargs)
        return tree_util.tree_unflatten(entry.out_tree, outs)

    def _check_floats(self, outs, args, kwargs):
        """debug_nans / debug_infs: a NaN (inf) output makes jit run the function op by
        op, where the first primitive to produce one raises FloatingPointError."""
        bad = [k for k, on in (("nan", _flags["debug_nans"]), ("inf", _flags["debug_infs"])) if on
               and any(dtypes.is_float(o._dtype_name) and _has_bad(o, k) for o in outs)]
        if bad:
            log.warning("Invalid %s value encountered in the output of a podlet.jit function. "
                        "Calling the de-optimized version.", bad[0])
            self._fun(*args, **kwargs)
            raise FloatingPointError(f"invalid value ({bad[0]}) encountered in jit("
                                     f"{getattr(self._fun, '__name__', 'fun')})")


user_contexts = []  # podlet.make_user_context's contexts (_src/config_contexts.py)
# Set by _src/sharding.commit the first time device_put commits an array to a split
# sharding: from then on jit looks for such arguments (before that, the check costs
# nothing on the hot path).
committed_hook = [None]


def _sharding_mod():
    from . import sharding
    return sharding


_OP_BY_OP = object()  # cache marker: this signature runs the Python function op by op


def _has_bad(a, kind):
    x = np.asarray(a)
    return bool(np.isnan(x).any()) if kind == "nan" else bool(np.isinf(x).any())


def check_floats(prim, outs):
    """Eager debug_nans / debug_infs: the first primitive whose output holds a NaN (inf)
    raises FloatingPointError naming it, as jax does."""
    for kind in ("nan", "inf"):
        if _flags["debug_" + kind + "s"] and any(dtypes.is_float(o._dtype_name) and _has_bad(o, kind)
                                                 for o in outs):
            raise FloatingPointError(f"invalid value ({kind}) encountered in {prim}")


def jit(fun=None, *, static_argnums=(), static_argnames=(), donate_argnums=(), in_shardings=None,
        out_shardings=None, **unused):
    """jax.jit: trace once per (shapes, dtypes, static args), run the cached graph.
    in_shardings / out_shardings are checked as JAX checks them, the values are the
    unsharded ones (_src/sharding.py)."""
    if fun is None:
        return functools.partial(jit, static_argnums=static_argnums, static_argnames=static_argnames,
                                 donate_argnums=donate_argnums, in_shardings=in_shardings,
                                 out_shardings=out_shardings)
    if in_shardings is not None or out_shardings is not None:
        from .sharding import ShardedJittedFunction
        return ShardedJittedFunction(fun, static_argnums, static_argnames, donate_argnums, in_shardings,
                                     out_shardings)
    return JittedFunction(fun, static_argnums, static_argnames, donate_argnums)


# ---------------------------------------------------------------------------------
# autodiff
# ---------------------------------------------------------------------------------
def _trace_for_diff(fun, args, kwargs):
    """Traces for grad / vjp; podlet.debug callbacks' values become extra outputs after
    the function's own (the backward graph returns them with the primal outputs)."""
    leaves, in_tree = tree_util.tree_flatten((tuple(args), kwargs))
    conv, sig = _abstractify_all(leaves)
    entry = _Traced(lambda a, k: fun(*a, **k), sig, in_tree, effects=True)
    entry.graph.outputs = entry.out_vids + entry.effect_vids
    return entry, conv, in_tree


def _leaf_ranges(args, argnums):
    """Leaf index range of each positional argument."""
    ranges, start = [], 0
    for a in args:
        n = tree_util.tree_structure(a).num_leaves
        ranges.append(range(start, start + n))
        start += n
    return ranges


def _check_argnums(argnums, nargs, fname):
    single = isinstance(argnums, int)
    nums = (argnums,) if single else tuple(argnums)
    for i in nums:
        if not -nargs <= i < nargs:
            raise ValueError(f"{fname}: argnums {argnums} out of range for {nargs} positional arguments")
    return single, tuple(i % nargs for i in nums)


def value_and_grad(fun, argnums=0, has_aux=False, holomorphic=False, allow_int=False, reduce_axes=()):
    """jax.value_and_grad: returns (value, grad) or ((value, aux), grad)."""

    @functools.wraps(fun)
    def vg(*args, **kwargs):
        single, nums = _check_argnums(argnums, len(args), "value_and_grad")
        entry, conv, in_tree = _trace_for_diff(fun, args, kwargs)
        out_leaves = entry.out_leaves_raw
        if has_aux:
            out = tree_util.tree_unflatten(entry.out_tree, list(range(len(out_leaves))))
            if not (isinstance(out, (tuple, list)) and len(out) == 2):
                raise TypeError("value_and_grad(has_aux=True): the function must return a pair (value, aux)")
            n_main = tree_util.tree_structure(out[0]).num_leaves
        else:
            n_main = len(out_leaves)
        ranges = _leaf_ranges(args, nums)
        wrt = [j for i in nums for j in ranges[i]]
        for i in nums:
            for j in ranges[i]:
                ld = entry.graph.aval(entry.graph.inputs[j])[0]
                if not dtypes.is_float(ld):
                    raise DTypeError(f"grad requires real-valued inputs; argument {i} has a leaf of dtype {ld} "
                                     "(integer inputs have no gradient: use allow_int or pass them as a "
                                     "non-differentiated argument)")
        main = tree_util.tree_unflatten(entry.out_tree, list(range(len(out_leaves))))
        if getattr(main[0] if has_aux else main, "_is_complex_pair", False):  # a ComplexArray (_src/complex.py)
            raise TypeError("grad requires real-valued outputs (output dtype that is a sub-dtype of np.floating), "
                            "but got a complex output; take its real part or abs() first, or use vjp")
        if n_main != 1:
            raise TypeError(f"grad requires a scalar-output function; the output has {n_main} leaves")
        d, shape = entry.graph.aval(entry.out_vids[0])
        if shape != ():
            raise TypeError(f"grad requires a scalar output, got shape {shape}; reduce it (e.g. .mean()) first")
        if not dtypes.is_float(d):
            raise TypeError(f"grad requires a real-valued output, got {d}")
        try:
            bwd = entry.graph.vjp(wrt, [0])
        except PodletError as e:
            _reraise_with_location(e)
        seed = Array.from_numpy(np.ones((), dtypes.SUPPORTED[d]), copy=True)  # exact dtype, even float64
        outs = call_graph(bwd, conv + list(entry.captures) + [seed])
        n_out, n_eff = len(out_leaves), len(entry.effect_vids)
        replay_effects(entry.effects, outs[n_out:n_out + n_eff])
        primal = tree_util.tree_unflatten(entry.out_tree, outs[:n_out])
        grads_flat = outs[n_out + n_eff:]
        grads, k = [], 0
        for i in nums:
            n = len(ranges[i])
            grads.append(tree_util.tree_unflatten(tree_util.tree_structure(args[i]), grads_flat[k:k + n]))
            k += n
        # JAX's convention for a real function of a complex input: the conjugate of
        # (df/dre + i df/dim), i.e. df/dre - i df/dim
        is_pair = lambda v: getattr(v, "_is_complex_pair", False)
        grads = [tree_util.tree_map(lambda v: v.conj() if is_pair(v) else v, gi, is_leaf=is_pair) for gi in grads]
        g = grads[0] if single else tuple(grads)
        return primal, g

    return vg


def grad(fun, argnums=0, has_aux=False, holomorphic=False, allow_int=False, reduce_axes=()):
    """jax.grad."""
    vg = value_and_grad(fun, argnums=argnums, has_aux=has_aux)

    @functools.wraps(fun)
    def g(*args, **kwargs):
        (v, g_) = vg(*args, **kwargs)
        if has_aux:
            return g_, v[1]
        return g_

    return g


def vjp(fun, *primals, has_aux=False):
    """jax.vjp: returns (primals_out, vjp_fn) [, aux]."""
    entry, conv, in_tree = _trace_for_diff(fun, primals, {})
    out_leaves = entry.out_leaves_raw
    if has_aux:
        out_struct = tree_util.tree_unflatten(entry.out_tree, list(range(len(out_leaves))))
        n_main = tree_util.tree_structure(out_struct[0]).num_leaves
    else:
        n_main = len(out_leaves)
    outs = call_graph(entry.graph, conv + list(entry.captures))
    replay_effects(entry.effects, outs[len(out_leaves):])
    primal_out = tree_util.tree_unflatten(entry.out_tree, outs[:len(out_leaves)])
    float_inputs = [j for j in range(len(conv)) if dtypes.is_float(entry.graph.aval(entry.graph.inputs[j])[0])]
    bwd = entry.graph.vjp(float_inputs, list(range(n_main)))
    main = primal_out[0] if has_aux else primal_out
    vjp_fn = VJPFn((bwd, len(out_leaves) + len(entry.effect_vids), len(conv), tuple(float_inputs), in_tree,
                    tree_util.tree_structure(main)), conv + list(entry.captures))
    if has_aux:
        return primal_out[0], vjp_fn, primal_out[1]
    return primal_out, vjp_fn


class VJPFn:
    """The vjp_fn of ``vjp``: a pytree (as jax's), whose leaves are the values the
    backward graph reads (the primal inputs and the captured constants), so it can be
    returned from jit or be the residual of a custom_vjp fwd rule (flax's
    ``nn.custom_vjp`` example does)."""

    def __init__(self, static, leaves):
        self._static, self._leaves = static, list(leaves)

    def __call__(self, ct):
        bwd, n_skip, n_conv, float_inputs, in_tree, main_tree = self._static
        ct_leaves, ct_tree = tree_util.tree_flatten(ct)
        if ct_tree != main_tree:
            raise ValueError(f"vjp: cotangent structure {ct_tree} does not match the output structure {main_tree}")
        grads = call_graph(bwd, self._leaves + ct_leaves)[n_skip:]
        full, k = [], 0
        for j in range(n_conv):
            if j in float_inputs:
                full.append(grads[k])
                k += 1
            else:
                full.append(None)  # integer inputs have no cotangent
        args, _ = tree_util.tree_unflatten(in_tree, full)
        return tuple(args)


tree_util.register_pytree_node(VJPFn, lambda v: (v._leaves, v._static), lambda st, leaves: VJPFn(st, leaves))


# ---------------------------------------------------------------------------------
# misc transformations
# ---------------------------------------------------------------------------------
def device_get(x):
    return tree_util.tree_map(
        lambda a: np.asarray(a) if isinstance(a, Array) or getattr(a, "_is_replicated", False) else a, x)


def block_until_ready(x):
    """Execution is synchronous: results are ready when returned."""
    return x


class ShapeDtypeStruct:
    """Shape and dtype of a value, without data (jax.ShapeDtypeStruct)."""
    __slots__ = ("shape", "dtype", "weak_type")

    def __init__(self, shape, dtype, weak_type=False):
        self.shape = tuple(shape)
        self.dtype = dtypes.dtype(dtype)
        self.weak_type = weak_type

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))

    def __repr__(self):
        return f"ShapeDtypeStruct(shape={self.shape}, dtype={self.dtype.name})"

    def __eq__(self, other):
        return isinstance(other, ShapeDtypeStruct) and (self.shape, self.dtype) == (other.shape, other.dtype)

    def __hash__(self):
        return hash((self.shape, self.dtype))


def eval_shape(fun, *args, **kwargs):
    """jax.eval_shape: the output shapes/dtypes of fun, found by tracing (no kernels run).
    Arguments may be arrays or anything with .shape and .dtype (e.g. ShapeDtypeStruct)."""
    def spec(x):
        if hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, (Array, Tracer, np.ndarray)):
            return ("abstract", dtypes.canonicalize(x.dtype).name, tuple(x.shape))
        return x
    leaves, in_tree = tree_util.tree_flatten((tuple(args), kwargs))
    sig = []
    for leaf in leaves:
        sp = spec(leaf)
        if isinstance(sp, tuple) and sp and sp[0] == "abstract":
            sig.append((sp[1], sp[2], False))
        else:
            sig.append(_abstractify(leaf)[1])
    entry = _Traced(lambda a, k: fun(*a, **k), sig, in_tree, effects=True)  # runs nothing: no callbacks
    outs = [ShapeDtypeStruct(entry.graph.aval(v)[1], entry.graph.aval(v)[0], w)
            for v, w in zip(entry.out_vids, entry.out_weak)]
    return tree_util.tree_unflatten(entry.out_tree, outs)


def make_graph(fun, *args, **kwargs):
    """The traced Graph of fun at these arguments (like jax.make_jaxpr)."""
    entry, _, _ = _trace_for_diff(fun, args, kwargs)
    entry.graph.outputs = entry.out_vids  # no podlet.debug callbacks: nothing runs
    entry.graph.dce()
    return entry.graph
