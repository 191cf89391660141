"""The graph jit executes: the traced graph with the optimizer's follow-up ops folded
into the fused AdamW primitive (cpp/podlet/ir/optim_fusion.h: apply_updates' add and an
EMA of the new params) and then elementwise chains fused (cpp/podlet/ir/fusion.h), built
once per cache entry. Only concrete execution uses it: a graph inlined into an outer
trace (grad of a jit'd function, nested jit) stays unfused, so autodiff never sees a
fused node. pmap runs the optimizer pass only (its executor merges elementwise nodes
across replicas by itself).

PODLET_FUSION=0 in the environment turns both passes off (read at each call, so tests
can flip it).
"""
import os

from .. import _core


def enabled():
    return os.environ.get("PODLET_FUSION", "1").lower() not in ("0", "false", "no", "off")


def _fuse_optimizer(graph):
    return _core.fuse_optimizer(graph) if hasattr(_core, "fuse_optimizer") else graph


def executable_graph(entry):
    """entry.graph with optimizer updates and elementwise chains fused (cached on the
    entry), or entry.graph itself when fusion is off."""
    if not enabled() or not hasattr(_core, "fuse_elementwise"):
        return entry.graph
    g = getattr(entry, "_fused_graph", None)
    if g is None:
        g = entry._fused_graph = _core.fuse_elementwise(_fuse_optimizer(entry.graph))
    return g


def pmap_graph(entry):
    """entry.graph with optimizer updates fused (cached on the entry), or entry.graph
    itself when fusion is off."""
    if not enabled():
        return entry.graph
    g = getattr(entry, "_optim_fused_graph", None)
    if g is None:
        g = entry._optim_fused_graph = _fuse_optimizer(entry.graph)
    return g
