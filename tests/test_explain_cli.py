"""``podlet explain`` and ``podlet export --format onnx`` on a run directory: a tiny run
on the synthetic patches, then the CLI's overlays, summary and ONNX file checked."""
import json
import os

import numpy as np
import onnxruntime as ort
import pytest

import podlet.numpy as jnp
from podlet import cli, explain

from train_helpers import SMOKE, TINY


def test_explain_and_export_a_run(tmp_path, capsys):
    d = str(tmp_path / "run")
    sets = [a for s in TINY + ["train.epochs=1"] for a in ("--set", s)]
    assert cli.main(["train", SMOKE, *sets, "--run-dir", d, "--no-progress"]) == 0

    assert cli.main(["explain", d, "--split", "test", "-n", "6"]) == 0
    out = os.path.join(d, "explain", "test")
    summary = json.load(open(os.path.join(out, "summary.json")))
    assert summary["n"] == 6 and summary["layer"] and len(summary["files"]) == 6
    assert summary["method"] == "grad_cam"                  # the default for a ResNet
    for f in summary["files"]:
        assert os.path.getsize(os.path.join(out, f)) > 1000
    # true class directories, as the synthetic test split labels its first examples
    cfg, model, variables = explain.load_run(d)
    from podlet.data import synthetic_ddsm
    src = synthetic_ddsm("test", image_size=16, scale=cfg.data.scale, seed=cfg.data.seed)
    names = src.class_names()
    assert [f.split("/")[0] for f in summary["files"]] == [names[src.label(i)] for i in range(6)]
    pg = summary["pointing_game"]
    assert pg["lesion_examples"] == sum(src.label(i) != 0 for i in range(6))
    assert 0 <= pg["accuracy"] <= 1 and 0 < pg["random_baseline"] < 1

    # a ResNet has no attention to roll out: one line naming what is missing, status 2
    assert cli.main(["explain", d, "-n", "2", "--method", "rollout"]) == 2
    assert "calls no nn.MultiHeadDotProductAttention" in capsys.readouterr().err

    assert cli.main(["export", d, "--format", "onnx"]) == 0
    x = np.random.default_rng(0).standard_normal((1, 16, 16, 1)).astype(np.float32)
    got = ort.InferenceSession(os.path.join(d, "model.onnx"), providers=["CPUExecutionProvider"]).run(
        None, {"input": x})[0]
    # the run trains in bfloat16; the export computes in float32
    want = np.asarray(model.clone(dtype=jnp.float32).apply(variables, jnp.asarray(x), train=False))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_explain_method_flags(monkeypatch):
    """--method and --layer reach explain_run (gradcam is grad_cam; no flag: by architecture)."""
    calls = []
    monkeypatch.setattr(explain, "explain_run", lambda run_dir, **kw: calls.append((run_dir, kw)) or "out")
    assert cli.main(["explain", "runs/vit", "--method", "gradcam", "--layer", "Transformer/encoderblock_1"]) == 0
    assert cli.main(["explain", "runs/vit", "--method", "rollout", "-n", "3"]) == 0
    assert cli.main(["explain", "runs/vit"]) == 0
    assert [(kw["method"], kw["layer"], kw["n"]) for _, kw in calls] == [
        ("grad_cam", "Transformer/encoderblock_1", 16), ("rollout", None, 3), (None, None, 16)]
    with pytest.raises(SystemExit):
        cli.main(["explain", "runs/vit", "--method", "lime"])
