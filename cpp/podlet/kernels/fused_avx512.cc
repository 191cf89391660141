// The fused elementwise interpreter's per-tile loops (instructions, loads, stores, row
// sums) built for AVX-512 (see
// prims/fused_ops.h): the same source as the baseline build, vectorised 16 lanes wide,
// with the same bits (compiled with -ffp-contract=off like every ISA file).
#include "podlet/prims/fused_ops.h"

namespace podlet::kernels {

const fused::TileKernels& fused_tile_kernels_avx512() {
  static const fused::TileKernels k{fused_ops::exec_instr, fused_ops::load_elems, fused_ops::store_elems,
                                    fused_ops::sum_rows_f32, fused_ops::sum_leaves_f32,
                                    fused_ops::store_elems_stream};
  return k;
}

}  // namespace podlet::kernels
