// podlet._core performance entry points: the measured FMA peak, the detailed profiling
// counters, and the graph passes run on executed graphs: elementwise fusion (fusion.h)
// and optimizer fusion (optim_fusion.h).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include "podlet/ir/graph.h"
#include "podlet/ir/fusion.h"
#include "podlet/ir/remat.h"
#include "podlet/ir/memory_plan.h"
#include "podlet/ir/optim_fusion.h"
#include "podlet/ir/pool_fusion.h"
#include "podlet/ir/copy_fusion.h"
#include "podlet/ir/dot_layout.h"
#include "podlet/prims/fused_tables.h"
#include "podlet/ir/attention_views.h"
#include "podlet/prims/fused_jit.h"
#include "podlet/kernels/conv_winograd.h"
#include "podlet/kernels/convert.h"
#include "podlet/kernels/pool.h"
#include "podlet/kernels/peak.h"
#include "registry.h"

namespace py = pybind11;
using namespace podlet;

static podlet_bindings::Binder reg_perf([](py::module_& m) {
  m.def("measure_peak", [](int threads, int reps) {
    py::gil_scoped_release nogil;
    return kernels::measure_f32_fma_peak(threads, reps);
  }, py::arg("threads"), py::arg("reps") = 20,
     "GFLOP/s of an f32 FMA loop on `threads` threads, best of `reps` short runs (0 on the ref ISA).");
  m.def("measure_bf16_peak", [](int threads, int reps) {
    py::gil_scoped_release nogil;
    return kernels::measure_bf16_peak(threads, reps);
  }, py::arg("threads"), py::arg("reps") = 20,
     "GFLOP/s of a vdpbf16ps loop on `threads` threads (the f32 FMA peak when the active ISA has no bf16 dot).");
  m.def("have_bf16_dot", &kernels::have_bf16_dot, "Whether the host has a bf16 dot instruction (AVX512_BF16).");
  m.def("measure_amx_peak", [](int threads, int reps) {
    py::gil_scoped_release nogil;
    return kernels::measure_amx_peak(threads, reps);
  }, py::arg("threads"), py::arg("reps") = 20,
     "GFLOP/s of the AMX tiles (TDPBF16PS into 4 accumulator tiles) on `threads` threads; 0 unless the "
     "active ISA is amx.");
  m.def("take_profile_detailed", []() {
    py::dict d;
    for (auto& [k, e] : take_profile_detailed())
      d[py::make_tuple(k.first, k.second)] = py::make_tuple(e.calls, e.seconds, e.flops, e.bytes);
    return d;
  }, "{(prim, dtype): (calls, seconds, flops, bytes)} since the last take; clears the counters.");
  m.def("fused_jit_stats", []() {
    const auto s = fused_jit::stats();
    py::dict d;
    d["compiled"] = s.compiled; d["refused"] = s.refused; d["runs"] = s.runs; d["leaf_runs"] = s.leaf_runs;
    d["reg_leaf_runs"] = s.reg_leaf_runs; d["spill_runs"] = s.spill_runs;
    d["unchecked_runs"] = s.unchecked_runs; d["unchecked_fallbacks"] = s.fallbacks;
    d["canonical_runs"] = s.canonical_runs;
    py::list ways;
    for (int w = 1; w <= fused_jit::kMaxWays; ++w) ways.append(s.way_runs[w]);
    d["way_runs"] = py::tuple(ways);
    d["enabled"] = fused_jit::enabled();
    return d;
  }, "Fused programs compiled to AVX-512 code / left to the interpreter since start, chunks run compiled (and of those, "
     "with column sums added in the compiled code; way_runs: of programs running 1, 2, ..., 8 vectors per iteration; "
     "spill_runs: of programs with broadcast scalars kept in memory; unchecked_runs: of programs with the unchecked "
     "bf16 loop, unchecked_fallbacks: its blocks flagged, whose run the checked loop finished; canonical_runs: of AVX2 "
     "programs whose roundings of canonical values skip the NaN check), "
     "and whether compiling is on (prims/fused_jit.h).");
  m.def("fused_tables_stats", []() {
    const auto s = fused_tables::stats();
    py::dict d;
    d["built"] = s.built; d["used"] = s.used; d["runs"] = s.runs; d["paired"] = s.paired; d["enabled"] = fused_tables::enabled();
    return d;
  }, "Tables of fused programs built since start, values read from tables (per program run), program runs with "
     "tables, of the values read those read in pairs (two values of one bf16 value by one gather), and whether tables "
     "are on (prims/fused_tables.h).");
  m.def("set_fused_tables", &fused_tables::set_enabled, py::arg("on"),
        "Read values computed from one bf16 value from a table of their 65536 results (default; PODLET_FUSED_TABLES=0 "
        "turns it off). Same bits either way.");
  m.def("set_fused_jit_ways", &fused_jit::set_max_ways, py::arg("ways"),
        "The most vectors per iteration (1-8) of fused programs compiled from now on (default 8; PODLET_FUSED_JIT_WAYS "
        "sets it at start). Same bits whatever it is.");
  m.def("set_fused_jit_unchecked", &fused_jit::set_unchecked_rounding, py::arg("on"),
        "bf16 programs compiled from now on (AVX512_BF16 hosts) round arithmetic results without a check per rounding, "
        "checking the MXCSR underflow / denormal flags and the stored NaNs of each block of iterations instead; a "
        "flagged block and the rest of its run are computed again with the checks; on AVX2 hosts, roundings of values "
        "whose NaNs are canonical skip the NaN check (default; PODLET_FUSED_JIT_UNCHECKED=0 turns it off at start). "
        "Same bits either way.");
  m.def("set_fused_jit", &fused_jit::set_enabled, py::arg("on"),
        "Compile fused programs to AVX-512 code (default; PODLET_FUSED_JIT=0 turns it off) or interpret them.");
  m.def("conv_winograd_stats", []() {
    const auto s = kernels::conv_winograd_stats();
    py::dict d;
    d["fwd"] = s.fwd; d["bwd_data"] = s.bwd_data; d["bwd_filter"] = s.bwd_filter; d["enabled"] = kernels::conv_winograd_enabled();
    return d;
  }, "Convolutions run by the Winograd kernels since start (forward, backward-data, backward-filter) and whether the path is on "
     "(kernels/conv_winograd.h).");
  m.def("convert_fast_calls", &kernels::convert_fast_calls,
        "Chunks of float32 <-> bfloat16 convert_element_type run by the AVX-512 loops since start (kernels/convert.h).");
  m.def("maxpool_fwd_fast_calls", &kernels::maxpool_fwd_fast_calls,
        "Max-pools (reduce_window max on f32 NHWC images) run by the AVX-512 kernel since start (kernels/pool.h).");
  m.def("maxpool_grad_fast_calls", &kernels::maxpool_grad_fast_calls,
        "Max-pool gradients (select_and_scatter_add on f32 NHWC images) run by the AVX-512 kernel since start "
        "(kernels/pool.h).");
  m.def("set_conv_winograd", &kernels::set_conv_winograd, py::arg("on"),
        "Run bf16 3x3 stride-1 convolutions as Winograd F(2x2, 3x3) on AVX512_BF16 hosts (fewer products, "
        "about 2.5x the rounding error; off by default, PODLET_CONV_WINOGRAD=1 turns it on).");
  m.def("profiling", &profiling);
  m.def("profiling_by_shape", &profiling_by_shape);
  m.def("fuse_elementwise", [](const Graph& g, bool excess_precision) { return fuse_elementwise(g, nullptr, excess_precision); },
        py::arg("graph"), py::arg("excess_precision") = false,
        "A copy of the graph with elementwise chains fused into fused_elementwise nodes (bit-identical results; with "
        "excess_precision, bf16 values inside a fused node stay f32 and only its outputs round, as XLA on a TPU).");
  m.def("fusion_stats", [](const Graph& g) {
    FusionStats s;
    fuse_elementwise(g, &s);
    py::dict d;
    d["groups"] = s.groups; d["nodes_fused"] = s.nodes_fused; d["broadcasts_absorbed"] = s.broadcasts_absorbed;
    d["siblings_merged"] = s.siblings_merged;
    return d;
  }, py::arg("graph"));
  m.def("rematerialize", [](const Graph& g, int64_t min_elements) { return rematerialize(g, nullptr, min_elements); },
        py::arg("graph"), py::arg("min_elements") = 4096,
        "A copy of the graph where elementwise values read far away (the backward pass) are recomputed there "
        "instead of kept (bit-identical results).");
  m.def("remat_stats", [](const Graph& g, int64_t min_elements) {
    RematStats s;
    rematerialize(g, &s, min_elements);
    py::dict d;
    d["values"] = s.values; d["nodes_cloned"] = s.nodes_cloned; d["bytes"] = s.bytes;
    return d;
  }, py::arg("graph"), py::arg("min_elements") = 4096);
  m.def("memory_plan", [](const Graph& g) {
    MemoryPlan p = plan_memory(g);
    py::dict d;
    d["arena_bytes"] = p.arena_bytes; d["values"] = p.values; d["sum_bytes"] = p.sum_bytes;
    py::dict off;
    for (int v = 0; v < int(p.offset.size()); ++v) if (p.offset[v] >= 0) off[py::int_(v)] = p.offset[v];
    d["offsets"] = off;
    return d;
  }, py::arg("graph"), "run_graph's memory plan: arena size, values placed in it, their total size, offsets by value id.");
  m.def("set_memory_plan", &set_memory_plan, py::arg("on"));
  m.def("memory_plan_enabled", &memory_plan_enabled);
  m.def("fuse_optimizer", [](const Graph& g) { return fuse_optimizer(g); }, py::arg("graph"),
        "A copy of the graph with apply_updates' add folded into adamw_update, sgd_momentum_update or "
        "lion_update and an EMA of the new params into adamw_update "
        "(bit-identical results).");
  m.def("fuse_pool_selection", [](const Graph& g) { return fuse_pool_selection(g); }, py::arg("graph"),
        "A copy of the graph whose max-pool gradients reuse the forward pass's selection (reduce_window_argmax / "
        "scatter_add_at_argmax; bit-identical results).");
  m.def("pool_selection_stats", [](const Graph& g) {
    int pools = 0;
    fuse_pool_selection(g, &pools);
    return pools;
  }, py::arg("graph"), "How many max-pools fuse_pool_selection rewrites in the graph.");
  m.def("fuse_copies", [](const Graph& g) { return fuse_copies(g); }, py::arg("graph"),
        "A copy of the graph whose chains of slices, concatenations, transposes, reversals and reshapes that keep "
        "the last dimension whole run as one gather_rows copy (bit-identical results).");
  m.def("copy_fusion_stats", [](const Graph& g) {
    CopyFusionStats s;
    fuse_copies(g, &s);
    py::dict d;
    d["chains"] = s.chains; d["copies_removed"] = s.copies_removed;
    return d;
  }, py::arg("graph"), "How many chain ends fuse_copies rewrites and how many copying nodes it removes.");
  m.def("fold_dot_transposes", [](const Graph& g) { return fold_dot_transposes(g); }, py::arg("graph"),
        "A copy of the graph whose dot_generals read only by a transpose write the transposed layout themselves "
        "(bit-identical results).");
  m.def("dot_transpose_stats", [](const Graph& g) {
    int n = 0;
    fold_dot_transposes(g, &n);
    return n;
  }, py::arg("graph"), "How many transposes fold_dot_transposes folds into the products before them.");
  m.def("sum_attention_dbias", [](const Graph& g) { return sum_attention_dbias(g); }, py::arg("graph"),
        "A copy of the graph whose attention backward nodes sum the bias gradient over the batch in the kernel "
        "where the VJP's reduce_sum over the batch was its only reader (close, not identical, sums).");
  m.def("attention_dbias_stats", [](const Graph& g) {
    int n = 0;
    sum_attention_dbias(g, &n);
    return n;
  }, py::arg("graph"), "How many attention backward nodes sum_attention_dbias rewrites.");
  m.def("fuse_attention_views", [](const Graph& g) { return fuse_attention_views(g); }, py::arg("graph"),
        "A copy of the graph whose fused attention nodes read q, k, v sliced from one projection in place and write "
        "dq, dk, dv into the concatenation of their gradients (bit-identical results).");
  m.def("attention_view_stats", [](const Graph& g) {
    AttentionViewStats s;
    fuse_attention_views(g, &s);
    py::dict d;
    d["views"] = s.views; d["packed"] = s.packed;
    return d;
  }, py::arg("graph"), "How many attention inputs fuse_attention_views reads in place and how many gradients it packs.");
  m.def("maxpool_select_fast_calls", &kernels::maxpool_select_fast_calls,
        "reduce_window_argmax / scatter_add_at_argmax calls run by the AVX-512 kernels since start (kernels/pool.h).");
  m.def("optimizer_fusion_stats", [](const Graph& g) {
    OptimFusionStats s;
    fuse_optimizer(g, &s);
    py::dict d;
    d["applies_folded"] = s.applies_folded; d["emas_folded"] = s.emas_folded; d["grads_widened"] = s.grads_widened;
    return d;
  }, py::arg("graph"));
});
