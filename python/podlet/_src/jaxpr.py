"""jax.make_jaxpr and jax.typeof: podlet's trace of a function, printed the way a
jaxpr is (``{ lambda consts ; inputs. let eqns in (outputs) }``).

The equations are podlet's primitives with podlet's attribute names (``reduce_sum
[axes=[0]]``, ``mul``), not jax's; constants podlet records (scalars included) are
constvars rather than inline literals; sub-graphs of scan / cond / while print as
``<graph: n nodes>``. The object keeps the Graph (``.graph``) for inspection.
"""
import functools
import re

import numpy as np

from .. import tree_util
from . import dtypes
from .core import Tracer, _abstractify_all, _Traced

_SHORT = {"float32": "f32", "float64": "f64", "bfloat16": "bf16", "float16": "f16", "int32": "i32",
          "int64": "i64", "uint32": "u32", "uint8": "u8", "int8": "i8", "bool": "bool"}


class ShapedArray:
    """An abstract value (jax.core.ShapedArray): shape, dtype and weak type."""
    __slots__ = ("shape", "dtype", "weak_type")

    def __init__(self, shape, dtype, weak_type=False):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtypes.canonicalize(dtype))
        self.weak_type = bool(weak_type)

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))

    def str_short(self, short_dtypes=False):
        name = _SHORT.get(self.dtype.name, self.dtype.name) if short_dtypes else self.dtype.name
        return f"{name}[{','.join(map(str, self.shape))}]"

    def __str__(self):
        return ("~" if self.weak_type else "") + self.str_short()

    def __repr__(self):
        weak = ", weak_type=True" if self.weak_type else ""
        return f"ShapedArray({self.str_short()}{weak})"

    def __eq__(self, other):
        return (isinstance(other, ShapedArray)
                and (self.shape, self.dtype, self.weak_type) == (other.shape, other.dtype, other.weak_type))

    def __hash__(self):
        return hash((self.shape, self.dtype, self.weak_type))


def typeof(x):
    """The abstract value of ``x`` (an array, tracer or Python scalar)."""
    if isinstance(x, Tracer):
        return ShapedArray(x.shape, x._dtype_name, x.weak_type)
    weak = (isinstance(x, (int, float)) and not isinstance(x, bool)) or getattr(x, "weak_type", False)
    (_, (d, shape, _)), = zip(*_abstractify_all([x]))
    return ShapedArray(shape, d, weak)


_AVAL = re.compile(r"%(\d+):(\w+)\(([^)]*)\)")


def _short_aval(dtype, dims):
    dims = ",".join(p.strip() for p in dims.split(",") if p.strip())
    return f"{_SHORT.get(dtype, dtype)}[{dims}]"


def _var_name(i):
    s = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        s = chr(97 + r) + s
    return s


class ClosedJaxpr:
    """What make_jaxpr returns: ``in_avals``, ``out_avals``, ``eqns`` (one line per
    primitive application), ``graph`` (podlet's Graph) and a jaxpr-style ``str``."""

    def __init__(self, graph, in_avals, out_avals):
        self.graph = graph
        self.in_avals = in_avals
        self.out_avals = out_avals
        self._text, self.eqns, self.constvars = self._render(str(graph))

    @staticmethod
    def _render(dump):
        names = {}

        def name(vid):
            if vid not in names:
                names[vid] = _var_name(len(names))
            return names[vid]

        constvars, invars, eqns, outs = [], [], [], []
        for line in dump.splitlines():
            if line.startswith("inputs:"):
                invars = [f"{name(v)}:{_short_aval(d, s)}" for v, d, s in _AVAL.findall(line)]
            elif line.startswith("const "):
                constvars += [f"{name(v)}:{_short_aval(d, s)}" for v, d, s in _AVAL.findall(line)]
            elif line.startswith("outputs:"):
                outs = [name(v) for v in re.findall(r"%(\d+)", line)]
            elif " = " in line:
                lhs, rhs = line.split(" = ", 1)
                m = re.match(r"(\w+)\(([^)]*)\)(?: \{(.*)\})?$", rhs)
                res = " ".join(f"{name(v)}:{_short_aval(d, s)}" for v, d, s in _AVAL.findall(lhs))
                if m is None:
                    eqns.append(f"{res} = {rhs}")
                    continue
                prim, args, attrs = m.groups()
                args = " ".join(name(v) for v in re.findall(r"%(\d+)", args))
                eqns.append(f"{res} = {prim}{'[' + attrs + ']' if attrs else ''} {args}".rstrip())
        head = f"{{ lambda {' '.join(constvars)}; {' '.join(invars)}. let"
        body = "".join(f"\n    {e}" for e in eqns)
        tail = f"\n  in ({', '.join(outs)}{',' if len(outs) == 1 else ''}) }}"
        return head + body + tail, eqns, constvars

    @property
    def jaxpr(self):
        return self

    def __str__(self):
        return self._text

    def pretty_print(self, **_):
        return self._text

    def __repr__(self):
        return self._text


def make_jaxpr(fun, static_argnums=(), axis_env=None, return_shape=False, abstracted_axes=None):
    """A function returning the traced program of ``fun`` at the given arguments (a
    :class:`ClosedJaxpr`; with ``return_shape=True`` also the output ShapeDtypeStructs)."""
    del axis_env, abstracted_axes
    if isinstance(static_argnums, int):
        static_argnums = (static_argnums,)

    @functools.wraps(fun)
    def make(*args, **kwargs):
        from .core import ShapeDtypeStruct
        static = {i % len(args) for i in static_argnums} if args else set()
        dyn = tuple(a for i, a in enumerate(args) if i not in static)

        def call(dargs, dkwargs):
            it = iter(dargs)
            full = [args[i] if i in static else next(it) for i in range(len(args))]
            return fun(*full, **dkwargs)

        leaves, in_tree = tree_util.tree_flatten((dyn, kwargs))
        _, sig = _abstractify_all(leaves)
        entry = _Traced(lambda a, k: call(a, k), sig, in_tree, effects=True)  # runs nothing
        entry.graph.dce()
        in_avals = [ShapedArray(s, d, w) for d, s, w in sig]
        out_avals = [ShapedArray(entry.graph.aval(v)[1], entry.graph.aval(v)[0], w)
                     for v, w in zip(entry.out_vids, entry.out_weak)]
        closed = ClosedJaxpr(entry.graph, in_avals, out_avals)
        if return_shape:
            shapes = [ShapeDtypeStruct(a.shape, a.dtype, a.weak_type) for a in out_avals]
            return closed, tree_util.tree_unflatten(entry.out_tree, shapes)
        return closed

    return make



