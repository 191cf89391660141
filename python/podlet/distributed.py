"""podlet.distributed: pmap across processes (jax.distributed).

Under ``mpirun -np P``, ``podlet.distributed.initialize()`` joins the MPI world: devices
become P x local devices, pmap's collectives cross processes in global replica order
(so the result does not depend on how devices are split over processes), and
``process_index()`` tells each process which shard of the data to read. A peer that
dies or stops answering makes a collective fail within ``PODLET_COLLECTIVE_TIMEOUT``
seconds (default 600) with an error naming it, and the job is aborted instead of hung.
"""
import atexit
import os

from . import _core

_initialized = False


def is_initialized():
    return _initialized


def initialize(coordinator_address=None, num_processes=None, process_id=None, local_device_ids=None,
               local_device_count=None):
    """Joins the MPI world started by mpirun. Arguments are checked against it (MPI
    itself decides ranks; coordinator_address is accepted for jax compatibility)."""
    global _initialized
    if _initialized:
        raise RuntimeError("podlet.distributed.initialize() was already called")
    if not _core.have_mpi():
        raise RuntimeError("podlet was built without MPI: install libopenmpi-dev and openmpi-bin (the README's "
                           "set-up command does) and rebuild")
    if local_device_count is not None:
        from ._src.pmap import set_local_device_count
        set_local_device_count(local_device_count)
    _core.mpi_initialize()
    _initialized = True
    atexit.register(shutdown)
    if num_processes is not None and num_processes != _core.process_count():
        raise ValueError(f"initialize(num_processes={num_processes}) but mpirun started "
                         f"{_core.process_count()} processes")
    if process_id is not None and process_id != _core.process_index():
        raise ValueError(f"initialize(process_id={process_id}) but MPI assigned rank {_core.process_index()}")


def shutdown():
    global _initialized
    if _initialized:
        _initialized = False
        _core.mpi_finalize()


def launched_by_mpirun():
    """True when this process was started by Open MPI's mpirun."""
    return "OMPI_COMM_WORLD_SIZE" in os.environ
