"""podlet.tree_util against jax.tree_util (the oracle)."""

import collections
import pickle

import pytest

import jax.tree_util as jtu

from podlet import tree_util as ptu  # noqa: E402

Point = collections.namedtuple("Point", ["x", "y"])
Other = collections.namedtuple("Other", ["x", "y"])


class Box:
    """A custom node registered with both libraries, with aux data."""

    def __init__(self, a, b, tag="t"):
        self.a, self.b, self.tag = a, b, tag

    def __eq__(self, other):
        return (type(other) is type(self) and self.a == other.a and self.b == other.b
                and self.tag == other.tag)

    def __repr__(self):
        return f"Box({self.a!r}, {self.b!r}, {self.tag!r})"


def _box_flatten(x):
    return (x.a, x.b), x.tag


def _box_unflatten(tag, children):
    assert isinstance(children, tuple), type(children)  # jax passes a tuple
    return Box(*children, tag=tag)


def _box_flatten_with_keys(x):
    return ((jtu.GetAttrKey("a"), x.a), (jtu.GetAttrKey("b"), x.b)), x.tag


def _pbox_flatten_with_keys(x):
    return ((ptu.GetAttrKey("a"), x.a), (ptu.GetAttrKey("b"), x.b)), x.tag


class KBox(Box):
    """Registered with keys, so paths name the attributes."""


def _kbox_unflatten(tag, children):
    return KBox(*children, tag=tag)


jtu.register_pytree_node(Box, _box_flatten, _box_unflatten)
ptu.register_pytree_node(Box, _box_flatten, _box_unflatten)
jtu.register_pytree_with_keys(KBox, _box_flatten_with_keys, _kbox_unflatten)
ptu.register_pytree_with_keys(KBox, _pbox_flatten_with_keys, _kbox_unflatten)


@ptu.register_pytree_node_class
class Pair:
    def __init__(self, first, second):
        self.first, self.second = first, second

    def tree_flatten(self):
        return (self.first, self.second), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)


class Opaque:
    """Never registered: a leaf for both libraries."""

    def __repr__(self):
        return "Opaque()"


OPAQUE = Opaque()


class Tagged:
    """An unregistered leaf that prints its tag."""

    def __init__(self, tag):
        self.tag = tag

    def __repr__(self):
        return f"Tagged({self.tag})"

TREES = [
    1,
    None,
    [],
    (),
    {},
    [None],
    (1,),
    [1, 2.5, "s"],
    (1, (2, 3), [4, [5]]),
    {"b": 1, "a": 2, "c": [3, 4]},
    {"params": {"Dense_1": {"kernel": 1, "bias": 2}, "Dense_0": {"kernel": 3, "bias": 4}}},
    {"a": None, "b": [None, 1, ()], "c": {}},
    {2: "x", 1: "y", 10: "z"},
    {(1, 2): 1, (0, 5): 2},
    {True: 1, 1.5: 2, 2: 3},
    Point(1, [2, 3]),
    {"p": Point(x=None, y=Point(4, 5))},
    collections.OrderedDict([("z", 1), ("a", 2), ("m", [3])]),
    collections.defaultdict(list, {"b": 1, "a": [2, 3]}),
    Box(1, [2, {"k": 3}], tag="aux"),
    [Box(Box(1, 2), None), OPAQUE],
    KBox({"w": 1}, (2, 3)),
    [collections.OrderedDict(b=1, a=2), {"x": collections.defaultdict(int, q=3)}],
]

IDS = [f"tree{i}" for i in range(len(TREES))]


@pytest.mark.parametrize("tree", TREES, ids=IDS)
def test_flatten_matches_jax(tree):
    jl, jdef = jtu.tree_flatten(tree)
    pl, pdef = ptu.tree_flatten(tree)
    assert len(pl) == len(jl)
    assert all(a is b for a, b in zip(pl, jl)), (pl, jl)
    assert repr(pdef) == repr(jdef)
    assert str(pdef) == str(jdef)
    assert pdef.num_leaves == jdef.num_leaves
    assert pdef.num_nodes == jdef.num_nodes
    assert ptu.tree_leaves(tree) == jl
    assert ptu.tree_structure(tree) == pdef


@pytest.mark.parametrize("tree", TREES, ids=IDS)
def test_round_trip(tree):
    leaves, treedef = ptu.tree_flatten(tree)
    rebuilt = ptu.tree_unflatten(treedef, leaves)
    expected = jtu.tree_unflatten(jtu.tree_structure(tree), leaves)
    assert type(rebuilt) is type(expected)
    assert rebuilt == expected
    assert repr(rebuilt) == repr(expected)  # same key order, same containers
    # unflatten takes any iterable
    assert treedef.unflatten(iter(leaves)) == expected


@pytest.mark.parametrize("tree", TREES, ids=IDS)
def test_repeated_unflatten(tree):
    # a treedef compiles its unflatten on reuse (jit keeps treedefs); same results
    leaves, treedef = ptu.tree_flatten(tree)
    new_leaves = [Tagged(i) for i in range(len(leaves))]
    expected = jtu.tree_unflatten(jtu.tree_structure(tree), new_leaves)
    for _ in range(4):
        got = treedef.unflatten(new_leaves)
        assert type(got) is type(expected)
        assert repr(got) == repr(expected)
        assert all(a is b for a, b in zip(jtu.tree_leaves(got), new_leaves, strict=True))
    with pytest.raises(ValueError, match="Too many leaves"):
        treedef.unflatten(new_leaves + [0])


@pytest.mark.parametrize("tree", TREES, ids=IDS)
def test_children(tree):
    pch = ptu.treedef_children(ptu.tree_structure(tree))
    jch = jtu.treedef_children(jtu.tree_structure(tree))
    assert [repr(c) for c in pch] == [repr(c) for c in jch]


def test_dict_keys_sorted_and_unflatten_sorted():
    tree = {"b": 1, "a": 2}
    leaves, treedef = ptu.tree_flatten(tree)
    assert leaves == [2, 1]
    assert list(ptu.tree_unflatten(treedef, [10, 20])) == ["a", "b"]


def test_unsortable_dict_keys_raise_like_jax():
    tree = {1: 1, "a": 2}
    with pytest.raises(ValueError, match="sorting pytree dictionary keys"):
        jtu.tree_flatten(tree)
    with pytest.raises(ValueError, match="sorting pytree dictionary keys"):
        ptu.tree_flatten(tree)


def test_subclasses_are_leaves():
    class D(dict):
        pass

    class L(list):
        pass

    for tree in (D(a=1), L([1, 2])):
        assert ptu.tree_leaves(tree) == jtu.tree_leaves(tree) == [tree]


STRUCTURE_PAIRS = [
    ({"a": 1}, {"b": 1}),
    ({"a": 1}, {"a": 2}),
    ([1, 2], (1, 2)),
    ([1, 2], [1, 2, 3]),
    (Point(1, 2), Other(1, 2)),
    (Point(1, 2), (1, 2)),
    (collections.OrderedDict(a=1), {"a": 1}),
    (collections.OrderedDict(a=1, b=2), collections.OrderedDict(b=2, a=1)),
    (collections.defaultdict(list, a=1), collections.defaultdict(int, a=1)),
    (collections.defaultdict(list, a=1), collections.defaultdict(list, a=5)),
    (None, 1),
    ([None], [1]),
    (None, None),
    (Box(1, 2, "x"), Box(3, 4, "x")),
    (Box(1, 2, "x"), Box(1, 2, "y")),
    (Box(1, 2), KBox(1, 2)),
    ({"a": [1, (2,)]}, {"a": [3, (4,)]}),
    ({"a": [1, (2,)]}, {"a": [3, [4]]}),
]


@pytest.mark.parametrize("t1,t2", STRUCTURE_PAIRS)
def test_treedef_equality_and_hash_match_jax(t1, t2):
    j_eq = jtu.tree_structure(t1) == jtu.tree_structure(t2)
    p1, p2 = ptu.tree_structure(t1), ptu.tree_structure(t2)
    assert (p1 == p2) == j_eq
    assert (p1 != p2) == (not j_eq)
    if j_eq:
        assert hash(p1) == hash(p2)
        assert len({p1, p2}) == 1


def test_treedef_equality_with_other_types():
    td = ptu.tree_structure([1])
    assert td != 3
    assert not (td == jtu.tree_structure([1]))


def test_treedef_usable_as_cache_key():
    cache = {ptu.tree_structure({"a": [1, 2], "b": None}): "hit"}
    assert cache[ptu.tree_structure({"b": None, "a": ["x", "y"]})] == "hit"
    assert ptu.tree_structure({"a": [1, 2], "b": 3}) not in cache


def test_treedef_pickles():
    td = ptu.tree_structure({"a": [1, Point(2, None)], "b": (3,),
                             "c": collections.OrderedDict(x=Box(1, 2, "q"))})
    back = pickle.loads(pickle.dumps(td))
    assert back == td and hash(back) == hash(td) and repr(back) == repr(td)
    assert back != ptu.tree_structure({"a": [1, Point(2, None)], "b": (3,)})
    assert back.unflatten(range(5))["c"]["x"] == Box(3, 4, "q")


def test_unflatten_wrong_number_of_leaves():
    td = ptu.tree_structure([1, 2])
    with pytest.raises(ValueError, match="Too few leaves for PyTreeDef; expected 2, got 1"):
        ptu.tree_unflatten(td, [1])
    with pytest.raises(ValueError, match="Too many leaves for PyTreeDef; expected 2"):
        ptu.tree_unflatten(td, [1, 2, 3])


def test_none_is_a_node_not_a_leaf():
    tree = [None, {"a": None, "b": 1}]
    assert ptu.tree_leaves(tree) == jtu.tree_leaves(tree) == [1]
    assert ptu.tree_map(lambda x: x + 1, tree) == [None, {"a": None, "b": 2}]
    assert ptu.tree_structure(None).num_leaves == 0
    assert ptu.tree_structure(None).num_nodes == 1
    for t in ([], None, 3, [None], {}):  # "leaf" here means "one node", as in jax
        assert ptu.treedef_is_leaf(ptu.tree_structure(t)) == jtu.treedef_is_leaf(
            jtu.tree_structure(t))


def test_is_leaf():
    tree = {"a": [None, (1, 2)], "b": Point(3, [4])}
    cases = [
        lambda x: x is None,
        lambda x: isinstance(x, tuple),
        lambda x: isinstance(x, list),
        lambda x: isinstance(x, dict),
        lambda x: False,
    ]
    for is_leaf in cases:
        jl, jdef = jtu.tree_flatten(tree, is_leaf=is_leaf)
        pl, pdef = ptu.tree_flatten(tree, is_leaf=is_leaf)
        assert pl == jl
        assert repr(pdef) == repr(jdef)
        assert ptu.tree_leaves(tree, is_leaf=is_leaf) == jl
        jm = jtu.tree_map(lambda x: ("leaf", x), tree, is_leaf=is_leaf)
        pm = ptu.tree_map(lambda x: ("leaf", x), tree, is_leaf=is_leaf)
        assert pm == jm


def test_is_leaf_called_on_same_nodes_as_jax():
    tree = [None, {"a": (1,), "b": Point(2, None)}]
    seen_j, seen_p = [], []
    jtu.tree_flatten(tree, is_leaf=lambda x: seen_j.append(x) or False)
    ptu.tree_flatten(tree, is_leaf=lambda x: seen_p.append(x) or False)
    assert seen_p == seen_j


def test_tree_map_single_and_multi():
    t1 = {"w": [1, 2], "b": (3, None), "p": Point(4, 5)}
    t2 = {"w": [10, 20], "b": (30, None), "p": Point(40, 50)}
    t3 = {"w": [100, 200], "b": (300, None), "p": Point(400, 500)}
    f = lambda *xs: sum(xs)  # noqa: E731
    assert ptu.tree_map(f, t1) == jtu.tree_map(f, t1)
    assert ptu.tree_map(f, t1, t2, t3) == jtu.tree_map(f, t1, t2, t3)
    assert ptu.tree_map(f, t1, t2, t3)["w"] == [111, 222]


def test_tree_map_rest_may_be_deeper():
    # the first tree is a prefix: its leaves line up with whole subtrees of the rest
    t1 = {"a": 1, "b": 2}
    t2 = {"a": [3, 4], "b": (5, {"c": 6})}
    g = lambda x, y: (x, y)  # noqa: E731
    assert ptu.tree_map(g, t1, t2) == jtu.tree_map(g, t1, t2)
    # a None in the rest, under a leaf of the first, is passed through as a value
    assert ptu.tree_map(g, {"a": 1}, {"a": None}) == {"a": (1, None)}


MISMATCHES = [
    ([1, 2], [1, 2, 3]),
    ({"a": 1}, {"b": 1}),
    ({"a": 1}, {"a": 1, "b": 2}),
    ({"a": 1}, [1]),
    ({"a": [1, 2]}, {"a": (1, 2)}),
    ({"a": None}, {"a": 1}),
    ([1, [2, 3]], [1, [2]]),
    (Point(1, 2), Other(1, 2)),
    (collections.OrderedDict(a=1, b=2), collections.OrderedDict(b=1, a=2)),
    ({"x": {"y": [1, {"z": 2}]}}, {"x": {"y": [1, {"q": 2}]}}),
    (Box(1, 2, "x"), Box(1, 2, "y")),
]


@pytest.mark.parametrize("t1,t2", MISMATCHES)
def test_tree_map_mismatch_errors_match_jax(t1, t2):
    f = lambda *xs: xs  # noqa: E731
    with pytest.raises(ValueError) as j:
        jtu.tree_map(f, t1, t2)
    with pytest.raises(ValueError) as p:
        ptu.tree_map(f, t1, t2)
    assert str(p.value) == str(j.value)


def test_flatten_up_to_messages_match_jax():
    cases = [
        ([1, 2], [1, 2, 3]),
        ((1, 2), (1, 2, 3)),
        ({"a": 1}, {"b": 2}),
        ({"a": 1}, [2]),
        ([None], [2]),
        ([1], Point(1, 2)),
        (Point(1, 2), (1, 2)),
        (Point(1, 2), Other(1, 2)),
        (collections.OrderedDict(a=1, b=2), collections.OrderedDict(b=1, a=2)),
        (collections.OrderedDict(a=1, b=2), {"a": 1, "b": 2}),
        ({"a": 1, "b": 2}, collections.OrderedDict(a=1, b=2)),
    ]
    for prefix, full in cases:
        with pytest.raises(ValueError) as j:
            jtu.tree_structure(prefix).flatten_up_to(full)
        with pytest.raises(ValueError) as p:
            ptu.tree_structure(prefix).flatten_up_to(full)
        assert str(p.value) == str(j.value), (prefix, full)


def test_tree_reduce_and_all():
    tree = {"a": [1, 2], "b": (3, None)}
    add = lambda a, b: a + b  # noqa: E731
    assert ptu.tree_reduce(add, tree) == jtu.tree_reduce(add, tree) == 6
    assert ptu.tree_reduce(add, tree, 10) == jtu.tree_reduce(add, tree, 10) == 16
    assert ptu.tree_reduce(add, [], 7) == 7
    with pytest.raises(TypeError):
        ptu.tree_reduce(add, [])
    assert ptu.tree_all({"a": [True, 1]})
    assert not ptu.tree_all({"a": [True, 0]})
    assert ptu.tree_all([]) == jtu.tree_all([])


def test_all_leaves():
    for items in ([1, 2.0, "x"], [1, None], [1, [2]], [], [Point(1, 2)], [OPAQUE]):
        assert ptu.all_leaves(items) == jtu.all_leaves(items), items
    is_none = lambda x: x is None  # noqa: E731
    assert ptu.all_leaves([1, None], is_leaf=is_none) == jtu.all_leaves(
        [1, None], is_leaf=is_none) is True


def _path_strs(lib, tree, **kw):
    return [(lib.keystr(path), leaf) for path, leaf in lib.tree_leaves_with_path(tree, **kw)]


PATH_TREES = [
    {"params": {"Dense_0": {"kernel": 1, "bias": 2}, "Dense_1": {"kernel": 3}},
     "batch_stats": {"BatchNorm_0": {"mean": 4, "var": 5}}},
    [1, None, (2, [3, {"k": 4}])],
    {"p": Point(1, Point(2, 3))},
    collections.OrderedDict([("z", [1]), ("a", 2)]),
    collections.defaultdict(list, {"b": 1, "a": 2}),
    {0: "zero", 1: ["one"]},
    Box(1, [2, 3]),  # registered without keys: FlattenedIndexKey
    KBox({"w": 1}, 2),  # registered with keys
    5,
]


@pytest.mark.parametrize("tree", PATH_TREES)
def test_paths_match_jax(tree):
    jflat, jdef = jtu.tree_flatten_with_path(tree)
    pflat, pdef = ptu.tree_flatten_with_path(tree)
    assert repr(pdef) == repr(jdef)
    assert [repr(path) for path, _ in pflat] == [repr(path) for path, _ in jflat]
    assert [leaf for _, leaf in pflat] == [leaf for _, leaf in jflat]
    assert _path_strs(ptu, tree) == _path_strs(jtu, tree)
    for (pp, _), (jp, _) in zip(pflat, jflat):
        assert ptu.keystr(pp, simple=True, separator="/") == jtu.keystr(
            jp, simple=True, separator="/")


def test_keystr_flax_style():
    params = {"params": {"Dense_0": {"kernel": 1, "bias": 2}}}
    got = [ptu.keystr(p) for p, _ in ptu.tree_leaves_with_path(params)]
    assert got == ["['params']['Dense_0']['bias']", "['params']['Dense_0']['kernel']"]
    assert got == [jtu.keystr(p) for p, _ in jtu.tree_leaves_with_path(params)]


def test_key_classes():
    pairs = [(ptu.DictKey("a"), jtu.DictKey("a")), (ptu.DictKey(3), jtu.DictKey(3)),
             (ptu.SequenceKey(0), jtu.SequenceKey(0)),
             (ptu.GetAttrKey("x"), jtu.GetAttrKey("x")),
             (ptu.FlattenedIndexKey(1), jtu.FlattenedIndexKey(1))]
    for p, j in pairs:
        assert repr(p) == repr(j)
        assert str(p) == str(j)
    assert ptu.DictKey("a") == ptu.DictKey("a")
    assert ptu.DictKey(0) != ptu.SequenceKey(0)
    assert ptu.DictKey(0) != 0
    assert len({ptu.DictKey("a"), ptu.DictKey("a"), ptu.GetAttrKey("a")}) == 2
    match ptu.DictKey("k"):
        case ptu.DictKey(key=k):
            assert k == "k"


def test_tree_map_with_path():
    tree = {"a": [1, 2], "b": Point(3, None)}
    f = lambda path, x: (jtu.keystr(path) if path and not isinstance(  # noqa: E731
        path[0], ptu.DictKey) else ptu.keystr(path), x)
    jres = jtu.tree_map_with_path(lambda p, x: (jtu.keystr(p), x), tree)
    pres = ptu.tree_map_with_path(f, tree)
    assert pres == jres
    other = {"a": [10, 20], "b": Point(30, None)}
    assert ptu.tree_map_with_path(lambda p, x, y: x + y, tree, other) == \
        jtu.tree_map_with_path(lambda p, x, y: x + y, tree, other)
    with pytest.raises(ValueError, match="tree_map_with_path tree\\['a'\\]"):
        ptu.tree_map_with_path(lambda p, x, y: x, tree, {"a": [1], "b": Point(3, None)})


def test_custom_node_registration():
    leaves, td = ptu.tree_flatten(Pair(1, [2, 3]))
    assert leaves == [1, 2, 3]
    assert repr(td) == "PyTreeDef(CustomNode(Pair[None], [*, [*, *]]))"
    back = ptu.tree_unflatten(td, ["a", "b", "c"])
    assert isinstance(back, Pair) and back.first == "a" and back.second == ["b", "c"]
    assert ptu.tree_map(lambda x: x * 2, Box(1, 2, "q")) == Box(2, 4, "q")
    assert Box in ptu.registry


def test_duplicate_registration_rejected():
    with pytest.raises(ValueError, match="Duplicate custom PyTreeDef type registration"):
        ptu.register_pytree_node(Box, _box_flatten, _box_unflatten)
    with pytest.raises(ValueError, match="Duplicate"):
        ptu.register_pytree_node(list, lambda x: (x, None), lambda a, c: list(c))


def test_registering_a_type_after_it_was_seen_as_leaf():
    class Late:
        def __init__(self, v):
            self.v = v

    assert ptu.tree_leaves(Late(1))[0].v == 1  # a leaf so far
    ptu.register_pytree_node(Late, lambda x: ((x.v,), None), lambda a, c: Late(*c))
    assert ptu.tree_leaves([Late(7)]) == [7]


def test_treedef_tuple():
    a, b = ptu.tree_structure([1, 2]), ptu.tree_structure({"k": 1})
    assert ptu.treedef_tuple([a, b]) == ptu.tree_structure(([1, 2], {"k": 1}))
    assert repr(ptu.treedef_tuple([a, b])) == repr(
        jtu.treedef_tuple([jtu.tree_structure([1, 2]), jtu.tree_structure({"k": 1})]))


def test_module_does_not_import_engine():
    import sys
    import ast
    src = open(ptu.__file__).read()
    names = set()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add(node.module or "")
    assert not any("_core" in n or n.startswith("jax") for n in names), names
    assert "jax" not in sys.modules.get(ptu.__name__).__dict__
