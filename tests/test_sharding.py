"""podlet.sharding, mesh_utils and flax's logical partitioning against jax / flax
(issue 26). JAX's CPU has one device here: the JAX oracle runs on a one-device mesh;
podlet's meshes of several devices are checked against JAX's unsharded results (what a
data-parallel sharded jit computes) and against the errors JAX raises."""
import re

import numpy as np
import pytest

import flax.linen as fnn
import flax.linen.partitioning as fpart
import jax
import jax.numpy as jjnp
import optax
from jax.experimental import mesh_utils as jmesh_utils
from jax.sharding import Mesh as JMesh, NamedSharding as JNS, PartitionSpec as JP

import podlet
import podlet.numpy as pjnp
import podlet.optim as poptax
from podlet import nn as pnn
from podlet.experimental import mesh_utils as pmesh_utils
from podlet.nn import partitioning as ppart
from podlet.sharding import Mesh as PMesh, NamedSharding as PNS, PartitionSpec as PP


def raises_like(fn_j, fn_p, exc_p=None):
    """Both raise; podlet's message is JAX's (up to 'jax' -> 'podlet' and podlet's
    'One of <what> arguments' prefix)."""
    with pytest.raises(Exception) as ej:
        fn_j()
    with pytest.raises(exc_p or type(ej.value)) as ep:
        fn_p()
    return str(ej.value), str(ep.value)


# ---------------------------------------------------------------------------------
# PartitionSpec
SPECS = [(), (None,), ("a",), ("a", None), (None, "a"), (("a", "b"),), (["a", "b"], None), ((),), ([],),
         (("a",),), ("a", ("b", "c"), None), ("a", JP.UNCONSTRAINED)]


def _to_p(args):
    return tuple(PP.UNCONSTRAINED if a is JP.UNCONSTRAINED else a for a in args)


@pytest.mark.parametrize("args", SPECS, ids=repr)
def test_partition_spec_matches_jax(args):
    j, p = JP(*args), PP(*_to_p(args))
    assert repr(p) == repr(j) and str(p) == str(j)
    assert len(p) == len(j)
    assert [repr(x) for x in p] == [repr(x) for x in j]
    assert repr(p.partitions) == repr(j.partitions)


def test_partition_spec_equality_and_algebra():
    pairs = [(("a",), ("a", None)), (("a",), (("a",),)), ((), (None,)), (("a", "b"), ("a", "b")),
             ((("a", "b"),), (["a", "b"],)), (("a",), ("b",))]
    for x, y in pairs:
        assert (PP(*x) == PP(*y)) == (JP(*x) == JP(*y)), (x, y)
        if PP(*x) == PP(*y):
            assert hash(PP(*x)) == hash(PP(*y))
    assert (PP("a") == ("a",)) == (JP("a") == ("a",))
    assert repr(PP("a") + PP(None, "b")) == repr(JP("a") + JP(None, "b"))
    assert repr(PP("a") + ("b",)) == repr(JP("a") + ("b",))
    assert repr(("b",) + PP("a")) == repr(("b",) + JP("a"))
    assert PP("a", None, "b").index("b") == JP("a", None, "b").index("b") == 2
    assert PP(None, None).count(None) == 2
    assert repr(PP.UNCONSTRAINED) == repr(JP.UNCONSTRAINED) == "UNCONSTRAINED"
    assert podlet.P is PP and podlet.sharding.PartitionSpec is PP
    # a pytree leaf, as in JAX
    assert podlet.tree_util.tree_leaves({"x": PP("a")}) == [PP("a")]
    with pytest.raises(TypeError, match="unhashable"):
        PP({"a"})
    with pytest.raises(AttributeError, match="immutable"):
        PP("a")._partitions = ()


# ---------------------------------------------------------------------------------
# Meshes
def test_one_device_mesh_matches_jax():
    jd, pd = jmesh_utils.create_device_mesh((1, 1)), pmesh_utils.create_device_mesh((1, 1), podlet.devices()[:1])
    assert jd.shape == pd.shape == (1, 1)
    jm, pm = JMesh(jd, ("data", "model")), PMesh(pd, ("data", "model"))
    assert repr(pm) == repr(jm) and str(pm) == str(jm)
    assert pm.shape == jm.shape and type(pm.shape) is type(jm.shape)
    assert pm.size == jm.size and pm.axis_names == jm.axis_names and pm.axis_sizes == jm.axis_sizes
    assert pm.devices.shape == jm.devices.shape and pm.devices.dtype == jm.devices.dtype
    assert pm.device_ids.tolist() == jm.device_ids.tolist()
    assert pm.shape_tuple == jm.shape_tuple
    jmm, pmm = jax.make_mesh((1,), ("x",)), podlet.make_mesh((1,), ("x",))
    assert repr(pmm) == repr(jmm)
    assert repr(PMesh(podlet.devices()[:1], "x")) == repr(JMesh(jax.devices(), "x"))


def test_several_device_mesh():
    devs = podlet.devices()
    n = len(devs)
    assert n >= 4, "podlet's default device count (8) is what these tests use"
    d = pmesh_utils.create_device_mesh((2, n // 2))
    assert d.shape == (2, n // 2) and [x.id for x in d.flat] == list(range(n))
    m = PMesh(d, ("data", "model"))
    assert m.shape == {"data": 2, "model": n // 2} and m.size == n
    assert m.devices is not d and (m.devices == d).all()
    assert m == PMesh(pmesh_utils.create_device_mesh((2, n // 2)), ("data", "model"))
    assert m != PMesh(d, ("data", "other"))
    m4 = podlet.make_mesh((4,), ("data",))  # the first 4 devices, as jax.make_mesh
    assert [x.id for x in m4.devices.flat] == [0, 1, 2, 3]
    # errors name the sizes, as JAX's
    j, p = raises_like(lambda: jmesh_utils.create_device_mesh((3,)),
                       lambda: pmesh_utils.create_device_mesh((3,), devs[:1]))
    assert p == j
    j, p = raises_like(lambda: JMesh(np.array(jax.devices()), ("a", "b")),
                       lambda: PMesh(np.array(devs[:1]), ("a", "b")))
    assert p == j
    with pytest.raises(ValueError, match="must be >= the product of mesh_shape"):
        podlet.make_mesh((n + 1,), ("x",))
    with pytest.raises(TypeError, match="podlet devices"):
        PMesh(np.array([0, 1]), ("x",))
    with pytest.raises(ValueError, match="unique"):
        PMesh(d, ("x", "x"))


def test_mesh_context_and_set_mesh():
    m = podlet.make_mesh((1,), ("x",))
    assert podlet.sharding.get_abstract_mesh().empty and jax.sharding.get_abstract_mesh().empty
    jm = JMesh(jmesh_utils.create_device_mesh((1,)), ("x",))  # Auto axes (make_mesh's are Explicit)
    x = np.arange(4.0, dtype=np.float32)
    # jax 0.10's legacy (deprecated) `with mesh:`: only with_sharding_constraint's PartitionSpecs see it
    with pytest.warns(DeprecationWarning, match="set_mesh"), jm, \
            pytest.warns(DeprecationWarning, match="set_mesh"), m:
        assert podlet.sharding.get_abstract_mesh().empty == jax.sharding.get_abstract_mesh().empty == True  # noqa
        assert podlet.sharding.get_mesh().empty and jax.sharding.get_mesh().empty
        np.testing.assert_array_equal(np.asarray(podlet.jit(lambda a: podlet.lax.with_sharding_constraint(
            a, PP("x")))(x)), np.asarray(jax.jit(lambda a: jax.lax.with_sharding_constraint(a, JP("x")))(x)))
        raises_like(lambda: jax.device_put(x, JP("x")), lambda: podlet.device_put(x, PP("x")))
        raises_like(lambda: jax.jit(lambda a: a, in_shardings=JP("x"))(x),
                    lambda: podlet.jit(lambda a: a, in_shardings=PP("x"))(x))
    raises_like(lambda: jax.lax.with_sharding_constraint(x, JP("x")),
                lambda: podlet.lax.with_sharding_constraint(x, PP("x")))
    jm = jax.make_mesh((1,), ("x",))
    with jax.set_mesh(jm) as jr, podlet.set_mesh(m) as pr:
        assert jr is None and pr is None
        got = podlet.sharding.get_abstract_mesh()
        want = jax.sharding.get_abstract_mesh()
        assert (got.axis_names, got.axis_sizes, got.empty) == (want.axis_names, want.axis_sizes, want.empty)
        # a PartitionSpec now means NamedSharding(mesh, spec)
        np.testing.assert_array_equal(np.asarray(podlet.device_put(np.arange(4.0), PP("x"))), np.arange(4.0))
    assert podlet.sharding.get_abstract_mesh().empty and podlet.sharding.get_mesh().empty


# ---------------------------------------------------------------------------------
# NamedSharding
def test_named_sharding_matches_jax():
    jm = JMesh(jmesh_utils.create_device_mesh((1, 1)), ("data", "model"))
    pm = PMesh(pmesh_utils.create_device_mesh((1, 1), podlet.devices()[:1]), ("data", "model"))
    for spec in [(), ("data",), ("data", "model"), (None, ("data", "model"))]:
        j, p = JNS(jm, JP(*spec)), PNS(pm, PP(*spec))
        assert repr(p) == repr(j)
        assert p.spec == PP(*spec) and p.mesh is pm
        assert p.is_fully_replicated == j.is_fully_replicated
        assert p.num_devices == j.num_devices
        assert p.shard_shape((4, 6)) == j.shard_shape((4, 6))
        assert p == PNS(pm, PP(*spec)) and hash(p) == hash(PNS(pm, PP(*spec)))
    j, p = raises_like(lambda: JNS(jm, JP("foo")), lambda: PNS(pm, PP("foo")))
    assert p == j
    j, p = raises_like(lambda: JNS(jm, JP("data", "data")), lambda: PNS(pm, PP("data", "data")), ValueError)
    assert p == j
    with pytest.raises(TypeError, match="expects a PartitionSpec"):
        PNS(pm, ("data",))
    single = podlet.sharding.SingleDeviceSharding(podlet.devices()[0])
    assert single.is_fully_replicated and single.device_set == {podlet.devices()[0]}
    assert single.shard_shape((3, 2)) == (3, 2)


def test_named_sharding_several_devices():
    m = PMesh(pmesh_utils.create_device_mesh((4, 2), podlet.devices()[:8]), ("data", "model"))
    s = PNS(m, PP("data"))
    assert not s.is_fully_replicated and s.num_devices == 8
    assert s.shard_shape((8, 6)) == (2, 6)
    idx = s.devices_indices_map((8, 6))
    assert idx[m.devices[1, 0]] == (slice(2, 4), slice(None)) and idx[m.devices[1, 1]] == idx[m.devices[1, 0]]
    assert PNS(m, PP(("data", "model"))).shard_shape((8, 3)) == (1, 3)
    assert PNS(m, PP(None)).is_fully_replicated


# ---------------------------------------------------------------------------------
# device_put, jit with shardings, with_sharding_constraint
def _mlp_step(jax_, jnp, optax_):
    def loss(params, batch):
        h = jnp.tanh(batch["x"] @ params["w1"] + params["b1"])
        return jnp.mean((h @ params["w2"] - batch["y"]) ** 2)

    tx = optax_.adam(0.01)

    def step(params, opt_state, batch):
        l, g = jax_.value_and_grad(loss)(params, batch)
        upd, opt_state = tx.update(g, opt_state, params)
        return optax_.apply_updates(params, upd), opt_state, l
    return tx, step


def _mlp_data():
    rs = np.random.RandomState(0)
    params = {"w1": rs.normal(size=(3, 16)).astype(np.float32) * 0.5, "b1": np.zeros(16, np.float32),
              "w2": rs.normal(size=(16, 2)).astype(np.float32) * 0.5}
    batch = {"x": rs.normal(size=(16, 3)).astype(np.float32), "y": rs.normal(size=(16, 2)).astype(np.float32)}
    return params, batch


def _run_sharded(jax_, jnp, optax_, mesh, NS, P, params, batch, steps=3):
    tx, step = _mlp_step(jax_, jnp, optax_)
    rep, data = NS(mesh, P()), NS(mesh, P("data"))
    params = jax_.device_put(params, rep)
    batch = jax_.device_put(batch, data)
    opt_state = tx.init(params)
    f = jax_.jit(step, in_shardings=(rep, rep, data), out_shardings=(rep, rep, None), donate_argnums=(0, 1))
    losses = []
    for _ in range(steps):
        params, opt_state, l = f(params, opt_state, batch)
        losses.append(float(l))
    return losses, params


def test_data_parallel_jit_one_device_is_jax():
    params, batch = _mlp_data()
    jm = JMesh(jmesh_utils.create_device_mesh((1,)), ("data",))
    pm = PMesh(pmesh_utils.create_device_mesh((1,), podlet.devices()[:1]), ("data",))
    jl, jp = _run_sharded(jax, jjnp, optax, jm, JNS, JP, params, batch)
    pl, pp = _run_sharded(podlet, pjnp, poptax, pm, PNS, PP, params, batch)
    np.testing.assert_allclose(pl, jl, rtol=1e-6)
    for k in jp:
        np.testing.assert_allclose(np.asarray(pp[k]), np.asarray(jp[k]), rtol=1e-5, atol=1e-7)
    # the same podlet step without shardings: a one-device sharding is an exact no-op
    tx, step = _mlp_step(podlet, pjnp, poptax)
    p0 = podlet.device_put(params)
    _, _, l0 = podlet.jit(step)(p0, tx.init(p0), podlet.device_put(batch))
    assert float(l0) == pl[0]


@pytest.mark.parametrize("n", [2, 8])
def test_data_parallel_jit_several_devices(n):
    """Batch sharded over n podlet devices, params replicated: the values of JAX's
    unsharded computation (each device computes its block; tests/test_sharding_partition.py
    checks the split itself)."""
    params, batch = _mlp_data()
    jm = JMesh(jmesh_utils.create_device_mesh((1,)), ("data",))
    jl, jp = _run_sharded(jax, jjnp, optax, jm, JNS, JP, params, batch)
    pm = PMesh(pmesh_utils.create_device_mesh((n,), podlet.devices()[:n]), ("data",))
    pl, pp = _run_sharded(podlet, pjnp, poptax, pm, PNS, PP, params, batch)
    np.testing.assert_allclose(pl, jl, rtol=1e-6)
    for k in jp:
        np.testing.assert_allclose(np.asarray(pp[k]), np.asarray(jp[k]), rtol=1e-5, atol=1e-7)
    # and podlet's unsharded run, up to the order of the loss's and gradients' sums
    pl1, pp1 = _run_sharded(podlet, pjnp, poptax, PMesh(podlet.devices()[:1], "data"), PNS, PP, params, batch)
    np.testing.assert_allclose(pl, pl1, rtol=1e-6)
    # a 2-D mesh whose second axis (size 1) is named on a parameter dimension: still data parallel
    m2 = PMesh(pmesh_utils.create_device_mesh((n, 1), podlet.devices()[:n]), ("data", "model"))
    x = podlet.device_put(params["w1"], PNS(m2, PP(None, "model")))
    np.testing.assert_array_equal(np.asarray(x), params["w1"])


def test_sharding_errors_match_jax():
    jm = JMesh(jmesh_utils.create_device_mesh((1,)), ("data",))
    pm = PMesh(podlet.devices()[:1], ("data",))
    # rank: a spec longer than the array
    j, p = raises_like(lambda: jax.device_put(np.ones(4), JNS(jm, JP("data", None))),
                       lambda: podlet.device_put(np.ones(4), PNS(pm, PP("data", None))))
    assert "is only valid for values of rank at least 2, but was applied to a value of rank 1" in j
    assert "is only valid for values of rank at least 2, but was applied to a value of rank 1" in p
    j, p = raises_like(lambda: jax.jit(lambda x: jax.lax.with_sharding_constraint(x, JNS(jm, JP("data", None))))(
        np.ones(4)), lambda: podlet.jit(lambda x: podlet.lax.with_sharding_constraint(
            x, PNS(pm, PP("data", None))))(np.ones(4)))
    assert "rank at least 2" in p and "rank at least 2" in j
    j, p = raises_like(lambda: jax.jit(lambda x: x, out_shardings=JNS(jm, JP(None, None)))(np.ones(4)),
                       lambda: podlet.jit(lambda x: x, out_shardings=PNS(pm, PP(None, None)))(np.ones(4)))
    assert "rank at least 2" in p and "rank at least 2" in j
    # a PartitionSpec without a mesh in context
    j, p = raises_like(lambda: jax.lax.with_sharding_constraint(np.ones(4), JP("data")),
                       lambda: podlet.lax.with_sharding_constraint(np.ones(4), PP("data")))
    assert p.replace("podlet", "jax").startswith(j[:60])
    j, p = raises_like(lambda: jax.jit(lambda x: x, in_shardings=JP("data"))(np.ones(4)),
                       lambda: podlet.jit(lambda x: x, in_shardings=PP("data"))(np.ones(4)))
    assert "requires a non-empty mesh in context" in j and "requires a non-empty mesh in context" in p
    j, p = raises_like(lambda: jax.device_put(np.ones(4), JP("data")),
                       lambda: podlet.device_put(np.ones(4), PP("data")))
    assert p.replace("podlet", "jax") == j
    # in_shardings of the wrong length
    j, p = raises_like(lambda: jax.jit(lambda x, y: x, in_shardings=(JNS(jm, JP()),))(np.ones(4), 1.0),
                       lambda: podlet.jit(lambda x, y: x, in_shardings=(PNS(pm, PP()),))(np.ones(4), 1.0))
    assert "wrong length" in j and "got 1 for an args tuple of length 2" in p
    # on one device, a spec that fits passes and leaves the values alone
    x = np.arange(6.0, dtype=np.float32).reshape(3, 2)
    y = podlet.jit(lambda a: podlet.lax.with_sharding_constraint(a * 2, PNS(pm, PP("data", None))))(x)
    np.testing.assert_array_equal(np.asarray(y), x * 2)


def test_sharding_errors_several_devices():
    m = PMesh(pmesh_utils.create_device_mesh((2, 4), podlet.devices()[:8]), ("data", "model"))
    with pytest.raises(ValueError, match=re.escape("implies that array axis 0 is partitioned 2 times, but the "
                                                   "dimension size is 3 (full shape: (3,)")):
        podlet.device_put(np.ones(3), PNS(m, PP("data")))
    # a model-parallel layout (a size-4 mesh axis on dimension 1) names the axis and the array
    with pytest.raises(NotImplementedError, match=r"args\[0\]\['w'\] of shape \(4, 8\) is sharded over mesh "
                                                  r"axis 'model' \(size 4\) on dimension 1"):
        podlet.jit(lambda p: p["w"].sum(), in_shardings=({"w": PNS(m, PP(None, "model"))},))({"w": np.ones((4, 8))})
    with pytest.raises(NotImplementedError, match=r"output\['h'\] .* mesh axis 'model'"):
        podlet.jit(lambda x: {"h": x * 2}, out_shardings={"h": PNS(m, PP("data", "model"))})(np.ones((4, 8)))
    with pytest.raises(NotImplementedError, match="mesh axis 'model'"):
        podlet.jit(lambda x: podlet.lax.with_sharding_constraint(x, PNS(m, PP(None, "model"))))(np.ones((4, 8)))
    with pytest.raises(NotImplementedError, match="mesh axis 'data' \\(size 2\\) on dimension 1"):
        podlet.device_put(np.ones((2, 8)), PNS(m, PP(None, ("data", "model"))))
    with pytest.raises(ValueError, match="tree prefix"):
        podlet.jit(lambda p: p, in_shardings=({"a": PNS(m, PP())},))({"b": np.ones(2)})


# ---------------------------------------------------------------------------------
# flax.linen logical partitioning
def _boxed_model(nn):
    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.Dense(8, kernel_init=nn.with_logical_partitioning(nn.initializers.xavier_uniform(),
                                                                     ("embed", "mlp")),
                         bias_init=nn.with_logical_partitioning(nn.initializers.normal(1e-2), ("mlp",)))(x)
            h = nn.LayerNorm(scale_init=nn.with_logical_partitioning(nn.initializers.ones, ("mlp",)),
                             bias_init=nn.with_partitioning(nn.initializers.zeros, ("tensor",)))(h)
            h = nn.DenseGeneral((2, 3), kernel_init=nn.with_logical_partitioning(
                nn.initializers.lecun_normal(), ("mlp", "heads")))(h)
            e = nn.Embed(11, 4, embedding_init=nn.with_logical_partitioning(nn.initializers.normal(1.0),
                                                                             ("vocab", "embed")))
            return h.sum(-1) @ e.embedding[:2, :3], e.attend(x[..., :4])
    return Block()


RULES = (("batch", "data"), ("embed", "fsdp"), ("mlp", "tensor"), ("vocab", "tensor"), ("heads", "tensor"))


def test_boxed_init_matches_flax():
    x = np.random.RandomState(1).normal(size=(2, 4)).astype(np.float32)
    vf = _boxed_model(fnn).init(jax.random.key(0), x)  # eager: the init bits podlet reproduces
    vp = _boxed_model(pnn).init(podlet.random.key(0), x)
    # the same boxes (type, names), paths and init bits
    assert str(podlet.tree_util.tree_structure(vp)) == str(jax.tree_util.tree_structure(vf))
    fk = [(jax.tree_util.keystr(k), np.asarray(v)) for k, v in jax.tree_util.tree_leaves_with_path(vf)]
    pk = [(podlet.tree_util.keystr(k), np.asarray(v)) for k, v in podlet.tree_util.tree_leaves_with_path(vp)]
    assert [k for k, _ in pk] == [k for k, _ in fk]
    for (_, a), (_, b) in zip(fk, pk):
        np.testing.assert_array_equal(b, a)
    box = vp["params"]["Dense_0"]["kernel"]
    assert isinstance(box, pnn.LogicallyPartitioned) and isinstance(box, pnn.Partitioned)
    assert box.names == ("embed", "mlp") and box.mesh is None and box.rules is None
    assert isinstance(vp["params"]["LayerNorm_0"]["bias"], pnn.Partitioned)
    assert not isinstance(vp["params"]["LayerNorm_0"]["bias"], pnn.LogicallyPartitioned)
    assert vp["params"]["DenseGeneral_0"]["kernel"].value.shape == (8, 2, 3)
    # partition specs, unboxing, apply on boxed and unboxed trees
    assert repr(pnn.get_partition_spec(vp)) == repr(fnn.get_partition_spec(vf))
    ub = pnn.unbox(vp)
    assert str(podlet.tree_util.tree_structure(ub)) == str(jax.tree_util.tree_structure(fnn.unbox(vf)))
    assert pnn.meta.unbox is pnn.unbox and box.unbox() is box.value
    yf = jax.jit(_boxed_model(fnn).apply)(vf, x)
    for v in (vp, ub):
        yp = _boxed_model(pnn).apply(v, x)
        for a, b in zip(jax.tree_util.tree_leaves(yf), podlet.tree_util.tree_leaves(yp)):
            np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-6)
    # eval_shape keeps the boxes (how lm1b reads its partition specs before init)
    shapes = podlet.eval_shape(_boxed_model(pnn).init, podlet.random.key(0), x)
    assert repr(pnn.get_partition_spec(shapes)) == repr(fnn.get_partition_spec(vf))
    # replace_boxed keeps boxes; a boxed param written back through a Variable keeps its box
    nb = pnn.meta.replace_boxed(vp, jax.tree_util.tree_map(lambda a: np.zeros(np.shape(a)), ub))
    assert isinstance(nb["params"]["Dense_0"]["kernel"], pnn.LogicallyPartitioned)
    assert not np.asarray(nb["params"]["Dense_0"]["kernel"].value).any()
    # the optimizer sees through the boxes (optax over Flax's boxed tree gives boxed state)
    sf = jax.eval_shape(optax.adam(0.1).init, vf["params"])
    sp = poptax.adam(0.1).init(vp["params"])
    assert str(podlet.tree_util.tree_structure(sp)) == str(jax.tree_util.tree_structure(sf))


def test_logical_to_mesh_axes_matches_flax():
    cases = [(("batch", "embed"), RULES), (("embed", "mlp"), RULES), (("mlp", "embed"), RULES),
             (("heads", "mlp"), RULES),  # both want 'tensor': the first rule to match wins
             ((None, "embed"), RULES), (("unknown", "embed"), RULES), ((), RULES),
             (("embed", "mlp"), (("embed", ("data", "fsdp")), ("mlp", "tensor"))),
             (("embed", "mlp"), (("embed", None), ("mlp", "data"), ("embed", "data"))),
             (("batch", JP.UNCONSTRAINED), RULES), (("embed", "mlp"), [["embed", "fsdp"], ["mlp", "tensor"]])]
    for names, rules in cases:
        pnames = _to_p(names)
        want = fnn.logical_to_mesh_axes(names, rules)
        got = pnn.logical_to_mesh_axes(pnames, rules)
        assert repr(got) == repr(want), (names, rules)
        with fnn.logical_axis_rules(rules), pnn.logical_axis_rules(rules):
            assert repr(pnn.logical_to_mesh_axes(pnames)) == repr(fnn.logical_to_mesh_axes(names))
            assert pnn.get_logical_axis_rules() == fnn.get_logical_axis_rules()
    assert pnn.get_logical_axis_rules() == () == fnn.get_logical_axis_rules()
    assert pnn.logical_to_mesh_axes(None, RULES) is None
    tree = {"a": JP("embed", "mlp"), "b": JP("batch"), "c": None}
    ptree = {"a": PP("embed", "mlp"), "b": PP("batch"), "c": None}
    assert repr(pnn.logical_to_mesh(ptree, RULES)) == repr(fnn.logical_to_mesh(tree, RULES))
    assert repr(ppart.logical_to_mesh(ptree, RULES)) == repr(fpart.logical_to_mesh(tree, RULES))
    # errors as Flax's
    j, p = raises_like(lambda: fnn.logical_to_mesh_axes(("embed", "embed"), RULES),
                       lambda: pnn.logical_to_mesh_axes(("embed", "embed"), RULES))
    assert p == j
    j, p = raises_like(lambda: fnn.logical_to_mesh_axes(("embed",), {"embed": "x"}),
                       lambda: pnn.logical_to_mesh_axes(("embed",), {"embed": "x"}))
    assert p.startswith(j)
    # set_logical_axis_rules / partitioning.set_axis_rules are global until reset
    pnn.set_logical_axis_rules(RULES)
    try:
        assert ppart.get_axis_rules() == RULES
    finally:
        ppart.set_axis_rules(())
    assert pnn.get_logical_axis_rules() == ()


def test_logical_to_mesh_sharding_and_constraints():
    jm = JMesh(jmesh_utils.create_device_mesh((1, 1, 1)), ("data", "fsdp", "tensor"))
    pm = PMesh(pmesh_utils.create_device_mesh((1, 1, 1), podlet.devices()[:1]), ("data", "fsdp", "tensor"))
    x = np.random.RandomState(1).normal(size=(2, 4)).astype(np.float32)
    vf = jax.eval_shape(_boxed_model(fnn).init, jax.random.key(0), x)
    vp = podlet.eval_shape(_boxed_model(pnn).init, podlet.random.key(0), x)
    sf = fnn.logical_to_mesh_sharding(fnn.get_partition_spec(vf), jm, RULES)
    sp = pnn.logical_to_mesh_sharding(pnn.get_partition_spec(vp), pm, RULES)
    assert repr(sp) == repr(sf)
    tf = {"a": fnn.Partitioned(np.ones((2, 3)), ("data", None)), "b": np.ones(2), "c": "text"}
    tp = {"a": pnn.Partitioned(np.ones((2, 3)), ("data", None)), "b": np.ones(2), "c": "text"}
    assert repr(pnn.get_sharding(tp, pm)) == repr(fnn.get_sharding(tf, jm))
    # lm1b's setup_initial_state: init under the mesh and rules with out_shardings, then unbox
    with podlet.set_mesh(pm), ppart.axis_rules(RULES):
        state = podlet.jit(_boxed_model(pnn).init, out_shardings=sp)(podlet.random.key(0), x)
        # with a mesh in context, unboxing applies the (checked) logical constraint
        y = podlet.jit(lambda v: _boxed_model(pnn).apply(v, x))(state)
        z = pnn.with_logical_constraint(pjnp.ones((2, 4)), PP("batch", "embed"))
        np.testing.assert_array_equal(np.asarray(z), np.ones((2, 4)))
        with pytest.raises(ValueError, match="did not match a rule"):
            pnn.with_logical_constraint(pjnp.ones((2,)), PP("nothing"), fallback=pnn.spmd.RulesFallback.RAISE_ERROR)
        with pytest.raises(ValueError, match="rank at least 2"):
            pnn.with_logical_constraint(pjnp.ones((2,)), PP("batch", "embed"))
    want = jax.jit(_boxed_model(fnn).apply)(jax.tree_util.tree_map(np.asarray, pnn.unbox(state)), x)
    for a, b in zip(jax.tree_util.tree_leaves(want), podlet.tree_util.tree_leaves(y)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-6)
    # without rules or mesh, a logical constraint is a no-op (as Flax's)
    assert pnn.with_logical_constraint(x, PP("nothing", "at-all")) is x
    # a model-parallel mesh: a size-2 'tensor' axis over the 'mlp' dimension of a kernel
    big = PMesh(pmesh_utils.create_device_mesh((1, 1, 2), podlet.devices()[:2]), ("data", "fsdp", "tensor"))
    shard = pnn.logical_to_mesh_sharding(pnn.get_partition_spec(vp), big, RULES)
    with pytest.raises(NotImplementedError, match=r"'Dense_0'\]\['kernel'\].* mesh axis 'tensor' \(size 2\) "
                                                  r"on dimension 1"):
        podlet.jit(_boxed_model(pnn).init, out_shardings=shard)(podlet.random.key(0), x)
    # and under that mesh, unboxing the param (its logical constraint) names the variable
    with podlet.set_mesh(big), ppart.axis_rules(RULES):
        with pytest.raises(NotImplementedError, match=r"param params/Dense_0/kernel: .* mesh axis 'tensor'"):
            _boxed_model(pnn).init(podlet.random.key(0), x)


def test_partitioning_param_with_axes_matches_flax():
    def model(nn, part):
        class M(nn.Module):
            @nn.compact
            def __call__(self, x):
                w = part.param_with_axes("w", nn.initializers.lecun_normal(), (x.shape[-1], 3),
                                         axes=("embed", "mlp"))
                v = part.variable_with_axes("stats", "count", lambda: np.zeros((3,), np.float32), axes=("mlp",))
                v.value = v.value + 1
                return x @ w
        return M()
    x = np.ones((2, 4), np.float32)
    vf = model(fnn, fpart).init(jax.random.key(0), x)
    vp = model(pnn, ppart).init(podlet.random.key(0), x)
    assert sorted(vp) == sorted(vf) == ["params", "params_axes", "stats", "stats_axes"]
    np.testing.assert_array_equal(np.asarray(vp["params"]["w"]), np.asarray(vf["params"]["w"]))
    np.testing.assert_array_equal(np.asarray(vp["stats"]["count"]), np.asarray(vf["stats"]["count"]))
    assert vp["params_axes"]["w_axes"] == ppart.AxisMetadata(names=("embed", "mlp"))
    assert repr(ppart.get_axis_names(vp["params_axes"])) .replace("FrozenDict", "") == \
        repr(fpart.get_axis_names(vf["params_axes"])).replace("FrozenDict", "")
    assert ppart.get_axis_names(vp["stats_axes"])["count"] == PP("mlp")


def test_partitioned_add_remove_axis():
    a = pnn.Partitioned(np.ones((2, 3)), ("x", None))
    fa = fnn.Partitioned(np.ones((2, 3)), ("x", None))
    params = {pnn.meta.PARTITION_NAME: "layers"}
    b, fb = a.add_axis(0, params), fa.add_axis(0, {fnn.meta.PARTITION_NAME: "layers"})
    assert b.names == fb.names == ("layers", "x", None)
    assert b.remove_axis(0, params).names == ("x", None)
    with pytest.raises(ValueError, match="partition_name"):
        a.add_axis(0, {})
    assert pnn.meta.add_axis({"p": a}, 1, params)["p"].names == ("x", "layers", None)


def test_add_metadata_axis_matches_flax():
    def model(nn):
        class Inner(nn.Module):
            @nn.compact
            def __call__(self, x):
                return nn.Dense(3, kernel_init=nn.with_partitioning(nn.initializers.lecun_normal(), ("a", None)))(x)

        class Outer(nn.Module):
            @nn.compact
            def __call__(self, x):
                return nn.add_metadata_axis(Inner, variable_axes={"params": 0},
                                            metadata_params={nn.PARTITION_NAME: "layers"})()(x)
        return Outer()
    x = np.ones((2, 4), np.float32)
    vf = model(fnn).init(jax.random.key(0), x)
    vp = model(pnn).init(podlet.random.key(0), x)
    assert repr(pnn.get_partition_spec(vp)) == repr(fnn.get_partition_spec(vf))
    assert pnn.get_partition_spec(vp)["params"]["Map_variablesInner_0"]["Dense_0"]["kernel"] == PP("layers", "a", None)
    np.testing.assert_allclose(np.asarray(model(pnn).apply(vp, x)), np.asarray(model(fnn).apply(vf, x)), rtol=1e-6)


@pytest.mark.parametrize("kind", ["scan", "vmap"])
def test_lifted_transforms_add_the_metadata_axis(kind):
    """nn.scan / nn.vmap with metadata_params: the boxes of the stacked params gain the
    new axis's name, as Flax's lifted transforms do."""
    def model(nn):
        class Cell(nn.Module):
            @nn.compact
            def __call__(self, c, x):
                h = nn.Dense(4, kernel_init=nn.with_logical_partitioning(nn.initializers.lecun_normal(),
                                                                         ("embed", "mlp")))(c)
                return h, h

        class Outer(nn.Module):
            @nn.compact
            def __call__(self, x):
                if kind == "scan":
                    return nn.scan(Cell, variable_axes={"params": 0}, split_rngs={"params": True}, length=3,
                                   metadata_params={nn.PARTITION_NAME: "layers"})()(x, None)[0]
                return nn.vmap(Cell, variable_axes={"params": 0}, split_rngs={"params": True}, in_axes=(0, None),
                               metadata_params={nn.PARTITION_NAME: "layers"})()(x, None)[0]
        return Outer()
    x = np.ones((2, 4), np.float32)
    vf = model(fnn).init(jax.random.key(0), x)
    vp = model(pnn).init(podlet.random.key(0), x)
    assert repr(pnn.get_partition_spec(vp)) == repr(fnn.get_partition_spec(vf))
    np.testing.assert_allclose(np.asarray(model(pnn).apply(vp, x)), np.asarray(model(fnn).apply(vf, x)),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["scan", "vmap"])
def test_partitioning_scan_vmap_with_axes_match_flax(kind):
    def model(nn, part):
        class Cell(nn.Module):
            @nn.compact
            def __call__(self, c, x):
                w = part.param_with_axes("w", nn.initializers.lecun_normal(), (4, 4), axes=("embed", "mlp"))
                return c @ w, c @ w

        class Outer(nn.Module):
            @nn.compact
            def __call__(self, x):
                if kind == "scan":
                    return part.scan_with_axes(Cell, variable_axes={"params": 0}, split_rngs={"params": True},
                                               length=3)()(x, None)[0]
                return part.vmap_with_axes(Cell, variable_axes={"params": 0}, split_rngs={"params": True},
                                           in_axes=(0, None), partitioning_axis_names={"params": "ens"})()(x, None)[0]
        return Outer()
    x = np.ones((2, 4), np.float32)
    vf = model(fnn, fpart).init(jax.random.key(0), x)
    vp = model(pnn, ppart).init(podlet.random.key(0), x)
    assert repr(vp["params_axes"]) == repr(vf["params_axes"])
    assert repr(ppart.get_axis_names(vp["params_axes"])) == repr(fpart.get_axis_names(vf["params_axes"]))
    np.testing.assert_array_equal(np.asarray(podlet.tree_util.tree_leaves(vp["params"])[0]),
                                  np.asarray(jax.tree_util.tree_leaves(vf["params"])[0]))
    np.testing.assert_allclose(np.asarray(model(pnn, ppart).apply(vp, x)), np.asarray(model(fnn, fpart).apply(vf, x)),
                               rtol=1e-5, atol=1e-6)
