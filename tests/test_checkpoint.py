"""HDF5 checkpoints: bit-exact round trip of a whole TrainState (bf16, optimizer named
tuples, EMA, rng, step), plain-h5py readability, every mismatched path reported, keep
last N + best, background writes, and atomicity under SIGKILL."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import h5py
import numpy as np
import pytest

import podlet
import podlet.numpy as jnp
import podlet.optim as optax
from podlet import models, struct
from podlet.training import checkpoints as ckpt
from podlet.training import train_state


class TrainState(train_state.TrainState):
    batch_stats: object = None
    ema_params: object = None
    rng: object = struct.field(pytree_node=True, default=None)


def _state(stage_sizes=(1, 1), seed=0, steps=1):
    model = models.ResNet(stage_sizes=list(stage_sizes), widths=[8, 16][:len(stage_sizes)] + [16] * (len(stage_sizes) - 2),
                          num_classes=5, dtype=jnp.bfloat16)
    key = podlet.random.PRNGKey(seed)
    v = model.init(key, jnp.zeros((2, 16, 16, 1)), train=False)
    tx = optax.chain(optax.clip_by_global_norm(1.0),
                     optax.adamw(optax.warmup_cosine_decay_schedule(0.0, 1e-3, 2, 10), weight_decay=1e-4))
    params = dict(v["params"])
    params["bf16_leaf"] = jnp.asarray(np.linspace(-3, 3, 7, dtype=np.float32), jnp.bfloat16)
    st = TrainState.create(apply_fn=model.apply, params=params, tx=tx, batch_stats=v["batch_stats"],
                           ema_params=params, rng=podlet.random.PRNGKey(seed + 1))
    for _ in range(steps):  # a few updates so mu/nu/count are not trivial
        grads = podlet.tree_util.tree_map(lambda p: jnp.ones(p.shape, p.dtype) * 0.1, st.params)
        st = st.apply_gradients(grads=grads)
    return model, st


def _bits(tree):
    return [(np.asarray(x).dtype, np.asarray(x).tobytes()) for x in podlet.tree_util.tree_leaves(tree)]


def test_round_trip_is_bit_exact_and_plain_h5py_readable(tmp_path):
    _, st = _state(steps=2)
    p = ckpt.save_checkpoint(tmp_path / "c.h5", st, step=2, config="train: {seed: 1}\n",
                             model={"architecture": "resnet18"}, metrics={"macro_f1": 0.5})
    _, target = _state(seed=7, steps=0)  # same structure, different values, python-int step
    back = ckpt.restore_checkpoint(p, target)
    assert podlet.tree_util.tree_structure(back) == podlet.tree_util.tree_structure(target)
    assert _bits(back) == _bits(st)
    assert back.params["bf16_leaf"].dtype == jnp.bfloat16
    # opt_state is the chain's tuple of named tuples: count/mu/nu restored inside ScaleByAdamState
    adam = back.opt_state[1][0]
    assert type(adam).__name__ == "ScaleByAdamState" and int(adam.count) == 2
    with h5py.File(p, "r") as f:  # no podlet needed to read it
        assert f.attrs["step"] == 2 and "seed: 1" in f.attrs["config"]
        ds = f["state/params/bf16_leaf"]
        assert ds.dtype == np.uint16 and ds.attrs["dtype"] == "bfloat16"
        np.testing.assert_array_equal(ds[()], np.asarray(st.params["bf16_leaf"]).view(np.uint16))
        assert "state/opt_state/1/0/mu/conv_init/kernel" in f
        assert "state/batch_stats/bn_init/mean" in f and "state/ema_params/Dense_0/kernel" in f
        assert f["state/rng"].dtype == np.uint32
    meta = ckpt.read_metadata(p)
    assert meta["metrics"] == {"macro_f1": 0.5} and meta["model"] == {"architecture": "resnet18"}


def test_restore_into_a_deeper_model_lists_every_path(tmp_path):
    _, small = _state(stage_sizes=(1, 1))
    p = ckpt.save_checkpoint(tmp_path / "c.h5", small, step=1)
    _, deeper = _state(stage_sizes=(2, 1))  # one more block in the first stage
    with pytest.raises(ckpt.CheckpointMismatchError) as ei:
        ckpt.restore_checkpoint(p, deeper)
    e = ei.value
    msg = str(e)
    # the new block's params, its BatchNorm stats, its EMA copy and its Adam moments
    for path in ["params/ResNetBlock_2/Conv_0/kernel", "batch_stats/ResNetBlock_2/BatchNorm_1/var",
                 "ema_params/ResNetBlock_2/Conv_1/kernel", "opt_state/1/0/nu/ResNetBlock_2/BatchNorm_0/scale"]:
        assert path in e.missing and f"missing from the checkpoint: {path}" in msg
    # ResNetBlock_1 exists in both but is now a same-width block (no projection): Conv_2 is extra
    assert "params/ResNetBlock_1/Conv_2/kernel" in e.extra
    assert len(e.missing) > 20 and str(len(e.missing)) + " missing" in msg


def test_mismatched_shape_and_dtype_are_named(tmp_path):
    tree = {"a": np.zeros((2, 3), np.float32), "b": np.zeros(4, np.int32), "c": np.ones(2, np.float32)}
    p = ckpt.save_checkpoint(tmp_path / "c.h5", tree, step=0)
    target = {"a": np.zeros((3, 2), np.float32), "b": np.zeros(4, np.float32), "d": np.ones(1)}
    with pytest.raises(ckpt.CheckpointMismatchError) as ei:
        ckpt.restore_checkpoint(p, target)
    msg = str(ei.value)
    assert "a: checkpoint has float32[2, 3], target expects float32[3, 2]" in msg
    assert "b: checkpoint has int32[4], target expects float32[4]" in msg
    assert "not in the target:           c" in msg and "missing from the checkpoint: d" in msg


def test_bad_files_and_leaves(tmp_path):
    with pytest.raises(ckpt.CheckpointError, match="does not exist"):
        ckpt.restore_checkpoint(tmp_path / "nope.h5", {})
    (tmp_path / "junk.h5").write_bytes(b"not hdf5 at all")
    with pytest.raises(ckpt.CheckpointError, match="junk.h5 is not a readable HDF5 file"):
        ckpt.read_metadata(tmp_path / "junk.h5")
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f["x"] = 1
    with pytest.raises(ckpt.CheckpointError, match="other.h5 is not a podlet checkpoint"):
        ckpt.read_checkpoint(tmp_path / "other.h5")
    with pytest.raises(ckpt.CheckpointError, match=r"leaf at 'a/b'.*str"):
        ckpt.save_checkpoint(tmp_path / "s.h5", {"a": {"b": "text"}}, step=0)
    assert sorted(os.listdir(tmp_path)) == ["junk.h5", "other.h5"]  # no s.h5, no temp file


def test_manager_keeps_last_n_and_best_in_background(tmp_path):
    mgr = ckpt.CheckpointManager(tmp_path, max_to_keep=2, best_metric="macro_f1")
    scores = {1: 0.2, 2: 0.6, 3: 0.4, 4: 0.3, 5: 0.5}
    for s, f1 in scores.items():
        mgr.save(s, {"w": np.full(3, s, np.float32)}, metrics={"macro_f1": f1})
    mgr.wait_until_finished()
    assert mgr.all_steps() == [2, 4, 5] and mgr.best_step() == 2 and mgr.latest_step() == 5
    assert mgr.restore({"w": np.zeros(3, np.float32)}, "best")["w"][0] == 2
    assert mgr.restore({"w": np.zeros(3, np.float32)}, 4)["w"][0] == 4
    with pytest.raises(ckpt.CheckpointError, match=r"no checkpoint for step 3 .* available: \[2, 4, 5\]"):
        mgr.restore({"w": np.zeros(3, np.float32)}, 3)
    # a fresh manager on the same directory sees the same best (metrics live in the files)
    assert ckpt.CheckpointManager(tmp_path, max_to_keep=2, best_metric="macro_f1").best_step() == 2
    low = ckpt.CheckpointManager(tmp_path, max_to_keep=2, best_metric="macro_f1", best_mode="min")
    assert low.best_step() == 4


def test_save_does_not_wait_for_the_write(tmp_path, monkeypatch):
    release = __import__("threading").Event()
    real = ckpt._write

    def slow(*a, **k):
        release.wait(10)
        return real(*a, **k)

    monkeypatch.setattr(ckpt, "_write", slow)
    mgr = ckpt.CheckpointManager(tmp_path)
    t0 = time.perf_counter()
    mgr.save(1, {"w": np.zeros(2)})
    assert time.perf_counter() - t0 < 1.0 and mgr.all_steps() == []  # still writing
    release.set()
    mgr.wait_until_finished()
    assert mgr.all_steps() == [1]


_WRITER = textwrap.dedent("""
    import sys, numpy as np
    from podlet.training import checkpoints as ckpt
    mgr = ckpt.CheckpointManager(sys.argv[1], max_to_keep=100)
    big = {f"layer{i}": np.full((1 << 20,), i, np.float32) for i in range(24)}   # ~100 MB
    mgr.save(1, {"w": np.arange(5.0)}, wait=True)
    print("ready", flush=True)
    step = 2
    while True:
        mgr.save(step, big, wait=True)
        step += 1
""")


def test_sigkill_during_a_write_leaves_earlier_checkpoints_readable(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path)], stdout=subprocess.PIPE, env=env)
    try:
        assert proc.stdout.readline().strip() == b"ready"
        deadline = time.time() + 60
        while not any(n.startswith(".tmp-") for n in os.listdir(tmp_path)):  # a write is under way
            assert time.time() < deadline, "the writer never started a checkpoint"
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    names = os.listdir(tmp_path)
    assert any(n.startswith(".tmp-") for n in names)  # the interrupted write, under a temp name
    mgr = ckpt.CheckpointManager(tmp_path)  # cleans the leftover
    assert not any(n.startswith(".tmp-") for n in os.listdir(tmp_path))
    assert 1 in mgr.all_steps()
    for s in mgr.all_steps():  # every file under a final name is complete
        data = ckpt.read_checkpoint(mgr.path(s))
        assert s == 1 or all(np.all(v == int(k[5:])) for k, v in data.items())
    np.testing.assert_array_equal(mgr.restore({"w": np.zeros(5)}, 1)["w"], np.arange(5.0))
