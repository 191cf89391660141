// Multi-process set-up (exec/mpi_comm.cc): podlet.distributed.initialize() calls
// mpi_initialize(), which installs the MPI Comm used by pmap's collectives.
#pragma once

namespace podlet {
bool have_mpi();
void mpi_initialize();   // MPI_Init_thread (if needed) + set_comm(MPI world)
void mpi_finalize();     // at interpreter exit; aborts the job after a failed collective
void mark_failed();
}  // namespace podlet
