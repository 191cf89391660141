"""jax.lax cumulative ops and reductions beyond reduce_sum / max / min / prod (issue 26):
cumprod, cummax, cummin, cumlogsumexp, the general reduce, reduce_and / or / xor and
reduce_precision, over podlet's cumulative and reduce primitives."""
import builtins as _bi

import numpy as _np

from .. import lax
from .. import numpy as jnp
from .. import tree_util
from . import dtypes as _dtypes
from .control_flow import associative_scan
from .core import Tracer, bind, to_array
from .custom_derivatives import custom_jvp, custom_vjp
from .forward import jvp

__all__ = ["cumprod", "cummax", "cummin", "cumlogsumexp", "reduce", "reduce_and", "reduce_or", "reduce_xor",
           "reduce_precision"]


def _axis(operand, axis, name):
    nd = len(operand.shape)
    if axis < 0:
        raise ValueError(f"lax.{name}: XLA operations do not allow negative axes, got axis={axis}")
    if not 0 <= axis < nd:
        raise ValueError(f"lax.{name}: axis {axis} is out of bounds for an array of rank {nd}")
    return axis


# ---------------------------------------------------------------------------------
# cumulative ops: the primitive's values, JAX's derivatives (the JVP of the associative
# scan of the binary op, transposed for reverse mode: exact where cumprod meets zeros)
# ---------------------------------------------------------------------------------
def _cumulative(name, prim, op):
    def call(x, axis, reverse):
        return bind(prim, x, axis=axis, reverse=int(reverse))

    run = custom_jvp(call, nondiff_argnums=(1, 2))

    def rule(axis, reverse, primals, tangents):
        (x,), (t,) = primals, tangents
        _, dt = jvp(lambda v: associative_scan(op, v, reverse=reverse, axis=axis), (x,), (t,))
        return run(x, axis, reverse), dt

    run.defjvp(rule)

    def f(operand, axis=0, reverse=False):
        x = jnp.asarray(operand)
        if x.dtype == _dtypes.bool_ and prim == "cumprod":
            raise TypeError(f"lax.{name} does not accept dtype bool")
        a = _axis(x, axis, name)
        if x.dtype.kind != "f" and x.dtype != _dtypes.bfloat16:
            return bind(prim, x, axis=a, reverse=int(_bi.bool(reverse)))
        return run(x, a, _bi.bool(reverse))
    f.__name__ = f.__qualname__ = name
    f.__doc__ = (f"jax.lax.{name}: inclusive running {op.__name__} along `axis` (reversed when "
                 "`reverse`); its gradient is JAX's (through the associative scan of the op).")
    return f


cumprod = _cumulative("cumprod", "cumprod", lambda a, b: bind("mul", a, b))
cummax = _cumulative("cummax", "cummax", lambda a, b: lax.max(a, b))
cummin = _cumulative("cummin", "cummin", lambda a, b: lax.min(a, b))


def cumlogsumexp(operand, axis=0, reverse=False):
    """jax.lax.cumlogsumexp: log of the running sum of exp along `axis`, by an
    associative scan of logaddexp (no overflow, accurate for tiny terms)."""
    x = jnp.asarray(operand)
    if x.dtype.kind != "f" and x.dtype != _dtypes.bfloat16:
        raise TypeError(f"lax.cumlogsumexp requires a floating operand, got {x.dtype}")
    a = _axis(x, axis, "cumlogsumexp")
    return associative_scan(jnp.logaddexp, x, reverse=_bi.bool(reverse), axis=a)


# ---------------------------------------------------------------------------------
# reduce
# ---------------------------------------------------------------------------------
def _is(comp, *fns):
    return _bi.any(comp is f for f in fns)


def _monoid(comp, dtype):
    """(primitive-based reducer, identity) for a recognised computation, else None."""
    d = _np.dtype(dtype)
    is_bool = d == _np.bool_
    if _is(comp, lax.add, jnp.add) and not is_bool:
        return (lambda x, dims: bind("reduce_sum", x, axes=dims)), 0
    if _is(comp, lax.mul, jnp.multiply) and not is_bool:
        return (lambda x, dims: bind("reduce_prod", x, axes=dims)), 1
    if _is(comp, lax.max, jnp.maximum):
        return (lambda x, dims: _minmax("reduce_max", x, dims)), _lowest(d)
    if _is(comp, lax.min, jnp.minimum):
        return (lambda x, dims: _minmax("reduce_min", x, dims)), _highest(d)
    if is_bool and _is(comp, lax.bitwise_and, jnp.logical_and, jnp.bitwise_and):
        return (lambda x, dims: _minmax("reduce_min", x, dims)), True
    if is_bool and _is(comp, lax.bitwise_or, jnp.logical_or, jnp.bitwise_or):
        return (lambda x, dims: _minmax("reduce_max", x, dims)), False
    return None


def _minmax(prim, x, dims):
    if x.dtype == _dtypes.bool_:
        return lax.convert_element_type(bind(prim, lax.convert_element_type(x, _np.int32), axes=dims), _np.bool_)
    return bind(prim, x, axes=dims)


def _lowest(d):
    if d == _np.bool_:
        return False
    return -_np.inf if d.kind == "f" or d == _dtypes.bfloat16 else _np.iinfo(d).min


def _highest(d):
    if d == _np.bool_:
        return True
    return _np.inf if d.kind == "f" or d == _dtypes.bfloat16 else _np.iinfo(d).max


def _scalar_value(v):
    if isinstance(v, Tracer):
        return None
    try:
        return _np.asarray(v).item()
    except Exception:
        return None


def _tree_reduce(comp, xs, inits, dims):
    """Generic reduce of operands xs (a list, one tree) over dims with a binary
    computation on trees of scalars-or-arrays: a balanced pairwise tree over the
    flattened reduced axis (XLA assumes comp associative and may regroup likewise)."""
    nd = len(xs[0].shape)
    keep = [i for i in range(nd) if i not in dims]
    out_shape = [xs[0].shape[i] for i in keep]
    n = int(_np.prod([xs[0].shape[i] for i in dims], dtype=_np.int64))
    flat = [lax.reshape(lax.transpose(x, list(dims) + keep), [n] + out_shape) for x in xs]
    init_b = [jnp.broadcast_to(jnp.asarray(i, dtype=x.dtype), [1] + out_shape) for i, x in zip(inits, xs)]
    if n == 0:
        return [lax.reshape(i, out_shape) for i in init_b]
    while n > 1:
        if n % 2:
            flat = [lax.concatenate([f, i], 0) for f, i in zip(flat, init_b)]
            n += 1
        h = n // 2
        lo = [lax.slice_in_dim(f, 0, h, axis=0) for f in flat]
        hi = [lax.slice_in_dim(f, h, n, axis=0) for f in flat]
        flat = comp(lo, hi)
        n = h
    return [lax.reshape(f, out_shape) for f in flat]


def reduce(operands, init_values, computation, dimensions):
    """jax.lax.reduce: reduces `operands` (an array or a pytree of arrays of one shape)
    over `dimensions` with `computation`, starting from `init_values` (the same tree).

    lax.add / mul / max / min (and bitwise_and / or on bools, or their jnp twins) with
    one operand lower to the reduce primitives (a non-identity init is combined once,
    at the end); any other computation is applied as a balanced pairwise tree, so it
    must be associative, as XLA requires."""
    flat_ops, tree = tree_util.tree_flatten(operands)
    flat_inits, init_tree = tree_util.tree_flatten(init_values)
    if tree != init_tree:
        raise ValueError(f"lax.reduce: operands tree {tree} and init_values tree {init_tree} must match")
    flat_ops = [jnp.asarray(x) for x in flat_ops]
    if not flat_ops:
        raise ValueError("lax.reduce: no operands")
    shape = flat_ops[0].shape
    for x in flat_ops:
        if x.shape != shape:
            raise ValueError(f"lax.reduce: operands must have one shape, got {[tuple(o.shape) for o in flat_ops]}")
    nd = len(shape)
    dims = [int(d) for d in dimensions]
    for d in dims:
        if not 0 <= d < nd:
            raise ValueError(f"lax.reduce: dimension {d} is out of bounds for operands of rank {nd}")
    if len(set(dims)) != len(dims):
        raise ValueError(f"lax.reduce: duplicate dimensions {tuple(dims)}")
    if len(flat_ops) == 1:
        x, init = flat_ops[0], flat_inits[0]
        m = _monoid(computation, x.dtype)
        if m is not None:
            reducer, ident = m
            out = reducer(x, dims)
            iv = _scalar_value(init)
            if iv is None or iv != ident:
                out = computation(jnp.asarray(init, dtype=x.dtype), out)
            return tree_util.tree_unflatten(tree, [out])

    def comp(lo, hi):
        a = tree_util.tree_unflatten(tree, lo)
        b = tree_util.tree_unflatten(tree, hi)
        r = tree_util.tree_leaves(computation(a, b))
        if len(r) != len(lo):
            raise ValueError("lax.reduce: the computation must return a tree like its operands")
        return [jnp.asarray(v, dtype=o.dtype) for v, o in zip(r, lo)]
    outs = _tree_reduce(comp, flat_ops, flat_inits, dims)
    return tree_util.tree_unflatten(tree, outs)


def _bitwise_reduce(name, prim, bool_path):
    def f(operand, axes):
        x = jnp.asarray(operand)
        if x.dtype.kind not in "biu":
            raise TypeError(f"lax.{name} requires a boolean or integer operand, got {x.dtype}")
        nd = len(x.shape)
        dims = sorted({int(a) % _bi.max(nd, 1) for a in axes})
        if x.dtype == _dtypes.bool_ and bool_path is not None:
            return bool_path(x, dims)
        ident = {"and": -1, "or": 0, "xor": 0}[prim]
        init = _np.array(ident).astype(x.dtype) if x.dtype != _dtypes.bool_ else _np.bool_(ident)
        return _tree_reduce(lambda lo, hi: [bind(prim, lo[0], hi[0])], [x], [init], dims)[0]
    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"jax.lax.{name}: bitwise {prim} over `axes` (logical for bool)."
    return f


def _xor_bool(x, dims):
    s = bind("reduce_sum", lax.convert_element_type(x, _np.int32), axes=dims)
    return lax.convert_element_type(bind("and", s, to_array(_np.int32(1))), _np.bool_)


reduce_and = _bitwise_reduce("reduce_and", "and", lambda x, d: _minmax("reduce_min", x, d))
reduce_or = _bitwise_reduce("reduce_or", "or", lambda x, d: _minmax("reduce_max", x, d))
reduce_xor = _bitwise_reduce("reduce_xor", "xor", _xor_bool)


# ---------------------------------------------------------------------------------
# reduce_precision: XLA's bit-level rounding (ReducePrecision in xla/service/...)
# ---------------------------------------------------------------------------------
def _u(v):
    return to_array(_np.uint32(v & 0xFFFFFFFF))


def _round_bits(x, exponent_bits, mantissa_bits):
    """float32 x rounded to `mantissa_bits` (nearest, ties to even) and clamped to the
    range of `exponent_bits` (overflow -> inf, underflow incl. denormals -> signed 0);
    NaN passes through unchanged."""
    bits = lax.bitcast_convert_type(x, _np.uint32)
    if mantissa_bits < 23:
        shift = 23 - mantissa_bits
        last = 1 << shift
        last_bit = bind("shift_right_logical", bind("and", bits, _u(last)), _u(shift))
        bias = bind("add", last_bit, _u((last >> 1) - 1))
        bits = bind("and", bind("add", bits, bias), _u(~(last - 1)))
    if exponent_bits < 8:
        exp_mask = 0xFF << 23
        red_bias = (1 << (exponent_bits - 1)) - 1
        e = bind("and", bits, _u(exp_mask))
        over = bind("gt", e, _u((127 + red_bias) << 23))
        under = bind("le", e, _u((127 - red_bias) << 23))
        signed_zero = bind("and", bits, _u(0x80000000))
        signed_inf = bind("or", signed_zero, _u(exp_mask))
        bits = bind("select", over, signed_inf, bind("select", under, signed_zero, bits))
    out = lax.bitcast_convert_type(bits, _np.float32)
    return bind("select", bind("ne", x, x), x, out)


def _reduce_precision_fn(exponent_bits, mantissa_bits):
    @custom_vjp
    def rp(x):
        d = x.dtype
        xf = lax.convert_element_type(x, _np.float32) if d != _np.float32 else x
        out = _round_bits(xf, exponent_bits, mantissa_bits)
        return lax.convert_element_type(out, d) if d != _np.float32 else out

    rp.defvjp(lambda x: (rp(x), ()), lambda _, g: (rp(g),))
    return rp


def reduce_precision(operand, exponent_bits, mantissa_bits):
    """jax.lax.reduce_precision: rounds float values to a float format with
    `exponent_bits` and `mantissa_bits` (round to nearest even, overflow to inf,
    underflow and the format's denormals to signed zero, NaN kept), bit for bit as
    XLA. float32 and bfloat16 operands (bfloat16 -> float32 is exact). The gradient
    is the cotangent rounded the same way, as in JAX."""
    x = jnp.asarray(operand)
    if x.dtype.name not in ("float32", "bfloat16"):
        raise TypeError(f"lax.reduce_precision: podlet rounds float32 and bfloat16 operands, got {x.dtype}")
    eb, mb = int(exponent_bits), int(mantissa_bits)
    if eb < 1 or mb < 0:
        raise ValueError(f"lax.reduce_precision: exponent_bits must be >= 1 and mantissa_bits >= 0, "
                         f"got exponent_bits={exponent_bits}, mantissa_bits={mantissa_bits}")
    if x.dtype == _dtypes.bfloat16 and eb >= 8 and mb >= 7:
        return x
    out = _reduce_precision_fn(_bi.min(eb, 8), _bi.min(mb, 23))(x)
    return jnp._weak_if(out, operand) if jnp._weak(operand) else out  # keeps a Python scalar's weak type
