"""Structural primitives: reshape, transpose, broadcast_in_dim, slice, dynamic_slice,
dynamic_update_slice, concatenate, pad, rev, iota, stop_gradient, copy.

Each is checked with prim_check.check_prim: forward against NumPy, jit == eager bitwise,
VJP against float64 finite differences; plus edge cases (empty dims, negative axes,
strides, negative / interior padding, XLA clamping of dynamic starts) and error messages.
"""
import ml_dtypes
import numpy as np
import pytest

import podlet
import prim_check
from prim_check import check_prim
from podlet._core import Array
from podlet._src.core import bind

# np.ascontiguousarray turns 0-d arrays into shape (1,), but primitives with 0-d operands
# (pad's padding value, dynamic_slice's start indices) need them kept 0-d; and
# prim_check.bits cannot view a 0-d array as bytes. Both patches switch themselves off
# once prim_check handles 0-d values.
if prim_check.as_podlet(np.float32(0)).shape != ():
    prim_check.as_podlet = lambda x: Array.from_numpy(np.array(x, order="C"), copy=True)
try:
    prim_check.bits(np.float64(0))
except ValueError:
    prim_check.bits = lambda x: np.asarray(x).reshape(-1).view(np.uint8)

BF16 = ml_dtypes.bfloat16
FLOATS = [np.float32, BF16, np.float64]
ALL = [np.float32, BF16, np.float64, np.int32, np.uint32, np.uint8, np.bool_]
rng = np.random.default_rng(0)


def rand(shape, dtype=np.float64, lo=-3, hi=3):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(0 if dtype.kind == "u" else lo, hi + 10, shape).astype(dtype)
    return rng.uniform(lo, hi, shape).astype(dtype)


def i32(v):
    return np.array(v, np.int32)


def f64(v):
    return np.asarray(v, np.float64)


def pa(x):
    return prim_check.as_podlet(np.asarray(x))


# ---- reshape / transpose / broadcast_in_dim ------------------------------------------

@pytest.mark.parametrize("dtype", ALL)
def test_reshape_transpose_broadcast_all_dtypes(dtype):
    x = rand((2, 3, 4), dtype)
    check_prim("reshape", [x], dict(new_sizes=[4, 6]), lambda a: a.reshape(4, 6))
    check_prim("transpose", [x], dict(permutation=[2, 0, 1]), lambda a: a.transpose(2, 0, 1))
    check_prim("broadcast_in_dim", [x[:, :1]], dict(shape=[5, 2, 3, 4], broadcast_dimensions=[1, 2, 3]),
               lambda a: np.broadcast_to(a, (5, 2, 3, 4)))


def test_reshape_transpose_broadcast_vjp():
    x = rand((2, 3, 4))
    check_prim("reshape", [x], dict(new_sizes=[3, 8]), lambda a: a.reshape(3, 8), grad_argnums=(0,))
    check_prim("transpose", [x], dict(permutation=[1, 2, 0]), lambda a: a.transpose(1, 2, 0), grad_argnums=(0,))
    y = rand((3, 1))
    check_prim("broadcast_in_dim", [y], dict(shape=[2, 3, 4], broadcast_dimensions=[1, 2]),
               lambda a: np.broadcast_to(a[None], (2, 3, 4)), grad_argnums=(0,))
    check_prim("broadcast_in_dim", [f64(2.5)], dict(shape=[3], broadcast_dimensions=[]),
               lambda a: np.full(3, a), grad_argnums=(0,))


def test_reshape_aliases_and_transpose_edge_cases():
    x = pa(rand((2, 3), np.float32))
    assert bind("reshape", x, new_sizes=[6])._address == x._address
    check_prim("transpose", [rand((0, 3))], dict(permutation=[1, 0]), lambda a: a.T)
    check_prim("transpose", [f64(1.5)], dict(permutation=[]), lambda a: a)
    check_prim("broadcast_in_dim", [rand((3,))], dict(shape=[0, 3], broadcast_dimensions=[1]),
               lambda a: np.zeros((0, 3)))


# ---- slice -----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL)
def test_slice_forward(dtype):
    x = rand((5, 6, 7), dtype)
    check_prim("slice", [x], dict(start_indices=[1, 0, 2], limit_indices=[4, 6, 7]), lambda a: a[1:4, :, 2:])
    check_prim("slice", [x], dict(start_indices=[0, 1, 2], limit_indices=[5, 6, 7], strides=[2, 3, 1]),
               lambda a: a[0:5:2, 1:6:3, 2:7])


@pytest.mark.parametrize("spec", [
    ((7,), [1], [7], [3]),           # stride not dividing the length
    ((4, 5), [0, 2], [4, 2], [1, 1]),  # empty result along dim 1
    ((4, 5), [2, 1], [4, 5], [5, 2]),  # stride larger than the extent
    ((0, 3), [0, 1], [0, 3], [1, 1]),  # empty input
])
def test_slice_edge_cases_and_vjp(spec):
    shape, start, limit, strides = spec
    x = rand(shape)
    ref = lambda a: a[tuple(np.s_[s:l:t] for s, l, t in zip(start, limit, strides))]
    check_prim("slice", [x], dict(start_indices=start, limit_indices=limit, strides=strides), ref,
               grad_argnums=(0,))


def test_slice_errors():
    x = pa(rand((4, 5), np.float32))
    with pytest.raises(podlet.ShapeError, match=r"slice \[2:6\] of dimension 1 \(size 5\)"):
        bind("slice", x, start_indices=[0, 2], limit_indices=[4, 6])
    with pytest.raises(podlet.ShapeError, match="start_indices has 1 entries, expected one per dimension"):
        bind("slice", x, start_indices=[0], limit_indices=[4, 5])
    with pytest.raises(podlet.ShapeError, match="strides .* must be >= 1"):
        bind("slice", x, start_indices=[0, 0], limit_indices=[4, 5], strides=[1, 0])


# ---- pad -------------------------------------------------------------------------------

def np_pad(x, v, lo, hi, interior):
    """Reference lax.pad: interior-dilate, then pad / crop each side."""
    x = np.asarray(x)
    for d in range(x.ndim):
        n = x.shape[d]
        if n and interior[d]:
            shape = list(x.shape)
            shape[d] = n + (n - 1) * interior[d]
            y = np.full(shape, v, x.dtype)
            idx = [slice(None)] * x.ndim
            idx[d] = slice(None, None, interior[d] + 1)
            y[tuple(idx)] = x
            x = y
        for side, amount in ((0, lo[d]), (1, hi[d])):
            idx = [slice(None)] * x.ndim
            if amount < 0:
                idx[d] = slice(-amount, None) if side == 0 else slice(None, x.shape[d] + amount)
                x = x[tuple(idx)]
            elif amount > 0:
                shape = list(x.shape)
                shape[d] = amount
                block = np.full(shape, v, x.dtype)
                x = np.concatenate([block, x] if side == 0 else [x, block], axis=d)
    return x


PADS = [
    ([1, 2], [0, 3], [0, 0]),
    ([-1, 0], [2, -2], [0, 0]),     # cropping
    ([1, -2], [-1, 2], [1, 2]),     # interior with cropping into the dilated array
    ([-3, 0], [-3, 0], [2, 0]),     # crop more than the original size on both sides
    ([0, 0], [0, 0], [3, 1]),
]


@pytest.mark.parametrize("lo,hi,interior", PADS)
def test_pad_forward_and_vjp(lo, hi, interior):
    x = rand((4, 5))
    v = f64(-7.5)
    check_prim("pad", [x, v], dict(low=lo, high=hi, interior=interior),
               lambda a, pv: np_pad(a, pv, lo, hi, interior), grad_argnums=(0, 1))


@pytest.mark.parametrize("dtype", ALL)
def test_pad_dtypes(dtype):
    x = rand((3, 4), dtype)
    v = rand((), dtype)
    lo, hi, it = [2, -1], [-1, 3], [1, 0]
    check_prim("pad", [x, v], dict(low=lo, high=hi, interior=it), lambda a, pv: np_pad(a, pv, lo, hi, it))


def test_pad_empty_and_errors():
    check_prim("pad", [rand((0, 3)), f64(1.0)], dict(low=[2, 0], high=[1, 0], interior=[4, 0]),
               lambda a, pv: np.ones((3, 3)), grad_argnums=(0, 1))
    x = pa(rand((3,), np.float32))
    v = pa(np.float32(0))
    with pytest.raises(podlet.ShapeError, match="gives a negative size -1"):
        bind("pad", x, v, low=[-2], high=[-2], interior=[0])
    with pytest.raises(podlet.ShapeError, match="padding_value must be a 0-d array"):
        bind("pad", x, x, low=[0], high=[0], interior=[0])
    with pytest.raises(podlet.ShapeError, match="interior padding .* must be >= 0"):
        bind("pad", x, v, low=[0], high=[0], interior=[-1])
    with pytest.raises(podlet.DTypeError, match="same dtype"):
        bind("pad", x, pa(np.float64(0)), low=[0], high=[0], interior=[0])



def test_zero_pads_and_whole_slices_add_no_node():
    # A traced pad by nothing or slice of everything returns its operand (XLA's simplifier
    # drops them; podlet ran each as a copy, and a zero pad's VJP as a pad and a slice).
    from podlet import lax
    import podlet.numpy as jnp
    x = jnp.asarray(rand((2, 1, 4), np.float32))
    w = jnp.asarray(rand((2, 1, 4), np.float32))
    jaxpr = lambda f: str(podlet.make_jaxpr(f)(x))
    zero_pad = lambda a, v=0.0: lax.pad(a, jnp.asarray(v, a.dtype), [(0, 0, 0)] * 3)
    whole = [lambda a: lax.slice(a, (0, 0, 0), (2, 1, 4)),
             lambda a: lax.slice(a, (0, 0, 0), (2, 1, 4), (1, 5, 1))]  # stride 5 over a size-1 axis
    assert "pad" not in jaxpr(zero_pad) and "pad" not in jaxpr(lambda a: jnp.pad(a, 0))
    for f in whole:
        assert "slice" not in jaxpr(f)
        assert np.array_equal(np.asarray(podlet.jit(f)(x)), np.asarray(x))
    # Not identities: the same shape shifted, a proper slice.
    assert "pad" in jaxpr(lambda a: lax.pad(a, jnp.float32(0), [(0, 0, 0), (0, 0, 0), (1, -1, 0)]))
    assert "slice" in jaxpr(lambda a: lax.slice(a, (0, 0, 1), (2, 1, 4)))
    # Values and gradients as before: d/dx sum(pad(x) * w) = w, nothing reaches the padding value.
    assert np.array_equal(np.asarray(podlet.jit(zero_pad)(x)), np.asarray(x))
    gx, gv = podlet.jit(podlet.grad(lambda a, v: (zero_pad(a, v) * w).sum(), argnums=(0, 1)))(x, jnp.float32(2.0))
    assert np.array_equal(np.asarray(gx), np.asarray(w)) and float(gv) == 0.0


# ---- dynamic_slice / dynamic_update_slice ----------------------------------------------

def xla_clamp(starts, shape, sizes):
    return [int(np.clip(s, 0, n - k)) for s, n, k in zip(starts, shape, sizes)]


@pytest.mark.parametrize("starts", [(1, 2), (-5, 1), (3, 100), (0, 0), (-1, -1)])
@pytest.mark.parametrize("dtype", [np.float32, BF16, np.float64, np.int32, np.bool_])
def test_dynamic_slice_clamps_like_xla(starts, dtype):
    x = rand((5, 6), dtype)
    sizes = [3, 4]
    s0, s1 = xla_clamp(starts, x.shape, sizes)
    check_prim("dynamic_slice", [x, i32(starts[0]), i32(starts[1])], dict(slice_sizes=sizes),
               lambda a, *_: a[s0:s0 + 3, s1:s1 + 4])


def test_dynamic_slice_vjp_and_edge_cases():
    x = rand((5, 6))
    check_prim("dynamic_slice", [x, i32(4), i32(-2)], dict(slice_sizes=[2, 3]), lambda a, *_: a[3:5, 0:3],
               grad_argnums=(0,))
    check_prim("dynamic_slice", [x, i32(2), i32(2)], dict(slice_sizes=[0, 6]), lambda a, *_: a[:0], grad_argnums=(0,))
    check_prim("dynamic_slice", [f64(3.0)], dict(slice_sizes=[]), lambda a: a, grad_argnums=(0,))
    # uint32 start indices are accepted too.
    check_prim("dynamic_slice", [x, np.array(1, np.uint32), np.array(9, np.uint32)], dict(slice_sizes=[2, 2]),
               lambda a, *_: a[1:3, 4:6])


@pytest.mark.parametrize("starts", [(1, 2), (-3, 5), (9, 9)])
def test_dynamic_update_slice(starts):
    x, u = rand((4, 6)), rand((2, 3))
    s0, s1 = xla_clamp(starts, x.shape, u.shape)

    def ref(a, b, *_):
        a = a.copy()
        a[s0:s0 + 2, s1:s1 + 3] = b
        return a
    check_prim("dynamic_update_slice", [x, u, i32(starts[0]), i32(starts[1])], None, ref, grad_argnums=(0, 1))


@pytest.mark.parametrize("dtype", ALL)
def test_dynamic_update_slice_dtypes(dtype):
    x, u = rand((3, 4, 5), dtype), rand((1, 4, 2), dtype)

    def ref(a, b, *_):
        a = a.copy()
        a[2:3, :, 3:5] = b
        return a
    check_prim("dynamic_update_slice", [x, u, i32(2), i32(0), i32(4)], None, ref)


def test_dynamic_slice_errors():
    x = pa(rand((4, 5), np.float32))
    with pytest.raises(podlet.ShapeError, match="expected 2 start indices"):
        bind("dynamic_slice", x, pa(i32(0)), slice_sizes=[1, 1])
    with pytest.raises(podlet.ShapeError, match=r"size 6 of dimension 1 must be in \[0, 5\]"):
        bind("dynamic_slice", x, pa(i32(0)), pa(i32(0)), slice_sizes=[1, 6])
    with pytest.raises(podlet.DTypeError, match="start index 1 must be an integer, got float32"):
        bind("dynamic_slice", x, pa(i32(0)), pa(np.float32(0)), slice_sizes=[1, 1])
    with pytest.raises(podlet.ShapeError, match="start index 0 must be a 0-d array"):
        bind("dynamic_slice", x, pa(i32([0])), pa(i32(0)), slice_sizes=[1, 1])
    with pytest.raises(podlet.ShapeError, match=r"update \(2, 6\) does not fit in operand \(4, 5\)"):
        bind("dynamic_update_slice", x, pa(rand((2, 6), np.float32)), pa(i32(0)), pa(i32(0)))


# ---- concatenate -----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL)
def test_concatenate_forward(dtype):
    a, b, c = rand((2, 3, 4), dtype), rand((2, 1, 4), dtype), rand((2, 0, 4), dtype)
    check_prim("concatenate", [a, b, c, a], dict(dimension=1), lambda *xs: np.concatenate(xs, 1))
    check_prim("concatenate", [a, a], dict(dimension=-1), lambda *xs: np.concatenate(xs, -1))


def test_concatenate_vjp_and_errors():
    a, b = rand((3, 2)), rand((1, 2))
    check_prim("concatenate", [a, b, a], dict(dimension=0), lambda *xs: np.concatenate(xs, 0), grad_argnums=(0, 1, 2))
    check_prim("concatenate", [a], dict(dimension=1), lambda x: x, grad_argnums=(0,))
    with pytest.raises(podlet.ShapeError, match=r"operand 1 has shape \(3, 3\), which does not match \(3, 2\) outside dimension 0"):
        bind("concatenate", pa(a), pa(rand((3, 3))), dimension=0)
    with pytest.raises(podlet.ShapeError, match="dimension 2 is out of range for an array of rank 2"):
        bind("concatenate", pa(a), pa(a), dimension=2)
    with pytest.raises(podlet.DTypeError):
        bind("concatenate", pa(a), pa(a.astype(np.float32)), dimension=0)


# ---- rev -------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL)
def test_rev_forward(dtype):
    x = rand((3, 4, 5), dtype)
    check_prim("rev", [x], dict(dimensions=[0, 2]), lambda a: a[::-1, :, ::-1])
    check_prim("rev", [x], dict(dimensions=[-2]), lambda a: a[:, ::-1])
    check_prim("rev", [x], dict(dimensions=[]), lambda a: a)


def test_rev_vjp_and_errors():
    check_prim("rev", [rand((4, 3))], dict(dimensions=[1]), lambda a: a[:, ::-1], grad_argnums=(0,))
    check_prim("rev", [rand((0, 3))], dict(dimensions=[0, 1]), lambda a: a, grad_argnums=(0,))
    with pytest.raises(podlet.ShapeError, match="dimension 1 repeated"):
        bind("rev", pa(rand((2, 2))), dimensions=[1, -1])


# ---- iota ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64", "int32", "uint32", "uint8"])
def test_iota(dtype):
    want = np.broadcast_to(np.arange(5)[None, :, None], (2, 5, 3))
    got = np.asarray(bind("iota", dtype=dtype, shape=[2, 5, 3], dimension=1))
    assert got.dtype == np.dtype(BF16 if dtype == "bfloat16" else dtype)
    np.testing.assert_array_equal(got.astype(np.float64), want)
    jitted = podlet.jit(lambda: bind("iota", dtype=dtype, shape=[2, 5, 3], dimension=-2))()
    assert np.array_equal(np.asarray(jitted), got)
    assert np.asarray(bind("iota", dtype=dtype, shape=[0, 4], dimension=1)).shape == (0, 4)


def test_iota_bf16_rounds_large_values_and_errors():
    got = np.asarray(bind("iota", dtype="bfloat16", shape=[300], dimension=0)).astype(np.float64)
    np.testing.assert_array_equal(got, np.arange(300).astype(BF16).astype(np.float64))
    with pytest.raises(podlet.ShapeError, match="dimension 2 is out of range"):
        bind("iota", dtype="int32", shape=[2, 2], dimension=2)
    with pytest.raises(podlet.DTypeError, match="unsupported dtype 'int64'"):
        bind("iota", dtype="int64", shape=[2], dimension=0)


def test_iota_under_grad_is_constant():
    def f(x):
        return bind("reduce_sum", bind("mul", x, bind("iota", dtype="float32", shape=[4], dimension=0)), axes=[0])
    g = podlet.grad(f)(pa(np.ones(4, np.float32)))
    np.testing.assert_array_equal(np.asarray(g), np.arange(4, dtype=np.float32))


# ---- stop_gradient / copy --------------------------------------------------------------

def test_stop_gradient_aliases_and_blocks_gradient():
    x = pa(rand((3, 4), np.float32))
    y = bind("stop_gradient", x)
    assert y._address == x._address and y.shape == (3, 4)
    np.testing.assert_array_equal(np.asarray(podlet.jit(lambda a: bind("stop_gradient", a))(x)), np.asarray(x))

    def f(a):
        s = bind("stop_gradient", bind("mul", a, a))
        return bind("reduce_sum", bind("add", bind("mul", s, a), a), axes=[0, 1])
    g = podlet.grad(f)(x)
    np.testing.assert_allclose(np.asarray(g), np.asarray(x) ** 2 + 1, rtol=1e-6)


@pytest.mark.parametrize("dtype", ALL)
def test_copy(dtype):
    x = rand((3, 5), dtype)
    out = check_prim("copy", [x], None, lambda a: a)
    a = pa(x)
    assert bind("copy", a)._address != a._address
    assert out.shape == (3, 5)


def test_copy_vjp():
    check_prim("copy", [rand((2, 3))], None, lambda a: a, grad_argnums=(0,))


# ---- composition under jit / grad ------------------------------------------------------

def test_structural_chain_grad_matches_numpy():
    """grad of sum(w * pad(rev(slice(x)))) is w routed back through the three ops."""
    x = rand((6, 5), np.float32)
    w = rand((5, 6), np.float32)

    def f(a):
        s = bind("slice", a, start_indices=[1, 0], limit_indices=[6, 5], strides=[2, 1])   # (3, 5)
        r = bind("rev", s, dimensions=[0])
        p = bind("pad", r, pa(np.float32(0)), low=[1, 0], high=[1, 1], interior=[0, 0])  # (5, 6)
        return bind("reduce_sum", bind("mul", p, pa(w)), axes=[0, 1])
    g = np.asarray(podlet.jit(podlet.grad(f))(pa(x)))
    want = np.zeros_like(x)
    want[1:6:2] = w[1:4, :5][::-1]
    np.testing.assert_allclose(g, want, rtol=1e-6)


# ---- the strided copy under every structural primitive -------------------------------

@pytest.mark.parametrize("seed", range(6))
def test_strided_copies_with_size_one_and_mergeable_dims(seed):
    # copy_strided (prims/common.cc) drops size-1 dimensions and merges a dimension into
    # the next where both strides run on across it, then counts rows instead of dividing
    # per row. Random shapes with 1s and slices that keep some dimensions whole (qkv
    # [B, T, 3, N, H] sliced on its 3), on 1 and 2 threads, against NumPy.
    r = np.random.default_rng(300 + seed)
    dtype = [np.float32, BF16, np.float64, np.uint8, np.bool_, np.int32][seed]
    shape = tuple(int(r.choice([1, 2, 3, 5, 17])) for _ in range(int(r.integers(2, 6))))
    x = rand(shape, dtype)
    px = pa(x)
    cases = []
    for _ in range(4):
        start = [int(r.integers(0, s)) if r.random() < 0.5 else 0 for s in shape]
        limit = [s if r.random() < 0.6 else int(r.integers(st, s + 1)) for st, s in zip(start, shape)]
        strides = [1 if r.random() < 0.7 else int(r.integers(1, 3)) for _ in shape]
        cases.append(("slice", (px,), dict(start_indices=start, limit_indices=limit, strides=strides),
                      x[tuple(slice(a, b, c) for a, b, c in zip(start, limit, strides))]))
    perm = [int(d) for d in r.permutation(len(shape))]
    cases.append(("transpose", (px,), dict(permutation=perm), np.transpose(x, perm)))
    out_shape = (2,) + shape
    cases.append(("broadcast_in_dim", (px,), dict(shape=out_shape, broadcast_dimensions=list(range(1, len(shape) + 1))),
                  np.broadcast_to(x, out_shape)))
    dim = int(r.integers(0, len(shape)))
    y = rand(shape[:dim] + (2,) + shape[dim + 1:], dtype)
    cases.append(("concatenate", (px, pa(y), px), dict(dimension=dim), np.concatenate([x, y, x], axis=dim)))
    lo = [int(r.integers(-1, 3)) if s > 1 else 0 for s in shape]
    hi = [int(r.integers(0, 3)) for _ in shape]
    zero = np.zeros((), dtype)
    padded = np.pad(x, [(max(a, 0), b) for a, b in zip(lo, hi)])[tuple(slice(max(-a, 0), None) for a in lo)]
    cases.append(("pad", (px, pa(zero)), dict(low=lo, high=hi, interior=[0] * len(shape)), padded))
    cases.append(("rev", (px,), dict(dimensions=[0, len(shape) - 1]), np.flip(x, (0, len(shape) - 1))))
    _copies_equal_numpy(cases)


def _copies_equal_numpy(cases, min_bytes=0):
    # Each (primitive, operands, attrs, NumPy's result) on 1 and 2 threads, bit for bit.
    n0 = podlet.config.num_threads
    try:
        for threads in (1, 2):
            podlet.config.update("num_threads", threads)
            for name, args, attrs, want in cases:
                got = np.asarray(bind(name, *args, **attrs))
                assert got.nbytes >= min_bytes, name
                assert got.shape == want.shape and got.tobytes() == np.ascontiguousarray(want).tobytes(), (name, attrs)
    finally:
        podlet.config.update("num_threads", n0)


@pytest.mark.parametrize("dtype", [BF16, np.float32, np.uint8], ids=["bf16", "f32", "u8"])
def test_large_copies_with_contiguous_rows_equal_numpy(dtype):
    # Outputs of 8 MB and more whose rows are contiguous on both sides go out with
    # non-temporal stores (copy_strided, prims/common.cc), each row's unaligned head and
    # tail by memcpy: Swin's window partition (rows of 7 x 96 elements), a patch merge's
    # rows of 96, a slice that starts 3 elements into each row (every row's start and end
    # unaligned), a concatenation; on 1 and 2 threads.
    r = np.random.default_rng(7)
    n = (10 << 20) // np.dtype(dtype).itemsize  # elements of a little under 10 MB once whole images
    x = r.integers(0, 250, size=n // (56 * 56 * 96) * 56 * 56 * 96).astype(np.float32).astype(dtype)
    x = x.reshape(-1, 56, 56, 96)
    px = pa(x)
    b = x.shape[0]
    win = x.reshape(b, 8, 7, 8, 7, 96)
    cases = [
        ("transpose", (pa(win),), dict(permutation=[0, 1, 3, 2, 4, 5]), win.transpose(0, 1, 3, 2, 4, 5)),
        ("transpose", (pa(x.reshape(b, 28, 2, 28, 2, 96)),), dict(permutation=[0, 1, 3, 4, 2, 5]),
         x.reshape(b, 28, 2, 28, 2, 96).transpose(0, 1, 3, 4, 2, 5)),
        ("slice", (px,), dict(start_indices=[0, 0, 0, 3], limit_indices=[b, 56, 56, 96], strides=[1, 1, 1, 1]),
         x[..., 3:]),
        ("concatenate", (px, px), dict(dimension=3), np.concatenate([x, x], axis=3)),
    ]
    _copies_equal_numpy(cases, min_bytes=8 << 20)
