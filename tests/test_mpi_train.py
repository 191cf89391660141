"""`podlet train` under mpirun: 2 processes x 4 devices train exactly like 1 process x 8
devices (every checkpoint, metrics.jsonl, summary.json), each process reads only its
part of every batch, only process 0 writes the run directory and prints, and a run
stopped by a signal to one process resumes under mpirun to the same bits; errors end
the job with status 2 (MPI_Abort unless every process raised the same error)."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import podlet.data as pdata
from podlet.training import checkpoints as ckpt
from podlet.training import loop
from podlet.training.input import ArrayData

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "mpi_train_worker.py")
SMOKE = os.path.join(HERE, "..", "configs", "experiments", "smoke.yaml")
FORWARD = ("PODLET_CORE_DIR", "PYTHONPATH", "PODLET_NUM_DEVICES", "PODLET_NUM_THREADS", "PODLET_COLLECTIVE_TIMEOUT",
           "SKBUILD_EDITABLE_SKIP")
# smoke.yaml (the small CNN on synthetic patches) made tiny: 32 px, 2 epochs of 3 steps of a
# global batch of 16. Evaluation batches of 32 over 279 validation / 489 test patches end
# with a batch whose second half is partly (validation) or wholly (test) padding.
TINY = ["data.image_size=[32,32,1]", "train.batch_size=16", "train.eval_batch_size=32", "train.epochs=2",
        "train.max_steps_per_epoch=3", "train.warmup_epochs=1", "train.keep_checkpoints=1"]


def _sets(extra=()):
    return [a for s in TINY + list(extra) for a in ("--set", s)]


def _env(**kw):
    env = dict(os.environ, PODLET_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    env.pop("PODLET_NUM_DEVICES", None)
    env.update(kw)
    return env


def _mpirun_cmd(env, args):
    # Loopback TCP only, no core binding: what a CI container offers. --tag-output marks
    # every line with the rank that printed it.
    cmd = [shutil.which("mpirun"), "-np", "2", "--oversubscribe", "--bind-to", "none", "--tag-output",
           "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo"]
    for k in FORWARD:
        if k in env:
            cmd += ["-x", k]
    return cmd + [sys.executable, WORKER] + args


def _worker_args(run_dir, log, podlet_args, opts=()):
    return [str(run_dir), str(log), *opts, "--", *podlet_args, "--run-dir", str(run_dir)]


def _records(run_dir):
    return [{k: v for k, v in r.items() if k not in loop.TIMING_FIELDS} for r in loop.read_metrics(run_dir)]


def _assert_same_run(a, b):
    """Same files, metrics (but wall-clock fields), checkpoints (every leaf, bitwise), summary."""
    for sub in ("", "checkpoints", "plots"):
        assert sorted(os.listdir(os.path.join(a, sub))) == sorted(os.listdir(os.path.join(b, sub))), sub
    assert _records(a) == _records(b)
    for name in os.listdir(os.path.join(a, "checkpoints")):
        x, y = (ckpt.read_checkpoint(os.path.join(d, "checkpoints", name)) for d in (a, b))
        assert x.keys() == y.keys() and len(x) > 20
        for k in x:
            assert x[k].dtype == y[k].dtype and x[k].tobytes() == y[k].tobytes(), (name, k)
    sa, sb = (json.load(open(os.path.join(d, "summary.json"))) for d in (a, b))
    for s in (sa, sb):
        del s["run_dir"], s["wall_seconds"]
    assert sa == sb


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """The reference: one process with 8 devices."""
    d = tmp_path_factory.mktemp("one")
    run = d / "run"
    r = subprocess.run([sys.executable, WORKER] + _worker_args(run, d / "log", ["train", SMOKE, *_sets(),
                                                                                "--no-progress"]),
                       env=_env(PODLET_NUM_DEVICES="8"), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert json.load(open(f"{d / 'log'}.0.json"))["devices"] == [8, 8]
    return str(run)


def test_two_processes_train_like_one_and_only_process_0_writes(one_process, tmp_path):
    run, log = tmp_path / "run", tmp_path / "log"
    r = subprocess.run(_mpirun_cmd(_env(PODLET_NUM_DEVICES="4"),
                                   _worker_args(run, log, ["train", SMOKE, *_sets()])),  # with a progress bar
                       env=_env(PODLET_NUM_DEVICES="4"), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    logs = [json.load(open(f"{log}.{i}.json")) for i in range(2)]
    assert [x["devices"] for x in logs] == [[8, 4], [8, 4]] and logs[0]["process_count"] == 2
    # process 1 wrote nothing under the run directory; process 0 wrote all of it
    assert logs[1]["writes"] == []
    renamed = {os.path.relpath(p, run) for e, p in logs[0]["writes"] if e == "os.rename"}
    assert {"config.yaml", "summary.json", "checkpoints/checkpoint_00000006.h5", "plots/loss.png"} <= renamed
    assert ["open", str(run / "metrics.jsonl")] in logs[0]["writes"]
    # and only process 0 printed (the progress bar included)
    out = r.stdout + r.stderr
    assert "[1,1]<" not in out, out[-3000:]
    assert out.count(f"[1,0]<stdout>:run directory: {run}") == 1 and "[1,0]<stderr>:" in out
    _assert_same_run(one_process, str(run))


def _wait_for(cond, proc, what, timeout=180):
    deadline = time.time() + timeout
    while not cond():
        assert proc.poll() is None, f"mpirun exited (status {proc.returncode}) before {what}"
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_a_signal_to_one_process_stops_all_at_one_step_and_mpirun_resumes(one_process, tmp_path):
    run, log, go = tmp_path / "run", tmp_path / "log", tmp_path / "go"
    # train.num_devices is the global count: 4 devices a process, without PODLET_NUM_DEVICES
    args = ["train", SMOKE, *_sets(["train.num_devices=8"]), "--no-progress"]
    env = _env()
    p = subprocess.Popen(_mpirun_cmd(env, _worker_args(run, log, args, ["--pause-at", "5", str(go)])), env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        marks = [f"{log}.paused.{i}" for i in range(2)]
        _wait_for(lambda: all(os.path.exists(m) and open(m).read() for m in marks), p, "step 5")
        os.kill(int(open(marks[1]).read()), signal.SIGUSR1)  # process 1 only
        time.sleep(0.2)
        go.touch()
        out, _ = p.communicate(timeout=180)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, out[-3000:]
    assert "interrupted at step 5; checkpoint saved" in out and "[1,1]<" not in out, out[-3000:]
    assert [r["step"] for r in loop.read_metrics(str(run), "train")] == [1, 2, 3, 4, 5]
    assert ckpt.CheckpointManager(str(run / "checkpoints")).all_steps() == [3, 5]
    assert json.load(open(f"{log}.1.json"))["writes"] == []

    r = subprocess.run(_mpirun_cmd(env, _worker_args(run, tmp_path / "log2", args + ["--resume"])), env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "[1,0]<stdout>:resuming" in r.stdout and json.load(open(f"{tmp_path / 'log2'}.1.json"))["writes"] == []
    _assert_same_run(one_process, str(run))


def test_train_refuses_mpirun_processes_that_were_not_joined(tmp_path):
    env = _env()
    code = "from podlet.training import loop; loop._check_distributed()"
    cmd = _mpirun_cmd(env, [])[:-1] + ["-c", code]  # python -c instead of the worker
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "one of 2 started by mpirun, but podlet.distributed.initialize() was not called" in r.stderr


# ------------------------------------------------------------ each process's part of a batch

def _synthetic(split="validation"):
    return pdata.synthetic_ddsm(split, image_size=32, scale=0.01, seed=0)  # 56 validation patches


def test_shard_batches_are_the_parts_of_the_unsharded_batches():
    def ds():
        return (pdata.Dataset(_synthetic()).shuffle(100, seed=3).normalize("minus_one_to_one")
                .augment(**pdata.CONSERVATIVE_AUGMENTATION, seed=1))
    full = list(ds().repeat().batch(16, drop_remainder=True).take(6).iterator(start_step=2, iteration=0))
    parts = [list(ds().repeat().batch(16, drop_remainder=True).shard_batches(4, i).take(6)
                  .iterator(start_step=2, iteration=0)) for i in range(4)]
    assert len(full) == 4 and all(len(p) == 4 for p in parts)
    for k in range(4):
        for key in ("image", "label", "id"):
            np.testing.assert_array_equal(full[k][key], np.concatenate([p[k][key] for p in parts]), err_msg=key)
    # one pass, the last batch short (56 = 3 x 16 + 8): parts 2 and 3 of it are empty
    full = list(ds().batch(16).iterator())
    parts = [list(ds().batch(16).shard_batches(4, i).prefetch(2).iterator()) for i in range(4)]
    assert [p[-1]["image"].shape[0] for p in parts] == [4, 4, 0, 0]
    for k in range(len(full)):
        np.testing.assert_array_equal(full[k]["image"], np.concatenate([p[k]["image"] for p in parts]))
    assert ds().batch(16).shard_batches(2, 1).per_device(4).iterator().__next__()["image"].shape == (4, 2, 32, 32, 1)
    with pytest.raises(ValueError, match="must come before per_device"):
        ds().batch(16).per_device(4).shard_batches(2, 0)
    with pytest.raises(ValueError, match="not divisible into 3 equal parts"):
        ds().batch(16).shard_batches(3, 0)
    with pytest.raises(ValueError, match="index 2 is not below num_shards 2"):
        ds().batch(16).shard_batches(2, 2)


def test_array_data_parts_and_padding():
    rng = np.random.default_rng(0)
    data = ArrayData({"train": (rng.random((40, 4, 4, 1), np.float32), np.arange(40) % 5),
                      "validation": (rng.random((21, 4, 4, 1), np.float32), np.arange(21) % 5)},
                     ["a", "b", "c", "d", "e"], seed=1)
    full = data.train_batches(8, start_step=3)
    parts = [data.train_batches(8, start_step=3, num_shards=2, shard_index=i) for i in range(2)]
    for _ in range(7):  # across an epoch boundary
        f, a, b = next(full), next(parts[0]), next(parts[1])
        np.testing.assert_array_equal(f["image"], np.concatenate([a["image"], b["image"]]))
        np.testing.assert_array_equal(f["label"], np.concatenate([a["label"], b["label"]]))
    full = list(data.eval_batches("validation", 8))
    parts = [list(data.eval_batches("validation", 8, num_shards=2, shard_index=i)) for i in range(2)]
    assert [p[-1]["mask"].tolist() for p in parts] == [[1, 1, 1, 1], [1, 0, 0, 0]]
    for k in range(len(full)):
        for key in ("image", "label", "mask"):
            np.testing.assert_array_equal(full[k][key], np.concatenate([p[k][key] for p in parts]))


def test_errors_under_mpirun_end_the_job_with_status_2(one_process, tmp_path):
    env = _env(PODLET_NUM_DEVICES="4")
    base = _mpirun_cmd(env, [])[:-1] + ["-m", "podlet", "train", SMOKE, *_sets()]
    # process 0 decides about the run directory: one message, every process exits with 2
    r = subprocess.run(base + ["--run-dir", one_process], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr.count("already holds checkpoints: pass --resume") == 1 and "(MPI_Abort)" not in r.stderr
    # an error any process may hit alone ends the whole job (MPI_Abort) with its status
    r = subprocess.run(base + ["--set", "train.learning_rate=-1", "--run-dir", str(tmp_path / "r")], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "expected a value > 0.0, got -1.0" in r.stderr
    assert "ends the job (MPI_Abort) with status 2" in r.stderr
    assert not (tmp_path / "r").exists()
