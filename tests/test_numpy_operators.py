"""Every Array operator against jax.numpy on the same inputs: both operand orders, Python
scalars on either side, negative integers, zero divisors, NaN/Inf, bool, several dtypes;
values and dtypes must agree (eager and under jit). Wrong answers this table caught:
% and // truncated instead of flooring, bool * bool raised, a scalar on the left of %,
//, &, |, ^, <<, >> raised."""
import operator

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import podlet
import podlet.numpy as pnp

INT = np.array([-7, -5, -1, 0, 1, 3, 5, 8], np.int32)
INT_B = np.array([4, -4, 3, -3, 2, -2, 0, 1], np.int32)
UINT = np.array([0, 1, 5, 7, 8, 250, 3, 9], np.uint32)
UINT_B = np.array([1, 2, 3, 0, 4, 7, 3, 1], np.uint32)
FLT = np.array([-5.5, -0.0, 0.0, 1.0, 7.25, np.inf, -np.inf, np.nan], np.float32)
FLT_B = np.array([4.0, -4.0, 0.0, 0.1, -0.0, 2.0, np.inf, 1.0], np.float32)
BOOL = np.array([True, False, True, False, True, True, False, False])
BOOL_B = np.array([True, True, False, False, True, False, True, False])

ARITH = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
         "//": operator.floordiv, "%": operator.mod, "**": operator.pow}
BITS = {"&": operator.and_, "|": operator.or_, "^": operator.xor}
SHIFTS = {"<<": operator.lshift, ">>": operator.rshift}
CMP = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
       "!=": operator.ne}

CASES = []
for name, op in {**ARITH, **CMP}.items():
    CASES += [(name, op, INT, INT_B), (name, op, FLT, FLT_B), (name, op, UINT, UINT_B)]
for name, op in {**BITS, **SHIFTS}.items():
    CASES += [(name, op, INT, np.abs(INT_B)), (name, op, UINT, UINT_B)]
for name, op in {**BITS, "*": operator.mul, "+": operator.add, "==": operator.eq, "!=": operator.ne}.items():
    CASES += [(name, op, BOOL, BOOL_B)]
SCALARS = {"int": [3, -2, 0], "float": [2.5, -0.0, float("inf")], "bool": [True]}


def _run(lib_array, op, a, b):
    try:
        return op(a, b), None
    except Exception as e:  # noqa: BLE001 - the kind of failure is compared
        return None, type(e)


def _agree(got, want, where):
    g, ge = got
    w, we = want
    if we is not None:
        assert ge is not None, f"{where}: JAX raises {we.__name__}, podlet gives {g}"
        return
    assert ge is None, f"{where}: podlet raises {ge.__name__}, JAX gives {w}"
    g, w = np.asarray(g), np.asarray(w)
    assert g.dtype == w.dtype, f"{where}: dtype {g.dtype}, JAX {w.dtype}"
    if g.dtype.kind == "f":
        np.testing.assert_allclose(g, w, rtol=2e-6, atol=0, equal_nan=True, err_msg=where)
        assert np.array_equal(np.signbit(g[g == 0]), np.signbit(w[w == 0])), f"{where}: signed zeros differ"
    else:
        np.testing.assert_array_equal(g, w, err_msg=where)


def _int_pow_ok(name, a, b):
    # a negative integer exponent is an error in JAX and NumPy alike; not a table entry
    return not (name == "**" and np.asarray(b).dtype.kind == "i" and (np.asarray(b) < 0).any())


@pytest.mark.parametrize("name,op,a,b", CASES, ids=[f"{c[0]}-{c[2].dtype}" for c in CASES])
def test_array_op_array_both_orders(name, op, a, b):
    for x, y in ((a, b), (b, a)):
        if not _int_pow_ok(name, x, y):
            continue
        got = _run(pnp, op, pnp.asarray(x), pnp.asarray(y))
        want = _run(jnp, op, jnp.asarray(x), jnp.asarray(y))
        _agree(got, want, f"{x.dtype} {name} {y.dtype}")


@pytest.mark.parametrize("name,op,a,b", CASES, ids=[f"{c[0]}-{c[2].dtype}" for c in CASES])
def test_python_scalar_on_either_side(name, op, a, b):
    kinds = ["bool"] if a.dtype == bool else (["int", "bool"] if a.dtype.kind in "iu" and name in {**BITS, **SHIFTS}
                                              else ["int", "float", "bool"])
    for kind in kinds:
        for s in SCALARS[kind]:
            if a.dtype.kind == "u" and isinstance(s, int) and s < 0:
                continue  # out of range for uint32: an error in both, with different types
            for x, y, where in ((pnp.asarray(a), s, f"{a.dtype} {name} {s!r}"), (s, pnp.asarray(a), f"{s!r} {name} {a.dtype}")):
                jx = jnp.asarray(a) if not isinstance(x, (bool, int, float)) else x
                jy = jnp.asarray(a) if not isinstance(y, (bool, int, float)) else y
                if not _int_pow_ok(name, np.asarray(jx), np.asarray(jy)):
                    continue
                _agree(_run(pnp, op, x, y), _run(jnp, op, jx, jy), where)


@pytest.mark.parametrize("name", ["//", "%", "&", "<<", ">>", "*"])
def test_under_jit_like_eager(name):
    op = {**ARITH, **BITS, **SHIFTS}[name]
    a, b = (INT, np.abs(INT_B)) if name in ("&", "<<", ">>") else (INT, INT_B)
    got = podlet.jit(lambda x, y: (op(x, y), op(3, x)))(a, b)
    want = jax.jit(lambda x, y: (op(x, y), op(3, x)))(a, b)
    for g, w in zip(got, want):
        _agree((g, None), (w, None), f"jit {name}")


def test_divmod_remainder_mod_fmod_floor_divide_functions():
    for a, b in ((INT, INT_B), (FLT, FLT_B)):
        for fn in ("remainder", "mod", "fmod", "floor_divide", "divmod"):
            got = getattr(pnp, fn)(a, b)
            want = getattr(jnp, fn)(a, b)
            if fn == "divmod":
                for g, w in zip(got, want):
                    _agree((g, None), (w, None), f"{fn} {a.dtype}")
            else:
                _agree((got, None), (want, None), f"{fn} {a.dtype}")
    _agree((divmod(pnp.asarray(INT), 3), None), (divmod(jnp.asarray(INT), 3), None), "builtin divmod")


def test_podlet_struct_is_loaded_with_podlet():
    import podlet as p
    assert hasattr(p.struct, "dataclass") and hasattr(p.struct, "PyTreeNode")
