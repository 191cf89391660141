"""dot_general: forward vs NumPy einsum (float64) and jax.lax.dot_general, eager == jit,
VJP vs finite differences, dtype rules, shape errors, FLOPs, thread-count determinism."""
import string

import jax
import ml_dtypes
import numpy as np
import pytest

import podlet
from podlet import lax
from podlet._src.core import bind
from prim_check import as_podlet, check_prim, check_vjp

BF16 = ml_dtypes.bfloat16


def ref_dot(lhs, rhs, lc, rc, lb, rb):
    """jax.lax.dot_general in float64 through np.einsum."""
    letters = iter(string.ascii_letters)
    ls = [next(letters) for _ in range(lhs.ndim)]
    rs = [next(letters) for _ in range(rhs.ndim)]
    for i, j in zip(lc, rc):
        rs[j] = ls[i]
    for i, j in zip(lb, rb):
        rs[j] = ls[i]
    out = [ls[i] for i in lb]
    out += [ls[i] for i in range(lhs.ndim) if i not in lc and i not in lb]
    out += [rs[i] for i in range(rhs.ndim) if i not in rc and i not in rb]
    spec = f"{''.join(ls)},{''.join(rs)}->{''.join(out)}"
    return np.einsum(spec, np.asarray(lhs, np.float64), np.asarray(rhs, np.float64))


def attrs_of(lc, rc, lb=(), rb=(), **kw):
    return dict(lhs_contracting=list(lc), rhs_contracting=list(rc), lhs_batch=list(lb), rhs_batch=list(rb), **kw)


# (lhs shape, rhs shape, lc, rc, lb, rb)
CASES = {
    "matmul": ((5, 7), (7, 3), [1], [0], [], []),
    "matvec": ((6, 4), (4,), [1], [0], [], []),
    "batched_vecdot": ((4, 9), (4, 9), [1], [1], [0], [0]),
    "outer": ((3, 2), (4,), [], [], [], []),
    "contract_first_dims": ((7, 5), (7, 3), [0], [0], [], []),
    "two_contracting_permuted": ((4, 3, 5), (5, 2, 4), [0, 2], [2, 0], [], []),
    "batch_not_leading": ((3, 6, 4), (4, 6, 2), [2], [0], [1], [1]),
    "attention_qk": ((2, 3, 5, 4), (2, 3, 6, 4), [3], [3], [0, 1], [0, 1]),   # (b,h,q,d)x(b,h,k,d)
    "attention_pv": ((2, 3, 5, 6), (2, 3, 6, 4), [3], [2], [0, 1], [0, 1]),   # (b,h,q,k)x(b,h,k,d)
    "batch_order_swapped": ((2, 3, 4), (3, 2, 4, 5), [2], [2], [1, 0], [0, 1]),
    "empty_k": ((3, 0), (0, 4), [1], [0], [], []),
    # no rows / no columns / no batch entries: the GEMM engines' tiles and prefetch
    # streams must not read an offset of the empty side
    "empty_m": ((0, 7), (7, 3), [1], [0], [], []),
    "empty_n_weight_grad": ((300, 5), (300, 0), [0], [0], [], []),
    "empty_batch": ((0, 4, 6), (0, 6, 3), [2], [1], [0], [0]),
}


def rand(rng, shape, dtype):
    x = rng.standard_normal(shape)
    if np.dtype(dtype) == np.int32:
        return rng.integers(-20, 20, shape).astype(np.int32)
    return x.astype(dtype)


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("dtype", [np.float32, BF16, np.float64])
def test_forward_matches_einsum(name, dtype):
    ls, rs, lc, rc, lb, rb = CASES[name]
    rng = np.random.default_rng(1)
    a, b = rand(rng, ls, dtype), rand(rng, rs, dtype)
    out = check_prim("dot_general", [a, b], attrs_of(lc, rc, lb, rb),
                     ref=lambda x, y: ref_dot(x, y, lc, rc, lb, rb))
    assert out.dtype == np.dtype(dtype)


def test_vector_dot_gives_a_scalar():
    rng = np.random.default_rng(12)
    a, b = rng.standard_normal(9), rng.standard_normal(9)
    out = check_prim("dot_general", [a, b], attrs_of([0], [0]), ref=lambda x, y: np.asarray(x @ y), grad_argnums=(0, 1))
    assert out.shape == () and out.dtype == np.float64


@pytest.mark.parametrize("name", ["matmul", "two_contracting_permuted", "attention_qk", "batch_order_swapped"])
def test_int32_exact(name):
    ls, rs, lc, rc, lb, rb = CASES[name]
    rng = np.random.default_rng(2)
    a, b = rand(rng, ls, np.int32), rand(rng, rs, np.int32)
    out = check_prim("dot_general", [a, b], attrs_of(lc, rc, lb, rb),
                     ref=lambda x, y: ref_dot(x, y, lc, rc, lb, rb).astype(np.int64))
    assert out.dtype == np.int32


def test_int32_wraps_like_int32():
    a = np.full((1, 3), 2 ** 30, np.int32)
    b = np.full((3, 1), 2, np.int32)
    out = np.asarray(bind("dot_general", as_podlet(a), as_podlet(b), **attrs_of([1], [0])))
    assert out[0, 0] == np.int32((3 * 2 ** 31) % 2 ** 32 - 2 ** 32)


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_crosses_tile_boundaries(dtype):
    """M, N, K larger than the 128 x 256 x 256 tiles, with odd remainders."""
    rng = np.random.default_rng(3)
    a, b = rand(rng, (131, 300), dtype), rand(rng, (300, 259), dtype)
    out = check_prim("dot_general", [a, b], attrs_of([1], [0]), ref=lambda x, y: x @ y,
                     rtol=2e-5 if dtype == np.float32 else None, atol=1e-4 if dtype == np.float32 else 0.15)
    assert out.shape == (131, 259)


def test_bf16_accumulates_in_f32_with_preferred_element_type():
    rng = np.random.default_rng(4)
    a, b = rand(rng, (2, 17, 600), BF16), rand(rng, (2, 600, 9), BF16)
    attrs = attrs_of([2], [1], [0], [0], preferred_element_type="float32")
    # bf16 x bf16 products are exact in f32, so only the f32 summation error remains.
    out = check_prim("dot_general", [a, b], attrs, ref=lambda x, y: np.einsum("bmk,bkn->bmn", x, y),
                     rtol=1e-5, atol=1e-4)
    assert out.dtype == np.float32
    # bf16 output = the f32 accumulation rounded once.
    out16 = np.asarray(bind("dot_general", as_podlet(a), as_podlet(b), **attrs_of([2], [1], [0], [0])))
    assert out16.dtype == BF16
    np.testing.assert_array_equal(out16, out.astype(BF16))


def test_mixed_float_operands_take_the_wider_dtype():
    rng = np.random.default_rng(5)
    a, b = rand(rng, (4, 5), BF16), rand(rng, (5, 3), np.float32)
    out = check_prim("dot_general", [a, b], attrs_of([1], [0]), ref=lambda x, y: x @ y, rtol=1e-5, atol=1e-5)
    assert out.dtype == np.float32
    c = rand(rng, (5, 3), np.float64)
    assert np.asarray(bind("dot_general", as_podlet(a), as_podlet(c), **attrs_of([1], [0]))).dtype == np.float64


@pytest.mark.parametrize("name", ["matmul", "two_contracting_permuted", "batch_not_leading", "attention_qk",
                                  "batch_order_swapped"])
def test_matches_jax(name):
    ls, rs, lc, rc, lb, rb = CASES[name]
    rng = np.random.default_rng(6)
    a, b = rand(rng, ls, np.float32), rand(rng, rs, np.float32)
    got = np.asarray(lax.dot_general(as_podlet(a), as_podlet(b), ((lc, rc), (lb, rb))))
    want = np.asarray(jax.lax.dot_general(a, b, ((lc, rc), (lb, rb))))
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", [n for n in CASES if not n.startswith("empty")])
def test_vjp_finite_differences(name):
    ls, rs, lc, rc, lb, rb = CASES[name]
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal(ls), rng.standard_normal(rs)
    check_vjp("dot_general", [a, b], attrs_of(lc, rc, lb, rb), grad_argnums=(0, 1))


def test_vjp_negative_axes():
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((3, 4, 5)), rng.standard_normal((3, 5, 2))
    check_vjp("dot_general", [a, b], attrs_of([-1], [-2], [0], [-3]), grad_argnums=(0, 1))


def test_vjp_of_bf16_with_f32_output_is_bf16():
    """Cotangents come back in each operand's dtype (rounded once from f32)."""
    rng = np.random.default_rng(9)
    a, b = rand(rng, (2, 8, 16), BF16), rand(rng, (2, 16, 4), np.float32)
    ct = rng.standard_normal((2, 8, 4)).astype(np.float32)
    attrs = attrs_of([2], [1], [0], [0], preferred_element_type="float32")
    _, vjp_fn = podlet.vjp(lambda x, y: bind("dot_general", x, y, **attrs), as_podlet(a), as_podlet(b))
    ga, gb = vjp_fn(as_podlet(ct))
    ga, gb = np.asarray(ga), np.asarray(gb)
    assert ga.dtype == BF16 and gb.dtype == np.float32
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    np.testing.assert_allclose(ga.astype(np.float64), np.einsum("bmn,bkn->bmk", ct, b64), rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(gb, np.einsum("bmk,bmn->bkn", a64, ct), rtol=1e-5, atol=1e-5)


def test_grad_through_podlet_matches_jax():
    rng = np.random.default_rng(10)
    a, b = rand(rng, (2, 3, 5, 4), np.float32), rand(rng, (2, 3, 6, 4), np.float32)
    dn = (([3], [3]), ([0, 1], [0, 1]))
    f = lambda m: lambda x, y: (m.dot_general(x, y, dn) ** 2).sum()
    ga, gb = podlet.grad(f(lax), argnums=(0, 1))(as_podlet(a), as_podlet(b))
    ja, jb = jax.grad(f(jax.lax), argnums=(0, 1))(a, b)
    np.testing.assert_allclose(np.asarray(ga), ja, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(gb), jb, rtol=1e-5, atol=1e-5)


def test_shape_errors_name_dims_and_sizes():
    a, b = as_podlet(np.zeros((3, 4), np.float32)), as_podlet(np.zeros((5, 2), np.float32))
    with pytest.raises(podlet.ShapeError, match=r"lhs dim 1 has size 4, rhs dim 0 has size 5"):
        bind("dot_general", a, b, **attrs_of([1], [0]))
    c, d = as_podlet(np.zeros((2, 3, 4), np.float32)), as_podlet(np.zeros((3, 4, 5), np.float32))
    with pytest.raises(podlet.ShapeError, match=r"batch dimension sizes must match: lhs dim 0 has size 2, rhs dim 0 has size 3"):
        bind("dot_general", c, d, **attrs_of([2], [1], [0], [0]))
    with pytest.raises(podlet.ShapeError, match="same length"):
        bind("dot_general", c, d, **attrs_of([1, 2], [1]))
    with pytest.raises(podlet.ShapeError, match="listed twice"):
        bind("dot_general", c, d, **attrs_of([0], [0], [0], [0]))
    with pytest.raises(podlet.ShapeError, match="out of range"):
        bind("dot_general", a, b, **attrs_of([2], [0]))
    # Under jit the error surfaces at trace time, naming the primitive and operand shapes.
    with pytest.raises(podlet.ShapeError, match=r"dot_general\(float32\(3, 4\), float32\(5, 2\)\)"):
        podlet.jit(lambda x, y: bind("dot_general", x, y, **attrs_of([1], [0])))(a, b)


def test_dtype_errors():
    f = as_podlet(np.zeros((2, 2), np.float32))
    i = as_podlet(np.zeros((2, 2), np.int32))
    with pytest.raises(podlet.DTypeError, match="int32"):
        bind("dot_general", f, i, **attrs_of([1], [0]))
    with pytest.raises(podlet.DTypeError, match="preferred_element_type"):
        bind("dot_general", f, f, **attrs_of([1], [0], preferred_element_type="int32"))
    b = as_podlet(np.zeros((2, 2), bool))
    with pytest.raises(podlet.DTypeError):
        bind("dot_general", b, b, **attrs_of([1], [0]))


def test_flops():
    a, b = np.zeros((2, 3, 5, 4), np.float32), np.zeros((2, 3, 6, 4), np.float32)
    g = podlet.make_graph(lambda x, y: bind("dot_general", x, y, **attrs_of([3], [3], [0, 1], [0, 1])),
                          as_podlet(a), as_podlet(b))
    assert g.flops() == 2 * (2 * 3) * 5 * 6 * 4


@pytest.mark.parametrize("dtype,pref", [(np.float32, None), (BF16, "float32"), (BF16, None), (np.float64, None)])
def test_bits_do_not_depend_on_thread_count(dtype, pref):
    rng = np.random.default_rng(11)
    a, b = rand(rng, (3, 150, 270), dtype), rand(rng, (3, 270, 260), dtype)
    attrs = attrs_of([2], [1], [0], [0], **({"preferred_element_type": pref} if pref else {}))
    n0 = podlet.config.num_threads
    outs = []
    try:
        for n in (1, 2):
            podlet.config.update("num_threads", n)
            outs.append(np.asarray(bind("dot_general", as_podlet(a), as_podlet(b), **attrs)).copy())
    finally:
        podlet.config.update("num_threads", n0)
    assert outs[0].view(np.uint8).tobytes() == outs[1].view(np.uint8).tobytes()
