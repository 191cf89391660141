// The AMX GEMM on emulated tiles (amx_tiles.h, Emu): the same blocking and packing as
// gemm_amx.cc with TDPBF16PS's arithmetic in plain C++, for hosts without AMX (tests, CI)
// and to check the hardware against. Compiled for baseline x86-64.
#include "podlet/kernels/gemm_amx_impl.h"

namespace podlet::kernels {

void gemm_amx_emu(const GemmArgs& g) { amx::gemm_run<amx::Emu>(g); }

}  // namespace podlet::kernels
