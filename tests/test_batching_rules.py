"""vmap's batching rules: every primitive has one (or a stated reason why it cannot),
and the rules of the collectives, random samplers, window ops, gathers / scatters and
dynamic slices agree with jax.vmap (JAX 0.10.2 is the oracle) or, for random numbers,
with a loop over keys. The per-primitive bit-exactness against a loop of eager binds is
in prim_check.check_batching, run by every primitive test."""
import numpy as np
import pytest

import jax as J
import jax.numpy as JNP

import podlet as pj
import podlet.numpy as jnp
from podlet import lax, _core
from podlet._src.core import bind
from podlet.nn import pooling


def rng(seed=0):
    return np.random.default_rng(seed)


def close(a, b, rtol=1e-6, atol=1e-6):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=rtol, atol=atol)


def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape, b.dtype, b.shape)
    np.testing.assert_array_equal(a, b)


# ---- every primitive has a rule --------------------------------------------------------

def test_every_primitive_has_a_batching_rule_or_a_reason():
    names = _core.prim_names()
    assert len(names) > 90
    lacking = [n for n in names if not _core.prim_info(n)["has_batch"] and not _core.prim_info(n)["no_batch_reason"]]
    assert lacking == [], f"primitives without a batching rule or a no_batch_reason: {lacking}"
    info = _core.prim_info("psum")
    assert set(info) == {"has_vjp", "has_batch", "batch_always", "no_batch_reason", "zero_grad"}
    assert info["batch_always"] and info["has_vjp"] and not info["zero_grad"]
    assert _core.prim_info("random_bits")["zero_grad"]
    with pytest.raises(Exception, match="unknown primitive"):
        _core.prim_info("no_such_prim")


# ---- collectives ----------------------------------------------------------------------

COLLECTIVES = {
    "psum": (lambda x, n: lax.psum(x, n), lambda x, n: J.lax.psum(x, n)),
    "pmean": (lambda x, n: lax.pmean(x, n), lambda x, n: J.lax.pmean(x, n)),
    "pmax": (lambda x, n: lax.pmax(x, n), lambda x, n: J.lax.pmax(x, n)),
    "pmin": (lambda x, n: lax.pmin(x, n), lambda x, n: J.lax.pmin(x, n)),
    "all_gather": (lambda x, n: lax.all_gather(x, n), lambda x, n: J.lax.all_gather(x, n)),
    "all_gather_axis1": (lambda x, n: lax.all_gather(x, n, axis=1), lambda x, n: J.lax.all_gather(x, n, axis=1)),
    "all_gather_tiled": (lambda x, n: lax.all_gather(x, n, axis=1, tiled=True),
                         lambda x, n: J.lax.all_gather(x, n, axis=1, tiled=True)),
    "all_gather_last": (lambda x, n: lax.all_gather(x, n, axis=-1), lambda x, n: J.lax.all_gather(x, n, axis=-1)),
    "ppermute": (lambda x, n: lax.ppermute(x, n, [(0, 2), (1, 0), (2, 1), (3, 3)]),
                 lambda x, n: J.lax.ppermute(x, n, [(0, 2), (1, 0), (2, 1), (3, 3)])),
    "axis_index": (lambda x, n: x * lax.axis_index(n), lambda x, n: x * J.lax.axis_index(n)),
    "mixed": (lambda x, n: x - lax.pmean(x, n) + lax.psum(x * x, n) / lax.pmax(jnp.abs(x) + 1, n),
              lambda x, n: x - J.lax.pmean(x, n) + J.lax.psum(x * x, n) / J.lax.pmax(JNP.abs(x) + 1, n)),
}


@pytest.mark.parametrize("name", sorted(COLLECTIVES))
def test_collective_over_the_vmap_axis(name):
    ours, theirs = COLLECTIVES[name]
    x = rng(1).standard_normal((4, 3, 5)).astype(np.float32)
    got = pj.vmap(lambda v: ours(v, "i"), axis_name="i")(x)
    want = J.vmap(lambda v: theirs(v, "i"), axis_name="i")(x)
    close(got, want)
    # mapped along axis 1, out along axis 1
    got = pj.vmap(lambda v: ours(v, "i"), in_axes=1, out_axes=1, axis_name="i")(x.transpose(1, 0, 2))
    close(got, np.asarray(want).swapaxes(0, 1) if np.ndim(want) >= 2 else want)


@pytest.mark.parametrize("name", ["psum", "pmean", "pmax", "pmin", "all_gather", "all_gather_tiled", "ppermute"])
def test_collective_of_an_unbatched_value(name):
    ours, theirs = COLLECTIVES[name]
    x = rng(2).standard_normal((4, 3, 5)).astype(np.float32)
    y = rng(3).standard_normal((3, 5)).astype(np.float32)
    got = pj.vmap(lambda v, w: ours(w, "i") + 0 * v[0, 0], in_axes=(0, None), axis_name="i")(x, y)
    want = J.vmap(lambda v, w: theirs(w, "i") + 0 * v[0, 0], in_axes=(0, None), axis_name="i")(x, y)
    close(got, want)


def test_psum_of_an_unbatched_int_and_axis_size():
    y = np.array([1, 2, 3], np.int32)
    got = pj.vmap(lambda w: lax.psum(w, "i"), in_axes=None, axis_size=5, axis_name="i", out_axes=None)(y)
    same(got, np.array([5, 10, 15], np.int32))
    got = pj.vmap(lambda: lax.axis_index("i"), in_axes=(), axis_size=4, axis_name="i")()
    same(got, np.arange(4, dtype=np.int32))


def test_partial_ppermute_gives_zeros_where_nobody_sends():
    x = rng(4).standard_normal((3, 2)).astype(np.float32)
    got = np.asarray(pj.vmap(lambda v: lax.ppermute(v, "i", [(0, 1), (1, 2)]), axis_name="i")(x))
    same(got, np.stack([np.zeros(2, np.float32), x[0], x[1]]))


def test_nested_vmaps_with_two_names():
    x = rng(5).standard_normal((3, 4, 5)).astype(np.float32)

    def ours(v):
        a = lax.psum(v, "i") * lax.axis_index("j") + lax.pmax(v, "j")
        b = lax.all_gather(v, "i", axis=0)  # [3, 5]
        c = lax.ppermute(v, "j", [(k, (k + 1) % 4) for k in range(4)])
        return a, b.sum(0) + c - lax.pmean(v, "j") * lax.axis_index("i")

    def theirs(v):
        a = J.lax.psum(v, "i") * J.lax.axis_index("j") + J.lax.pmax(v, "j")
        b = J.lax.all_gather(v, "i", axis=0)
        c = J.lax.ppermute(v, "j", [(k, (k + 1) % 4) for k in range(4)])
        return a, b.sum(0) + c - J.lax.pmean(v, "j") * J.lax.axis_index("i")

    got = pj.vmap(pj.vmap(ours, axis_name="j"), axis_name="i")(x)
    want = J.vmap(J.vmap(theirs, axis_name="j"), axis_name="i")(x)
    for g, w in zip(got, want):
        close(g, w, rtol=1e-5, atol=1e-5)
    # the other nesting order of the names
    got = pj.vmap(pj.vmap(ours, axis_name="i"), axis_name="j", in_axes=1, out_axes=1)(x)
    want = J.vmap(J.vmap(theirs, axis_name="i"), axis_name="j", in_axes=1, out_axes=1)(x)
    for g, w in zip(got, want):
        close(g, w, rtol=1e-5, atol=1e-5)


def test_vmap_inside_pmap():
    # pmap over "p" (8 replicas) of a vmap over "b" (3 elements): collectives over either axis.
    n = pj.local_device_count()
    x = rng(6).standard_normal((n, 3, 4)).astype(np.float32)
    perm = [(k, (k + 3) % n) for k in range(n)]

    def ours(v):
        s = lax.psum(v, "p") + lax.pmean(v, "b")
        g = lax.all_gather(v, "p", axis=1)  # [4, n]
        r = lax.ppermute(v, "p", perm)
        return s * lax.axis_index("p") + r + g.sum(1) + lax.axis_index("b")

    def theirs(v):
        s = J.lax.psum(v, "p") + J.lax.pmean(v, "b")
        g = J.lax.all_gather(v, "p", axis=1)
        r = J.lax.ppermute(v, "p", perm)
        return s * J.lax.axis_index("p") + r + g.sum(1) + J.lax.axis_index("b")

    got = pj.pmap(pj.vmap(ours, axis_name="b"), axis_name="p")(x)
    # vmap over the device axis is pmap's semantics, with any number of host devices
    want = J.vmap(J.vmap(theirs, axis_name="b"), axis_name="p")(x)
    close(got, want, rtol=1e-5, atol=1e-5)


# ---- random ---------------------------------------------------------------------------

SAMPLERS = {
    "bits": (lambda k: pj.random.bits(k, (3, 4)), lambda k: J.random.bits(k, (3, 4))),
    "bits8": (lambda k: pj.random.bits(k, (5,), np.uint8), lambda k: J.random.bits(k, (5,), np.uint8)),
    "uniform": (lambda k: pj.random.uniform(k, (7,), minval=-2.0, maxval=3.0),
                lambda k: J.random.uniform(k, (7,), minval=-2.0, maxval=3.0)),
    "normal": (lambda k: pj.random.normal(k, (2, 3)), lambda k: J.random.normal(k, (2, 3))),
    "normal_bf16": (lambda k: pj.random.normal(k, (6,), jnp.bfloat16), lambda k: J.random.normal(k, (6,), JNP.bfloat16)),
    "truncated_normal": (lambda k: pj.random.truncated_normal(k, -1.0, 2.0, (9,)),
                         lambda k: J.random.truncated_normal(k, -1.0, 2.0, (9,))),
    "bernoulli": (lambda k: pj.random.bernoulli(k, 0.3, (11,)), lambda k: J.random.bernoulli(k, 0.3, (11,))),
    "randint": (lambda k: pj.random.randint(k, (8,), 0, 10), lambda k: J.random.randint(k, (8,), 0, 10)),
    "permutation": (lambda k: pj.random.permutation(k, 10), lambda k: J.random.permutation(k, 10)),
    "split": (lambda k: pj.random.split(k, 3), lambda k: J.random.split(k, 3)),
    "fold_in": (lambda k: pj.random.fold_in(k, 7), lambda k: J.random.fold_in(k, 7)),
    "split_then_normal": (lambda k: pj.random.normal(pj.random.split(k)[1], (4,)),
                          lambda k: J.random.normal(J.random.split(k)[1], (4,))),
}


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_random_with_batched_keys(name):
    ours, theirs = SAMPLERS[name]
    keys = pj.random.split(pj.random.PRNGKey(42), 4)
    got = np.asarray(pj.vmap(ours)(keys))
    loop = np.stack([np.asarray(ours(keys[b])) for b in range(4)])
    same(got, loop)
    jkeys = J.random.split(J.random.PRNGKey(42), 4)
    same(np.asarray(keys), np.asarray(jkeys))
    same(got, np.asarray(J.vmap(theirs)(jkeys)))
    # keys mapped along axis 1, under jit, nested in a second vmap
    got1 = pj.jit(pj.vmap(ours, in_axes=1))(np.asarray(keys).T.copy())
    same(got1, loop)
    keys2 = np.asarray(pj.random.split(pj.random.PRNGKey(7), 6)).reshape(2, 3, 2)
    got2 = np.asarray(pj.vmap(pj.vmap(ours))(keys2))
    same(got2, np.stack([np.stack([np.asarray(ours(keys2[a, b])) for b in range(3)]) for a in range(2)]))


def test_random_with_batched_seeds_data_and_params():
    seeds = np.array([0, 1, 5, 123456], np.int32)
    same(pj.vmap(pj.random.PRNGKey)(seeds), J.vmap(J.random.PRNGKey)(seeds))
    key = pj.random.PRNGKey(3)
    data = np.array([1, 2, 3], np.int32)
    same(pj.vmap(lambda d: pj.random.fold_in(key, d))(data), J.vmap(lambda d: J.random.fold_in(J.random.PRNGKey(3), d))(data))
    lo = np.array([-1.0, 0.0, 2.0], np.float32)
    got = pj.vmap(lambda m: pj.random.uniform(key, (5,), minval=m, maxval=m + 1))(lo)
    want = J.vmap(lambda m: J.random.uniform(J.random.PRNGKey(3), (5,), minval=m, maxval=m + 1))(lo)
    same(got, want)
    p = np.array([0.1, 0.5, 0.9], np.float32)
    same(pj.vmap(lambda q: pj.random.bernoulli(key, q, (6,)))(p), J.vmap(lambda q: J.random.bernoulli(J.random.PRNGKey(3), q, (6,)))(p))


def test_dropout_mask_per_example():
    keys = pj.random.split(pj.random.PRNGKey(0), 3)
    x = rng(7).standard_normal((3, 16)).astype(np.float32)

    def drop(k, v):
        keep = pj.random.bernoulli(k, 0.75, v.shape)
        return jnp.where(keep, v / 0.75, 0.0)
    got = pj.vmap(drop)(keys, x)
    same(got, np.stack([np.asarray(drop(keys[b], x[b])) for b in range(3)]))


# ---- window ops -----------------------------------------------------------------------

POOLS = {
    "max": (lambda v: pooling.max_pool(v, (2, 2), (2, 2)), lambda v: J.lax.reduce_window(
        v, -JNP.inf, J.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")),
    "max_overlap_same": (lambda v: pooling.max_pool(v, (3, 3), (2, 2), "SAME"), lambda v: J.lax.reduce_window(
        v, -JNP.inf, J.lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")),
    "avg": (lambda v: pooling.avg_pool(v, (2, 2), (1, 1)), lambda v: J.lax.reduce_window(
        v, 0.0, J.lax.add, (1, 2, 2, 1), (1, 1, 1, 1), "VALID") / 4),
    "max_unbatched_input": (lambda v: pooling.max_pool(v[0], (2, 2), (1, 1)), lambda v: J.lax.reduce_window(
        v[0], -JNP.inf, J.lax.max, (2, 2, 1), (1, 1, 1), "VALID")),
}


@pytest.mark.parametrize("name", sorted(POOLS))
def test_pooling_and_its_gradient_under_vmap(name):
    ours, theirs = POOLS[name]
    x = rng(8).standard_normal((3, 2, 6, 6, 4)).astype(np.float32)  # [vmap, N, H, W, C]
    close(pj.vmap(ours)(x), J.vmap(theirs)(x))
    # per-example gradients of a weighted sum of the pooled output
    w = rng(9).standard_normal(np.asarray(J.vmap(theirs)(x)).shape[1:]).astype(np.float32)
    g = pj.vmap(pj.grad(lambda v: (ours(v) * w).sum()))(x)
    gw = J.vmap(J.grad(lambda v: (theirs(v) * w).sum()))(x)
    close(g, gw, rtol=1e-5, atol=1e-5)
    # the loop gives the same bits
    loop = np.stack([np.asarray(pj.grad(lambda v: (ours(v) * w).sum())(x[b])) for b in range(3)])
    same(g, loop)
    # second order: vmap of the gradient's jvp-free transpose (grad of grad-sum)
    gg = pj.vmap(pj.grad(lambda v: (pj.grad(lambda u: (ours(u) * w).sum())(v) * v).sum()))(x)
    ggw = J.vmap(J.grad(lambda v: (J.grad(lambda u: (theirs(u) * w).sum())(v) * v).sum()))(x)
    close(gg, ggw, rtol=1e-5, atol=1e-5)


def test_window_prims_fold_or_add_a_dim():
    # a window over dim 0 (not foldable) and a rank-1 operand
    x = rng(10).standard_normal((3, 7)).astype(np.float32)
    f = lambda v: bind("reduce_window", v, computation="max", window_dimensions=[3], window_strides=[2],
                       padding=[1, 1])
    same(pj.vmap(f)(x), np.stack([np.asarray(f(x[b])) for b in range(3)]))
    close(pj.vmap(f)(x), J.vmap(lambda v: J.lax.reduce_window(v, -JNP.inf, J.lax.max, (3,), (2,), ((1, 1),)))(x))
    # argmax + scatter_at_argmax (the fused max-pool backward) under vmap
    y = rng(11).standard_normal((3, 2, 4, 4, 2)).astype(np.float32)
    wa = dict(window_dimensions=[1, 2, 2, 1], window_strides=[1, 2, 2, 1], padding=[0, 0] * 4)

    def h(v):
        m, sel = bind("reduce_window_argmax", v, **wa)
        return m, bind("scatter_add_at_argmax", m * 2, sel, operand_shape=list(v.shape), **wa)
    got = pj.vmap(h)(y)
    for i in range(2):
        same(got[i], np.stack([np.asarray(h(y[b])[i]) for b in range(3)]))


# ---- gathers, scatters, dynamic slices -------------------------------------------------

def test_take_gather_scatter_under_vmap():
    x = rng(12).standard_normal((4, 5, 6)).astype(np.float32)
    idx = rng(13).integers(0, 5, (4, 3)).astype(np.int32)
    f = lambda v, i: jnp.take(v, i, axis=0)
    same(pj.vmap(f)(x, idx), J.vmap(lambda v, i: JNP.take(v, i, axis=0))(x, idx))
    same(pj.vmap(f, in_axes=(None, 0))(x[0], idx), J.vmap(lambda v, i: JNP.take(v, i, axis=0), in_axes=(None, 0))(x[0], idx))
    same(pj.vmap(f, in_axes=(0, None))(x, idx[0]), J.vmap(lambda v, i: JNP.take(v, i, axis=0), in_axes=(0, None))(x, idx[0]))
    i2 = rng(14).integers(0, 6, (4, 2, 2)).astype(np.int32)
    same(pj.vmap(lambda v, i: jnp.take(v, i, axis=1))(x, i2), J.vmap(lambda v, i: JNP.take(v, i, axis=1))(x, i2))
    # integer-array indexing and take_along_axis
    same(pj.vmap(lambda v, i: v[i])(x, idx), J.vmap(lambda v, i: v[i])(x, idx))
    ia = rng(15).integers(0, 6, (4, 5, 2)).astype(np.int32)
    same(pj.vmap(lambda v, i: jnp.take_along_axis(v, i, axis=1))(x, ia),
         J.vmap(lambda v, i: JNP.take_along_axis(v, i, axis=1))(x, ia))
    # scatter_add (duplicate indices add up) vs .at[].add
    u = rng(16).standard_normal((4, 3, 6)).astype(np.float32)
    dup = np.array([[0, 0, 1], [2, 4, 2], [3, 3, 3], [1, 0, 4]], np.int32)
    got = pj.vmap(lambda v, i, w: bind("scatter_add", v, i, w, axis=0))(x, dup, u)
    close(got, J.vmap(lambda v, i, w: v.at[i].add(w))(x, dup, u))
    ua = rng(17).standard_normal((4, 5, 2)).astype(np.float32)
    got = pj.vmap(lambda v, i, w: bind("scatter_add_along_axis", v, i, w, axis=1))(x, ia, ua)
    want = np.stack([np.asarray(bind("scatter_add_along_axis", pj.numpy.asarray(x[b]), pj.numpy.asarray(ia[b]),
                                     pj.numpy.asarray(ua[b]), axis=1)) for b in range(4)])
    same(got, want)
    # gradients of gathers are scatters: per-example gradients
    g = pj.vmap(pj.grad(lambda v, i: (jnp.take(v, i, axis=0) ** 2).sum()))(x, dup)
    gw = J.vmap(J.grad(lambda v, i: (JNP.take(v, i, axis=0) ** 2).sum()))(x, dup)
    close(g, gw)


@pytest.mark.parametrize("idt", [np.int32, np.uint32, np.uint8])
def test_dynamic_slice_with_batched_indices(idt):
    x = rng(18).standard_normal((5, 6, 7)).astype(np.float32)
    s0 = np.array([0, 1, 3, 4, 2], idt)
    s1 = np.array([5, 0, 250, 2, 1], idt)  # 250: clamped like XLA
    f = lambda v, a, b: lax.dynamic_slice(v, (a, b), (3, 4))
    fj = lambda v, a, b: J.lax.dynamic_slice(v, (a, b), (3, 4))
    same(pj.vmap(f)(x, s0, s1), J.vmap(fj)(x, s0, s1))
    same(pj.vmap(f, in_axes=(None, 0, None))(x[0], s0, idt(2)), J.vmap(fj, in_axes=(None, 0, None))(x[0], s0, idt(2)))
    same(pj.vmap(f, in_axes=(0, None, 0))(x, idt(1), s1), J.vmap(fj, in_axes=(0, None, 0))(x, idt(1), s1))
    u = rng(19).standard_normal((5, 2, 3)).astype(np.float32)
    g = lambda v, w, a, b: lax.dynamic_update_slice(v, w, (a, b))
    gj = lambda v, w, a, b: J.lax.dynamic_update_slice(v, w, (a, b))
    same(pj.vmap(g)(x, u, s0, s1), J.vmap(gj)(x, u, s0, s1))
    same(pj.vmap(g, in_axes=(None, 0, 0, None))(x[0], u, s0, idt(3)),
         J.vmap(gj, in_axes=(None, 0, 0, None))(x[0], u, s0, idt(3)))
    same(pj.vmap(g, in_axes=(0, None, None, 0))(x, u[0], idt(1), s1),
         J.vmap(gj, in_axes=(0, None, None, 0))(x, u[0], idt(1), s1))


def test_dynamic_slice_gradient_with_batched_indices():
    x = rng(20).standard_normal((4, 8)).astype(np.float32)
    s = np.array([0, 3, 5, 7], np.int32)
    f = lambda v, a: (lax.dynamic_slice(v, (a,), (3,)) ** 2).sum()
    fj = lambda v, a: (J.lax.dynamic_slice(v, (a,), (3,)) ** 2).sum()
    close(pj.vmap(pj.grad(f))(x, s), J.vmap(J.grad(fj))(x, s))


# ---- a small CNN: per-example gradients -------------------------------------------------

def _cnn(lib_lax, lib_np, params, x):
    w1, b1, w2, b2 = params
    y = lib_lax.conv_general_dilated(x[None], w1, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    y = lib_np.maximum(y + b1, 0.0)
    y = lib_lax.reduce_window(y, -lib_np.inf, lib_lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    y = lib_lax.reduce_window(y, 0.0, lib_lax.add, (1, 2, 2, 1), (1, 1, 1, 1), "VALID") / 4.0
    y = y.reshape(-1)
    logits = y @ w2 + b2
    return logits


def test_per_example_gradients_of_a_small_cnn():
    r = rng(21)
    params = [r.standard_normal((3, 3, 2, 4)).astype(np.float32) * 0.3, r.standard_normal(4).astype(np.float32) * 0.1,
              r.standard_normal((3 * 3 * 4, 5)).astype(np.float32) * 0.2, r.standard_normal(5).astype(np.float32) * 0.1]
    x = r.standard_normal((6, 8, 8, 2)).astype(np.float32)
    labels = r.integers(0, 5, 6).astype(np.int32)

    def loss(lib_lax, lib_np, logsumexp):
        def f(p, xi, yi):
            lg = _cnn(lib_lax, lib_np, p, xi)
            return logsumexp(lg) - lg[yi]
        return f

    ours = pj.vmap(pj.grad(loss(lax, jnp, lambda v: jnp.log(jnp.exp(v).sum()))), in_axes=(None, 0, 0))(params, x, labels)
    theirs = J.vmap(J.grad(loss(J.lax, JNP, lambda v: JNP.log(JNP.exp(v).sum()))), in_axes=(None, 0, 0))(params, x, labels)
    for g, w in zip(ours, theirs):
        assert np.asarray(g).shape == np.asarray(w).shape
        close(g, w, rtol=1e-4, atol=1e-5)
    # under jit too, and the same bits
    ours_j = pj.jit(pj.vmap(pj.grad(loss(lax, jnp, lambda v: jnp.log(jnp.exp(v).sum()))), in_axes=(None, 0, 0)))(
        params, x, labels)
    for g, w in zip(ours_j, theirs):
        close(g, w, rtol=1e-4, atol=1e-5)


# ---- determinism -----------------------------------------------------------------------

def test_vmap_results_do_not_depend_on_the_thread_count():
    r = rng(22)
    params = [r.standard_normal((3, 3, 2, 4)).astype(np.float32) * 0.3, r.standard_normal(4).astype(np.float32) * 0.1,
              r.standard_normal((3 * 3 * 4, 5)).astype(np.float32) * 0.2, r.standard_normal(5).astype(np.float32) * 0.1]
    x = r.standard_normal((16, 8, 8, 2)).astype(np.float32)
    keys = pj.random.split(pj.random.PRNGKey(1), 16)
    idx = r.integers(0, 30, (16, 4)).astype(np.int32)

    def f(p, xi, k, i):
        g = pj.grad(lambda q: _cnn(lax, jnp, q, xi).sum())(p)
        n = pj.random.normal(k, (5000,))
        t = jnp.take(n, i) + lax.psum(xi.sum(), "b")
        return g, n, t

    before = _core.num_threads()
    outs = []
    try:
        for n in (1, 2):
            pj.config.update("num_threads", n)
            outs.append(pj.tree_util.tree_leaves(pj.vmap(f, in_axes=(None, 0, 0, 0), axis_name="b")(params, x, keys, idx)))
    finally:
        pj.config.update("num_threads", before)
    for a, b in zip(*outs):
        same(a, b)


# ---- graph-level prims: fused_elementwise, adamw_update ---------------------------------

def _batched_vs_loop(g, args, bdims, size=3):
    """Runs g batched (C++ batch_graph) on stacked args and compares with g per element."""
    bg, ob = g.batch(bdims, size, "")
    stacked = [pj._src.core.to_array(a) for a in args]
    got = bg.run(stacked)
    for b in range(size):
        el = [pj._src.core.to_array(np.asarray(a)[b] if d >= 0 else np.asarray(a)) for a, d in zip(args, bdims)]
        want = g.run(el)
        for o, w, d in zip(got, want, ob):
            same(np.asarray(o)[b] if d >= 0 else np.asarray(o), w)
    return bg


def test_fused_elementwise_under_vmap():
    r = rng(23)
    x = r.standard_normal((3, 4, 6)).astype(np.float32)
    y = r.standard_normal((4, 6)).astype(np.float32)
    c = r.standard_normal(6).astype(np.float32)

    def f(a, b, v):
        return jnp.tanh(a * b + v) * 2 - jnp.exp(a), (a * b).astype(jnp.bfloat16)

    g = _core.fuse_elementwise(pj.make_graph(f, x[0], y, c))
    assert "fused_elementwise" in g.dump()
    _batched_vs_loop(g, [x, y, c], [0, -1, -1])
    _batched_vs_loop(g, [x, np.stack([y] * 3) + 1, np.stack([c] * 3)], [0, 0, 0])

    # a program with a reduced output (column sums: BatchNorm statistics) runs as the batched loop
    def stats(a):
        return (a * a).sum(0), jnp.maximum(a, 0.0)
    gs = _core.fuse_elementwise(pj.make_graph(stats, x[0]))
    bg = _batched_vs_loop(gs, [x], [0])
    if "reduced" in gs.dump():
        assert "vmap_size" in bg.dump()


@pytest.mark.parametrize("batched_scalars", [False, True])
def test_adamw_update_under_vmap(batched_scalars):
    r = rng(24)
    p, gr, mu, nu = (r.standard_normal((3, 5, 4)).astype(np.float32) for _ in range(4))
    nu = np.abs(nu)
    lr = np.array([1e-3, 2e-3, 5e-4], np.float32)
    attrs = dict(b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, weight_decay=1e-4, max_norm=1.0)

    def f(a, b, m, v, l):
        return bind("adamw_update", a, b, m, v, l, jnp.float32(0.5), jnp.float32(0.1), jnp.float32(0.01), **attrs)

    l_axis = 0 if batched_scalars else None
    larg = lr if batched_scalars else lr[0]
    got = pj.vmap(f, in_axes=(0, 0, 0, 0, l_axis))(p, gr, mu, nu, larg)
    for b in range(3):
        want = f(*[pj.numpy.asarray(v[b]) for v in (p, gr, mu, nu)], pj.numpy.asarray(lr[b] if batched_scalars else lr[0]))
        for o, w in zip(got, want):
            same(np.asarray(o)[b], w)
