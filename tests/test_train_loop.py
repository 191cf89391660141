"""The training loop end to end on a tiny model and in-memory data (8 virtual devices):
determinism, resume after SIGKILL (mid-training and mid-checkpoint-write) and Ctrl-C,
NaN handling, early stopping, and the run directory's contents."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import h5py
import numpy as np
import pytest

from podlet.training import checkpoints as ckpt
from podlet.training import loop
from train_helpers import tiny_config, tiny_data


def _run(run_dir, *extra, resume=False, **kw):
    cfg = tiny_config(*extra)
    return loop.train(cfg, run_dir, resume=resume, data=tiny_data(cfg), progress=False, print_fn=None, **kw)


def _records(run_dir):
    # Timing fields measure the wall clock: everything else must be identical.
    return [{k: v for k, v in r.items() if k not in loop.TIMING_FIELDS} for r in loop.read_metrics(run_dir)]


def _final_state_bits(run_dir):
    mgr = ckpt.CheckpointManager(os.path.join(run_dir, "checkpoints"))
    data = ckpt.read_checkpoint(mgr.path(mgr.latest_step()))
    return mgr.latest_step(), {k: v.tobytes() for k, v in data.items()}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One uninterrupted run that the other tests compare with."""
    d = str(tmp_path_factory.mktemp("ref"))
    summary = _run(d)
    return d, summary


def test_run_directory(reference):
    d, summary = reference
    assert sorted(os.listdir(d)) == ["checkpoints", "config.yaml", "metrics.jsonl", "plots", "summary.json"]
    recs = loop.read_metrics(d)
    train = [r for r in recs if r["kind"] == "train"]
    val = [r for r in recs if r["kind"] == "val"]
    assert [r["step"] for r in train] == list(range(1, 10)) and [r["epoch"] for r in val] == [1, 2, 3]
    # the LR actually applied: warmup over epoch 1 (3 steps) from 0, then cosine to 0 at step 9
    lrs = [r["lr"] for r in train]
    peak = tiny_config().train.learning_rate
    assert lrs[0] == 0.0 and max(lrs) == pytest.approx(peak) and lrs.index(max(lrs)) == 3
    assert all(r["grad_norm"] > 0 and r["finite"] for r in train)
    assert set(val[0]) >= {"loss", "accuracy", "balanced_accuracy", "macro_f1", "roc_auc", "per_class_f1",
                           "confusion_matrix", "train_loss"}
    assert sorted(os.listdir(os.path.join(d, "plots"))) == ["confusion_matrix.png", "loss.png", "lr.png",
                                                           "per_class_f1.png", "val_macro_f1.png"]
    s = json.load(open(os.path.join(d, "summary.json")))
    assert s["test"]["num_examples"] == 40 and s["selected_step"] in (3, 6, 9)
    best = max(val, key=lambda r: (r["macro_f1"], -r["step"]))
    assert s["selected_step"] == best["step"] and s["validation"]["macro_f1"] == pytest.approx(best["macro_f1"])
    assert summary["test"]["macro_f1"] == s["test"]["macro_f1"]
    # keep_checkpoints=2 plus the best
    steps = ckpt.CheckpointManager(os.path.join(d, "checkpoints")).all_steps()
    assert steps[-2:] == [6, 9] and best["step"] in steps
    with h5py.File(os.path.join(d, "checkpoints", "checkpoint_00000009.h5"), "r") as f:
        assert "state/ema_params/Dense_0/kernel" in f and "state/opt_state/1/0/mu/Dense_0/kernel" in f
        assert "train:" in f.attrs["config"] and json.loads(f.attrs["model"])["architecture"] == "resnet18"


def test_same_config_and_seed_give_identical_metrics(reference, tmp_path):
    _run(str(tmp_path))
    assert _records(str(tmp_path)) == _records(reference[0])
    assert _final_state_bits(str(tmp_path)) == _final_state_bits(reference[0])


def test_stop_and_resume_is_bit_identical(reference, tmp_path):
    d = str(tmp_path)
    with pytest.raises(loop.TrainingInterrupted) as e:
        _run(d, stop_after_step=4)  # mid-epoch 2, as Ctrl-C: a checkpoint at step 4
    assert e.value.step == 4 and os.path.exists(e.value.path)
    with pytest.raises(loop.RunDirError, match="already holds checkpoints: pass --resume"):
        _run(d)
    _run(d, resume=True)
    assert _records(d) == _records(reference[0])
    assert _final_state_bits(d) == _final_state_bits(reference[0])


_CHILD = textwrap.dedent("""
    import sys, time, types
    sys.path[:0] = {paths!r}
    import h5py
    from podlet.training import checkpoints as ckpt, loop
    from train_helpers import tiny_config, tiny_data
    if sys.argv[2] == "slow-write":
        class SlowFile(h5py.File):  # the step-6 checkpoint write lasts long enough to be killed in
            def close(self):
                if ".tmp-checkpoint_00000006" in self.filename:
                    time.sleep(60)
                super().close()
        ckpt.h5py = types.SimpleNamespace(File=SlowFile, Dataset=h5py.Dataset)
    cfg = tiny_config()
    data = tiny_data(cfg)
    if sys.argv[2] == "pause":  # stall before step 6 so the kill lands mid-epoch 2, whatever the speed
        batches = data.train_batches
        def train_batches(batch_size, start_step=0):
            for i, b in enumerate(batches(batch_size, start_step), start_step + 1):
                if i == 6:
                    time.sleep(60)
                yield b
        data.train_batches = train_batches
    loop.train(cfg, sys.argv[1], data=data, progress=False, print_fn=None)
""")


def _spawn(run_dir, mode):
    here = os.path.dirname(__file__)
    src = _CHILD.format(paths=[here, os.path.join(here, "..", "python")])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.Popen([sys.executable, "-c", src, run_dir, mode], env=env)


def _wait_for(cond, proc, what, timeout=120):
    deadline = time.time() + timeout
    while not cond():
        assert proc.poll() is None, f"the training process exited (status {proc.returncode}) before {what}"
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.002)


def _train_steps_logged(d):
    try:
        return [r["step"] for r in loop.read_metrics(d, "train")]
    except (FileNotFoundError, json.JSONDecodeError):
        return []


def test_sigkill_during_training_then_resume_is_bit_identical(reference, tmp_path):
    d = str(tmp_path)
    proc = _spawn(d, "pause")
    try:  # killed in epoch 2, after the step-3 checkpoint: steps 4.. are lost and redone
        # (the step-3 checkpoint is written in the background: wait for it as well)
        _wait_for(lambda: 5 in _train_steps_logged(d) and os.path.exists(ckpt.checkpoint_path(
            os.path.join(d, "checkpoints"), 3)), proc, "step 5 and the step-3 checkpoint")
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert ckpt.CheckpointManager(os.path.join(d, "checkpoints")).latest_step() == 3
    _run(d, resume=True)
    assert _records(d) == _records(reference[0])
    assert _final_state_bits(d) == _final_state_bits(reference[0])


def test_sigkill_during_a_checkpoint_write_then_resume_is_bit_identical(reference, tmp_path):
    d = str(tmp_path)
    cdir = os.path.join(d, "checkpoints")
    proc = _spawn(d, "slow-write")
    try:
        _wait_for(lambda: os.path.isdir(cdir) and any(n.startswith(".tmp-checkpoint_00000006")
                                                      for n in os.listdir(cdir)), proc, "the step-6 checkpoint write")
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    # the half-written step-6 file never got its final name; step 3 is intact
    assert ckpt.CheckpointManager(cdir).all_steps() == [3]
    assert ckpt.read_checkpoint(ckpt.checkpoint_path(cdir, 3))
    _run(d, resume=True)
    assert _records(d) == _records(reference[0])
    assert _final_state_bits(d) == _final_state_bits(reference[0])


def test_nan_stops_with_the_step_or_skips(tmp_path):
    cfg = tiny_config("train.epochs=1")
    # example 0 is NaN: it sits in the first epoch's batch that the (seed, epoch) shuffle puts it in
    data = tiny_data(cfg, nan_at=0)
    order = np.random.default_rng([cfg.train.seed, 0]).permutation(96)
    bad_step = int(np.flatnonzero(order == 0)[0]) // 16 + 1
    if bad_step > 3:  # beyond max_steps_per_epoch: make it reachable
        data.splits["train"][0][order[0]] = np.nan
        bad_step = 1
    with pytest.raises(loop.NonFiniteError, match=f"step {bad_step}: loss .* grad norm nan is not finite"):
        loop.train(cfg, str(tmp_path / "stop"), data=data, progress=False, print_fn=None)
    cfg = tiny_config("train.epochs=1", "train.nan_policy=skip")
    loop.train(cfg, str(tmp_path / "skip"), data=data, progress=False, print_fn=None)
    recs = loop.read_metrics(str(tmp_path / "skip"), "train")
    assert [r["finite"] for r in recs] == [r["step"] != bad_step for r in recs]
    final = ckpt.read_checkpoint(ckpt.CheckpointManager(str(tmp_path / "skip" / "checkpoints")).path(3))
    assert all(np.all(np.isfinite(v.astype(np.float32))) for k, v in final.items() if "params" in k)


def test_early_stopping(tmp_path):
    # With a zero-ish learning rate nothing improves after epoch 1: patience 1 stops at epoch 2.
    s = _run(str(tmp_path), "train.learning_rate=1e-12", "train.early_stopping_patience=1", "train.epochs=5")
    val = loop.read_metrics(str(tmp_path), "val")
    assert s["stopped_early"] and [r["epoch"] for r in val] == [1, 2] and s["selected_step"] == 3
