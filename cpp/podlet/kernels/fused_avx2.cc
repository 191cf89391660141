// The fused elementwise interpreter's per-tile loops (instructions, loads, stores, row
// sums) built for AVX2 + FMA hosts (see prims/fused_ops.h): the same source as the
// baseline build, vectorised 8 lanes wide instead of SSE2's 4, with the same bits
// (compiled with -ffp-contract=off like every ISA file; tests/test_fusion.py compares
// fused and unfused graphs bitwise on the active ISA).
#include "podlet/prims/fused_ops.h"

namespace podlet::kernels {

const fused::TileKernels& fused_tile_kernels_avx2() {
  static const fused::TileKernels k{fused_ops::exec_instr, fused_ops::load_elems, fused_ops::store_elems,
                                    fused_ops::sum_rows_f32, fused_ops::sum_leaves_f32,
                                    fused_ops::store_elems_stream};
  return k;
}

}  // namespace podlet::kernels
