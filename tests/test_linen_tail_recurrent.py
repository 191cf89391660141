"""podlet.nn's recurrent layers against flax.linen 0.12.8 (and the orthogonal initializer
against jax.nn.initializers) on the same keys and inputs.

For every cell (LSTMCell, OptimizedLSTMCell, GRUCell, MGUCell, SimpleCell, ConvLSTMCell):
``initialize_carry`` and ``init`` give Flax's tree (paths, shapes, dtypes) with
bit-identical values, except the orthogonal recurrent kernels, which jax computes with
LAPACK's QR and podlet with its own Householder QR: those must agree to 1e-6. ``apply``
with Flax's variables gives Flax's carry and output; through ``nn.RNN`` (variable
``seq_lengths``, ``reverse``, ``keep_order``, ``time_major``, ``return_carry``) the outputs,
final carries and the gradients (``podlet.grad`` vs ``jax.grad``) with respect to the
parameters and the inputs agree to float32 rounding. Per-step rngs: a cell with dropout
in an ``RNN`` whose 'dropout' stream is split per step draws Flax's masks.
"""
import functools

import numpy as np
import pytest

import jax
import jax.numpy as jnp
import flax.linen as fnn

import podlet
import podlet.numpy as pjnp
from podlet import nn as pnn
from podlet.nn import initializers as pinit

RS = np.random.RandomState(0)
XSEQ = RS.randn(2, 5, 3).astype(np.float32)        # (batch, time, features)
LENGTHS = np.array([3, 5], np.int32)


def pkey(seed=0):
    return podlet.random.PRNGKey(seed)


def jkey(seed=0):
    return jax.random.PRNGKey(seed)


def to_podlet(tree):
    return jax.tree_util.tree_map(lambda a: pjnp.asarray(np.asarray(a)), tree)


def to_np(tree, tu=jax.tree_util):
    return tu.tree_map(np.asarray, tree)


def _is_recurrent_kernel(path):
    names = [getattr(k, "key", None) for k in path]
    return names[-1] == "kernel" and len(names) >= 2 and str(names[-2]).startswith("h")


def assert_init_matches(pv, fv, orthogonal=True):
    """Same paths, shapes and dtypes; values bit-identical, except the orthogonal
    recurrent kernels (``h*`` modules) when `orthogonal`, which must agree to 1e-6."""
    pl, pdef = podlet.tree_util.tree_flatten_with_path(pv)
    fl, fdef = jax.tree_util.tree_flatten_with_path(fv)
    assert [podlet.tree_util.keystr(p) for p, _ in pl] == [jax.tree_util.keystr(p) for p, _ in fl]
    for (path, a), (_, b) in zip(pl, fl):
        a, b = np.asarray(a), np.asarray(b)
        where = podlet.tree_util.keystr(path)
        assert a.shape == b.shape and a.dtype == b.dtype, (where, a.shape, a.dtype, b.shape, b.dtype)
        if orthogonal and _is_recurrent_kernel(path):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-6, err_msg=where)
        else:
            assert a.tobytes() == b.tobytes(), f"{where}: values differ"


def close_tree(got, want, rtol=1e-5, atol=1e-6):
    got, want = to_np(got, podlet.tree_util), to_np(want)
    assert podlet.tree_util.tree_structure(got) == podlet.tree_util.tree_structure(want) or \
        jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


# ----------------------------------------------------------------------------- orthogonal
# jax compiles a QR per shape (~1-2 s each here): three shapes cover square, wide, tall,
# rank 3, column_axis and scale.
@pytest.mark.parametrize("shape,kw", [((4, 4), {}), ((3, 7), dict(scale=0.5)), ((2, 3, 5), dict(column_axis=0))],
                         ids=["square", "wide_scale", "3d_column_axis0"])
def test_orthogonal_initializer(shape, kw):
    got = np.asarray(pinit.orthogonal(**kw)(pkey(3), shape))
    want = np.asarray(jax.nn.initializers.orthogonal(**kw)(jkey(3), shape))
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6)
    # and it is orthogonal to float32 rounding: Q^T Q = I on the smaller side
    ax = kw.get("column_axis", -1)
    m = np.moveaxis(got, ax, -1).reshape(-1, shape[ax]) / kw.get("scale", 1.0)
    gram = m.T @ m if m.shape[0] >= m.shape[1] else m @ m.T
    np.testing.assert_allclose(gram, np.eye(len(gram)), atol=2e-6)


def test_orthogonal_under_jit_and_delta_orthogonal():
    f = podlet.jit(lambda k: pinit.orthogonal()(k, (8, 5)))
    np.testing.assert_allclose(np.asarray(f(pkey(1))), np.asarray(jax.nn.initializers.orthogonal()(jkey(1), (8, 5))),
                               atol=1e-6)
    got = np.asarray(pinit.delta_orthogonal()(pkey(2), (3, 3, 4, 6)))
    want = np.asarray(jax.nn.initializers.delta_orthogonal()(jkey(2), (3, 3, 4, 6)))
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert np.count_nonzero(got[0]) == 0 and np.count_nonzero(got[1, 1]) == 24
    with pytest.raises(ValueError, match="at least a 2D"):
        pinit.orthogonal()(pkey(0), (5,))


# ----------------------------------------------------------------------------- cells, one step
CELLS = [
    ("LSTMCell", {}), ("OptimizedLSTMCell", {}), ("GRUCell", {}), ("MGUCell", {}),
    ("MGUCell", dict(reset_gate=False)), ("SimpleCell", dict(residual=True)),
]


@pytest.mark.parametrize("name,kw", CELLS, ids=[f"{n}{kw or ''}" for n, kw in CELLS])
def test_cell_step(name, kw):
    x = XSEQ[:, 0]
    pcell, fcell = getattr(pnn, name)(4, **kw), getattr(fnn, name)(4, **kw)
    pc = pcell.initialize_carry(pkey(1), x.shape)
    fc = fcell.initialize_carry(jkey(1), x.shape)
    close_tree(pc, fc, rtol=0, atol=0)
    pv = pcell.init(pkey(2), pc, pjnp.asarray(x))
    fv = fcell.init(jkey(2), fc, jnp.asarray(x))
    assert_init_matches(pv, fv)
    # a non-zero carry, so the recurrent kernels take part
    fc = jax.tree_util.tree_map(lambda c: c + 0.5, fc)
    got = pcell.apply(to_podlet(fv), to_podlet(fc), pjnp.asarray(x))
    want = fcell.apply(fv, fc, jnp.asarray(x))
    close_tree(got, want)


def test_cells_take_their_options():
    # carry_init, dtype and a custom gate: the LSTM's carry is (c, h) from split keys
    x = XSEQ[:, 0]
    make = lambda nn: nn.LSTMCell(4, carry_init=nn.initializers.normal(1.0), gate_fn=nn.tanh,  # noqa: E731
                                  dtype=jnp.bfloat16)
    pc = make(pnn).initialize_carry(pkey(5), x.shape)
    fc = make(fnn).initialize_carry(jkey(5), x.shape)
    close_tree(pc, fc, rtol=0, atol=0)
    fv = make(fnn).init(jkey(2), fc, jnp.asarray(x))
    (pcar, py) = make(pnn).apply(to_podlet(fv), to_podlet(fc), pjnp.asarray(x))
    (fcar, fy) = make(fnn).apply(fv, fc, jnp.asarray(x))
    # the gates compute in bf16; h = o * act(c) with c from the f32 carry comes out f32, as in Flax
    assert np.asarray(py).dtype == np.asarray(fy).dtype == np.float32
    np.testing.assert_allclose(np.asarray(py), np.asarray(fy), atol=2 ** -7, rtol=2 ** -7)
    close_tree(pcar, fcar, rtol=2 ** -7, atol=2 ** -7)
    with pytest.raises(NotImplementedError):
        pnn.RNNCellBase().initialize_carry(pkey(0), (2, 3))


def _flat_lecun_normal(key, shape, dtype=jnp.float32):
    """jax's lecun_normal of a conv kernel, drawn as its 2-D (H*W*I, O) equivalent: the
    same fans and, threefry bits depending only on the flat index, the same bits, but jax
    compiles a 2-D sampler in ~1 s where a rank-4 one takes 5-7 s on a loaded 2-core box."""
    flat = (int(np.prod(shape[:-1])), shape[-1])
    return jnp.reshape(jax.nn.initializers.lecun_normal()(key, flat, dtype), shape)


def test_conv_lstm_cell_and_rnn(monkeypatch):
    # one step against Flax (jax compiles a conv inside a scan slowly: the RNN over time
    # is checked against podlet's own step loop instead)
    import flax.linen.recurrent
    monkeypatch.setattr(flax.linen.recurrent, "Conv", functools.partial(fnn.Conv, kernel_init=_flat_lecun_normal))
    x = RS.randn(2, 3, 4, 4, 3).astype(np.float32)        # (batch, time, H, W, C): ih, hh kernels both (3, 3, 3, 12)
    pcell, fcell = pnn.ConvLSTMCell(3, kernel_size=(3, 3)), fnn.ConvLSTMCell(3, kernel_size=(3, 3))
    pc = pcell.initialize_carry(pkey(1), x[:, 0].shape)
    fc = fcell.initialize_carry(jkey(1), x[:, 0].shape)
    close_tree(pc, fc, rtol=0, atol=0)
    assert np.asarray(pc[0]).shape == (2, 4, 4, 3) and pcell.num_feature_axes == 3
    pv = pcell.init(pkey(4), pc, pjnp.asarray(x[:, 0]))
    fv = fcell.init(jkey(4), fc, jnp.asarray(x[:, 0]))
    assert_init_matches(pv, fv, orthogonal=False)         # ih / hh are Convs (lecun_normal)
    fc = jax.tree_util.tree_map(lambda c: c + 0.25, fc)
    close_tree(pcell.apply(to_podlet(fv), to_podlet(fc), pjnp.asarray(x[:, 1])),
               fcell.apply(fv, fc, jnp.asarray(x[:, 1])))
    # RNN finds the time axis from num_feature_axes and shares the cell's params over steps
    rv = pnn.RNN(pcell).init(pkey(4), pjnp.asarray(x))
    assert podlet.tree_util.tree_map(np.shape, rv["params"]["cell"]) == podlet.tree_util.tree_map(np.shape, pv["params"])
    carry, y = pnn.RNN(pcell, return_carry=True).apply({"params": {"cell": pv["params"]}}, pjnp.asarray(x))
    c = pcell.initialize_carry(pkey(0), x[:, 0].shape)
    for t in range(3):
        c, yt = pcell.apply(pv, c, pjnp.asarray(x[:, t]))
        np.testing.assert_allclose(np.asarray(y)[:, t], np.asarray(yt), rtol=1e-6, atol=1e-6)
    close_tree(carry, c, rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------------------------- RNN
RNN_CASES = [
    (dict(), dict()),
    (dict(reverse=True), dict()),
    (dict(reverse=True, keep_order=True, return_carry=True), dict(seq_lengths=LENGTHS)),
    (dict(return_carry=True), dict(seq_lengths=LENGTHS)),
    (dict(reverse=True), dict(seq_lengths=LENGTHS)),
    (dict(time_major=True, return_carry=True), dict()),
]


@pytest.fixture(scope="module")
def lstm_rnn_variables():
    """One Flax init of RNN(LSTMCell(4)) (the parameters do not depend on RNN's options),
    checked against podlet's once."""
    pv = pnn.RNN(pnn.LSTMCell(4)).init(pkey(2), pjnp.asarray(XSEQ))
    fv = fnn.RNN(fnn.LSTMCell(4)).init(jkey(2), jnp.asarray(XSEQ))
    assert_init_matches(pv, fv)
    return fv


@pytest.mark.parametrize("kw,call_kw", RNN_CASES, ids=[f"{kw}{sorted(c)}" for kw, c in RNN_CASES])
def test_rnn_over_sequences(lstm_rnn_variables, kw, call_kw):
    fv = lstm_rnn_variables
    x = np.swapaxes(XSEQ, 0, 1).copy() if kw.get("time_major") else XSEQ
    make = lambda nn: nn.RNN(nn.LSTMCell(4), **kw)  # noqa: E731
    pcall = {k: pjnp.asarray(v) for k, v in call_kw.items()}
    got = make(pnn).apply(to_podlet(fv), pjnp.asarray(x), **pcall)
    want = make(fnn).apply(fv, jnp.asarray(x), **call_kw)
    close_tree(got, want)


def test_rnn_seq_lengths_semantics():
    # the carry returned with seq_lengths is the one after each sequence's last valid step
    cell_p, cell_f = pnn.GRUCell(3), fnn.GRUCell(3)
    fv = fnn.RNN(cell_f).init(jkey(0), jnp.asarray(XSEQ))
    carry, y = pnn.RNN(cell_p, return_carry=True).apply(to_podlet(fv), pjnp.asarray(XSEQ),
                                                         seq_lengths=pjnp.asarray(LENGTHS))
    y = np.asarray(y)
    for b, n in enumerate(LENGTHS):
        np.testing.assert_array_equal(np.asarray(carry)[b], y[b, n - 1])
    # reverse=True with lengths: padding stays at the end, each sequence is read backwards
    yr = np.asarray(pnn.RNN(cell_p, reverse=True, keep_order=True).apply(
        to_podlet(fv), pjnp.asarray(XSEQ), seq_lengths=pjnp.asarray(LENGTHS)))
    x0 = XSEQ[0, :3][::-1].copy()[None]
    y0 = np.asarray(pnn.RNN(cell_p).apply(to_podlet(fv), pjnp.asarray(x0)))[0][::-1]
    np.testing.assert_allclose(yr[0, :3], y0, rtol=1e-6, atol=1e-6)
    flipped = pnn.recurrent.flip_sequences(pjnp.asarray(np.array([[1, 0, 0], [2, 3, 0], [4, 5, 6]])),
                                           pjnp.asarray(np.array([1, 2, 3])), num_batch_dims=1, time_major=False)
    np.testing.assert_array_equal(np.asarray(flipped), [[1, 0, 0], [3, 2, 0], [6, 5, 4]])


@pytest.mark.parametrize("name,kw", CELLS[:4] + CELLS[5:], ids=[f"{n}{kw or ''}" for n, kw in CELLS[:4] + CELLS[5:]])
def test_rnn_gradients_match_jax(name, kw):
    """d(loss)/d(params, inputs) of an RNN over variable-length sequences, podlet.grad vs jax.grad."""
    w = RS.randn(2, 5, 4).astype(np.float32)
    fv = fnn.RNN(getattr(fnn, name)(4, **kw)).init(jkey(7), jnp.asarray(XSEQ))

    def make_loss(nn, np_, lengths, weights):
        model = nn.RNN(getattr(nn, name)(4, **kw), return_carry=True)

        def loss(params, x):
            carry, y = model.apply({"params": params}, x, seq_lengths=lengths)
            c = carry if not isinstance(carry, tuple) else carry[0] + carry[1]
            return np_.sum(y * weights) + np_.sum(c * c)
        return loss

    fl = make_loss(fnn, jnp, jnp.asarray(LENGTHS), jnp.asarray(w))
    pl = make_loss(pnn, pjnp, pjnp.asarray(LENGTHS), pjnp.asarray(w))
    fval, fg = jax.jit(jax.value_and_grad(fl, argnums=(0, 1)))(fv["params"], jnp.asarray(XSEQ))
    pval, pg = podlet.value_and_grad(pl, argnums=(0, 1))(to_podlet(fv["params"]), pjnp.asarray(XSEQ))
    np.testing.assert_allclose(np.asarray(pval), np.asarray(fval), rtol=1e-5)
    close_tree(pg, fg, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------- Bidirectional
def test_bidirectional():
    make = lambda nn: nn.Bidirectional(nn.RNN(nn.GRUCell(4)), nn.RNN(nn.LSTMCell(4)), return_carry=True)  # noqa: E731
    pv = make(pnn).init(pkey(2), pjnp.asarray(XSEQ))
    fv = make(fnn).init(jkey(2), jnp.asarray(XSEQ))
    assert_init_matches(pv, fv)
    assert list(pv["params"]) == ["forward_rnn", "backward_rnn"]
    got = make(pnn).apply(to_podlet(fv), pjnp.asarray(XSEQ), seq_lengths=pjnp.asarray(LENGTHS))
    want = make(fnn).apply(fv, jnp.asarray(XSEQ), seq_lengths=LENGTHS)
    close_tree(got, want)
    carry, y = got
    assert np.asarray(y).shape == (2, 5, 8)
    # a custom merge and an explicit pair of initial carries (same parameters)
    merge = lambda a, b: a * b  # noqa: E731
    mk = lambda nn: nn.Bidirectional(nn.RNN(nn.GRUCell(4)), nn.RNN(nn.LSTMCell(4)), merge_fn=merge)  # noqa: E731
    c0 = (np.full((2, 4), 0.3, np.float32), (np.full((2, 4), -0.2, np.float32), np.full((2, 4), 0.1, np.float32)))
    got = mk(pnn).apply(to_podlet(fv), pjnp.asarray(XSEQ), initial_carry=to_podlet(c0))
    want = mk(fnn).apply(fv, jnp.asarray(XSEQ), initial_carry=c0)
    close_tree(got, want)


# ----------------------------------------------------------------------------- per-step rngs
def test_rnn_split_rngs_draw_flaxs_dropout_masks():
    def make(nn):
        class DropCell(nn.GRUCell):
            @nn.compact
            def __call__(self, carry, x):
                carry, y = super().__call__(carry, x)
                return carry, nn.Dropout(0.5, deterministic=False)(y)

        return nn.RNN(DropCell(4), split_rngs={"params": False, "dropout": True})

    fv = make(fnn).init({"params": jkey(1), "dropout": jkey(2)}, jnp.asarray(XSEQ))
    pv = make(pnn).init({"params": pkey(1), "dropout": pkey(2)}, pjnp.asarray(XSEQ))
    assert_init_matches(pv, fv)
    got = np.asarray(make(pnn).apply(to_podlet(fv), pjnp.asarray(XSEQ), rngs={"dropout": pkey(9)}))
    want = np.asarray(make(fnn).apply(fv, jnp.asarray(XSEQ), rngs={"dropout": jkey(9)}))
    np.testing.assert_array_equal(got == 0, want == 0)    # the same mask at every step
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert len({tuple((got[0, t] == 0).tolist()) for t in range(5)}) > 1   # and a different one per step
