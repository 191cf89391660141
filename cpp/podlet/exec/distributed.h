// Multi-process set-up (exec/mpi_comm.cc): podlet.distributed.initialize() calls
// mpi_initialize(), which installs the MPI Comm used by pmap's collectives.
#pragma once

namespace podlet {
bool have_mpi();
void mpi_initialize();   // MPI_Init_thread (if needed) + set_comm(MPI world)
void mpi_finalize();     // at interpreter exit; aborts the job after a failed collective
void mark_failed();
// Ends every process of the job now with exit status `code` (MPI_Abort): for an error
// on one process while the others may be waiting for it in a collective. Without MPI
// (or before initialize / after finalize) it only exits this process.
[[noreturn]] void mpi_abort(int code);
}  // namespace podlet
