"""A function traced into a list of primitive applications that Python can read.

``core.bind`` appends each primitive to ``trace.graph`` (a C++ Graph, whose bindings do
not expose its nodes). Here the trace's graph is a recorder that forwards every call to
a real Graph (so shape rules and errors are the usual ones) and keeps, in Python, each
node's primitive, attributes, inputs and outputs, the constants, and the user's source
line. Operations on concrete values (e.g. BatchNorm's ``rsqrt(var + eps)`` on the
loaded statistics) run eagerly during tracing and arrive as constants: folded for free.
"""
import dataclasses

import numpy as np

from .. import tree_util
from .._src import core
from .._src.errors import PodletError


@dataclasses.dataclass
class Node:
    prim: str
    inputs: list
    outputs: list
    attrs: dict
    where: str


class _Recorder:
    def __init__(self):
        self.g = core._core.Graph()
        self.nodes, self.consts, self.inputs = [], {}, []

    def add_input(self, dtype_name, shape):
        vid = self.g.add_input(dtype_name, shape)
        self.inputs.append(vid)
        return vid

    def add_const(self, arr):
        vid = self.g.add_const(arr)
        self.consts[vid] = np.asarray(arr)
        return vid

    def add(self, prim, inputs, attrs=None, where=""):
        res = self.g.add(prim, inputs, attrs or {})
        self.nodes.append(Node(prim, list(inputs), [r[0] for r in res], dict(attrs or {}), core._user_frame()))
        return res

    def aval(self, vid):
        return self.g.aval(vid)

    def inline(self, sub, args, where=""):
        raise PodletError("export: the function calls a jitted function (or grad) inside the traced code; "
                          "the exporter reads only primitives applied directly, so call the un-jitted function")

    @property
    def outputs(self):
        return self.g.outputs

    @outputs.setter
    def outputs(self, vids):
        self.g.outputs = vids


@dataclasses.dataclass
class Recording:
    nodes: list          # Node, in trace (topological) order, dead ones dropped
    consts: dict         # value id -> NumPy array
    inputs: list         # value ids of the flattened arguments
    outputs: list        # value ids of the flattened results
    out_tree: object
    avals: dict          # value id -> (dtype name, shape)


def record(fun, *args):
    """Traces ``fun(*args)``; `args` are arrays or ShapeDtypeStructs (only shapes and
    dtypes are used)."""
    leaves, in_tree = tree_util.tree_flatten(args)
    trace = core.Trace()
    rec = trace.graph = _Recorder()
    core._trace_stack.append(trace)
    try:
        tracers = [trace.new_input(core.dtypes.canonicalize(x.dtype).name, tuple(x.shape)) for x in leaves]
        out = fun(*tree_util.tree_unflatten(in_tree, tracers))
        out_leaves, out_tree = tree_util.tree_flatten(out)
        outs = [trace.value_of(core._leaf_value(o)) for o in out_leaves]
    finally:
        trace.active = False
        core._trace_stack.pop()
    # Dead-code elimination: keep the nodes some output depends on.
    live, kept = set(outs), []
    for n in reversed(rec.nodes):
        if any(o in live for o in n.outputs):
            kept.append(n)
            live.update(n.inputs)
    kept.reverse()
    avals = {}
    for v in set(live) | set(rec.inputs) | {o for n in kept for o in n.outputs}:
        avals[v] = rec.aval(v)
    return Recording(kept, {v: a for v, a in rec.consts.items() if v in live}, rec.inputs, outs, out_tree, avals)
