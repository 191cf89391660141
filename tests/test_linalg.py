"""podlet.numpy.linalg / podlet.lax.linalg against jax.numpy.linalg (and NumPy float64).

The seven primitives (cholesky, triangular_solve, lu, eigh, eig, qr, svd) go through
check_prim (forward, eager == jit bits, vmap == loop bits, triangular_solve's VJP
against finite differences); the public functions are compared with JAX on batched
float32 inputs, values and gradients, under jit and vmap; each custom derivative rule
is checked once against float64 central differences; second derivatives (hessians,
jacrev of jacrev, grad of grad) against jax.hessian. Eigenvectors and singular vectors
are compared through sign-invariant quantities, eig's complex eigenvectors up to a phase. Kept small: the whole file is meant to
take seconds.
"""
import numpy as np
import pytest

import jax
import jax.numpy as jnp_jax

import podlet
import podlet.numpy as jnp
import podlet.numpy.linalg as la
import podlet.lax.linalg as lla
from prim_check import check_prim

RNG = np.random.default_rng(26)
F32 = dict(rtol=2e-4, atol=2e-5)
GRAD32 = dict(rtol=2e-3, atol=2e-4)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def spd(*batch, n=4, dtype=np.float32):
    x = RNG.standard_normal(batch + (n, n))
    return (x @ np.swapaxes(x, -1, -2) + n * np.eye(n)).astype(dtype)


def well(*batch, n=4, dtype=np.float32):
    """A well-conditioned general square matrix."""
    return (RNG.standard_normal(batch + (n, n)) + 3 * np.eye(n)).astype(dtype)


def close(got, want, **tol):
    tol = tol or F32
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, **tol)


@pytest.fixture
def x64():
    podlet.config.update("jax_enable_x64", True)
    jax.config.update("jax_enable_x64", True)
    yield
    podlet.config.update("jax_enable_x64", False)
    jax.config.update("jax_enable_x64", False)


# ---- the primitives -------------------------------------------------------------------
def test_cholesky_primitive():
    for dt in (np.float32, np.float64):
        a = spd(2, n=4, dtype=dt)
        check_prim("cholesky", [a], ref=np.linalg.cholesky, rtol=1e-5 if dt == np.float32 else 1e-12)


@pytest.mark.parametrize("lower,transpose_a,unit", [(1, 0, 0), (0, 1, 0), (1, 1, 1), (0, 0, 1)])
def test_triangular_solve_primitive(lower, transpose_a, unit):
    n, k = 4, 3
    a = (RNG.standard_normal((2, n, n)) + 4 * np.eye(n))
    b = RNG.standard_normal((2, n, k))

    def ref(a, b):
        t = np.tril(a) if lower else np.triu(a)
        if unit:
            t = t * (1 - np.eye(n)) + np.eye(n)
        return np.linalg.solve(np.swapaxes(t, -1, -2) if transpose_a else t, b)

    attrs = dict(lower=lower, transpose_a=transpose_a, unit_diagonal=unit)
    check_prim("triangular_solve", [a.astype(np.float32), b.astype(np.float32)], attrs, ref=ref, rtol=1e-4, atol=1e-5)
    check_prim("triangular_solve", [a, b], attrs, ref=ref, grad_argnums=(0, 1), check_vmap=False)
    # podlet.lax.linalg.triangular_solve (left_side=False: x op(a) = b) against JAX
    bt = np.swapaxes(b, -1, -2).astype(np.float32)
    kw = dict(left_side=False, lower=bool(lower), transpose_a=bool(transpose_a), unit_diagonal=bool(unit))
    close(lla.triangular_solve(a.astype(np.float32), bt, **kw),
          jax.lax.linalg.triangular_solve(a.astype(np.float32), bt, **kw))


def test_lu_eigh_qr_svd_primitives():
    a = well(2, n=4)
    lu, piv, perm = check_prim("lu", [a])
    jlu, jpiv, jperm = jax.lax.linalg.lu(a)
    close(lu, jlu)
    np.testing.assert_array_equal(piv, jpiv)
    np.testing.assert_array_equal(perm, jperm)
    rect = rand(2, 5, 3)
    check_prim("lu", [rect])
    sym = spd(2, n=4)
    v, w = check_prim("eigh", [sym], {"lower": 1})
    close(w, np.linalg.eigvalsh(sym.astype(np.float64)))
    close(v @ (w[..., None] * np.swapaxes(v, -1, -2)), sym, rtol=1e-4, atol=1e-4)
    for full in (0, 1):
        q, r = check_prim("qr", [rect], {"full_matrices": full})
        close(np.matmul(q, r), rect)
        s, u, vt = check_prim("svd", [rect], {"full_matrices": full, "compute_uv": 1})
        k = min(rect.shape[-2:])
        close(np.matmul(u[..., :, :k] * s[..., None, :], vt[..., :k, :]), rect)
    s = check_prim("svd", [rect], {"full_matrices": 0, "compute_uv": 0},
                   ref=lambda x: np.linalg.svd(x, compute_uv=False), rtol=1e-5, atol=1e-5)
    assert s.shape == (2, 3)


def test_primitives_refuse_bad_dtypes_and_shapes():
    with pytest.raises(podlet.DTypeError, match="bfloat16"):
        la.cholesky(jnp.asarray(np.eye(3), dtype=jnp.bfloat16))
    with pytest.raises(podlet.DTypeError, match="bfloat16"):
        la.svd(jnp.asarray(np.eye(3), dtype=jnp.bfloat16))
    with pytest.raises(ValueError, match=r"\(3, 4\)"):
        la.inv(np.ones((3, 4), np.float32))
    with pytest.raises(podlet.ShapeError, match=r"square"):
        podlet._core.apply("eigh", [podlet._core.Array.from_numpy(np.ones((3, 4), np.float32))], {})
    with pytest.raises(ValueError, match="must be at least two dimensional"):
        la.solve(np.ones(3, np.float32), np.ones(3, np.float32))


def test_bad_values_give_nans_like_jax():
    not_pd = np.array([[1.0, 2.0], [2.0, 1.0]], np.float32)
    np.testing.assert_array_equal(np.asarray(la.cholesky(not_pd)), np.asarray(jnp_jax.linalg.cholesky(not_pd)))
    assert np.isnan(np.asarray(la.cholesky(not_pd))[1, 1])
    nan = np.full((3, 3), np.nan, np.float32)
    for f in (la.eigvalsh, la.svdvals, lambda x: la.qr(x).R):
        assert np.isnan(np.asarray(f(nan))).all()
    sing = np.ones((4, 4), np.float32)
    assert float(la.det(sing)) == float(jnp_jax.linalg.det(sing)) == 0.0
    s, ld = la.slogdet(sing)
    assert float(s) == 0.0 and float(ld) == -np.inf
    assert not np.isfinite(np.asarray(la.solve(sing, np.ones(4, np.float32)))).all()


# ---- values against jax.numpy.linalg -------------------------------------------------
def test_factorisations():
    """Against LAPACK through NumPy float64 (what jax.numpy.linalg calls on CPU) and, for
    the NaN pattern, JAX itself (test_bad_values_give_nans_like_jax)."""
    a = spd(2, 3, n=4)
    a64 = a.astype(np.float64)
    close(la.cholesky(a), np.linalg.cholesky(a64))
    close(la.cholesky(a, upper=True), jnp_jax.linalg.cholesky(a, upper=True))
    w, v = la.eigh(a)
    nw, nv = np.linalg.eigh(a64)
    close(w, nw, rtol=1e-4, atol=1e-4)
    close(np.abs(np.sum(np.asarray(v) * nv, axis=-2)), np.ones((2, 3, 4)), atol=1e-3, rtol=0)
    close(np.asarray(v) @ (np.asarray(w)[..., None] * np.swapaxes(np.asarray(v), -1, -2)), a, atol=1e-4, rtol=1e-4)
    close(la.eigvalsh(a, UPLO="U"), np.linalg.eigvalsh(a64, UPLO="U"), rtol=1e-4, atol=1e-4)
    m = rand(2, 5, 3)
    m64 = m.astype(np.float64)
    for mode in ("reduced", "complete"):
        q, r = la.qr(m, mode=mode)
        nq, nr = np.linalg.qr(m64, mode=mode)
        assert q.shape == nq.shape and r.shape == nr.shape
        close(r, nr, rtol=1e-4, atol=1e-4)  # Householder signs as LAPACK's
        close(np.matmul(q, r), m)
    close(la.qr(m, mode="r"), np.linalg.qr(m64, mode="r"), rtol=1e-4, atol=1e-4)
    for mat in (m64, np.swapaxes(m64, -1, -2)):
        for full in (True, False):
            u, s, vh = la.svd(mat.astype(np.float32), full_matrices=full)
            nu, ns, nvh = np.linalg.svd(mat, full_matrices=full)
            assert u.shape == nu.shape and vh.shape == nvh.shape
            close(s, ns)
            k = s.shape[-1]
            close(np.abs(np.sum(np.asarray(u)[..., :k] * nu[..., :k], axis=-2)), np.ones((2, k)), atol=1e-3, rtol=0)
            close(np.abs(np.sum(np.asarray(vh)[..., :k, :] * nvh[..., :k, :], axis=-1)), np.ones((2, k)),
                  atol=1e-3, rtol=0)
        close(la.svd(mat, compute_uv=False), np.linalg.svd(mat, compute_uv=False))
        close(la.svdvals(mat), np.linalg.svdvals(mat))


def test_solvers_and_determinants():
    """Against jax.numpy.linalg once, NumPy float64 for the rest (cheap oracles)."""
    a = well(2, n=4)
    b = rand(2, 4, 3)
    close(la.solve(a, b), jnp_jax.linalg.solve(a, b))
    close(la.solve(a, b[0, :, 0]), np.linalg.solve(a, b[0, :, 0]))  # b a vector, a batched
    close(la.inv(a), np.linalg.inv(a.astype(np.float64)))
    for n in (1, 2, 3, 5):
        m = well(2, n=n) * np.array([1, -1], np.float32)[:, None, None]
        m64 = m.astype(np.float64)
        close(la.det(m), np.linalg.det(m64), rtol=1e-4, atol=1e-4)
        s, ld = la.slogdet(m)
        ns, nld = np.linalg.slogdet(m64)
        close(s, ns)
        close(ld, nld)
    close(la.det(a), jnp_jax.linalg.det(a), rtol=1e-4)
    sq = rand(5, 3)
    bb = rand(5, 2)
    x, resid, rank, s = la.lstsq(sq, bb)
    nx, nres, nrank, ns = np.linalg.lstsq(sq.astype(np.float64), bb.astype(np.float64), rcond=None)
    close(x, nx)
    close(resid, nres, rtol=1e-3, atol=1e-4)
    close(s, ns)
    assert int(rank) == int(nrank)
    close(la.pinv(sq), np.linalg.pinv(sq.astype(np.float64)))
    close(la.pinv(a), np.linalg.pinv(a.astype(np.float64)))
    for n in (0, 1, 3, 5, -2):
        close(la.matrix_power(a, n), np.linalg.matrix_power(a.astype(np.float64), n), rtol=1e-3, atol=1e-3)
    low = np.asarray(rand(2, 4, 2) @ rand(2, 2, 4))
    np.testing.assert_array_equal(np.asarray(la.matrix_rank(low)), np.linalg.matrix_rank(low))
    for p in (None, 2, -2, 1, -1, np.inf, "fro", "nuc"):
        close(la.cond(a, p), np.linalg.cond(a.astype(np.float64), p), rtol=1e-3)
    t = well(n=6)
    tb = rand(2, 3)
    close(la.tensorsolve(t.reshape(2, 3, 2, 3), tb), np.linalg.tensorsolve(t.reshape(2, 3, 2, 3), tb))
    close(la.tensorinv(t.reshape(2, 3, 6), ind=2), np.linalg.tensorinv(t.reshape(2, 3, 6), ind=2))


def test_norms_and_products():
    x = rand(2, 3, 4)
    x64 = x.astype(np.float64)
    for ord_ in (None, "fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf):
        for keepdims in (False, True):
            close(la.norm(x, ord_, axis=(1, 2), keepdims=keepdims),
                  np.linalg.norm(x64, ord_, axis=(1, 2), keepdims=keepdims))
    close(la.norm(x, 1, axis=(2, 0)), np.linalg.norm(x64, 1, axis=(2, 0)))
    for ord_ in (None, 0, 1, 2, 3, np.inf, -np.inf, -1):
        close(la.norm(x, ord_, axis=1), np.linalg.norm(x64, ord_, axis=1))
        o = 2 if ord_ is None else ord_
        close(la.vector_norm(x, ord=o, axis=(0, 2)), np.linalg.vector_norm(x64, ord=o, axis=(0, 2)))
    close(la.norm(x), jnp_jax.linalg.norm(x))
    close(la.vector_norm(x), np.linalg.vector_norm(x64))
    close(la.matrix_norm(x, ord="nuc"), np.linalg.matrix_norm(x64, ord="nuc"))
    with pytest.raises(ValueError, match="Invalid order"):
        la.norm(x, "bad", axis=(0, 1))
    y = rand(2, 4, 3)
    close(la.matmul(x, y), np.matmul(x64, y))
    z = rand(4, 5)
    close(la.tensordot(x, z, axes=1), np.tensordot(x64, z, axes=1))
    close(la.matrix_transpose(x), np.linalg.matrix_transpose(x))
    close(la.diagonal(x, offset=1), np.linalg.diagonal(x, offset=1))
    close(la.trace(x), np.linalg.trace(x64))
    close(la.vecdot(x, x), np.linalg.vecdot(x64, x64))
    v3 = rand(2, 3)
    close(la.cross(v3, v3[::-1]), np.linalg.cross(v3, v3[::-1]))
    close(la.outer(v3[0], x[0, 0]), np.linalg.outer(v3[0], x[0, 0]))
    ms = [rand(3), rand(3, 4), rand(4, 2), rand(2)]
    close(la.multi_dot(ms), np.linalg.multi_dot(ms))
    close(la.multi_dot(ms[1:3]), np.linalg.multi_dot(ms[1:3]))


# ---- gradients against jax.grad --------------------------------------------------------
def C(*shape):
    """Fixed loss weights of a shape."""
    return np.random.default_rng(sum(shape) + len(shape)).standard_normal(shape).astype(np.float32)


# name: (loss(np_module, linalg_module)(a), a). Losses of eigen/singular vectors are
# sign-invariant (squares), as LAPACK and Eigen may pick opposite signs.
GRAD_CASES = {
    "cholesky": (lambda np_, L: lambda a: np_.sum(L.cholesky(a) * C(2, 4, 4)), spd(2)),
    "solve": (lambda np_, L: lambda a: np_.sum(L.solve(a, C(2, 4, 2)) * C(2, 4, 2)), well(2)),
    "inv": (lambda np_, L: lambda a: np_.sum(L.inv(a) * C(2, 4, 4)), well(2)),
    "det": (lambda np_, L: lambda a: np_.sum(L.det(a) * C(2)), well(2, n=5)),
    "slogdet": (lambda np_, L: lambda a: np_.sum(L.slogdet(a)[1] * C(2)),
                well(2) * np.array([1, -1], np.float32)[:, None, None]),
    "eigh": (lambda np_, L: lambda a: np_.sum(L.eigh(a)[0] * C(2, 4)) + np_.sum(L.eigh(a)[1] ** 2 * C(2, 4, 4)),
             spd(2)),
    "qr": (lambda np_, L: lambda a: np_.sum(L.qr(a)[0] * C(2, 5, 3)) + np_.sum(L.qr(a)[1] * C(2, 3, 3)),
           rand(2, 5, 3)),
    "svdvals": (lambda np_, L: lambda a: np_.sum(L.svdvals(a) * C(2, 3)), rand(2, 5, 3)),
    "svd_uv": (lambda np_, L: lambda a: np_.sum(L.svd(a, full_matrices=False)[0] ** 2 * C(2, 5, 3))
               + np_.sum(L.svd(a, full_matrices=False)[2] ** 2 * C(2, 3, 3)), rand(2, 5, 3)),
    "pinv": (lambda np_, L: lambda a: np_.sum(L.pinv(a) * C(2, 3, 4)), rand(2, 4, 3)),
    "norm": (lambda np_, L: lambda a: np_.sum(L.norm(a, 2, axis=(1, 2))) + np_.sum(L.norm(a, "nuc", axis=(1, 2)))
             + np_.sum(L.norm(a, axis=1)), rand(2, 4, 3)),
    "lstsq": (lambda np_, L: lambda a: np_.sum(L.lstsq(a, C(5, 2))[0] * C(3, 2)), rand(5, 3)),
    # lax.linalg.lu (JAX's _lu_jvp_rule), a tall and a wide matrix
    "lu": (lambda np_, L: lambda a: np_.sum((jax.lax.linalg.lu if np_ is jnp_jax else lla.lu)(a)[0] * C(2, 5, 3))
           + np_.sum((jax.lax.linalg.lu if np_ is jnp_jax else lla.lu)(np_.swapaxes(a, 1, 2))[0] * C(2, 3, 5)),
           rand(2, 5, 3)),
}


@pytest.fixture(scope="module")
def jax_grads(request):
    """Every reference gradient from one jitted JAX program (one compile, not dozens of
    eager ones), kept in JAX's persistent compilation cache under .pytest_cache (as
    tests/test_numpy_api.py does): repeated runs skip the compile."""
    cache = getattr(request.config, "cache", None)  # None under -p no:cacheprovider
    if cache is not None and not jax.config.jax_compilation_cache_dir:
        jax.config.update("jax_compilation_cache_dir", str(cache.mkdir("jax_oracle_xla_cache")))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    names = list(GRAD_CASES)
    f = jax.jit(lambda *xs: [jax.grad(GRAD_CASES[n][0](jnp_jax, jnp_jax.linalg))(x) for n, x in zip(names, xs)])
    return dict(zip(names, f(*[GRAD_CASES[n][1] for n in names])))


@pytest.mark.parametrize("name", list(GRAD_CASES))
def test_gradients_match_jax(name, jax_grads):
    make, a = GRAD_CASES[name]
    close(podlet.grad(make(jnp, la))(a), jax_grads[name], **GRAD32)


def test_transforms_jit_vmap_jvp(jax_grads):
    a = spd(3)
    b = rand(3, 4, 2)
    a64 = a.astype(np.float64)
    close(podlet.jit(la.solve)(a, b), np.linalg.solve(a64, b))
    close(podlet.jit(lambda x: la.eigh(x)[0])(a), np.linalg.eigvalsh(a64), rtol=1e-4, atol=1e-4)
    close(podlet.vmap(la.det)(a), np.linalg.det(a64), rtol=1e-4)
    close(podlet.vmap(la.cholesky)(a), np.linalg.cholesky(a64))
    close(podlet.vmap(la.solve, in_axes=(None, 0))(a[0], b), np.linalg.solve(a64[0], b))
    close(podlet.vmap(lambda x: la.svd(x, compute_uv=False))(b), np.linalg.svd(b, compute_uv=False))
    # gradients under jit and vmap: the same as eager podlet.grad (checked against JAX above)
    make, c = GRAD_CASES["cholesky"]
    f = make(jnp, la)
    want = np.asarray(jax_grads["cholesky"])
    close(podlet.jit(podlet.grad(f))(c), want, **GRAD32)
    g = lambda x: jnp.sum(la.inv(x) * x[0, 0]) + jnp.sum(la.eigvalsh(x) ** 2)
    close(podlet.vmap(podlet.grad(g))(a), np.stack([np.asarray(podlet.grad(g)(a[i])) for i in range(3)]), **GRAD32)
    # forward mode: d log|det a| [t] = tr(a^-1 t)
    t = rand(3, 4, 4)
    _, tan = podlet.jvp(lambda x: la.slogdet(x)[1], (a,), (t,))
    close(tan, np.trace(np.linalg.solve(a64, t), axis1=-2, axis2=-1), **GRAD32)


@pytest.mark.parametrize("name", ["cholesky", "solve", "det", "eigh", "qr", "svd", "pinv"])
def test_gradient_finite_differences_float64(name, x64):
    rng = np.random.default_rng(7)
    n = 4
    c = rng.standard_normal((n, n))
    fs = {
        "cholesky": (lambda a: jnp.sum(la.cholesky(a) * c), spd(n=n, dtype=np.float64)),
        "solve": (lambda a: jnp.sum(la.solve(a, c) * c), well(n=n, dtype=np.float64)),
        "det": (lambda a: la.det(a), well(n=5, dtype=np.float64)),
        "eigh": (lambda a: jnp.sum(la.eigh(a)[0] * c[0]) + jnp.sum(la.eigh(a)[1] ** 2 * c), spd(n=n, dtype=np.float64)),
        "qr": (lambda a: jnp.sum(la.qr(a)[0] * c) + jnp.sum(la.qr(a)[1] * c), well(n=n, dtype=np.float64)),
        "svd": (lambda a: jnp.sum(la.svd(a, full_matrices=False)[0] ** 2 * c[:, :3].repeat(2, 0)[:5])
                + jnp.sum(la.svdvals(a) * c[0, :3]), rng.standard_normal((5, 3))),
        "pinv": (lambda a: jnp.sum(la.pinv(a) * c[:3]), rng.standard_normal((4, 3))),
    }
    f, a = fs[name]
    g = np.asarray(podlet.grad(f)(jnp.asarray(a)))
    assert g.dtype == np.float64
    eps = 1e-6
    for _ in range(2):
        d = rng.standard_normal(a.shape)
        if name in ("cholesky", "eigh"):
            d = d + d.T  # stay symmetric
        fd = (float(f(jnp.asarray(a + eps * d))) - float(f(jnp.asarray(a - eps * d)))) / (2 * eps)
        an = float(np.sum(g * d))
        assert abs(fd - an) <= 1e-6 * max(1.0, abs(fd)), (name, an, fd)


def test_submodules_and_names():
    import importlib
    assert importlib.import_module("podlet.numpy.linalg") is jnp.linalg is la
    assert importlib.import_module("podlet.lax.linalg") is podlet.lax.linalg is lla
    want = {n for n in dir(jnp_jax.linalg) if not n.startswith("_")} - {"eig", "eigvals"}
    missing = sorted(n for n in want if not hasattr(la, n))
    assert missing == [], missing
    for name in ("cholesky", "triangular_solve", "lu", "eigh", "qr", "svd"):
        assert hasattr(lla, name)
    r = la.slogdet(spd())
    assert type(r).__name__ == "SlogdetResult" and r.sign.shape == () and r.logabsdet.shape == ()
    r = la.eigh(spd())
    assert r.eigenvalues.shape == (4,) and r.eigenvectors.shape == (4, 4)
    r = la.svd(rand(3, 2))
    assert (r.U.shape, r.S.shape, r.Vh.shape) == ((3, 3), (2,), (2, 2))
    assert la.solve(np.eye(2, dtype=np.int32), np.ones(2, np.int32)).dtype == np.float32


def test_bits_do_not_depend_on_thread_count():
    a = spd(6, n=5)
    m = rand(6, 5, 3)
    n0 = podlet.config.num_threads
    outs = []
    try:
        for threads in (1, 2):
            podlet.config.update("num_threads", threads)
            outs.append([np.asarray(o) for o in (la.cholesky(a), *la.eigh(a), *la.svd(m), *la.qr(m), la.inv(a),
                                                 lla.triangular_solve(a, m, left_side=True, lower=True))])
    finally:
        podlet.config.update("num_threads", n0)
    for x, y in zip(*outs):
        assert x.tobytes() == y.tobytes()


def test_empty_matrices_like_jax():
    z = lambda *s: np.zeros(s, np.float32)
    assert la.cholesky(z(0, 0)).shape == (0, 0)
    assert [x.shape for x in la.svd(z(3, 0))] == [(3, 3), (0,), (0, 0)]
    assert la.svd(z(2, 3, 0), compute_uv=False).shape == (2, 0)
    assert [x.shape for x in la.qr(z(0, 3))] == [(0, 0), (0, 3)]
    assert la.inv(z(2, 0, 0)).shape == (2, 0, 0)
    assert [x.shape for x in la.eigh(z(0, 0))] == [(0,), (0, 0)]
    assert float(la.det(z(0, 0))) == 1.0 and [float(x) for x in la.slogdet(z(0, 0))] == [1.0, 0.0]
    assert la.solve(z(0, 0), z(0, 2)).shape == (0, 2)
    assert la.pinv(z(0, 3)).shape == (3, 0)


# ---- second derivatives through the factorisations ------------------------------------
_W = RNG.standard_normal((4, 4)).astype(np.float32)
HESS_CASES = {  # name: (f(numpy module, linalg module), a (4, 4) input)
    "cholesky": (lambda np_, L: lambda a: np_.sum(L.cholesky(a) * _W), spd()),
    "solve": (lambda np_, L: lambda a: np_.sum(L.solve(a, _W[:, :2]) * _W[:, 2:]), well()),
    "inv": (lambda np_, L: lambda a: np_.sum(L.inv(a) * _W), well()),
    "det": (lambda np_, L: lambda a: L.det(a), well()),
    "slogdet": (lambda np_, L: lambda a: L.slogdet(a)[1], -well()),
    "eigh": (lambda np_, L: lambda a: np_.sum(L.eigh(a)[0] * _W[0]), spd()),
    "qr": (lambda np_, L: lambda a: np_.sum(L.qr(a)[0] * _W) + np_.sum(L.qr(a)[1] * _W.T), well()),
    "svdvals": (lambda np_, L: lambda a: np_.sum(L.svdvals(a) * _W[0]), well()),
    "pinv": (lambda np_, L: lambda a: np_.sum(L.pinv(a) * _W), well()),
    "lu": (lambda np_, L: lambda a: np_.sum(L.lu(a)[0] * _W), well()),
}


JAX_HESS = ["cholesky", "solve", "inv", "det", "slogdet", "eigh", "qr", "svdvals"]


@pytest.fixture(scope="module")
def jax_hessians(request):
    """jax.hessian of the JAX_HESS cases from one jitted program compiled without XLA's
    optimisation passes (same semantics) and kept in the persistent compilation cache, as
    jax_grads: eager jax.hessian would compile op by op (a minute)."""
    cache = getattr(request.config, "cache", None)
    if cache is not None and not jax.config.jax_compilation_cache_dir:
        jax.config.update("jax_compilation_cache_dir", str(cache.mkdir("jax_oracle_xla_cache")))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    before = jax.config.read("jax_disable_most_optimizations")
    jax.config.update("jax_disable_most_optimizations", True)
    try:
        f = jax.jit(lambda *xs: [jax.hessian(HESS_CASES[n][0](jnp_jax, jnp_jax.linalg))(x)
                                 for n, x in zip(JAX_HESS, xs)])
        return dict(zip(JAX_HESS, f(*[HESS_CASES[n][1] for n in JAX_HESS])))
    finally:
        jax.config.update("jax_disable_most_optimizations", before)


@pytest.mark.parametrize("name", JAX_HESS)
def test_hessians_match_jax(name, jax_hessians):
    make, a = HESS_CASES[name]
    want = np.asarray(jax_hessians[name])
    h = podlet.hessian(make(jnp, la))(a)
    assert h.shape == (4, 4, 4, 4)
    close(h, want, rtol=1e-3, atol=1e-3 * float(np.abs(want).max()))


@pytest.mark.parametrize("name", ["lu", "pinv", "det", "eigh"])
def test_hessians_finite_differences_float64(name, x64):
    # the rest (lax.linalg.lu, pinv: JAX's hessians take long to compile) and two checked
    # against JAX above: the hessian against central differences of podlet's gradient
    # (itself checked against JAX), along random directions.
    make, a = HESS_CASES[name]
    f = make(jnp, lla if name == "lu" else la)
    a = jnp.asarray(a.astype(np.float64))
    h = np.asarray(podlet.hessian(f)(a))
    assert h.dtype == np.float64
    g = podlet.grad(f)
    rng = np.random.default_rng(3)
    eps = 1e-5
    for _ in range(2):
        d = rng.standard_normal((4, 4))
        if name == "eigh":
            d = d + d.T
        fd = (np.asarray(g(a + eps * d)) - np.asarray(g(a - eps * d))) / (2 * eps)
        np.testing.assert_allclose(np.einsum("ijkl,kl->ij", h, d), fd, rtol=1e-6, atol=1e-6 * np.abs(fd).max())


@pytest.mark.parametrize("name", ["cholesky", "inv"])
def test_second_derivatives_every_way(name, jax_hessians):
    # jacrev of jacrev, jacfwd of grad under jit, grad of grad: JAX's hessian each time.
    make, a = HESS_CASES[name]
    f = make(jnp, la)
    want = np.asarray(jax_hessians[name])
    tol = dict(rtol=1e-3, atol=1e-3 * float(np.abs(want).max()))
    close(podlet.jacrev(podlet.jacrev(f))(a), want, **tol)
    close(podlet.jit(podlet.jacfwd(podlet.grad(f)))(a), want, **tol)
    d = rand(4, 4)
    gg = podlet.grad(lambda x: jnp.sum(podlet.grad(f)(x) * d))(a)
    close(gg, np.einsum("ijkl,ij->kl", want, d), **tol)


def test_derivatives_past_the_rule_depth_are_a_named_error():
    # Each level of a factorisation's rule holds its function again, to lla._RULE_DEPTH
    # levels; one order more reaches the bare primitive: an error naming it, never a zero.
    a = spd(n=2, dtype=np.float32)
    f = lambda x: jnp.sum(la.cholesky(x))
    for _ in range(lla._RULE_DEPTH):
        f = (lambda g: lambda x: jnp.sum(podlet.grad(g)(x)))(f)
    assert np.isfinite(float(f(a)))  # third order
    f = (lambda g: lambda x: jnp.sum(podlet.grad(g)(x)))(f)
    with pytest.raises(podlet.PodletError, match="'cholesky'"):
        f(a)


def test_refusing_rules_do_not_stop_jit():
    # svd's full matrices, qr of a wide matrix: no derivative (JAX raises when one is
    # taken), but jit and vmap of the functions themselves work, as in JAX.
    x = rand(3, 5)
    u = la.svd(x).U
    np.testing.assert_array_equal(np.asarray(podlet.jit(lambda y: la.svd(y).U)(x)), np.asarray(u))
    np.testing.assert_array_equal(np.asarray(podlet.vmap(lambda y: la.qr(y).R)(x[None])[0]), np.asarray(la.qr(x).R))
    with pytest.raises(podlet.PodletError, match="'svd'"):
        podlet.grad(lambda y: jnp.sum(la.svd(y).U))(x)
    with pytest.raises(podlet.PodletError, match="'qr'"):
        podlet.grad(lambda y: jnp.sum(la.qr(y).R))(x)


# ---- eig / eigvals / roots ------------------------------------------------------------
def _match_columns(w, v, w_ref, v_ref):
    """v's columns reordered to w_ref's order (nearest eigenvalue), each turned by the
    phase that best aligns it with v_ref's column (eigenvectors are unique up to one)."""
    w, v, w_ref, v_ref = (np.asarray(x, np.complex128) for x in (w, v, w_ref, v_ref))
    idx = [int(np.argmin(np.abs(w - x))) for x in w_ref]
    assert sorted(idx) == list(range(len(w))), (w, w_ref)
    v = v[:, idx]
    ph = np.sum(np.conj(v) * v_ref, axis=0)
    return w[idx], v * (ph / np.abs(ph))


def test_eig_primitive():
    a = rand(3, 5, 5)
    for vec in (0, 1):
        outs = check_prim("eig", [a], {"compute_right_eigenvectors": vec})
        assert len(outs) == (4 if vec else 2)
    wr, wi, vr, vi = check_prim("eig", [a.astype(np.float64)], {"compute_right_eigenvectors": 1})
    w, v = wr + 1j * wi, vr + 1j * vi
    np.testing.assert_allclose(a @ v, v * w[:, None, :], atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(v, axis=-2), 1, rtol=1e-12)
    # LAPACK's conventions: pairs adjacent, positive imaginary part first; largest component real
    for b in range(3):
        for j in range(5):
            if wi[b, j] > 0:
                assert wi[b, j + 1] == -wi[b, j] and wr[b, j + 1] == wr[b, j]
                np.testing.assert_array_equal(v[b, :, j + 1], np.conj(v[b, :, j]))
            k = np.argmax(np.abs(v[b, :, j]))
            assert vi[b, k, j] == 0
    with pytest.raises(podlet.ShapeError, match=r"eig operand must be square.*\(3, 4\)"):
        podlet._core.apply("eig", [podlet._core.Array.from_numpy(np.ones((3, 4), np.float32))], {})
    with pytest.raises(podlet.DTypeError, match="int32"):
        podlet._core.apply("eig", [podlet._core.Array.from_numpy(np.ones((3, 3), np.int32))], {})


def test_eig_eigvals_like_jax():
    a = rand(2, 6, 6)
    w, v = la.eig(a)
    jw, jv = jnp_jax.linalg.eig(a)
    assert w.dtype == v.dtype == np.complex64 and w.shape == (2, 6) and v.shape == (2, 6, 6)
    for b in range(2):
        mw, mv = _match_columns(w[b], v[b], jw[b], jv[b])
        np.testing.assert_allclose(mw, np.asarray(jw[b]), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(mv, np.asarray(jv[b]), atol=2e-4)
    ev = la.eigvals(a)
    np.testing.assert_allclose(np.asarray(ev), np.asarray(w), rtol=1e-5, atol=1e-5)
    # jit and vmap give the eager bits
    np.testing.assert_array_equal(np.asarray(podlet.jit(la.eigvals)(a)), np.asarray(ev))
    jv_ = podlet.vmap(la.eig)(a)
    np.testing.assert_array_equal(np.asarray(jv_.eigenvectors), np.asarray(v))
    # dtypes: integers promote to float32 -> complex64; lax.linalg.eig's [w, vl, vr]
    assert la.eigvals(np.array([[1, 2], [3, 4]])).dtype == np.complex64
    lw, lvl, lvr = lla.eig(a[0])
    jw0, jvl, _ = jax.lax.linalg.eig(a[0])
    _, mvl = _match_columns(lw, lvl, jw0, jvl)
    np.testing.assert_allclose(mvl, np.asarray(jvl), atol=5e-4)
    assert la.eig(np.zeros((0, 0), np.float32)).eigenvectors.shape == (0, 0)
    assert np.isnan(np.asarray(la.eigvals(np.full((3, 3), np.nan, np.float32)))).all()
    with pytest.raises(ValueError, match=r"square matrix. Got shape \(2, 3\)"):
        la.eig(np.ones((2, 3), np.float32))
    with pytest.raises(TypeError, match="eig"):
        la.eigvals(jnp.asarray(np.eye(2)) * 1j)


def test_eig_under_x64_is_complex128(x64):
    a = rand(5, 5, dtype=np.float64)
    w = la.eigvals(a)
    assert w.dtype == np.complex128
    np.testing.assert_allclose(np.sort_complex(np.asarray(w)), np.sort_complex(np.linalg.eigvals(a)), rtol=1e-12)


def test_eig_derivatives_like_jax():
    a = rand(4, 4)
    f = lambda L: lambda x: L.linalg.eigvals(x).real * 1.5 + L.linalg.eigvals(x).imag
    pf = lambda x: jnp.real(la.eigvals(x)) * 1.5 + jnp.imag(la.eigvals(x))
    # rows in podlet's eigenvalue order (LAPACK's and Eigen's QR iterations may order them differently)
    w, jw = np.asarray(la.eigvals(a)), np.asarray(jnp_jax.linalg.eigvals(a))
    idx = [int(np.argmin(np.abs(jw - x))) for x in w]
    assert sorted(idx) == list(range(4))
    want = np.asarray(jax.jacfwd(f(jnp_jax))(a))[idx]
    close(podlet.jacfwd(pf)(a), want, **GRAD32)
    close(podlet.jacrev(pf)(a), want, **GRAD32)
    close(podlet.grad(lambda x: jnp.sum(pf(x)))(a), want.sum(0), **GRAD32)
    # eigenvectors: no derivative (JAX raises NotImplementedError); eig itself under jit is fine
    with pytest.raises(podlet.PodletError, match="'eig'"):
        podlet.grad(lambda x: jnp.sum(jnp.real(la.eig(x).eigenvectors)))(a)
    with pytest.raises(NotImplementedError):
        jax.grad(lambda x: jnp_jax.sum(jnp_jax.linalg.eig(x)[1].real))(a)
    # second derivatives of the eigenvalues need the eigenvectors' derivative: an error, as in JAX
    with pytest.raises(podlet.PodletError, match="'eig'"):
        podlet.hessian(lambda x: jnp.sum(pf(x)))(a)
    np.testing.assert_array_equal(np.asarray(podlet.jit(lambda x: la.eig(x).eigenvectors)(a)),
                                  np.asarray(la.eig(a).eigenvectors))


@pytest.mark.parametrize("p", [[1.0, -6, 11, -6], [0.0, 0, 1, -3, 2], [1.0, 0, 1], [1.0, 2, 0, 0], [3.0],
                               [0.0, 0, 0], [2.0, -1, 0.5, 4, -3, 1]])
def test_roots_like_jax(p):
    p = np.array(p, np.float32)
    for strip in (True, False):
        got, want = jnp.roots(p, strip_zeros=strip), jnp_jax.roots(p, strip_zeros=strip)
        assert got.dtype == want.dtype == np.complex64 and got.shape == want.shape
        g, w = np.asarray(got), np.asarray(want)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        fin = ~np.isnan(w)
        np.testing.assert_allclose(np.sort_complex(g[fin]), np.sort_complex(w[fin]), rtol=1e-3, atol=1e-3)
    jit_roots = podlet.jit(lambda q: jnp.roots(q, strip_zeros=False))(p)
    np.testing.assert_array_equal(np.asarray(jit_roots), np.asarray(jnp.roots(p, strip_zeros=False)))


def test_roots_errors_like_jax():
    with pytest.raises(ValueError, match="rank-1"):
        jnp.roots(np.ones((2, 2), np.float32))
    with pytest.raises(podlet.ConcretizationError, match="strip_zeros=False"):
        podlet.jit(jnp.roots)(np.array([1.0, -3, 2], np.float32))
    assert jnp.roots(np.array([1, -3, 2])).dtype == np.complex64


def test_poly_of_a_square_matrix_like_jax():
    # the characteristic polynomial, from eigvals: complex, as JAX's
    for m in (np.array([[1.0, 2], [3, 4]], np.float32), np.array([[0.0, -1], [1, 0]], np.float32), well(n=4)):
        got, want = jnp.poly(m), jnp_jax.poly(m)
        assert got.dtype == want.dtype == np.complex64 and got.shape == want.shape
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-4 * np.abs(want).max())
