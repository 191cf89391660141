"""Copy fusion (cpp/podlet/ir/copy_fusion.h): chains of slices, concatenations,
transposes, reversals and reshapes that keep the last dimension whole run as one
gather_rows copy in executable graphs. Checked against NumPy (the same rolls and window
partitions), against the graph with the pass off (same bits, forward and gradient), for
what it must leave alone, and the gather_rows primitive's own errors."""
import ml_dtypes
import numpy as np
import pytest

import podlet
import podlet.numpy as jnp
from podlet import _core
from podlet._src import fusion

BF16 = ml_dtypes.bfloat16
MOVES = ("slice", "concatenate", "transpose", "rev")


def _prims(graph):
    return [l.split("=", 1)[1].strip().split("(")[0] for l in graph.dump().splitlines() if " = " in l]


def _exec_graph(f, *args):
    return fusion.executable_graph(podlet.jit(f).lower(*args))


def _shift_partition(x, s, ws=7):
    """Swin's cyclic shift and window partition: (B, H, W, C) -> (B * windows, ws * ws, C)."""
    b, h, w, c = x.shape
    x = jnp.roll(x, (-s, -s), axis=(1, 2))
    x = jnp.reshape(x, (b, h // ws, ws, w // ws, ws, c))
    return jnp.reshape(jnp.transpose(x, (0, 1, 3, 2, 4, 5)), (b * (h // ws) * (w // ws), ws * ws, c))


def _shift_partition_np(x, s, ws=7):
    b, h, w, c = x.shape
    x = np.roll(x, (-s, -s), axis=(1, 2)).reshape(b, h // ws, ws, w // ws, ws, c)
    return x.transpose(0, 1, 3, 2, 4, 5).reshape(-1, ws * ws, c)


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.int32])
def test_shift_and_window_partition_is_one_gather(dtype):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((2, 14, 21, 32)) * 100).astype(dtype)
    g = _exec_graph(lambda a: _shift_partition(a, 3), jnp.asarray(x))
    prims = _prims(g)
    assert prims.count("gather_rows") == 1 and not set(prims) & set(MOVES), prims
    got = np.asarray(podlet.jit(lambda a: _shift_partition(a, 3))(jnp.asarray(x)))
    assert got.dtype == x.dtype and got.tobytes() == _shift_partition_np(x, 3).tobytes()


def test_stats_count_chains_and_removed_copies():
    x = jnp.zeros((2, 14, 14, 32), jnp.float32)
    st = _core.copy_fusion_stats(podlet.jit(lambda a: _shift_partition(a, 3)).lower(x).graph)
    # Two rolls (two slices and a concatenation each) and the transpose: seven copying nodes
    # (five passes over the map), one chain.
    assert st == {"chains": 1, "copies_removed": 7}


def test_flips_strided_slices_and_several_ends():
    """rev, a strided slice over a leading dim and an intermediate value read outside the
    chain (it stays, computed by its own gather) all give NumPy's values."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 10, 6, 16)).astype(np.float32)

    def f(a):
        m = jnp.concatenate([a[:, ::2], jnp.flip(a[:, 1::2], axis=(1, 2))], axis=1)  # (4, 10, 6, 16)
        t = jnp.transpose(m, (2, 0, 1, 3))
        return jnp.tanh(m), jnp.reshape(t[1:5], (4 * 4 * 10, 16)) * 2.0

    def f_np(a):
        m = np.concatenate([a[:, ::2], np.flip(a[:, 1::2], axis=(1, 2))], axis=1)
        return np.tanh(m), np.transpose(m, (2, 0, 1, 3))[1:5].reshape(-1, 16) * 2.0

    g = _exec_graph(f, jnp.asarray(x))
    assert _prims(g).count("gather_rows") == 2 and not set(_prims(g)) & set(MOVES), _prims(g)
    got = podlet.jit(f)(jnp.asarray(x))
    for a, b in zip(got, f_np(x)):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-6, atol=1e-6)
        assert np.asarray(a).shape == b.shape


def test_chains_it_leaves_alone():
    x = jnp.zeros((2, 8, 8, 32), jnp.float32)
    # One copy: nothing to gain.
    assert "gather_rows" not in _prims(_exec_graph(lambda a: jnp.transpose(a, (0, 2, 1, 3)), x))
    # The last dimension is cut or moved: not a row move.
    assert "gather_rows" not in _prims(_exec_graph(lambda a: jnp.roll(a, 2, axis=3), x))
    assert "gather_rows" not in _prims(_exec_graph(lambda a: jnp.transpose(a[:, ::-1], (0, 1, 3, 2)), x))
    # Rows of 8 bytes: an element-by-element gather would not beat the copies.
    small = jnp.zeros((2, 8, 8, 2), jnp.float32)
    assert "gather_rows" not in _prims(_exec_graph(lambda a: jnp.roll(a, (1, 2), axis=(1, 2)), small))
    # Two sources: each concatenation input comes from another array.
    y = jnp.ones((2, 8, 8, 32), jnp.float32)
    assert "gather_rows" not in _prims(_exec_graph(lambda a, b: jnp.concatenate([a[:, 2:], b[:, :2]], 1), x, y))


def test_chain_ends_next_to_ops_that_move_the_last_dimension():
    """A roll over the channels after a roll over rows, a transpose of the channels after
    one: the row moves before them become a gather, the rest stays as it was."""
    x = np.random.default_rng(3).standard_normal((2, 8, 8, 32)).astype(np.float32)
    f1 = lambda a: jnp.roll(jnp.roll(a, 1, axis=2), 2, axis=3)
    f2 = lambda a: jnp.transpose(jnp.roll(a, 2, axis=1), (0, 1, 3, 2))
    for f, want in ((f1, np.roll(np.roll(x, 1, axis=2), 2, axis=3)),
                    (f2, np.transpose(np.roll(x, 2, axis=1), (0, 1, 3, 2)))):
        prims = _prims(_exec_graph(f, jnp.asarray(x)))
        assert prims.count("gather_rows") == 1 and set(prims) & set(MOVES), prims
        assert np.asarray(podlet.jit(f)(jnp.asarray(x))).tobytes() == want.tobytes()


@pytest.mark.parametrize("shape, perm, moves", [
    ((2, 1, 1, 7, 7, 32), (0, 1, 3, 2, 4, 5), False),  # Swin's last stage: one 7 x 7 window
    ((3, 1, 5), (1, 0, 2), False),
    ((1, 4, 1, 6), (2, 0, 1, 3), False),
    ((3, 1, 5), (2, 1, 0), True),  # an element moves: stays a transpose
    ((2, 1, 3, 4), (0, 2, 1, 3), False),
])
def test_transposes_that_move_no_element_are_reshapes(shape, perm, moves, monkeypatch):
    """A transpose whose permutation is the identity once the size-1 axes are dropped
    becomes a reshape (no copy); its values, and its gradient's, are NumPy's and those of
    the graph with the pass off."""
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)

    def f(a):
        return jnp.transpose(a, perm), jnp.sum(jnp.transpose(a * 2.0, perm) ** 2)

    prims = _prims(_exec_graph(f, jnp.asarray(x)))
    assert ("transpose" in prims) == moves, prims
    got = podlet.jit(f)(jnp.asarray(x))
    assert np.asarray(got[0]).shape == np.transpose(x, perm).shape
    assert np.asarray(got[0]).tobytes() == np.ascontiguousarray(np.transpose(x, perm)).tobytes()
    grad = podlet.jit(podlet.grad(lambda a: f(a)[1]))
    g_on = np.asarray(grad(jnp.asarray(x)))
    monkeypatch.setenv("PODLET_COPY_FUSION", "0")
    assert "transpose" in _prims(_exec_graph(f, jnp.asarray(x)))
    g_off = np.asarray(podlet.jit(podlet.grad(lambda a: f(a)[1]))(jnp.asarray(x)))
    assert g_on.tobytes() == g_off.tobytes()
    np.testing.assert_allclose(g_on, 8.0 * x, rtol=1e-6)


def _window_block_grads(x, monkeypatch, on):
    """value_and_grad of a shifted Swin window attention (bf16) with the pass on or off."""
    from podlet.models import swin
    monkeypatch.setenv("PODLET_COPY_FUSION", "1" if on else "0")
    m = swin.WindowAttention(num_heads=2, window_size=7, shift_size=3, dtype=jnp.bfloat16)
    v = m.init(podlet.random.PRNGKey(0), x, deterministic=True)

    def loss(p, x):
        y = m.apply({"params": p}, x, deterministic=True)
        return jnp.sum(jnp.asarray(y, jnp.float32) ** 2)

    step = podlet.jit(podlet.value_and_grad(loss, argnums=(0, 1)))
    n = _prims(fusion.executable_graph(step.lower(v["params"], x))).count("gather_rows")
    return n, step(v["params"], x)


def test_swin_shifted_window_gradients_same_bits(monkeypatch):
    x = jnp.asarray(np.random.default_rng(2).standard_normal((2, 14, 14, 64)).astype(np.float32))
    n1, (l1, g1) = _window_block_grads(x, monkeypatch, True)
    n0, (l0, g0) = _window_block_grads(x, monkeypatch, False)
    assert n1 >= 3 and n0 == 0  # shift + partition, merge + unshift, and the gradient's
    assert np.asarray(l1).tobytes() == np.asarray(l0).tobytes()
    a, b = podlet.tree_util.tree_leaves(g1), podlet.tree_util.tree_leaves(g0)
    assert len(a) == len(b) and all(np.asarray(p).tobytes() == np.asarray(q).tobytes() for p, q in zip(a, b))


def test_under_pmap():
    n = podlet.local_device_count()
    x = np.arange(n * 1 * 14 * 14 * 16, dtype=np.float32).reshape(n, 1, 14, 14, 16)
    got = podlet.pmap(lambda a: _shift_partition(a, 3) * 1.0)(jnp.asarray(x))
    want = np.stack([_shift_partition_np(x[i], 3) for i in range(n)])
    assert np.asarray(got).tobytes() == want.tobytes()


def test_gather_rows_primitive_and_its_errors():
    x = np.arange(4 * 3 * 16, dtype=np.float32).reshape(4, 3, 16)
    rows = np.array([11, 0, 1, 2, 5, 4], np.int32)
    (y,) = _core.apply("gather_rows", [jnp.asarray(x), jnp.asarray(rows)], {"shape": [2, 3, 16]})
    np.testing.assert_array_equal(np.asarray(y), x.reshape(12, 16)[rows].reshape(2, 3, 16))
    with pytest.raises(ValueError, match=r"rows\[2\] = 12 is outside the operand's 12 rows"):
        _core.apply("gather_rows", [jnp.asarray(x), jnp.asarray(np.array([0, 1, 12], np.int32))], {"shape": [3, 16]})
    with pytest.raises(ValueError, match=r"rows\[0\] = -1"):
        _core.apply("gather_rows", [jnp.asarray(x), jnp.asarray(np.array([-1], np.int32))], {"shape": [1, 16]})
    with pytest.raises(ValueError, match="same last dimension"):
        _core.apply("gather_rows", [jnp.asarray(x), jnp.asarray(rows)], {"shape": [6, 2, 8]})
    with pytest.raises(ValueError, match="3 entries, expected 6"):
        _core.apply("gather_rows", [jnp.asarray(x), jnp.asarray(rows[:3])], {"shape": [6, 16]})
    with pytest.raises(TypeError, match="1-d int32"):
        _core.apply("gather_rows", [jnp.asarray(x), jnp.asarray(rows.astype(np.float32))], {"shape": [6, 16]})
