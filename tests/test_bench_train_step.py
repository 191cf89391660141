"""bench/train_step.py's helpers: the ResNet-50 twins (podlet, Flax, plain torch) have one
parameter count, the architecture's; the f32-bf16prec probe tells rounded products from
exact ones; the grid of cells; the MFU denominators (AMX tiles on amx hosts) and the
table that names them. Fast: parameter counts at 32x32 (Flax abstractly), no step is run.
"""
import importlib.util
import pathlib
import sys

import jax

import podlet

_PATH = pathlib.Path(__file__).resolve().parent.parent / "bench" / "train_step.py"
_spec = importlib.util.spec_from_file_location("bench_train_step", _PATH)
ts = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("bench_train_step", ts)
_spec.loader.exec_module(ts)


def _resnet50_params(in_channels=1, classes=5):
    """ResNet-50's parameter count from its architecture (conv weights, BatchNorm scale and
    bias, the head's weight and bias), written out independently of any of the twins."""
    n = 7 * 7 * in_channels * 64 + 2 * 64  # stem conv + BatchNorm
    cin = 64
    for i, blocks in enumerate([3, 4, 6, 3]):
        w = 64 * 2 ** i
        for j in range(blocks):
            n += cin * w + 2 * w + 9 * w * w + 2 * w + w * 4 * w + 2 * 4 * w
            if j == 0:  # projection of the residual: the width (and, after stage 0, the size) changes
                n += cin * 4 * w + 2 * 4 * w
            cin = 4 * w
    return n + cin * classes + classes


def test_resnet50_parameter_counts_agree_across_frameworks():
    assert _resnet50_params(3, 1000) == 25_557_032  # torchvision's resnet50
    want = _resnet50_params()
    assert want == 23_512_005
    counts = ts.param_counts(["resnet50"], 32)
    assert counts == {"resnet50": {"podlet": want, "jax": want, "torch": want}}


def test_resnet50_twins_are_bottleneck_networks():
    # podlet's model is models.ResNet50; the torch twin has the bottleneck's three convolutions
    # per block (16 blocks) plus the stem and four projections, and the 4x wider head input.
    from podlet import models
    assert ts.podlet_resnet("resnet50", podlet.numpy.float32) == models.ResNet50(num_classes=ts.NUM_CLASSES)
    import torch
    tm = ts.torch_resnet("resnet50")
    convs = [m for m in tm.modules() if isinstance(m, torch.nn.Conv2d)]
    assert len(convs) == 1 + 3 * 16 + 4
    assert tm.fc.in_features == 2048


def test_products_rounded_probe():
    with podlet.default_matmul_precision("bfloat16"):
        assert ts.products_rounded(podlet.jit, podlet.lax, podlet.numpy) == {"dot": True, "conv": True}
    assert ts.products_rounded(podlet.jit, podlet.lax, podlet.numpy) == {"dot": False, "conv": False}
    # jax's CPU backend ignores the flag (the f32-bf16prec JAX row is exact f32, and says so)
    with jax.default_matmul_precision("bfloat16"):
        assert ts.products_rounded(jax.jit, jax.lax, jax.numpy) == {"dot": False, "conv": False}


def test_grid():
    cells = ts.grid(["resnet50", "vit_tiny"], ["f32", "bf16", "f32-bf16prec"], ["podlet", "podlet-direct", "torch"])
    assert cells == [("resnet50", "f32", "podlet"), ("resnet50", "f32", "torch"),
                     ("resnet50", "bf16", "podlet"), ("resnet50", "bf16", "podlet-direct"),
                     ("resnet50", "bf16", "torch"), ("resnet50", "f32-bf16prec", "podlet"),
                     ("vit_tiny", "f32", "podlet"), ("vit_tiny", "f32", "torch"), ("vit_tiny", "bf16", "podlet"),
                     ("vit_tiny", "bf16", "torch"), ("vit_tiny", "f32-bf16prec", "podlet")]
    # podlet-excess (allow_excess_precision) only in bf16, for every model
    assert ts.grid(["vit_tiny", "resnet18"], ["f32", "bf16"], ["podlet", "podlet-excess"]) == [
        ("vit_tiny", "f32", "podlet"), ("vit_tiny", "bf16", "podlet"), ("vit_tiny", "bf16", "podlet-excess"),
        ("resnet18", "f32", "podlet"), ("resnet18", "bf16", "podlet"), ("resnet18", "bf16", "podlet-excess")]
    # without f32 in --dtypes, PyTorch's f32 row is still run, for f32-bf16prec
    assert ts.grid(["resnet18"], ["f32-bf16prec"], ["jax", "torch"]) == [
        ("resnet18", "f32-bf16prec", "jax"), ("resnet18", "f32", "torch")]


def _peak(isa, bf16=None, amx=None):
    return {"isa": isa, "f32_fma_gflops_all": 100.0, "bf16_dot": "available" if bf16 else "not available",
            "bf16_dot_gflops_all": bf16, "amx_gflops_all": amx}


def test_mfu_peaks():
    amx = ts.mfu_peaks(_peak("amx", 50.0, 2000.0))
    assert amx == {"f32": (100.0, "f32 FMA"), "bf16": (2000.0, "AMX tiles"), "f32-bf16prec": (2000.0, "AMX tiles")}
    assert ts.mfu_peaks(_peak("avx512bf16", 200.0))["f32-bf16prec"] == (200.0, "vdpbf16ps")
    assert ts.mfu_peaks(_peak("avx2"))["bf16"] == (100.0, "f32 FMA (no bf16 dot)")
    # results written before the AMX key existed
    old = _peak("avx512bf16", 200.0)
    del old["amx_gflops_all"]
    assert ts.mfu_peaks(old)["bf16"] == (200.0, "vdpbf16ps")


def _run(fw, dtype, ips, mfu=None, **kw):
    r = {"framework": fw, "model": "resnet50", "dtype": dtype, "images_per_s": ips, "compile_s": 1.0,
         "peak_rss_bytes": 2 ** 30, "step_s": [32 / ips], **kw}
    if mfu is not None:
        r.update(mfu=mfu, mfu_of=ts.mfu_peaks(_peak("amx", 50.0, 2000.0))[dtype][1])
    return r


def test_table_names_peaks_and_notes():
    runs = [_run("podlet", "f32", 10.0, 0.5), _run("torch", "f32", 8.0, 0.4),
            _run("podlet", "bf16", 30.0, 0.2), _run("jax", "bf16", 3.0, 0.02), _run("torch", "bf16", 20.0, 0.13),
            _run("podlet", "f32-bf16prec", 24.0, 0.16, bf16_products={"dot": True, "conv": True}),
            _run("jax", "f32-bf16prec", 4.0, 0.027, bf16_products={"dot": False, "conv": False}),
            {"framework": "podlet-direct", "model": "resnet50", "dtype": "bf16", "error": "timeout"},
            _run("podlet-excess", "bf16", 36.0, 0.24)]
    out = ts.table({"peak": _peak("amx", 50.0, 2000.0), "runs": runs}).splitlines()
    assert out[0].startswith("| model | framework | dtype | images/s | vs podlet | MFU | MFU of |")
    rows = {tuple(c.strip() for c in line.split("|")[2:4]): line for line in out[2:] if line.startswith("| ")}
    assert "| 50.0% | f32 FMA |" in rows[("podlet", "f32")]
    assert "| 20.0% | AMX tiles |" in rows[("podlet", "bf16")]
    assert "| AMX tiles |" in rows[("podlet", "f32-bf16prec")]
    assert "f32 operands rounded to bf16" in rows[("podlet", "f32-bf16prec")]
    assert "jax's CPU backend ignores the flag: f32 exact" in rows[("jax", "f32-bf16prec")]
    assert "counterpart of f32-bf16prec" in rows[("torch", "f32")]
    assert "| 0.17x |" in rows[("jax", "f32-bf16prec")]  # against podlet's f32-bf16prec row
    assert "| error |" in rows[("podlet-direct", "bf16")]
    text = "\n".join(out)
    assert "resnet50 podlet bf16 30.00 img/s = 1.50x PyTorch bf16, 10.00x JAX bf16." in text
    assert "resnet50 podlet f32-bf16prec 24.00 img/s = 3.00x PyTorch f32, 6.00x JAX f32-bf16prec." in text
    assert "resnet50 podlet-excess bf16 36.00 img/s = 1.80x PyTorch bf16, 12.00x JAX bf16." in text
    assert "| 1.20x |" in rows[("podlet-excess", "bf16")]  # against podlet's bf16 row
    # a probe that found the flag not applied in podlet is flagged, not hidden
    bad = _run("podlet", "f32-bf16prec", 1.0, bf16_products={"dot": True, "conv": False})
    assert ts.note(bad, [bad]).startswith("flag NOT applied in part")
