"""The podlet command: train / eval / sweep in process (tiny in-memory data), config
errors and Ctrl-C in a subprocess (exit statuses 2 and 130)."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from podlet import cli
from podlet.training import checkpoints as ckpt
from podlet.training import loop
from train_helpers import SMOKE, TINY, tiny_data


@pytest.fixture
def tiny(monkeypatch):
    monkeypatch.setattr(loop, "make_data", tiny_data)
    return [a for s in TINY for a in ("--set", s)] + ["--set", "train.epochs=2"]


def test_train_eval_sweep(tiny, tmp_path, capsys):
    d = str(tmp_path / "run")
    assert cli.main(["train", SMOKE, *tiny, "--run-dir", d, "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "macro_f1" in out and "test per class" in out and f"run directory: {os.path.abspath(d)}" in out
    summary = json.load(open(os.path.join(d, "summary.json")))

    assert cli.main(["eval", d, "--split", "test", "--checkpoint", "best", "--json"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["macro_f1"] == summary["test"]["macro_f1"] and m["step"] == summary["selected_step"]
    assert cli.main(["eval", d, "--split", "validation", "--checkpoint", "latest"]) == 0
    assert "checkpoint step 6, validation split (40 examples)" in capsys.readouterr().out

    sd = str(tmp_path / "sweep")
    assert cli.main(["sweep", SMOKE, "--seeds", "3,4", *tiny, "--run-dir", sd, "--no-progress"]) == 0
    out = capsys.readouterr().out
    runs = [json.load(open(os.path.join(sd, f"seed_{s}", "summary.json"))) for s in (3, 4)]
    stats = json.load(open(os.path.join(sd, "sweep.json")))["test"]
    f1 = [r["test"]["macro_f1"] for r in runs]
    assert stats["macro_f1"]["mean"] == pytest.approx(np.mean(f1))
    assert stats["macro_f1"]["std"] == pytest.approx(np.std(f1, ddof=1))
    assert "per_class.BENIGN_MASS.f1" in stats
    assert f"macro_f1{' ' * 32} {np.mean(f1):.4f} ± {np.std(f1, ddof=1):.4f}" in out


def _cli(*args, timeout=120):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run([sys.executable, "-m", "podlet", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_errors_exit_2_with_one_clear_line(tmp_path):
    r = _cli("train", SMOKE, "--set", "train.learning_rate=-5e-4")
    assert r.returncode == 2
    assert r.stderr.strip() == ("podlet: error: --set train.learning_rate=-5e-4: train.learning_rate: "
                                "expected a value > 0.0, got -0.0005")
    r = _cli("eval", str(tmp_path))
    assert r.returncode == 2 and "has no config.yaml (is it a run directory?)" in r.stderr
    r = _cli("sweep", SMOKE, "--seeds", "1,x")
    assert r.returncode == 2 and "--seeds '1,x': expected comma-separated integers" in r.stderr
    r = _cli("bench")
    assert r.returncode == 0 and "mlp_step" in r.stdout
    r = _cli("bench", "nope")
    assert r.returncode == 2 and "no benchmark 'nope'" in r.stderr


_CHILD = textwrap.dedent("""
    import sys
    sys.path[:0] = {paths!r}
    from podlet import cli
    from podlet.training import loop
    from train_helpers import tiny_data
    loop.make_data = tiny_data
    sys.exit(cli.main(sys.argv[1:]))
""")


def test_ctrl_c_saves_a_checkpoint_and_exits_130(tmp_path):
    d = str(tmp_path / "run")
    here = os.path.dirname(__file__)
    src = _CHILD.format(paths=[here, os.path.join(here, "..", "python")])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    args = [a for s in TINY for a in ("--set", s)] + ["--set", "train.epochs=50"]
    proc = subprocess.Popen([sys.executable, "-c", src, "train", SMOKE, *args, "--run-dir", d, "--no-progress"],
                            env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while True:
        try:
            if len(loop.read_metrics(d, "train")) >= 4:
                break
        except (FileNotFoundError, json.JSONDecodeError):
            pass
        assert proc.poll() is None and time.time() < deadline
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    mgr = ckpt.CheckpointManager(os.path.join(d, "checkpoints"))
    last = mgr.latest_step()
    assert last == max(r["step"] for r in loop.read_metrics(d, "train"))  # saved at the step it stopped
    assert ckpt.read_checkpoint(mgr.path(last))
    assert f"interrupted at step {last}" in err and f"--resume --run-dir {d}" in err


def test_data_export_hdf5_reads_back_as_the_same_batches(tmp_path, capsys):
    from podlet.training import config as C
    from podlet.training.input import make_data
    out = str(tmp_path / "ddsm")
    assert cli.main(["data", "export", "--format", "hdf5", "--out", out, "--image-size", "16", "--scale", "0.004",
                     "--seed", "3"]) == 0
    assert sorted(os.listdir(out)) == ["test.h5", "train.h5", "validation.h5"]
    base = ["data.image_size=[16,16,1]", "data.scale=0.004", "data.seed=3", "train.batch_size=8",
            "train.num_devices=8"]
    synth = make_data(C.load_config(SMOKE, base, num_devices=8))
    h5 = make_data(C.load_config(SMOKE, base + ["data.dataset_name=hdf5", f"data.data_dir={out}"], num_devices=8))
    assert h5.class_names == synth.class_names
    for role in ("train", "validation", "test"):
        assert h5.num_examples(role) == synth.num_examples(role) > 0
    for a, b in zip(synth.eval_batches("test", 8), h5.eval_batches("test", 8)):
        np.testing.assert_array_equal(a["image"], b["image"])
        np.testing.assert_array_equal(a["label"], b["label"])
        np.testing.assert_array_equal(a["mask"], b["mask"])
    ta, tb = synth.train_batches(8, start_step=5), h5.train_batches(8, start_step=5)
    np.testing.assert_array_equal(next(ta)["image"], next(tb)["image"])
    # the resumed stream (start_step=5) is the uninterrupted stream's 6th batch
    it = synth.train_batches(8)
    for _ in range(5):
        next(it)
    np.testing.assert_array_equal(next(it)["image"], next(synth.train_batches(8, start_step=5))["image"])


def test_bad_config_stops_before_anything_is_built(tmp_path, capsys, monkeypatch):
    """A config naming a missing data directory (or otherwise invalid) is one error line and
    exit status 2, before the data is opened or a model built: no run directory appears."""
    from podlet.training import config as C
    from podlet.training import steps
    built = []
    monkeypatch.setattr(loop, "make_data", lambda cfg: built.append("data"))
    monkeypatch.setattr(steps, "build_model", lambda cfg: built.append("model"))
    d = str(tmp_path / "run")
    missing = str(tmp_path / "no-such-dir")
    for args, says in [
        (["--set", "data.dataset_name=hdf5", "--set", f"data.data_dir={missing}"],
         f"data.data_dir: {missing} does not exist (dataset 'hdf5' is read from it)"),
        (["--set", "model.architecture=resnet99"], "model.architecture: expected one of ['resnet18', 'resnet34', "
                                                   "'resnet50', 'vit_tiny', 'vit_small', 'vit_b16', 'vit_b32', 'swin_tiny', "
                                                   "'swin_small', 'small_cnn'], got 'resnet99'"),
        (["--set", "data.image_size=[72,72,1]", "--set", "model=vit_tiny"],
         "data.image_size: 72x72 is not a multiple of the ViT patch size 16"),
    ]:
        assert cli.main(["train", SMOKE, *args, "--run-dir", d, "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("podlet: error: ") and says in err, err
    assert built == [] and not os.path.exists(d)
    # the loop validates a config built in Python before touching the run directory too
    from train_helpers import tiny_config
    cfg = tiny_config()
    cfg.train.batch_size = 12
    with pytest.raises(C.ConfigError, match="train.batch_size: the global batch 12 is not divisible by 8 devices"):
        loop.train(cfg, d, progress=False, print_fn=None)
    assert built == [] and not os.path.exists(d)
