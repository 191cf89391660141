"""Issue 26's long tail of ``jax`` / ``jax.tree_util`` / ``flax.jax_utils`` names
against jax 0.10.2 and flax: the same inputs give the same values, structures, printed
output and kinds of error."""

import collections
import dataclasses
import functools

import numpy as np
import pytest

import jax
import jax.numpy as jnp
import jax.tree_util as jtu

import podlet
import podlet.numpy as pnp
from podlet import tree_util as ptu

Pair = collections.namedtuple("Pair", ["x", "y"])


def _both(fn):
    """fn(tu) with each library's tree_util: (jax result, podlet result)."""
    return fn(jtu), fn(ptu)


def _err(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the kind and message are the point
        return type(e), str(e)
    return None


# ------------------------------------------------------------------ tree_util

@pytest.mark.parametrize("tree", [
    {"b": [1, 2], "a": (3,)}, [1, (2, None)], None, Pair(1, [2]),
    (1, 2), collections.OrderedDict(b=1, a=2), collections.defaultdict(list, {"z": 1, "y": 2}),
])
def test_flatten_one_level(tree):
    j, p = _both(lambda tu: tu.flatten_one_level(tree))
    assert j == p and type(j[0]) is type(p[0])
    j, p = _both(lambda tu: tu.flatten_one_level_with_keys(tree))
    if isinstance(tree, Pair):  # jax 0.10.2 repeats the first field's key
        assert [c for _, c in j[0]] == [c for _, c in p[0]] and j[1] == p[1]
        assert [k for k, _ in p[0]] == [k for k, _ in ptu.tree_flatten_with_path(
            tree, is_leaf=lambda x: x is not tree)[0] for k in k]
    else:
        assert str(j) == str(p) and type(j[0]) is type(p[0])
    assert jtu.default_registry.flatten_one_level(tree) is not None
    assert str(jtu.default_registry.flatten_one_level(tree)) == str(
        ptu.default_registry.flatten_one_level(tree))


def test_flatten_one_level_of_a_leaf():
    for name in ("flatten_one_level", "flatten_one_level_with_keys"):
        j, p = _both(lambda tu: _err(lambda: getattr(tu, name)(1.5)))
        assert j == p == (ValueError, "can't tree-flatten type: <class 'float'>")
        assert getattr(ptu.default_registry, name)(1.5) is None
        assert getattr(jtu.default_registry, name)(1.5) is None


def test_is_tree_node_and_registry():
    for t in (list, tuple, dict, type(None), Pair, collections.OrderedDict, int, float,
              str, np.ndarray, jtu.Partial):
        pt = ptu.Partial if t is jtu.Partial else t
        assert jtu.is_tree_node(t) == ptu.is_tree_node(pt) == ptu.default_registry.is_node(pt), t
    tree = [1, {"a": (2, None), "b": Pair(3, 4)}]
    jl, jd = jtu.default_registry.flatten(tree)
    pl, pd = ptu.default_registry.flatten(tree)
    assert jl == pl and str(jd) == str(pd)
    assert ptu.KeyPath == tuple[ptu.KeyEntry, ...]
    assert repr(ptu.KeyEntry) == repr(jtu.KeyEntry) == "~KeyEntry"


def _dataclass_types():
    out = []
    for tu in (jtu, ptu):
        @tu.register_dataclass
        @dataclasses.dataclass
        class S:
            x: object
            y: object
            op: str = dataclasses.field(default="add", metadata=dict(static=True))
        out.append(S)
    return out


def test_register_dataclass():
    JS, PS = _dataclass_types()
    j, p = JS(1, [2, 3]), PS(1, [2, 3])
    assert str(jtu.tree_structure(j)) == str(ptu.tree_structure(p)).replace("PS", "S")
    assert str(jtu.tree_flatten_with_path(j)[0]) == str(ptu.tree_flatten_with_path(p)[0])
    assert ptu.tree_map(lambda v: v * 10, p) == PS(10, [20, 30])
    assert jtu.tree_map(lambda v: v * 10, j).y == [20, 30]
    assert ptu.tree_structure(PS(1, 2, "sub")) != ptu.tree_structure(p)
    # the static field is node data under jit: one trace per value
    traces = []

    @podlet.jit
    def f(s):
        traces.append(s.op)
        return s.x + s.y if s.op == "add" else s.x - s.y

    assert float(f(PS(pnp.float32(3), pnp.float32(1)))) == 4.0
    assert float(f(PS(pnp.float32(3), pnp.float32(1), "sub"))) == 2.0
    assert traces == ["add", "sub"]


def test_register_dataclass_errors():
    @dataclasses.dataclass
    class D:
        x: object
        y: object

    class NotDC:
        def __init__(self, a, b):
            self.a, self.b = a, b

    cases = [
        lambda tu: tu.register_dataclass(NotDC),
        lambda tu: tu.register_dataclass(D, data_fields=["x"]),
        lambda tu: tu.register_dataclass(D, data_fields=["x"], meta_fields=[]),
        lambda tu: tu.register_dataclass(D, data_fields=["x", "y", "z"], meta_fields=[]),
        lambda tu: tu.register_dataclass(D, data_fields=["x", "y"], meta_fields=["x"]),
    ]
    for case in cases:
        j, p = _both(lambda tu: _err(lambda: case(tu)))
        assert j == p and j is not None
    JS, PS = _dataclass_types()
    j, p = _err(lambda: jtu.register_dataclass(JS)), _err(lambda: ptu.register_dataclass(PS))
    assert j[0] is p[0] is ValueError and j[1].replace("JS", "S") == p[1].replace("PS", "S")
    # a plain class with explicit fields
    for tu in (jtu, ptu):
        class NC(NotDC):
            pass
        tu.register_dataclass(NC, data_fields=["a"], meta_fields=["b"])
        out = tu.tree_map(lambda v: v + 1, NC(1, "z"))
        assert (out.a, out.b) == (2, "z")
        assert str(tu.tree_structure(NC(1, "z"))) == "PyTreeDef(CustomNode(NC[('z',)], [*]))"


def test_register_static():
    types_ = []
    for tu in (jtu, ptu):
        @tu.register_static
        class StaticStr(str):
            pass
        types_.append(StaticStr)
        tree = [StaticStr("add"), 1]
        assert tu.tree_leaves(tree) == [1]
        assert str(tu.tree_structure(tree)) == "PyTreeDef([CustomNode(StaticStr[add], []), *])"
        assert str(tu.flatten_one_level_with_keys(StaticStr("a"))) == "([], 'a')"

    @podlet.jit
    def f(x, y, s):
        return x + y if s == "add" else x - y

    assert float(f(pnp.float32(1), pnp.float32(2), types_[1]("add"))) == 3.0
    assert float(f(pnp.float32(1), pnp.float32(2), types_[1]("sub"))) == -1.0


def test_partial():
    def fn(a, b, c=0):
        return a + 2 * b + 3 * c

    j, p = jtu.Partial(fn, 1, c=5), ptu.Partial(fn, 1, c=5)
    assert str(jtu.tree_structure(j)) == str(ptu.tree_structure(p))
    assert jtu.tree_leaves(j) == ptu.tree_leaves(p) == [1, 5]
    assert j(2) == p(2) == 20 and repr(j) == repr(p)
    assert ptu.tree_map(lambda v: v * 2, p)(2) == jtu.tree_map(lambda v: v * 2, j)(2)
    # a partial's own arguments stay out of the pytree
    inner = functools.partial(fn, 10)
    j, p = jtu.Partial(inner, 3), ptu.Partial(inner, 3)
    assert jtu.tree_leaves(j) == ptu.tree_leaves(p) == [3] and j() == p() == 16
    assert p.func == inner and p.args == (3,)
    # passable to jit: the bound arrays are traced, the function is static
    call = podlet.jit(lambda g, x: g(x))
    got = call(ptu.Partial(pnp.multiply, pnp.arange(3.0)), pnp.float32(2))
    want = jax.jit(lambda g, x: g(x))(jtu.Partial(jnp.multiply, jnp.arange(3.0)), 2.0)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_tree_broadcast():
    cases = [([1, {"a": 2}], [[3, 4], {"a": (5, 6)}]), (1, {"a": [2, 3]}),
             ({"x": None, "y": 0}, {"x": None, "y": [1, 2]})]
    for prefix, full in cases:
        j, p = _both(lambda tu: tu.tree_broadcast(prefix, full))
        assert j == p
    j, p = _both(lambda tu: tu.tree_broadcast([1, [2]], [[3], (4,)], is_leaf=lambda x: x == [2]))
    assert j == p
    j, p = _both(lambda tu: _err(lambda: tu.tree_broadcast([1, 2], [3, 4, 5])))
    assert j == p and j[0] is ValueError


def test_tree_reduce_associative():
    show = lambda a, b: f"({a}+{b})"  # noqa: E731
    for tree in ([1, 2, 3, 4, 5], {"a": 1}, [[1], (2, 3)], ["a", "b", "c"]):
        j, p = _both(lambda tu: tu.tree_reduce_associative(show, tree))
        assert j == p
    j, p = _both(lambda tu: tu.tree_reduce_associative(
        lambda a, b: a + b, [(1,), [(2,)]], is_leaf=lambda x: isinstance(x, tuple)))
    assert j == p == (1, 2)
    j, p = _both(lambda tu: tu.tree_reduce_associative(lambda a, b: a + b, [], identity=0))
    assert j == p == 0
    j, p = _both(lambda tu: _err(lambda: tu.tree_reduce_associative(lambda a, b: a + b, [])))
    assert j == p and j[0] is TypeError


def test_tree_transpose():
    tree = [{"a": 1, "b": 2}, {"a": 3, "b": 4}, {"a": 5, "b": 6}]
    for inner in (True, False):
        j, p = _both(lambda tu: tu.tree_transpose(
            tu.tree_structure([0, 0, 0]),
            tu.tree_structure({"a": 0, "b": 0}) if inner else None, tree))
        assert j == p == {"a": [1, 3, 5], "b": [2, 4, 6]}
    j, p = _both(lambda tu: tu.tree_transpose(
        tu.tree_structure(Pair(0, 0)), tu.tree_structure((0, [0])), Pair((1, [2]), (3, [4]))))
    assert j == p
    j, p = _both(lambda tu: _err(lambda: tu.tree_transpose(
        tu.tree_structure([0, 0]), tu.tree_structure({"a": 0, "b": 0}),
        [{"a": 1, "b": 2}, {"a": 3}])))
    assert j == p and j[0] is TypeError
    o, i = ptu.tree_structure([0, (0, 0)]), ptu.tree_structure({"k": 0})
    assert str(o.compose(i)) == str(jtu.tree_structure([0, (0, 0)]).compose(
        jtu.tree_structure({"k": 0})))
