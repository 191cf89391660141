"""podlet.distributed: pmap across processes (jax.distributed).

Under ``mpirun -np P``, ``podlet.distributed.initialize()`` joins the MPI world: devices
become P x local devices, pmap's collectives cross processes in global replica order
(so the result does not depend on how devices are split over processes), and
``process_index()`` tells each process which shard of the data to read. A peer that
dies or stops answering makes a collective fail within ``PODLET_COLLECTIVE_TIMEOUT``
seconds (default 600) with an error naming it, and the job is aborted instead of hung.

Host-side exchange for code around the pmap'd step (the training loop: who writes, which
checkpoint to restore, whether to stop) is in ``podlet.experimental.multihost_utils``
(``sync_global_devices``, ``broadcast_one_to_all``, ``process_allgather``, as in JAX) and,
for small picklable Python values, :func:`allgather_object` / :func:`broadcast_object`.
"""
import atexit
import os
import pickle

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


def allgather_object(obj):
    """Every process's `obj` (picklable), as a list in process order: ``[obj]`` in a single
    process. A collective: every process must call it, in the same order."""
    from . import _core
    if _core.process_count() == 1:
        return [obj]
    return [pickle.loads(b) for b in _core.process_allgather_bytes(pickle.dumps(obj))]


def broadcast_object(obj):
    """Process 0's `obj` on every process (the others' arguments are ignored). A collective."""
    from . import _core
    if _core.process_count() == 1:
        return obj
    mine = pickle.dumps(obj) if _core.process_index() == 0 else b""
    return pickle.loads(_core.process_allgather_bytes(mine)[0])


def abort(code=1):
    """Ends every process of the job now with exit status `code` (MPI_Abort): for an error
    raised on some processes while others may be waiting for them in a collective. In a
    single process, exits with `code` (without running atexit handlers)."""
    import sys
    if _core.process_count() > 1:
        # said here because Open MPI's own MPI_ABORT banner is not always printed
        # (its show_help may fail under a loaded launcher)
        print(f"podlet: process {_core.process_index()} ends the job (MPI_Abort) with status {int(code)}",
              file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    _core.mpi_abort(int(code))
