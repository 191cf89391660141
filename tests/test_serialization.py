"""podlet.serialization and podlet.traverse_util against flax.serialization / flax.traverse_util.

The bytes of ``to_bytes`` must equal Flax's for the same tree, and each side must read the
other's files (``msgpack`` itself is only the test's oracle for the codec; podlet does not
import it).
"""
import collections
import dataclasses
import warnings

import ml_dtypes
import msgpack
import numpy as np
import pytest

import podlet
import podlet.numpy as pnp
from podlet import optim
from podlet import serialization as ps
from podlet import struct as pstruct
from podlet import traverse_util as pt
from podlet._src import msgpack as pmsgpack
from podlet.nn import frozen_dict as pfd
from podlet.training import train_state as p_train_state

import flax
import optax
from flax import serialization as fs
from flax import traverse_util as ft
from flax.core import frozen_dict as ffd
from flax.training import train_state as f_train_state

NT = collections.namedtuple("NT", "a b")


def _tree():
    """Every kind of leaf Flax's format carries: arrays of several dtypes (bf16, 0-d, empty),
    NumPy scalars, Python ints at encoding boundaries, floats, str, bytes, None, complex."""
    return {
        "params": {"Dense_0": {"kernel": np.arange(12, dtype=np.float32).reshape(3, 4),
                               "bias": np.linspace(-1, 1, 4).astype(ml_dtypes.bfloat16)},
                   "scalar_arr": np.array(7, np.int32), "empty": np.zeros((0, 3), np.float32)},
        "step": 3, "ints": [0, 127, 128, 255, 256, 65535, 65536, 2**32, -1, -32, -33, -128, -129, -2**31, -2**40],
        "f": 1.5, "s": "x" * 40, "long_s": "é" * 300, "b": True, "none": None, "bytes": b"\x00" * 300,
        "sc": np.float32(2.5), "i8": np.int8(-3), "b16": ml_dtypes.bfloat16(1.25), "u64": np.uint64(2**63),
        "lst": [1, np.ones((2, 2), np.uint8)], "tup": (np.float64(1.0), 2.0),
        "nt": NT(np.uint8(4), np.zeros((2,), np.bool_)), "c": 1 + 2j, "emptyd": {}, "emptyl": [],
        "many": {str(i): i * 1000 for i in range(20)}, "longlist": list(range(20)),
    }


def _assert_tree_equal(a, b):
    assert type(a) is type(b) or (isinstance(a, dict) and isinstance(b, dict)), (type(a), type(b))
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _assert_tree_equal(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_tree_equal(x, y)
    elif isinstance(a, (np.ndarray, np.generic)):
        assert a.dtype == b.dtype and np.shape(a) == np.shape(b)
        np.testing.assert_array_equal(a, b)
    else:
        assert a == b


def test_to_bytes_equals_flax_bytes():
    t = _tree()
    data = fs.to_bytes(t)
    assert ps.to_bytes(t) == data
    sd = fs.to_state_dict(t)
    assert ps.msgpack_serialize(sd) == fs.msgpack_serialize(sd)  # a tree_map copy: keys sorted, as in jax
    assert ps.msgpack_serialize(fs.to_state_dict(t), in_place=True) == data
    _assert_tree_equal(ps.msgpack_restore(data), fs.msgpack_restore(data))


def test_podlet_array_leaves_write_flax_bytes():
    vals = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "h": np.ones(3, ml_dtypes.bfloat16),
            "i": np.array([1, -2], np.int32), "m": np.array([True, False]), "z": np.array(0.5, np.float32)}
    ptree = {"a": {k: pnp.asarray(v) for k, v in vals.items()}, "l": [pnp.asarray(vals["w"])]}
    ntree = {"a": vals, "l": [vals["w"]]}
    data = ps.to_bytes(ptree)
    assert data == fs.to_bytes(ntree)
    _assert_tree_equal(fs.from_bytes(ntree, data), ntree)


def test_flax_bytes_read_into_podlet_arrays():
    import jax.numpy as jnp
    jtree = {"kernel": jnp.arange(6.0).reshape(2, 3), "bias": jnp.ones(3, jnp.bfloat16),
             "count": jnp.array(4, jnp.int32), "step": 5, "lr": np.float32(0.1)}
    out = ps.from_bytes(jtree, fs.to_bytes(jtree))
    for k in ("kernel", "bias", "count"):
        assert isinstance(out[k], podlet.Array)
        assert out[k].dtype == np.asarray(jtree[k]).dtype and out[k].shape == jtree[k].shape
        np.testing.assert_array_equal(np.asarray(out[k]), np.asarray(jtree[k]))
    assert out["step"] == 5 and out["lr"] == np.float32(0.1) and isinstance(out["lr"], np.float32)
    # A dtype podlet does not hold (int8, float16) stays a NumPy array rather than change dtype.
    odd = {"q": np.arange(4, dtype=np.int8), "h": np.ones(2, np.float16)}
    out = ps.from_bytes(odd, fs.to_bytes(odd))
    assert out["q"].dtype == np.int8 and out["h"].dtype == np.float16


def test_frozen_dict_namedtuple_partial():
    vals = {"a": {"b": np.ones(2, np.float32)}, "c": np.int32(3)}
    data = ps.to_bytes(pfd.freeze(vals))
    assert data == fs.to_bytes(ffd.freeze(vals))
    out = ps.from_bytes(pfd.freeze(vals), data)
    assert isinstance(out, pfd.FrozenDict) and isinstance(out["a"], pfd.FrozenDict)
    nt = NT(a=np.ones(2, np.float32), b=[1, 2])
    assert ps.to_state_dict(nt) == fs.to_state_dict(nt) or ps.to_bytes(nt) == fs.to_bytes(nt)
    back = ps.from_bytes(nt, ps.to_bytes(nt))
    assert type(back) is NT and back.b == [1, 2]
    p = podlet.tree_util.Partial(lambda x, y: x + y, np.float32(1.0))
    assert ps.to_state_dict(p) == {"args": {"0": np.float32(1.0)}, "keywords": {}}
    assert ps.from_state_dict(p, {"args": {"0": 5.0}, "keywords": {}})(1.0) == 6.0


@pstruct.dataclass
class PState:
    count: object
    weights: object
    name: str = pstruct.field(pytree_node=False, default="m")


@flax.struct.dataclass
class FState:
    count: object
    weights: object
    name: str = flax.struct.field(pytree_node=False, default="m")


def test_struct_dataclass_state_dict():
    w = {"w": np.arange(3, dtype=np.float32)}
    p, f = PState(np.int32(2), w), FState(np.int32(2), w)
    assert ps.is_serializable(PState)
    sd = ps.to_state_dict(p)
    assert sd.keys() == fs.to_state_dict(f).keys() == {"count", "weights"}
    assert ps.to_bytes(p) == fs.to_bytes(f)
    back = ps.from_bytes(PState(np.int32(0), {"w": np.zeros(3, np.float32)}, name="kept"), fs.to_bytes(f))
    assert isinstance(back, PState) and back.name == "kept" and back.count == 2
    np.testing.assert_array_equal(np.asarray(back.weights["w"]), w["w"])
    with pytest.raises(ValueError, match="Missing field weights"):
        ps.from_state_dict(p, {"count": 1})
    with pytest.raises(ValueError, match='Unknown field\\(s\\) "extra"'):
        ps.from_state_dict(p, {"count": 1, "weights": w, "extra": 0})


def test_train_state_round_trip_and_flax_layout():
    params = {"Dense_0": {"kernel": np.ones((2, 3), np.float32), "bias": np.zeros(3, np.float32)}}
    pst = p_train_state.TrainState.create(apply_fn=None, params={k: {n: pnp.asarray(v) for n, v in d.items()}
                                                                  for k, d in params.items()}, tx=optim.adam(1e-3))
    fst = f_train_state.TrainState.create(apply_fn=None, params=params, tx=optax.adam(1e-3))
    psd, fsd = ps.to_state_dict(pst), fs.to_state_dict(fst)
    assert psd.keys() == fsd.keys() == {"step", "params", "opt_state"}
    assert ft.flatten_dict(fsd["params"]).keys() == pt.flatten_dict(psd["params"]).keys()
    # The optimizer state has Optax's layout (tuple of namedtuples: ScaleByAdamState, EmptyState).
    assert sorted(pt.flatten_dict(psd["opt_state"], sep="/")) == sorted(ft.flatten_dict(fsd["opt_state"], sep="/"))
    # podlet writes, Flax reads into its own TrainState; and back.
    fback = fs.from_bytes(fst, ps.to_bytes(pst))
    np.testing.assert_array_equal(fback.params["Dense_0"]["kernel"], params["Dense_0"]["kernel"])
    fst2 = fst.replace(step=7)
    pback = ps.from_bytes(pst, fs.to_bytes(fst2))
    assert pback.step == 7 and isinstance(pback.params["Dense_0"]["kernel"], podlet.Array)
    assert isinstance(pback.opt_state[0].mu["Dense_0"]["bias"], podlet.Array)
    assert ps.to_bytes(pback) == fs.to_bytes(fst2)


def test_chunked_arrays(monkeypatch):
    monkeypatch.setattr(ps, "MAX_CHUNK_SIZE", 64)
    monkeypatch.setattr(fs, "MAX_CHUNK_SIZE", 64)
    t = {"big": np.arange(50, dtype=np.float32).reshape(5, 10), "small": np.ones(3, np.float32),
         "nested": {"big": np.arange(40, dtype=np.int32)}}
    data = ps.msgpack_serialize(t)
    assert data == fs.msgpack_serialize(t)
    assert b"__msgpack_chunked_array__" in data
    _assert_tree_equal(ps.msgpack_restore(data), t)
    _assert_tree_equal(fs.msgpack_restore(data), t)
    assert ps.msgpack_serialize(t["big"]) == fs.msgpack_serialize(t["big"])  # a chunked top-level array


@pytest.mark.parametrize("obj", [
    0, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**64 - 1, -1, -32, -33, -128, -129, -32768, -32769,
    -2**31, -2**31 - 1, -2**63, 0.1, -0.0, float("inf"), True, False, None, "", "a" * 31, "a" * 32, "a" * 255,
    "a" * 256, "a" * 65536, b"", b"a" * 255, b"a" * 256, b"a" * 65536, [1] * 15, [1] * 16, [1] * 65536,
    {str(i): i for i in range(15)}, {str(i): i for i in range(16)}, {1: "int key", None: [(), {}]},
    (1, (2, [3])),
])
def test_msgpack_codec_against_msgpack(obj):
    data = pmsgpack.packb(obj)
    assert data == msgpack.packb(obj, use_bin_type=True)
    assert pmsgpack.unpackb(data) == msgpack.unpackb(data, strict_map_key=False)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 8, 16, 17, 255, 256, 70000])
def test_msgpack_ext_lengths(n):
    ext = pmsgpack.ExtType(5, b"z" * n)
    data = pmsgpack.packb([ext])
    assert data == msgpack.packb([msgpack.ExtType(5, b"z" * n)])
    assert pmsgpack.unpackb(data) == [ext]
    assert pmsgpack.unpackb(data, ext_hook=lambda code, d: (code, len(d))) == [(5, n)]


def test_msgpack_float32_and_raw():
    data = msgpack.packb([1.5, "é"], use_single_float=True)
    assert data[1] == 0xCA
    assert pmsgpack.unpackb(data) == [1.5, "é"]
    assert pmsgpack.unpackb(data, raw=True) == [1.5, "é".encode()]


@pytest.mark.parametrize("bad", [b"", b"\xc1", b"\x92\x01", b"\x81\xa1a", b"\xd9\x05ab", b"\x01\x02",
                                 b"\xc7\x05\x01abc", b"\xd6\x01\x00\x00\x00\x00", b"\xa2\xff\xfe"])
def test_bad_bytes_raise_value_error(bad):
    with pytest.raises(ValueError):
        ps.msgpack_restore(bad)
    with pytest.raises(ValueError):
        ps.from_bytes({"a": 1}, bad)


def test_unserializable_leaf_raises_type_error():
    class Opaque:
        pass
    with pytest.raises(TypeError, match="Opaque"):
        ps.to_bytes({"x": Opaque()})
    with pytest.raises(ValueError, match="Object and structured dtypes"):
        ps.to_bytes({"x": np.array([object()])})


def test_mismatched_target_structure():
    data = fs.to_bytes({"a": np.ones(2, np.float32), "b": [1, 2]})
    with pytest.raises(ValueError, match="target dict contains keys {'c'} which are not present in state dict"):
        ps.from_bytes({"a": 0, "b": [0, 0], "c": 0}, data)
    with pytest.raises(ValueError, match="size of the list and the state dict do not match, got 3 and 2 at path ./b"):
        ps.from_bytes({"a": 0, "b": [0, 0, 0]}, data)
    with pytest.raises(ValueError, match="field names of the state dict and the named tuple do not match"):
        ps.from_state_dict(NT(1, 2), {"a": 1, "c": 2})
    # Flax raises the same errors on the same inputs.
    with pytest.raises(ValueError, match="target dict contains keys {'c'}"):
        fs.from_bytes({"a": 0, "b": [0, 0], "c": 0}, data)


def test_register_serialization_state():
    class Box:
        def __init__(self, v):
            self.v = v
    ps.register_serialization_state(Box, lambda b: {"v": ps.to_state_dict(b.v)},
                                    lambda b, sd: Box(ps.from_state_dict(b.v, sd["v"], name="v")))
    try:
        assert ps.is_serializable(Box(1))
        with pytest.raises(ValueError, match='handler for "Box" is already registered'):
            ps.register_serialization_state(Box, None, None)
        data = ps.to_bytes({"box": Box([np.float32(1), 2])})
        assert data == fs.to_bytes({"box": {"v": [np.float32(1), 2]}})
        assert ps.from_bytes({"box": Box([0, 0])}, data)["box"].v == [1.0, 2]
    finally:
        del ps._STATE_DICT_REGISTRY[Box]


_NESTED = [
    {"foo": 1, "bar": {"a": 2, "b": {}}},
    {"Dense_0": {"kernel": 1, "bias": 2}, "BatchNorm_0": {"scale": 3, "mean": {"x": {"y": 4}}}, "e": {"f": {}}},
    {},
    {"a": {}},
]


@pytest.mark.parametrize("xs", _NESTED)
@pytest.mark.parametrize("sep", [None, "/", "."])
@pytest.mark.parametrize("keep", [False, True])
def test_traverse_util_matches_flax(xs, sep, keep):
    pflat = pt.flatten_dict(xs, keep_empty_nodes=keep, sep=sep)
    fflat = ft.flatten_dict(xs, keep_empty_nodes=keep, sep=sep)
    assert list(pflat) == list(fflat)
    assert [v is pt.empty_node for v in pflat.values()] == [v is ft.empty_node for v in fflat.values()]
    assert [v for v in pflat.values() if v is not pt.empty_node] == \
        [v for v in fflat.values() if v is not ft.empty_node]
    assert pt.unflatten_dict(pflat, sep=sep) == ft.unflatten_dict(fflat, sep=sep)
    assert pt.flatten_dict(pfd.freeze(xs), keep_empty_nodes=keep, sep=sep).keys() == pflat.keys()


def test_traverse_util_is_leaf_and_path_aware_map():
    xs = {"a": {"x": 10, "y": 3}, "b": {"x": 20, "c": {"d": 1}}, "e": {}}
    leaf = lambda path, x: path == ("b", "c")  # noqa: E731
    assert pt.flatten_dict(xs, is_leaf=leaf) == ft.flatten_dict(xs, is_leaf=leaf)
    f = lambda path, x: x + 5 if "x" in path else -x  # noqa: E731
    assert pt.path_aware_map(f, xs) == ft.path_aware_map(f, xs) == \
        {"a": {"x": 15, "y": -3}, "b": {"x": 25, "c": {"d": -1}}, "e": {}}
    with pytest.raises(AssertionError, match="expected \\(frozen\\)dict"):
        pt.flatten_dict([1])


def test_traversals_match_flax():
    @dataclasses.dataclass
    class Foo:
        foo: int = 0
        bar: int = 0

    data = [{"foo": 1, "bar": 2}, {"foo": 3, "bar": 4}]
    params = {"Dense_0": {"kernel": 1, "bias": 2}, "Dense_1": {"kernel": 3, "bias": 4, "e": {}}}
    with pytest.warns(DeprecationWarning):
        pt.TraverseEach()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for m in (pt, ft):
            tr = m.t_identity.each()["foo"]
            mpt = m.ModelParamTraversal(lambda path, _: "kernel" in path)
            got = (list(tr.iterate(data)), tr.update(lambda x: x * 10, data), tr.set([7, 8], data),
                   list(mpt.iterate(params)), mpt.update(lambda x: -x, params),
                   m.t_identity[1:].update(lambda x: x * 2, (1, 2, 3)),
                   NT(1, 2) == m.t_identity.a.update(lambda x: x, NT(1, 2)),
                   m.t_identity["f"].bar.update(lambda x: x + 1, {"f": Foo(bar=2)}),
                   list(m.t_identity.tree().iterate({"a": [1, 2]})),
                   m.TraverseMerge(m.TraverseItem(0), m.TraverseItem(2)).update(str, [1, 2, 3]),
                   m.t_identity.each().filter(lambda x: x > 1).update(lambda x: 0, [1, 2, 3]))
            if m is pt:
                want = got
                assert isinstance(mpt.update(lambda x: x, pfd.freeze(params)), pfd.FrozenDict)
        assert got == want
        with pytest.raises(ValueError, match="Too many values provided"):
            pt.t_identity.each().set([1, 2, 3], [0, 0])
