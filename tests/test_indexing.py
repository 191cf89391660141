"""Gathers and scatters along one axis: take, scatter_add, take_along_axis,
scatter_add_along_axis.

Out-of-range indices clamp to [0, n-1] (np.take(mode="clip") / jnp.take(mode="clip"),
so -1 reads element 0). Forward against NumPy, VJP against finite differences (each
gather's VJP is its scatter and vice versa), duplicate indices, broadcasting in
take_along_axis, bit-identical scatters for 1 and 2 threads, and error messages.
"""
import ml_dtypes
import numpy as np
import pytest

import podlet
import prim_check
from prim_check import check_prim
from podlet import _core
from podlet._core import Array
from podlet._src.core import bind

# prim_check.as_podlet turns 0-d arrays into shape (1,) and prim_check.bits cannot view
# a 0-d array as bytes; 0-d indices need both. Each patch switches itself off once
# prim_check handles 0-d values.
if prim_check.as_podlet(np.float32(0)).shape != ():
    prim_check.as_podlet = lambda x: Array.from_numpy(np.array(x, order="C"), copy=True)
try:
    prim_check.bits(np.float64(0))
except ValueError:
    prim_check.bits = lambda x: np.asarray(x).reshape(-1).view(np.uint8)

BF16 = ml_dtypes.bfloat16
ALL = [np.float32, BF16, np.float64, np.int32, np.uint32, np.uint8, np.bool_]
ARITH = [np.float32, BF16, np.float64, np.int32, np.uint32, np.uint8]
rng = np.random.default_rng(2)


def rand(shape, dtype=np.float64):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(0, 30, shape).astype(dtype)
    return rng.uniform(-2, 2, shape).astype(dtype)


def idx(shape, lo, hi, dtype=np.int32):
    return rng.integers(lo, hi, shape).astype(dtype)


def pa(x):
    return prim_check.as_podlet(np.asarray(x))


@pytest.fixture
def restore_threads():
    n = _core.num_threads()
    yield
    _core.set_num_threads(n)


# ---- take ------------------------------------------------------------------------------

TAKE_CASES = [((5, 4), (3,), 0), ((5, 4), (2, 3), 1), ((3, 6, 2), (), 1), ((3, 6, 2), (7,), -1),
              ((4,), (0,), 0), ((2, 3), (4, 0), 1), ((3, 0), (2,), 0)]


@pytest.mark.parametrize("xshape,ishape,axis", TAKE_CASES)
def test_take_forward_and_vjp(xshape, ishape, axis):
    x = rand(xshape)
    n = xshape[axis]
    i = idx(ishape, -2, n + 2)  # out-of-range on both sides
    check_prim("take", [x, i], dict(axis=axis), lambda a, j: np.take(a, j, axis=axis, mode="clip"),
               grad_argnums=(0,))


@pytest.mark.parametrize("dtype", ALL)
def test_take_dtypes(dtype):
    x = rand((6, 5), dtype)
    for idt in (np.int32, np.uint32, np.uint8):
        i = idx((3, 2), 0, 8, idt)
        check_prim("take", [x, i], dict(axis=0), lambda a, j: np.take(a, j, axis=0, mode="clip"))


def test_take_duplicate_indices_gradient_adds():
    x = pa(np.arange(5, dtype=np.float32))
    i = pa(np.array([1, 1, 4, 9, -3, 1], np.int32))
    g = podlet.grad(lambda a: bind("reduce_sum", bind("take", a, i, axis=0), axes=[0]))(x)
    np.testing.assert_array_equal(np.asarray(g), [1, 3, 0, 0, 2])


def test_take_errors():
    x = pa(np.zeros((3, 4), np.float32))
    with pytest.raises(podlet.DTypeError, match="indices must be integers .*got float32"):
        bind("take", x, pa(np.zeros(2, np.float32)), axis=0)
    with pytest.raises(podlet.ShapeError, match="axis 2 is out of range for an array of rank 2"):
        bind("take", x, pa(np.zeros(2, np.int32)), axis=2)
    with pytest.raises(podlet.ShapeError, match="cannot take indices from axis 1 of size 0"):
        bind("take", pa(np.zeros((3, 0), np.float32)), pa(np.zeros(2, np.int32)), axis=1)


# ---- scatter_add -----------------------------------------------------------------------

def np_scatter_add(op, j, upd, axis):
    op = np.array(op, dtype=np.float64 if op.dtype == BF16 else op.dtype)
    n = op.shape[axis]
    jc = np.clip(j, 0, n - 1)
    moved = np.moveaxis(op, axis, 0)  # view: writes go to op
    u = np.moveaxis(upd.reshape(op.shape[:axis] + (j.size,) + op.shape[axis + 1:]), axis, 0)
    np.add.at(moved, jc.reshape(-1), u.astype(moved.dtype))
    return op


SCATTER_CASES = [((5, 4), (3,), 0), ((5, 4), (2, 3), 1), ((3, 6, 2), (), 1), ((3, 6, 300), (9,), 1),
                 ((4,), (0,), 0), ((2, 3), (4, 0), 1)]


@pytest.mark.parametrize("xshape,ishape,axis", SCATTER_CASES)
def test_scatter_add_forward_and_vjp(xshape, ishape, axis):
    x = rand(xshape)
    n = xshape[axis]
    i = idx(ishape, -2, n + 2)
    ushape = xshape[:axis] + ishape + xshape[axis + 1:]
    u = rand(ushape)
    check_prim("scatter_add", [x, i, u], dict(axis=axis), lambda a, j, b: np_scatter_add(a, j, b, axis),
               grad_argnums=(0, 2))


@pytest.mark.parametrize("dtype", ARITH)
def test_scatter_add_dtypes(dtype):
    x = rand((6, 5), dtype)
    i = idx((7,), 0, 8)
    u = rand((7, 5), dtype)
    want = np_scatter_add(x, i, u, 0)
    if np.dtype(dtype).kind in "iu":
        want = want.astype(dtype)
    check_prim("scatter_add", [x, i, u], dict(axis=0), lambda *_: want)


def test_scatter_add_bf16_accumulates_in_float32():
    # 512 updates of 1 into one bf16 element: rounding each step would stop at 256.
    x = np.zeros((2,), BF16)
    got = np.asarray(bind("scatter_add", pa(x), pa(np.zeros(512, np.int32)), pa(np.ones(512, BF16)), axis=0))
    np.testing.assert_array_equal(got.astype(np.float64), [512.0, 0.0])


def test_scatter_add_errors():
    x = pa(np.zeros((3, 4), np.float32))
    with pytest.raises(podlet.ShapeError, match=r"updates have shape \(2, 3\), expected \(3, 2\)"):
        bind("scatter_add", x, pa(np.zeros(2, np.int32)), pa(np.zeros((2, 3), np.float32)), axis=1)
    with pytest.raises(podlet.DTypeError, match="same dtype"):
        bind("scatter_add", x, pa(np.zeros(2, np.int32)), pa(np.zeros((2, 4), np.float64)), axis=0)
    with pytest.raises(podlet.DTypeError, match="scatter_add of bool is not supported"):
        bind("scatter_add", pa(np.zeros(3, bool)), pa(np.zeros(2, np.int32)), pa(np.zeros(2, bool)), axis=0)


# ---- take_along_axis / scatter_add_along_axis ------------------------------------------

ALONG_CASES = [
    ((4, 5), (4, 3), 1),        # plain
    ((4, 5), (7, 5), 0),        # more indices than the axis length
    ((4, 5), (1, 6), 1),        # indices broadcast along dim 0
    ((1, 5), (3, 2), 1),        # operand broadcast along dim 0
    ((2, 1, 6), (1, 3, 4), -1),  # both broadcast
    ((3, 4, 2), (3, 0, 2), 1),  # empty index axis
]


def broadcast_along(xshape, ishape, axis):
    axis %= len(xshape)
    out = [max(a, b) if d != axis else b for d, (a, b) in enumerate(zip(xshape, ishape))]
    return tuple(out)


def np_take_along(a, j, axis):
    axis %= a.ndim
    out = broadcast_along(a.shape, j.shape, axis)
    xs = [out[d] if d != axis else a.shape[axis] for d in range(a.ndim)]
    js = [out[d] if d != axis else j.shape[axis] for d in range(a.ndim)]
    return np.take_along_axis(np.broadcast_to(a, xs), np.broadcast_to(np.clip(j, 0, a.shape[axis] - 1), js), axis)


def np_scatter_along(op, j, upd, axis):
    op = np.array(op, dtype=np.float64 if op.dtype == BF16 else op.dtype)
    axis %= op.ndim
    out = upd.shape
    jc = np.broadcast_to(np.clip(j, 0, op.shape[axis] - 1), out)
    coords = list(np.indices(out, sparse=False))
    dest = tuple(jc if d == axis else (coords[d] if op.shape[d] != 1 else np.zeros_like(coords[d]))
                 for d in range(op.ndim))
    np.add.at(op, tuple(c.reshape(-1) for c in dest), upd.reshape(-1).astype(op.dtype))
    return op


@pytest.mark.parametrize("xshape,ishape,axis", ALONG_CASES)
def test_take_along_axis_forward_and_vjp(xshape, ishape, axis):
    x = rand(xshape)
    i = idx(ishape, -2, xshape[axis] + 2)
    check_prim("take_along_axis", [x, i], dict(axis=axis), lambda a, j: np_take_along(a, j, axis),
               grad_argnums=(0,))


@pytest.mark.parametrize("xshape,ishape,axis", ALONG_CASES)
def test_scatter_add_along_axis_forward_and_vjp(xshape, ishape, axis):
    x = rand(xshape)
    i = idx(ishape, -2, xshape[axis] + 2)
    u = rand(broadcast_along(xshape, ishape, axis))
    check_prim("scatter_add_along_axis", [x, i, u], dict(axis=axis),
               lambda a, j, b: np_scatter_along(a, j, b, axis), grad_argnums=(0, 2))


@pytest.mark.parametrize("dtype", ALL)
def test_take_along_axis_dtypes(dtype):
    x = rand((3, 7), dtype)
    i = idx((3, 4), 0, 7, np.uint8)
    check_prim("take_along_axis", [x, i], dict(axis=1), lambda a, j: np_take_along(a, j, 1))


@pytest.mark.parametrize("dtype", ARITH)
def test_scatter_add_along_axis_dtypes(dtype):
    x = rand((3, 7), dtype)
    i = idx((1, 9), 0, 7)
    u = rand((3, 9), dtype)
    want = np_scatter_along(x, i, u, 1)
    if np.dtype(dtype).kind in "iu":
        want = want.astype(dtype)
    check_prim("scatter_add_along_axis", [x, i, u], dict(axis=1), lambda *_: want)


def test_take_along_axis_with_argsort_sorts():
    x = rand((4, 9))
    order = bind("argsort", pa(x), axis=1)
    got = np.asarray(bind("take_along_axis", pa(x), order, axis=1))
    np.testing.assert_array_equal(got, np.sort(x, axis=1))


def test_along_axis_errors():
    x = pa(np.zeros((3, 4), np.float32))
    with pytest.raises(podlet.ShapeError, match=r"indices of rank 1 \(2,\) must have the operand's rank 2"):
        bind("take_along_axis", x, pa(np.zeros(2, np.int32)), axis=1)
    with pytest.raises(podlet.ShapeError, match="do not broadcast along dimension 0"):
        bind("take_along_axis", x, pa(np.zeros((2, 4), np.int32)), axis=1)
    with pytest.raises(podlet.ShapeError, match=r"updates have shape \(3, 4\), expected \(3, 2\)"):
        bind("scatter_add_along_axis", x, pa(np.zeros((3, 2), np.int32)), pa(np.zeros((3, 4), np.float32)), axis=1)


# ---- determinism -----------------------------------------------------------------------

def test_scatters_bit_identical_across_thread_counts(restore_threads):
    op = rng.standard_normal((50, 64)).astype(np.float32)
    i = idx((40_000,), 0, 50)
    u = rng.standard_normal((40_000, 64)).astype(np.float32)
    op2 = rng.standard_normal((300, 40)).astype(np.float32)
    i2 = idx((300, 500), 0, 40)
    u2 = rng.standard_normal((300, 500)).astype(np.float32)
    outs = {}
    for t in (1, 2):
        _core.set_num_threads(t)
        outs[t] = [np.asarray(bind("scatter_add", pa(op), pa(i), pa(u), axis=0)),
                   np.asarray(bind("scatter_add", pa(op.T.copy()), pa(i), pa(u.T.copy()), axis=1)),
                   np.asarray(bind("scatter_add_along_axis", pa(op2), pa(i2), pa(u2), axis=1)),
                   np.asarray(bind("scatter_add_along_axis", pa(op2[:1]), pa(i2), pa(u2), axis=1)),
                   np.asarray(bind("take", pa(u), pa(i), axis=0))]
    for a, b in zip(outs[1], outs[2]):
        assert a.tobytes() == b.tobytes()
