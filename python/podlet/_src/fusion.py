"""The graph jit executes: the traced graph with the optimizer's follow-up ops folded
into the fused AdamW primitive (cpp/podlet/ir/optim_fusion.h: apply_updates' add and an
EMA of the new params), max-pool gradients reading the selection their forward pass made
(cpp/podlet/ir/pool_fusion.h), fused attention reading q, k, v where a projection left
them and summing a batch-broadcast bias's gradient in its kernel
(cpp/podlet/ir/attention_views.h), chains of row-moving copies (a roll, a window
partition) made one gather (cpp/podlet/ir/copy_fusion.h), transposes beside products
folded into them (cpp/podlet/ir/dot_layout.h) and then elementwise chains fused
(cpp/podlet/ir/fusion.h), built once per cache entry. Only concrete execution uses
it: a graph inlined into an outer trace (grad of a jit'd function, nested jit) stays
unfused, so autodiff never sees a fused node. pmap runs the same passes; its executor
runs a fused node over every replica's shard at once unless the node sums per replica
(BatchNorm statistics).

Values the backward pass reads are recomputed there from the forward pass's
inputs before fusion (cpp/podlet/ir/remat.h), so fusion folds the recomputation into
the backward pass's own passes; PODLET_REMAT=0 keeps them instead.

PODLET_ATTENTION_VIEWS=0, PODLET_ATTENTION_DBIAS=0, PODLET_COPY_FUSION=0 and
PODLET_DOT_TRANSPOSES=0 turn those four passes off (A/B runs; bench/copy_fusion.py
times the first and the third);
PODLET_FUSION=0 in the environment turns every pass off (read at each call, so tests can
flip it). config.allow_excess_precision (part of jit's cache key)
marks the fused nodes to keep bf16 intermediates in f32.
"""
import os

from .. import _core
from .config import flags


def _off(name):
    return os.environ.get(name, "1").lower() in ("0", "false", "no", "off")


def enabled():
    return not _off("PODLET_FUSION")


def _fuse_optimizer(graph):
    return _core.fuse_optimizer(graph) if hasattr(_core, "fuse_optimizer") else graph


def _fuse_pools(graph):
    return _core.fuse_pool_selection(graph) if hasattr(_core, "fuse_pool_selection") else graph


def _attention_views(graph):
    if _off("PODLET_ATTENTION_VIEWS") or not hasattr(_core, "fuse_attention_views"):
        return graph
    return _core.fuse_attention_views(graph)


def _attention_dbias(graph):
    if _off("PODLET_ATTENTION_DBIAS") or not hasattr(_core, "sum_attention_dbias"):
        return graph
    return _core.sum_attention_dbias(graph)


def _fuse_copies(graph):
    if _off("PODLET_COPY_FUSION") or not hasattr(_core, "fuse_copies"):
        return graph
    return _core.fuse_copies(graph)


def _fold_dot_transposes(graph):
    if _off("PODLET_DOT_TRANSPOSES") or not hasattr(_core, "fold_dot_transposes"):
        return graph
    return _core.fold_dot_transposes(graph)


def remat_enabled():
    return not _off("PODLET_REMAT")


def _passes(graph):
    g = _fuse_pools(_fuse_optimizer(graph))
    if remat_enabled():
        g = _core.rematerialize(g)
    g = _fold_dot_transposes(_fuse_copies(_attention_dbias(_attention_views(g))))
    return _core.fuse_elementwise(g, excess_precision=bool(flags["allow_excess_precision"]))


def executable_graph(entry):
    """entry.graph with optimizer updates fused, elementwise values the backward pass
    reads recomputed there (cpp/podlet/ir/remat.h) and elementwise chains fused (cached
    on the entry), or entry.graph itself when fusion is off."""
    if not enabled() or not hasattr(_core, "fuse_elementwise"):
        return entry.graph
    g = getattr(entry, "_fused_graph", None)
    if g is None:
        g = entry._fused_graph = _passes(entry.graph)
    return g


def pmap_graph(entry):
    """The same for pmap (cached separately: the executor runs fused nodes over all
    replicas at once where it can, cpp/podlet/exec/pmap.cc)."""
    if not enabled():
        return entry.graph
    g = getattr(entry, "_pmap_fused_graph", None)
    if g is None:
        g = entry._pmap_fused_graph = _passes(entry.graph)
    return g
