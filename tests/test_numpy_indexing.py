"""NumPy indexing on podlet arrays, differentially against jax.numpy (the oracle).

One table of index expressions (1-D to 4-D operands: ints, negative ints, slices with
steps, None, Ellipsis, boolean scalars, integer arrays in any number and position,
broadcasting index arrays, out-of-range and negative entries, concrete boolean masks)
drives: x[idx] eagerly with NumPy and with podlet index arrays, under podlet.jit with
the integer arrays traced, the gradient of sum(x[idx] ** 2), every x.at[idx] update and
the gradients of .at[idx].set / .add with respect to the operand and the updates.
"""
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import podlet
import podlet.numpy as pnp

jax.config.update("jax_platforms", "cpu")

rng = np.random.default_rng(0)
A = lambda *v: np.array(v, dtype=np.int32)  # noqa: E731
E = Ellipsis
S = slice
M3 = np.array([True, False, True])
M4 = np.array([False, True, True, False])
M34 = np.arange(12).reshape(3, 4) % 3 == 0
M23 = np.array([[True, False, True], [False, False, True]])

CASES = [
    # 1-D
    ((5,), ()), ((5,), 0), ((5,), -1), ((5,), 4), ((5,), S(1, 4)), ((5,), S(None, None, 2)),
    ((5,), S(None, None, -1)), ((5,), S(4, 0, -2)), ((5,), S(-3, None)), ((5,), S(10, 20)),
    ((5,), None), ((5,), E), ((5,), (None, E)), ((5,), (E, None)), ((5,), True), ((5,), False),
    ((5,), A(0, 2, 4)), ((5,), A(-1, -5)), ((5,), A(7, -9, 5)), ((5,), A([0, 1], [2, 3])),
    ((5,), A(1, 1, 1)), ((5,), np.array([True, False, True, True, False])), ((5,), np.array(3)),
    ((5,), np.int64(2)), ((5,), ([1, 3],)), ((5,), (S(1, 3), None)), ((5,), 7), ((5,), -9),
    # 2-D
    ((3, 4), 1), ((3, 4), (-1, 2)), ((3, 4), (E, 1)), ((3, 4), (1, E)), ((3, 4), (E, None)),
    ((3, 4), (None, E)), ((3, 4), (S(None), A(0, 2))), ((3, 4), (A(0, 2), S(1, 3))),
    ((3, 4), (A(0, 1, 2), A(3, 2, 1))), ((3, 4), (A(0, 2), 1)), ((3, 4), (1, A(0, 3))),
    ((3, 4), (A([0], [2]), A(1, 3))), ((3, 4), (S(None, None, -1), A(0, 1))), ((3, 4), M34),
    ((3, 4), M3), ((3, 4), (S(None), M4)), ((3, 4), (A(0, 1), None)), ((3, 4), (None, A(0, 1))),
    ((3, 4), (True, A(1, 2))), ((3, 4), (A(1, 2), True)), ((3, 4), (M3, A(0, 3))),
    ((3, 4), (S(None), A(-1, 4, -5))), ((3, 4), (E, S(None, None, -3))),
    # 3-D
    ((2, 3, 4), (E, 1)), ((2, 3, 4), (1, E, 2)), ((2, 3, 4), (S(None), A(0, 2), S(1, 3))),
    ((2, 3, 4), (A(0, 1), S(None), A(1, 3))), ((2, 3, 4), (0, S(None), A(0, 1))),
    ((2, 3, 4), (S(None), 1, A(0, 1))), ((2, 3, 4), (A(0, 1), A(0, 2), A(1, 3))),
    ((2, 3, 4), (A(1), None, A(2))), ((2, 3, 4), (E, A(0, -1))), ((2, 3, 4), M23),
    ((2, 3, 4), (S(None), M34)), ((2, 3, 4), (M23, A(0, 3, 1))), ((2, 3, 4), (E, None, S(None, None, -2))),
    ((2, 3, 4), (None, 0, None, S(1, None), None)), ((2, 3, 4), (A([[0, 1], [1, 0]]), E)),
    ((2, 3, 4), (S(None), S(None), A([[3, 0], [1, 2]]))), ((2, 3, 4), (1, A(2, 0), S(None, None, -1))),
    # 4-D
    ((2, 3, 4, 5), (E, None)), ((2, 3, 4, 5), (S(None), A(0, 2), S(None), A(1, 4))),
    ((2, 3, 4, 5), (S(None), A(0, 2), A(1, 3), S(None))), ((2, 3, 4, 5), (1, E, A(0, 4))),
    ((2, 3, 4, 5), (A([[0, 1]]), S(None), S(None), A([1], [2]))),
    ((2, 3, 4, 5), (E, S(1, 3), A(0, 1, 2))), ((2, 3, 4, 5), (0, 1, 2, 3)), ((2, 3, 4, 5), (-1, -1, -1, -1)),
    ((2, 3, 4, 5), (A(0, 1), 1, A(2, 3), S(None, None, -1))), ((2, 3, 4, 5), (None, E, 2, None)),
    ((2, 3, 4, 5), (S(None), None, A(2, 0), E, A(4, 3))),
]
IDS = [f"{i}-{len(s)}d-{k!r}".replace(" ", "")[:60] for i, (s, k) in enumerate(CASES)]


def operand(shape, dtype=np.float32):
    return (np.arange(int(np.prod(shape))).reshape(shape) * 0.5 + 1).astype(dtype)


def as_tuple(key):
    return key if isinstance(key, tuple) else (key,)


def is_int_array(k):
    return isinstance(k, np.ndarray) and k.dtype.kind in "iu"


def podlet_key(key):
    """The same index with podlet Arrays for the NumPy arrays (masks stay concrete)."""
    out = tuple(pnp.asarray(k) if isinstance(k, np.ndarray) else k for k in as_tuple(key))
    return out if isinstance(key, tuple) else out[0]


def traced(key):
    """(template, arrays): the integer arrays of key become jit arguments."""
    t = as_tuple(key)
    arrays = [k for k in t if is_int_array(k)]

    def rebuild(args):
        it = iter(args)
        out = tuple(next(it) if is_int_array(k) else k for k in t)
        return out if isinstance(key, tuple) else out[0]
    return rebuild, arrays


def check(got, want, exact=True):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    if exact:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-6, atol=1e-6)


def test_table_is_large():
    assert len(CASES) >= 60


# ---- x[idx] ----------------------------------------------------------------------------

@pytest.mark.parametrize("shape,key", CASES, ids=IDS)
def test_getitem_eager(shape, key):
    x = operand(shape)
    want = jnp.asarray(x)[key]
    check(pnp.asarray(x)[key], want)
    check(pnp.asarray(x)[podlet_key(key)], want)


@pytest.mark.parametrize("shape,key", CASES, ids=IDS)
def test_getitem_jit(shape, key):
    x = operand(shape)
    rebuild, arrays = traced(key)
    want = jax.jit(lambda a, *i: a[rebuild(i)])(jnp.asarray(x), *arrays)
    got = podlet.jit(lambda a, *i: a[rebuild(i)])(pnp.asarray(x), *[pnp.asarray(i) for i in arrays])
    check(got, want)


@pytest.mark.parametrize("shape,key", CASES, ids=IDS)
def test_getitem_grad(shape, key):
    x = operand(shape)
    want = jax.grad(lambda a: jnp.sum(a[key] ** 2))(jnp.asarray(x))
    got = podlet.grad(lambda a: pnp.sum(a[key] ** 2))(pnp.asarray(x))
    check(got, want, exact=False)
    rebuild, arrays = traced(key)
    got = podlet.jit(podlet.grad(lambda a, *i: pnp.sum(a[rebuild(i)] ** 2)))(
        pnp.asarray(x), *[pnp.asarray(i) for i in arrays])
    check(got, want, exact=False)


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.int32, np.uint8, np.bool_])
def test_getitem_dtypes(dtype):
    x = operand((3, 4, 5)).astype(dtype)
    for key in [(E, 1), (A(2, 0), S(None), A(-1, 3)), (None, 1, S(None, None, -2)), M34]:
        check(pnp.asarray(x)[key], jnp.asarray(x)[key])


def test_scalar_dynamic_index_under_jit_clamps():
    x = operand((4, 3))
    for i in (2, -1, 9, -9):
        want = jax.jit(lambda a, j: a[j, 1:])(jnp.asarray(x), i)
        check(podlet.jit(lambda a, j: a[j, 1:])(pnp.asarray(x), pnp.asarray(np.int32(i))), want)


def test_scalar_dynamic_index_gradient_lands_on_the_clamped_position():
    # jax indexes with scalar tracers through dynamic_slice: out-of-range ones clamp in
    # the forward pass and in the gradient.
    x = operand((4, 3))
    f = lambda lib: lambda a, j: lib.sum(a[j, 1:] ** 2)  # noqa: E731
    for i in (2, -1, 9, -9):
        want = jax.jit(jax.grad(f(jnp)))(jnp.asarray(x), i)
        check(podlet.jit(podlet.grad(f(pnp)))(pnp.asarray(x), pnp.asarray(np.int32(i))), want, exact=False)


def test_vmap_of_scalar_dynamic_index():
    # A scalar index shared by the mapped rows (dynamic_slice has a batching rule; an
    # index that differs per row, or an index array, needs take's, which podlet lacks).
    x = operand((3, 4))
    for i in (1, -1, 7):
        want = jax.vmap(lambda a, j: a[j], in_axes=(0, None))(jnp.asarray(x), i)
        got = podlet.vmap(lambda a, j: a[j], in_axes=(0, None))(pnp.asarray(x), pnp.asarray(np.int32(i)))
        check(got, want)
    check(podlet.vmap(lambda a: a[..., 1:3, None])(pnp.asarray(x)), jax.vmap(lambda a: a[..., 1:3, None])(x))


def test_static_out_of_range_int_clamps_like_jax():
    # jax 0.10 clamps an out-of-range Python int in a gather (it no longer raises, unlike
    # NumPy); podlet follows jax. A size-0 axis has no element to clamp to: IndexError.
    x = operand((5,))
    check(pnp.asarray(x)[7], jnp.asarray(x)[7])
    check(pnp.asarray(x)[-9], jnp.asarray(x)[-9])
    with pytest.raises(IndexError, match="out of bounds for axis 0 with size 0"):
        pnp.zeros((0,))[0]


# ---- errors ----------------------------------------------------------------------------

def test_index_errors():
    x = pnp.asarray(operand((3, 4)))
    with pytest.raises(IndexError, match="Too many indices: array is 2-dimensional, but 3 were indexed"):
        x[0, 0, 0]
    with pytest.raises(IndexError, match="Too many indices"):
        x[E, 0, 0, None, 0]
    with pytest.raises(IndexError, match="single ellipsis"):
        x[E, E]
    with pytest.raises(TypeError, match="Indexer must have integer or boolean type, got indexer with type float64"):
        x[1.0]
    with pytest.raises(TypeError, match="integer or boolean type, got indexer with type float32"):
        x[np.array([1.0], np.float32)]
    with pytest.raises(TypeError, match="string indexing"):
        x["a"]
    with pytest.raises(IndexError, match=r"boolean index did not match shape of indexed array in index 0: "
                                         r"got \(2,\), expected \[3\]"):
        x[np.array([True, False])]
    with pytest.raises(ValueError, match=r"Incompatible shapes for broadcasting: shapes=\[\(2,\), \(3,\)\]"):
        x[A(0, 1), A(0, 1, 2)]
    with pytest.raises(TypeError, match="Indexer must have integer"):
        podlet.jit(lambda a, i: a[i])(x, pnp.asarray(np.float32(1)))


def test_traced_boolean_mask_is_a_named_error():
    x = pnp.asarray(operand((3, 4)))
    with pytest.raises(podlet.NonConcreteBooleanIndexError, match=r"Array boolean indices must be concrete; got bool\[3, 4\]"):
        podlet.jit(lambda a: a[a > 2])(x)
    with pytest.raises(IndexError, match="Array boolean indices must be concrete"):
        podlet.jit(lambda a, m: a[m])(x, pnp.asarray(M3))
    with pytest.raises(IndexError, match="Array boolean indices must be concrete"):
        podlet.grad(lambda a: pnp.sum(a[a > 2]))(x)
    # Concrete masks are fine eagerly and as constants inside jit, like jax.
    check(x[np.asarray(x) > 2], jnp.asarray(np.asarray(x))[np.asarray(x) > 2])
    check(podlet.jit(lambda a: a[M34])(x), jnp.asarray(np.asarray(x))[M34])


def test_traced_slice_bound_is_an_error():
    x = pnp.asarray(operand((5,)))
    with pytest.raises(IndexError, match="Slice entries must be static integers"):
        podlet.jit(lambda a, i: a[i:])(x, pnp.asarray(np.int32(1)))
    check(x[pnp.asarray(np.int32(1)):np.int64(4)], jnp.arange(5.0)[1:4] * 0.5 + 1)


# ---- take / take_along_axis -------------------------------------------------------------

def test_take_like_jax():
    x = operand((4, 5))
    px, jx = pnp.asarray(x), jnp.asarray(x)
    check(pnp.take(px, -1), jnp.take(jx, -1))
    check(pnp.take(px[0], -1), jnp.take(jx[0], -1))
    i = A([-1, 7], [-9, 2])
    for axis in (None, 0, 1, -1):
        for mode in (None, "fill", "clip", "wrap"):
            check(pnp.take(px, i, axis=axis, mode=mode), jnp.take(jx, i, axis=axis, mode=mode))
            check(pnp.take(px, pnp.asarray(i), axis=axis, mode=mode), jnp.take(jx, i, axis=axis, mode=mode))
    check(pnp.take(px, i, axis=1, fill_value=-3.0), jnp.take(jx, i, axis=1, fill_value=-3.0))
    xi = np.arange(5, dtype=np.int32)
    check(pnp.take(pnp.asarray(xi), A(7, -1)), jnp.take(jnp.asarray(xi), A(7, -1)))
    xu = np.arange(5, dtype=np.uint8)
    check(pnp.take(pnp.asarray(xu), A(7, -1)), jnp.take(jnp.asarray(xu), A(7, -1)))
    got = podlet.jit(lambda a, j: pnp.take(a, j, axis=1))(px, pnp.asarray(i))
    check(got, jax.jit(lambda a, j: jnp.take(a, j, axis=1))(jx, i))
    g = podlet.grad(lambda a: pnp.sum(pnp.take(a, i, axis=1, mode="clip") ** 2))(px)
    check(g, jax.grad(lambda a: jnp.sum(jnp.take(a, i, axis=1, mode="clip") ** 2))(jx), exact=False)


def test_take_along_axis_like_jax():
    x = operand((3, 5))
    px, jx = pnp.asarray(x), jnp.asarray(x)
    i = A([-1, 7, 0], [2, -9, 4], [1, 1, -5])
    for mode in (None, "fill", "clip"):
        check(pnp.take_along_axis(px, i, 1, mode=mode), jnp.take_along_axis(jx, i, 1, mode=mode))
    check(pnp.take_along_axis(px, i, 1, fill_value=0.5), jnp.take_along_axis(jx, i, 1, fill_value=0.5))
    g = podlet.grad(lambda a: pnp.sum(pnp.take_along_axis(a, i, 1) ** 2))(px)
    check(g, jax.grad(lambda a: jnp.sum(jnp.take_along_axis(a, i, 1) ** 2))(jx), exact=False)


# ---- x.at[idx] -------------------------------------------------------------------------

def updates_for(shape, key, dtype=np.float32):
    s = jnp.asarray(operand(shape))[key].shape
    return (rng.integers(-20, 20, s) * 0.25 + 0.125).astype(dtype)


AT_OPS = ["set", "add", "subtract", "multiply", "min", "max", "divide", "power"]


@pytest.mark.parametrize("case", range(len(CASES)), ids=IDS)
def test_at_updates_eager(case):
    shape, key = CASES[case]
    x = operand(shape)
    u = updates_for(shape, key)
    # Three of the eight update ops per index form, rotating, so every op meets every
    # kind of index across the table (each JAX eager op compiles: all eight doubled the
    # file's time).
    for op in [AT_OPS[(case + k) % len(AT_OPS)] for k in (0, 3, 5)]:
        uu = np.abs(u) if op == "power" else u
        want = getattr(jnp.asarray(x).at[key], op)(uu)
        got = getattr(pnp.asarray(x).at[key], op)(uu)
        check(got, want, exact=op in ("set", "min", "max"))
    check(pnp.asarray(x).at[key].get(), jnp.asarray(x).at[key].get())


@pytest.mark.parametrize("shape,key", CASES[::3], ids=IDS[::3])
def test_at_updates_jit(shape, key):
    x = operand(shape)
    u = updates_for(shape, key)
    rebuild, arrays = traced(key)
    for op in ("set", "add", "multiply", "max"):
        want = jax.jit(lambda a, v, *i: getattr(a.at[rebuild(i)], op)(v))(jnp.asarray(x), u, *arrays)
        got = podlet.jit(lambda a, v, *i: getattr(a.at[rebuild(i)], op)(v))(
            pnp.asarray(x), pnp.asarray(u), *[pnp.asarray(i) for i in arrays])
        check(got, want, exact=op != "multiply")


@pytest.mark.parametrize("shape,key", CASES[1::3], ids=IDS[1::3])
def test_at_set_add_gradients(shape, key):
    x = operand(shape)
    u = updates_for(shape, key)
    for op in ("set", "add"):
        def f(lib):
            return lambda a, v: lib.sum(getattr(a.at[key], op)(v * v) ** 2)
        want = jax.grad(f(jnp), argnums=(0, 1))(jnp.asarray(x), jnp.asarray(u))
        got = podlet.grad(f(pnp), argnums=(0, 1))(pnp.asarray(x), pnp.asarray(u))
        check(got[0], want[0], exact=False)
        check(got[1], want[1], exact=False)
    rebuild, arrays = traced(key)

    def g(lib, jit):
        return jit(jax.grad(lambda a, v, *i: lib.sum(a.at[rebuild(i)].set(v) ** 3), argnums=(0, 1))
                   if lib is jnp else podlet.grad(lambda a, v, *i: lib.sum(a.at[rebuild(i)].set(v) ** 3),
                                                  argnums=(0, 1)))
    want = g(jnp, jax.jit)(jnp.asarray(x), jnp.asarray(u), *arrays)
    got = g(pnp, podlet.jit)(pnp.asarray(x), pnp.asarray(u), *[pnp.asarray(i) for i in arrays])
    check(got[0], want[0], exact=False)
    check(got[1], want[1], exact=False)


def test_at_repeated_indices():
    x = np.ones(6, np.float32)
    i = A(1, 4, 1, 1, -2, 9)  # 1 three times, 4 twice (-2 wraps), 9 dropped
    u = np.array([2, 3, 5, 7, 11, 13], np.float32)
    for op in AT_OPS:
        want = getattr(jnp.asarray(x).at[i], op)(u)
        check(getattr(pnp.asarray(x).at[i], op)(u), want, exact=op != "power")
        got = podlet.jit(lambda a, j, v: getattr(a.at[j], op)(v))(pnp.asarray(x), pnp.asarray(i), pnp.asarray(u))
        check(got, want, exact=op != "power")
    # set with repeated indices: the last update wins (jax on CPU), and only it gets a gradient.
    f = lambda lib: lambda a, v: lib.sum(a.at[i].set(v) ** 2 * lib.arange(6.0))  # noqa: E731
    want = jax.grad(f(jnp), argnums=(0, 1))(jnp.asarray(x), jnp.asarray(u))
    got = podlet.grad(f(pnp), argnums=(0, 1))(pnp.asarray(x), pnp.asarray(u))
    check(got[0], want[0], exact=False)
    check(got[1], want[1], exact=False)


def test_at_apply_get_modes_and_dtypes():
    x = np.arange(6, dtype=np.float32) + 1
    px, jx = pnp.asarray(x), jnp.asarray(x)
    i = A(1, 1, 3, -1, 8)
    check(px.at[i].apply(lambda v: v * 2), jx.at[i].apply(lambda v: v * 2))
    check(podlet.jit(lambda a, j: a.at[j].apply(pnp.sqrt))(px, pnp.asarray(i)), jx.at[i].apply(jnp.sqrt))
    for mode in (None, "clip", "fill", "drop", "promise_in_bounds"):
        if mode != "promise_in_bounds":
            check(px.at[i].get(mode=mode), jx.at[i].get(mode=mode))
            check(px.at[i].set(-1.0, mode=mode), jx.at[i].set(-1.0, mode=mode))
    check(px.at[i].get(mode="fill", fill_value=-7), jx.at[i].get(mode="fill", fill_value=-7))
    check(px.at[A(-1, 2)].get(wrap_negative_indices=False), jx.at[A(-1, 2)].get(wrap_negative_indices=False))
    check(px.at[A(-1, 2)].get(wrap_negative_indices=False, mode="fill"),
          jx.at[A(-1, 2)].get(wrap_negative_indices=False, mode="fill"))
    xi = np.arange(5, dtype=np.int32)
    check(pnp.asarray(xi).at[1].set(2.7), jnp.asarray(xi).at[1].set(2.7))
    check(pnp.asarray(xi).at[A(0, 0, 4)].add(3), jnp.asarray(xi).at[A(0, 0, 4)].add(3))
    check(pnp.asarray(xi).at[A(0, 7)].get(mode="fill"), jnp.asarray(xi).at[A(0, 7)].get(mode="fill"))
    xb = np.zeros(4, bool)
    check(pnp.asarray(xb).at[A(1, 3)].set(True), jnp.asarray(xb).at[A(1, 3)].set(True))
    xh = operand((3, 4)).astype(ml_dtypes.bfloat16)
    check(pnp.asarray(xh).at[E, A(0, 2)].set(1.5), jnp.asarray(xh).at[E, A(0, 2)].set(1.5))
    check(pnp.asarray(xh).at[1:, None, 1].add(2.0), jnp.asarray(xh).at[1:, None, 1].add(2.0))
    with pytest.raises(ValueError):
        pnp.zeros((3, 4)).at[0].set(pnp.ones((1, 1, 4)))


def test_at_set_under_jit_with_traced_operand_and_static_index():
    x = operand((4, 5))
    f = lambda a, v: a.at[:, A(0, -1)].set(v).at[1:3, 2].add(1.0)  # noqa: E731
    v = np.ones((4, 2), np.float32)
    check(podlet.jit(f)(pnp.asarray(x), pnp.asarray(v)), jax.jit(f)(jnp.asarray(x), v))
