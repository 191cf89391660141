"""pmap across processes: `mpirun -np 2` with 4 devices each gives the same bits as one
process with 8 devices; a dead or stuck rank ends the job with an error naming it."""
import os
import shutil
import subprocess
import sys
import time

import numpy as np

import podlet

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "mpi_worker.py")
FORWARD = ("PODLET_CORE_DIR", "PYTHONPATH", "PODLET_NUM_DEVICES", "PODLET_NUM_THREADS", "PODLET_COLLECTIVE_TIMEOUT")


def _env(**kw):
    env = dict(os.environ, PODLET_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    env.update(kw)
    return env


def _mpirun(args, env, timeout):
    # Loopback TCP only, no core binding: what a CI container offers.
    cmd = [shutil.which("mpirun"), "-np", "2", "--oversubscribe", "--bind-to", "none",
           "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo"]
    for k in FORWARD:
        if k in env:
            cmd += ["-x", k]
    return subprocess.run(cmd + [sys.executable, WORKER] + args, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_built_with_mpi():
    assert podlet._core.have_mpi()
    assert shutil.which("mpirun"), "openmpi-bin is part of the set-up"


def test_two_processes_match_one_process_bitwise(tmp_path):
    one = subprocess.run([sys.executable, WORKER, str(tmp_path / "one.npz"), "20"],
                         env=_env(PODLET_NUM_DEVICES="8"), capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr[-3000:]
    two = _mpirun([str(tmp_path / "two.npz"), "20", "--mpi"], _env(PODLET_NUM_DEVICES="4"), timeout=300)
    assert two.returncode == 0, two.stdout[-2000:] + two.stderr[-3000:]
    a, b = np.load(tmp_path / "one.npz"), np.load(tmp_path / "two.npz")
    assert len(a.files) == len(b.files) > 5
    for k in a.files:
        if k == "loss":  # process 0 holds its 4 devices' copies of the pmean'd loss
            np.testing.assert_array_equal(a[k][:4], b[k])
        else:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_a_dead_rank_ends_the_job_naming_it(tmp_path):
    t0 = time.time()
    r = _mpirun([str(tmp_path / "x.npz"), "20", "--mpi", "--die-at", "3"],
                _env(PODLET_NUM_DEVICES="4", PODLET_COLLECTIVE_TIMEOUT="20"), timeout=240)
    assert r.returncode != 0
    assert time.time() - t0 < 200
    out = r.stdout + r.stderr
    assert "Exit code:    3" in out and ",1]" in out, out[-3000:]  # mpirun names rank 1
    assert not (tmp_path / "x.npz").exists()


def test_a_stuck_rank_times_out_with_an_error_naming_it(tmp_path):
    t0 = time.time()
    r = _mpirun([str(tmp_path / "x.npz"), "20", "--mpi", "--hang-at", "3"],
                _env(PODLET_NUM_DEVICES="4", PODLET_COLLECTIVE_TIMEOUT="5"), timeout=240)
    assert r.returncode != 0
    assert time.time() - t0 < 200
    out = r.stdout + r.stderr
    assert "timed out after 5 s waiting for process(es) 1" in out, out[-3000:]
