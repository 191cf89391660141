"""Checkpoint integrity (format v2): a checksum per leaf and one over the metadata. A damaged
file (a flipped byte, 64 zeroed bytes, a truncation, anywhere) is refused with a
CheckpointError naming the file and the failing leaves, or restores bit-identical (the
damage hit unused bytes): never a silently changed value, never another exception. v1
files (no checksums) still load, with a warning; resume takes the newest checkpoint that
verifies."""
import json
import os
import re
import warnings
import zlib

import h5py
import ml_dtypes
import numpy as np
import pytest

import podlet
from podlet.training import checkpoints as ckpt


def _tree():
    """A small train-state-like pytree (~240 KB): float32/bfloat16/int32/uint32 arrays,
    NumPy scalars and Python scalars, nested dicts and lists."""
    rng = np.random.default_rng(0)
    return {"params": {"conv": {"kernel": rng.standard_normal((3, 3, 16, 32)).astype(np.float32),
                                "bias": rng.standard_normal(32).astype(np.float32)},
                       "dense": {"kernel": rng.standard_normal((256, 128)).astype(np.float32),
                                 "bf16": rng.standard_normal((64, 64)).astype(ml_dtypes.bfloat16)}},
            "opt_state": [{"count": np.int32(7), "mu": rng.standard_normal((256, 64)).astype(np.float32)},
                          {"ids": rng.integers(1, 1000, (100,), dtype=np.int32)}],
            "step": 12, "lr": 0.125, "done": False, "rng": np.array([1, 2], np.uint32)}


def _bits(tree):
    return [(type(x).__name__, np.asarray(x).dtype.str, np.asarray(x).shape, np.asarray(x).tobytes())
            for x in podlet.tree_util.tree_leaves(tree)]


def _save(path, tree=None, step=5):
    return ckpt.save_checkpoint(path, _tree() if tree is None else tree, step=step, config="train: {seed: 1}\n",
                                model={"architecture": "tiny"}, metrics={"macro_f1": 0.5})


def _data_extents(path):
    """{leaf path: (offset, size)} of every dataset's contiguous data in the file."""
    out = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and obj.id.get_offset() is not None:
                out[name] = (obj.id.get_offset(), obj.id.get_storage_size())
        f["state"].visititems(visit)
    return out


def _damage(src, dst, offset, kind):
    b = bytearray(open(src, "rb").read())
    if kind == "flip":
        b[offset] ^= 0xFF
    elif kind == "zero":
        b[offset:offset + 64] = bytes(len(b[offset:offset + 64]))
    else:
        del b[offset:]
    with open(dst, "wb") as f:
        f.write(b)


def test_every_damage_is_refused_or_harmless(tmp_path):
    tree = _tree()
    good = _save(tmp_path / "good.h5", tree)
    size = os.path.getsize(good)
    want_bits = _bits(ckpt.restore_checkpoint(good, tree))
    assert want_bits == _bits(tree)
    want_read = {k: (v.dtype.str, v.tobytes()) for k, v in ckpt.read_checkpoint(good).items()}
    want_meta = ckpt.read_metadata(good)
    extents = _data_extents(good)
    in_data = np.zeros(size, bool)
    for off, n in extents.values():
        in_data[off:off + n] = True
    rng = np.random.default_rng(1234)
    # 60 offsets spread over the whole file (one per 1/60th), and 40 more among the bytes
    # that are not leaf data (HDF5's headers, B-trees, heaps and the attributes).
    edges = np.linspace(0, size, 61).astype(int)
    offsets = [int(rng.integers(lo, hi)) for lo, hi in zip(edges[:-1], edges[1:])]
    offsets += [int(o) for o in rng.choice(np.flatnonzero(~in_data), 40, replace=False)]
    bad = tmp_path / "bad.h5"
    readers = {"restore_checkpoint": (lambda: _bits(ckpt.restore_checkpoint(bad, tree)), want_bits),
               "read_checkpoint": (lambda: {k: (v.dtype.str, v.tobytes())
                                            for k, v in ckpt.read_checkpoint(bad).items()}, want_read),
               "read_metadata": (lambda: ckpt.read_metadata(bad), want_meta),
               "verify_checkpoint": (lambda: ckpt.verify_checkpoint(bad), None)}
    outcomes = {"refused": 0, "identical": 0}
    for offset in sorted(set(offsets)):
        for kind in ("flip", "zero", "truncate"):
            _damage(good, bad, offset, kind)
            where = f"{kind} at byte {offset} of {size}"
            refused = set()
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # a v2 file is never read as an unverified v1 file
                for name, (read, want) in readers.items():
                    try:
                        got = read()
                    except ckpt.CheckpointError as e:  # any other exception fails the test
                        assert str(bad) in str(e).splitlines()[0], f"{where}: {name}'s error does not name the file"
                        refused.add(name)
                        continue
                    assert got == want, f"{where}: {name} returned changed values without an error"
            # the readers of the leaves agree; the metadata can be intact when a leaf is not
            assert len(refused - {"read_metadata"}) in (0, 3), (where, refused)
            assert "read_metadata" not in refused or len(refused) == 4, (where, refused)
            if kind == "truncate" or (kind == "flip" and in_data[offset]):  # always a real change
                assert len(refused) >= 3, (where, refused)
            outcomes["refused" if refused else "identical"] += 1
    # most damages are detected; the others hit bytes nothing reads (or zeroed zeros)
    assert outcomes["refused"] > 200 and outcomes["identical"] > 0, outcomes


def test_error_names_the_file_and_every_failing_leaf(tmp_path):
    tree = _tree()
    good = _save(tmp_path / "good.h5", tree)
    ext = _data_extents(good)
    b = bytearray(open(good, "rb").read())
    for leaf in ("params/dense/kernel", "opt_state/0/mu", "params/dense/bf16"):
        off, n = ext[leaf]
        b[off + n // 2] ^= 0x01  # one bit of one value each
    bad = tmp_path / "checkpoint_00000005.h5"
    bad.write_bytes(b)
    for read in (lambda: ckpt.restore_checkpoint(bad, tree), lambda: ckpt.read_checkpoint(bad),
                 lambda: ckpt.verify_checkpoint(bad)):
        with pytest.raises(ckpt.CheckpointError) as ei:
            read()
        msg = str(ei.value)
        first = msg.splitlines()[0]
        assert str(bad) in first and "3 leaf/leaves fail verification" in first
        for leaf in ("params/dense/kernel", "opt_state/0/mu", "params/dense/bf16"):
            assert leaf in first and f"  {leaf}: crc32 of its data is" in msg
        assert "params/conv/kernel" not in msg
    assert ckpt.read_metadata(bad)["step"] == 5  # the metadata itself is intact


def _rehead(path):
    """Rewrites the integrity header to match the file as it now is: damage that happened
    before the header was written (in memory, or by a buggy writer) is left to the checks
    of the root checksum, the manifest and the per-leaf crc32s."""
    with h5py.File(path, "r") as f:
        userblock = f.userblock_size
        ranges = []
        f["state"].visititems(lambda n, o: ranges.append((o.id.get_offset() or 0, o.id.get_storage_size()))
                              if isinstance(o, h5py.Dataset) else None)
    with open(path, "rb+") as fh:
        fh.write(bytes(userblock))
        ckpt._write_header(fh, userblock, ckpt._merge(ranges))


def test_tampered_metadata_and_tree_are_refused(tmp_path):
    tree = _tree()
    good = _save(tmp_path / "good.h5", tree)
    cases = {
        "metrics": lambda f: f.attrs.__setitem__("metrics", json.dumps({"macro_f1": 0.9})),
        "step": lambda f: f.attrs.__setitem__("step", 6),
        "manifest": lambda f: f.attrs.__setitem__("manifest", f.attrs["manifest"].replace("[256,128]", "[128,256]")),
        "no checksum": lambda f: f.attrs.__delitem__("checksum"),
        "downgraded": lambda f: f.attrs.__setitem__("format", ckpt.FORMAT_V1),
    }
    for what, change in cases.items():
        for rehead in (False, True):
            p = tmp_path / f"{what}-{rehead}.h5"
            p.write_bytes(open(good, "rb").read())
            with h5py.File(p, "r+") as f:
                change(f)
            if rehead:
                _rehead(p)
            for read in (ckpt.read_metadata, ckpt.read_checkpoint, lambda q: ckpt.restore_checkpoint(q, tree)):
                with pytest.raises(ckpt.CheckpointError, match="is damaged") as ei:
                    read(p)
                msg = str(ei.value)
                assert str(p) in msg, what
                if not rehead:  # the header sees the change first
                    assert "its header records" in msg, (what, msg)
                else:  # then the root checksum
                    assert re.search(r"checksum of its metadata|format attribute says|attribute\(s\) checksum missing",
                                     msg), (what, msg)
    # the tree: a leaf removed, one added, a value and a dtype attribute rewritten
    p = tmp_path / "tree.h5"
    p.write_bytes(open(good, "rb").read())
    with h5py.File(p, "r+") as f:
        del f["state/params/conv/bias"]
        f["state/params/extra"] = np.zeros(3, np.float32)
        f["state/params/dense/kernel"][0, 0] = 1.0
        f["state/rng"].attrs["dtype"] = "int32"
    _rehead(p)
    for read in (lambda: ckpt.restore_checkpoint(p, tree), lambda: ckpt.read_checkpoint(p)):
        with pytest.raises(ckpt.CheckpointError) as ei:
            read()
        assert not isinstance(ei.value, ckpt.CheckpointMismatchError)  # damage, not a model change
        msg = str(ei.value)
        assert msg.startswith(f"checkpoint {p} is damaged: 3 leaf/leaves fail verification: ")
        assert "  params/conv/bias: listed in the manifest, missing from the file" in msg
        assert "  params/extra: in the file, not in the manifest" in msg
        assert "  rng: dtype attribute 'int32', the manifest records 'uint32'" in msg
    with h5py.File(p, "r+") as f:  # the tree repaired: only the changed value is left
        del f["state/params/extra"]
        f["state/params/conv/bias"] = tree["params"]["conv"]["bias"]
        f["state/params/conv/bias"].attrs.update({"dtype": "float32",
                                                  "crc32": zlib.crc32(tree["params"]["conv"]["bias"])})
        f["state/rng"].attrs["dtype"] = "uint32"
    _rehead(p)
    with pytest.raises(ckpt.CheckpointError, match=r"1 leaf/leaves fail verification: params/dense/kernel\n"
                                                   r"  params/dense/kernel: crc32 of its data is 0x"):
        ckpt.read_checkpoint(p)
    with h5py.File(p, "r+") as f:
        f["state/params/dense/kernel"][0, 0] = tree["params"]["dense"]["kernel"][0, 0]
    _rehead(p)
    assert _bits(ckpt.restore_checkpoint(p, tree)) == _bits(tree)


def test_integrity_header(tmp_path):
    tree = _tree()
    good = _save(tmp_path / "good.h5", tree)
    head = open(good, "rb").read(512)
    assert head.startswith(b"podlet-checkpoint-v2 integrity header ")
    with h5py.File(good, "r") as f:  # plain h5py reads past it (an HDF5 user block)
        assert f.userblock_size >= 512 and f.attrs["step"] == 5
    cases = {"header line": len(b"podlet-checkpoint-v2 integrity header "), "header json": head.index(b'"size"') + 3, "header crc": head.index(b"}\n") + 3}
    for what, off in cases.items():
        p = tmp_path / f"{what}.h5"
        _damage(good, p, off, "flip")
        with pytest.raises(ckpt.CheckpointError, match="its integrity header"):
            ckpt.read_metadata(p)
    p = tmp_path / "magic.h5"
    _damage(good, p, 0, "zero")
    with pytest.raises(ckpt.CheckpointError, match="neither a podlet checkpoint header nor the HDF5 signature"):
        ckpt.read_metadata(p)
    p = tmp_path / "long.h5"
    p.write_bytes(open(good, "rb").read() + b"\0")
    with pytest.raises(ckpt.CheckpointError, match=r"truncated or extended"):
        ckpt.read_metadata(p)
    # a v2 file whose header is gone (written over with an HDF5 file's start) is refused
    p = tmp_path / "headless.h5"
    with h5py.File(good, "r") as f:
        userblock = f.userblock_size
    p.write_bytes(open(good, "rb").read()[userblock:])  # HDF5 opens it: its superblock is at byte 0
    with pytest.raises(ckpt.CheckpointError, match="without its integrity header"):
        ckpt.read_metadata(p)


def test_format_v2_layout(tmp_path):
    tree = _tree()
    p = _save(tmp_path / "c.h5", tree)
    with h5py.File(p, "r") as f:
        assert f.attrs["format"] == "podlet-checkpoint-v2"
        manifest = json.loads(f.attrs["manifest"])
        assert [e[0] for e in manifest] == sorted(e[0] for e in manifest)
        entry = {e[0]: e for e in manifest}
        assert entry["params/dense/bf16"][1:4] == ["bfloat16", [64, 64], None]
        assert entry["step"][1:4] == ["int64", [], "int"] and entry["lr"][3] == "float"
        for path, dtype, shape, pytype, crc in manifest:
            ds = f["state/" + path]
            assert int(ds.attrs["crc32"]) == crc == zlib.crc32(np.ascontiguousarray(ds[()]))
        text = json.dumps([f.attrs[k] if k != "step" else int(f.attrs[k]) for k in
                           ("format", "podlet_version", "step", "config", "model", "metrics", "manifest")],
                          ensure_ascii=True, separators=(",", ":"))
        assert int(f.attrs["checksum"]) == zlib.crc32(text.encode())
    # a non-contiguous leaf: the checksum is of the stored (C-order) bytes
    t = {"w": np.arange(12, dtype=np.float32).reshape(3, 4).T}
    q = ckpt.save_checkpoint(tmp_path / "t.h5", t, step=0)
    np.testing.assert_array_equal(ckpt.read_checkpoint(q)["w"], t["w"])


def _write_v1(path, tree, step=3, metrics=None):
    """A checkpoint in the v1 layout, written with plain h5py (what podlet wrote before v2)."""
    with h5py.File(path, "w") as f:
        f.attrs["format"] = "podlet-checkpoint-v1"
        f.attrs["podlet_version"] = "0.1.0"
        f.attrs["step"] = step
        f.attrs["config"] = "train: {seed: 1}\n"
        f.attrs["model"] = json.dumps({"architecture": "tiny"})
        f.attrs["metrics"] = json.dumps(metrics or {})
        g = f.create_group("state")
        for p, a, pytype in ckpt._snapshot(tree):
            ds = g.create_dataset(p, data=a.view(np.uint16) if a.dtype == ml_dtypes.bfloat16 else a)
            ds.attrs["dtype"] = str(a.dtype)
            if pytype:
                ds.attrs["python_type"] = pytype
    return str(path)


def test_v1_files_still_load_with_a_warning(tmp_path):
    tree = _tree()
    p = _write_v1(tmp_path / "v1.h5", tree)
    with pytest.warns(UserWarning, match=r"v1\.h5 has no checksums"):
        back = ckpt.restore_checkpoint(p, tree)
    assert _bits(back) == _bits(tree)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per file
        assert ckpt.read_metadata(p)["metrics"] == {}
        assert set(ckpt.read_checkpoint(p)) == {path for path, _ in ckpt._leaf_paths(tree)}
        ckpt.verify_checkpoint(p)
    # saving again writes v2
    q = ckpt.save_checkpoint(tmp_path / "v2.h5", back, step=3)
    with h5py.File(q, "r") as f:
        assert f.attrs["format"] == ckpt.FORMAT and "checksum" in f.attrs
    # a v1 file that is damaged beyond what HDF5 tolerates is still a CheckpointError
    b = bytearray(open(p, "rb").read())
    (tmp_path / "v1-short.h5").write_bytes(b[:len(b) // 2])
    with pytest.raises(ckpt.CheckpointError, match="v1-short.h5 is not a readable HDF5 file"):
        ckpt.read_checkpoint(tmp_path / "v1-short.h5")


def test_resume_selection_skips_damaged_newest_checkpoints(tmp_path):
    mgr = ckpt.CheckpointManager(tmp_path, max_to_keep=5, best_metric="macro_f1")
    for s in (1, 2, 3, 4):
        mgr.save(s, {"w": np.full(1000, s, np.float32), "step": s}, metrics={"macro_f1": s / 10})
    mgr.wait_until_finished()
    assert mgr.latest_valid_step() == 4
    # step 4: one value changed; step 3: truncated; step 2 intact
    p4, p3 = mgr.path(4), mgr.path(3)
    off, n = _data_extents(p4)["w"]
    _damage(p4, p4, off + 100, "flip")
    _damage(p3, p3, os.path.getsize(p3) - 10, "truncate")
    skipped = []
    assert mgr.latest_valid_step(on_skip=lambda s, e: skipped.append((s, str(e)))) == 2
    assert [s for s, _ in skipped] == [4, 3]
    assert p4 in skipped[0][1] and "w: crc32 of its data" in skipped[0][1]
    assert p3 in skipped[1][1] and "(truncated or extended)" in skipped[1][1]
    assert mgr.latest_step() == 4  # the files are left where they are
    # a fresh manager reads every file's metadata: the damaged one does not stop it
    _damage(mgr.path(2), mgr.path(1), 0, "zero")  # step 1: its superblock zeroed
    with open(mgr.path(2), "rb+") as f:  # step 2: its metrics attribute damaged in place
        b = f.read()
        at = b.index(b'{"macro_f1": 0.2')
        f.seek(at + 13)
        f.write(b"9")
    fresh = ckpt.CheckpointManager(tmp_path, max_to_keep=5, best_metric="macro_f1")
    assert fresh.all_steps() == [1, 2, 3, 4] and fresh._metrics[1] == {} and fresh._metrics[2] == {}
    # step 4 scores best, but its data fails verification; 1-3 have no readable metrics
    with pytest.warns(UserWarning, match=r"step 4 is not used as the best checkpoint: checkpoint .*"
                                         r"checkpoint_00000004\.h5 is damaged: 1 leaf/leaves fail"):
        assert fresh.best_step() is None
    with pytest.raises(ckpt.CheckpointError, match="checkpoint_00000002.h5 is damaged"):
        fresh.metadata(2)
    skipped = []
    assert fresh.latest_valid_step(on_skip=lambda s, e: skipped.append(s)) is None
    assert skipped == [4, 3, 2, 1]


def test_resume_in_the_training_loop_uses_the_newest_valid_checkpoint(tmp_path, monkeypatch):
    """loop.train's --resume asks the manager for the newest checkpoint that verifies and
    says why it skipped each newer one (the run itself is stubbed after the selection)."""
    from podlet.training import loop

    d = tmp_path / "checkpoints"
    mgr = ckpt.CheckpointManager(d)
    mgr.save(3, {"w": np.ones(10, np.float32)}, wait=True)
    mgr.save(6, {"w": np.ones(10, np.float32)}, wait=True)
    _damage(mgr.path(6), mgr.path(6), os.path.getsize(mgr.path(6)) // 2, "truncate")
    said = []
    chosen = []

    class Stop(Exception):
        pass

    def fake_restore(path, state):
        chosen.append(path)
        raise Stop

    monkeypatch.setattr(ckpt, "restore_checkpoint", fake_restore)
    from train_helpers import tiny_config, tiny_data
    cfg = tiny_config()
    (tmp_path / "config.yaml").write_text(loop.C.dump_config(cfg))
    with pytest.raises(Stop):
        loop.train(cfg, str(tmp_path), resume=True, data=tiny_data(cfg), progress=False, print_fn=said.append)
    assert chosen == [mgr.path(3)]
    assert len(said) == 1 and said[0].startswith("warning: not resuming from step 6: checkpoint ")
    assert mgr.path(6) in said[0]


def _flip_leaf(path, leaf="w"):
    off, n = _data_extents(path)[leaf]
    _damage(path, path, off + n // 2, "flip")


def test_best_and_latest_selection_skip_damaged_files(tmp_path):
    mgr = ckpt.CheckpointManager(tmp_path, max_to_keep=2, best_metric="macro_f1")
    scores = {1: 0.2, 2: 0.6, 3: 0.5, 4: 0.3}
    for s, f1 in scores.items():
        mgr.save(s, {"w": np.full(1000, s, np.float32)}, metrics={"macro_f1": f1})
    mgr.wait_until_finished()
    assert mgr.all_steps() == [2, 3, 4] and mgr.best_step() == 2
    _flip_leaf(mgr.path(2))  # the best: one value changed
    _damage(mgr.path(4), mgr.path(4), os.path.getsize(mgr.path(4)) - 10, "truncate")  # the newest
    # a warning naming the file and the reason, once per damaged file ...
    with pytest.warns(UserWarning, match=r"step 2 is not used as the best checkpoint: checkpoint .*"
                                         r"checkpoint_00000002\.h5 is damaged: 1 leaf/leaves fail verification"):
        assert mgr.best_step() == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert mgr.best_step() == 3
    # ... or, given on_skip, every skip to it
    skipped = []
    assert mgr.best_step(on_skip=lambda s, e: skipped.append((s, str(e)))) == 3
    assert [s for s, _ in skipped] == [2]
    assert skipped[0][1].startswith(f"checkpoint {mgr.path(2)} is damaged: 1 leaf/leaves fail verification: w")
    with pytest.warns(UserWarning, match=r"step 4 is not used as the newest checkpoint: .*\(truncated or extended\)"):
        assert mgr.resolve("latest") == 3
    assert mgr.resolve("best") == 3
    assert mgr.latest_step() == 4  # documented: the newest file, unverified
    assert mgr.restore({"w": np.zeros(1000, np.float32)}, "best")["w"][0] == 3
    with pytest.raises(ckpt.CheckpointError, match="checkpoint_00000002.h5 is damaged"):  # asked for by number
        mgr.restore({"w": np.zeros(1000, np.float32)}, 2)
    # a fresh manager (a resumed run) verifies only the candidates it considers
    fresh = ckpt.CheckpointManager(tmp_path, max_to_keep=2, best_metric="macro_f1")
    verified = []
    real = ckpt.verify_checkpoint

    def counting(path):
        verified.append(os.path.basename(path))
        return real(path)

    try:
        ckpt.verify_checkpoint = counting
        with pytest.warns(UserWarning):
            assert fresh.best_step() == 3
        assert fresh.best_step() == 3 and fresh.latest_valid_step(on_skip=lambda s, e: None) == 3
    finally:
        ckpt.verify_checkpoint = real
    # 2 once, 3 once (cached), 4 never read: its header check in __init__ already failed
    assert verified == ["checkpoint_00000002.h5", "checkpoint_00000003.h5"]
    # repairing a file (a new write under the same name) is noticed: the cache follows the file
    fresh.save(2, {"w": np.full(1000, 2, np.float32)}, metrics={"macro_f1": 0.6}, wait=True)
    assert fresh.best_step() == 2


def test_pruning_never_deletes_the_newest_or_best_valid_checkpoint(tmp_path):
    mgr = ckpt.CheckpointManager(tmp_path, max_to_keep=2, best_metric="macro_f1")
    for s, f1 in {1: 0.2, 2: 0.6, 3: 0.5, 4: 0.3}.items():
        mgr.save(s, {"w": np.full(100, s, np.float32)}, metrics={"macro_f1": f1})
    mgr.wait_until_finished()
    _flip_leaf(mgr.path(2))  # the best
    _flip_leaf(mgr.path(4))  # the newest
    with pytest.warns(UserWarning, match="checkpoint_00000002.h5 is damaged"):
        mgr.save(5, {"w": np.full(100, 5, np.float32)}, metrics={"macro_f1": 0.1}, wait=True)
    # the last 2 (4, 5) and the best by its metrics (2, damaged) as before, and now also 3,
    # the best that verifies (the old rule deleted it: only damaged 2 would be left as "best")
    assert mgr.all_steps() == [2, 3, 4, 5] and mgr.best_step() == 3
    mgr.save(6, {"w": np.full(100, 6, np.float32)}, metrics={"macro_f1": 0.05}, wait=True)
    assert mgr.all_steps() == [2, 3, 5, 6]  # damaged 4 left the window like any file

    # A run resumed from an older checkpoint, past damaged newer files: its first new
    # checkpoint is the newest that verifies and must survive max_to_keep=1.
    d = tmp_path / "resumed"
    first = ckpt.CheckpointManager(d, max_to_keep=3)
    for s in (1, 2, 3):
        first.save(s, {"w": np.full(100, s, np.float32)})
    first.wait_until_finished()
    _flip_leaf(first.path(2))
    _damage(first.path(3), first.path(3), 100, "truncate")
    resumed = ckpt.CheckpointManager(d, max_to_keep=1)
    skipped = []
    assert resumed.latest_valid_step(on_skip=lambda s, e: skipped.append((s, str(e)))) == 1
    assert [s for s, _ in skipped] == [3, 2] and f"checkpoint {first.path(3)} is damaged" in skipped[0][1]
    resumed.save(2, {"w": np.full(100, 20, np.float32)}, wait=True)  # replaces damaged 2
    # window {3} (damaged) + the newest that verifies (2); the old rule left only damaged 3
    assert resumed.all_steps() == [2, 3] and resumed.latest_valid_step() == 2
    assert resumed.restore({"w": np.zeros(100, np.float32)})["w"][0] == 20


def test_training_resume_pruning_and_selection_with_damaged_checkpoints(tmp_path, monkeypatch):
    """A small run whose best and newest checkpoints are damaged between sessions: resume
    starts from the newest that verifies, pruning keeps the resumed progress, and the
    final selection takes the best that verifies, saying which it skipped and why."""
    from podlet.training import loop
    from train_helpers import tiny_config, tiny_data

    # validation macro-F1 by step, so which checkpoint is best does not depend on numerics
    scores = {3: 0.9, 6: 0.5, 9: 0.6, 12: 0.7}
    real_eval = loop._Evaluator.__call__

    def scripted(self, rstate, role, use_ema=True):
        m = real_eval(self, rstate, role, use_ema)
        if role == "validation":
            m["macro_f1"] = scores[int(np.asarray(rstate.step).reshape(-1)[0])]
        return m

    monkeypatch.setattr(loop._Evaluator, "__call__", scripted)
    cfg = tiny_config("train.epochs=4", "train.keep_checkpoints=1")
    run = str(tmp_path / "run")
    ckdir = os.path.join(run, "checkpoints")
    path = lambda s: ckpt.checkpoint_path(ckdir, s)  # noqa: E731

    def train(**kw):
        said = []
        try:
            return loop.train(cfg, run, data=tiny_data(cfg), progress=False, print_fn=said.append, **kw), said
        except loop.TrainingInterrupted:
            return None, said

    _, _ = train(stop_after_step=9)
    assert ckpt.CheckpointManager(ckdir).all_steps() == [3, 9]  # the last one and the best (3)
    _flip_leaf(path(9), "params/Dense_0/kernel")  # the newest
    _, said = train(resume=True, stop_after_step=6)
    assert said[0].startswith(f"warning: not resuming from step 9: checkpoint {path(9)} is damaged")
    assert said[1] == f"resuming {run} from step 3"
    # max_to_keep=1 counted only damaged 9 as "the last one": the old rule deleted 6 here
    mgr = ckpt.CheckpointManager(ckdir)
    assert mgr.all_steps() == [3, 6, 9] and mgr.latest_valid_step(on_skip=lambda s, e: None) == 6
    _flip_leaf(path(3), "params/Dense_0/kernel")  # the best
    with pytest.warns(UserWarning, match=r"step 3 is not used as the best checkpoint: .*checkpoint_00000003\.h5"):
        summary, said = train(resume=True)  # (the warning: pruning after the save of step 9)
    assert said[0].startswith(f"warning: not resuming from step 9: checkpoint {path(9)}")
    assert said[1] == f"resuming {run} from step 6"
    skip = [m for m in said if "not selecting" in m]
    assert skip == [f"warning: not selecting step 3 as the best checkpoint: checkpoint {path(3)} is damaged: "
                    f"1 leaf/leaves fail verification: params/Dense_0/kernel"]
    assert summary["selected_step"] == 12 and summary["validation"]["macro_f1"] == 0.7
    assert json.load(open(os.path.join(run, "summary.json")))["selected_step"] == 12
    # damaged 3 is still the best by its metrics: kept, never deleted for being damaged
    assert ckpt.CheckpointManager(ckdir).all_steps() == [3, 12]
