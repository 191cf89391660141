"""podlet's weight import against the real torchvision and timm, not rebuilds of them.

    bench/setup_torchvision.sh && .venv/bin/python scripts/check_torchvision.py   # or: make torchvision-check

torchvision 0.29.1 needs torch 2.14.1, which cannot share podlet's .venv (torch 2.13.0 is
the test oracle there), so the default suite checks the importers against plain-torch
rebuilds of torchvision's modules (tests/test_import_weights.py, tests/test_swin.py). This
script closes the loop in two processes:

1. In .venv-torchvision (bench/setup_torchvision.sh), torchvision's own ``resnet18``,
   ``resnet34``, ``resnet50``, ``swin_t``, ``swin_s``, ``vit_b_16`` and ``vit_b_32``
   (``weights=None``: no model hub) and timm's ``vit_tiny_patch16_224``,
   ``vit_small_patch16_224`` and ``swin_tiny_patch4_window7_224`` (``pretrained=False``),
   with random unit-gain weights and every norm affine, bias, BatchNorm statistic, token
   and relative-position table randomised so a wrong mapping shows, are saved with
   ``torch.save(model.state_dict())`` beside their logits for a random RGB batch and for a
   gray batch repeated to RGB.
2. In .venv, podlet reads each file with its own .pth reader and
   ``models.load_torchvision_*`` / ``load_timm_*``: RGB logits (``in_channels=3``) and
   gray logits (``in_channels=1``: the RGB stem / patch filters summed) must be within
   --atol (times the logits' standard deviation where that is above 1) of torch's, while
   the same weights with one mid-network kernel mis-mapped (a negative control) must miss
   them by more than 1000 times that; and each default-suite rebuild, built at full size,
   must have exactly the library's state_dict keys and shapes (so the suite's tests check
   the real layout).

Prints one line per check with the measured difference; exits 1 if any fails.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TV_PYTHON = os.path.join(ROOT, ".venv-torchvision", "bin", "python")
TV_ARCHS = ("resnet18", "resnet34", "resnet50", "swin_t", "swin_s", "vit_b_16", "vit_b_32")
TIMM_ARCHS = ("vit_tiny_patch16_224", "vit_small_patch16_224", "swin_tiny_patch4_window7_224")
ARCHS = TV_ARCHS + TIMM_ARCHS


def produce(out_dir, archs, batch, size):
    """Runs under .venv-torchvision: torchvision's models, randomised, saved with logits."""
    import torch
    import torchvision
    from torch import nn as tnn
    from torchvision.models import swin_transformer

    torch.set_num_threads(2)
    versions = f"torchvision {torchvision.__version__}, torch {torch.__version__}"
    swin_attn = (swin_transformer.ShiftedWindowAttention,)
    if any(a in TIMM_ARCHS for a in archs):
        import timm
        import timm.models.swin_transformer as timm_swin
        versions += f", timm {timm.__version__}"
        swin_attn += (timm_swin.WindowAttention,)
    for i, arch in enumerate(archs):
        torch.manual_seed(i)
        if arch in TIMM_ARCHS:
            net = timm.create_model(arch, pretrained=False)
        else:
            net = getattr(torchvision.models, arch)(weights=None)
        with torch.no_grad():
            for m in net.modules():
                if isinstance(m, (tnn.LayerNorm, tnn.BatchNorm2d)):
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.normal_(0, 0.2)
                if isinstance(m, tnn.BatchNorm2d):
                    m.running_mean.normal_(0, 0.2)
                    m.running_var.uniform_(0.5, 2.0)
                if isinstance(m, (tnn.Linear, tnn.Conv2d)) and m.bias is not None:
                    m.bias.normal_(0, 0.1)
                # Unit-gain weights: with the libraries' small inits (ViT's head even starts
                # at 0) a deep random net's logits hardly depend on the image, and neither
                # would a mapping error in its early layers show.
                if isinstance(m, (tnn.Linear, tnn.Conv2d)):
                    m.weight.normal_(0, m.weight[0].numel() ** -0.5)
                if isinstance(m, tnn.MultiheadAttention):
                    m.in_proj_weight.normal_(0, m.in_proj_weight.shape[1] ** -0.5)
                    m.in_proj_bias.normal_(0, 0.2)
                if isinstance(m, swin_attn):
                    m.relative_position_bias_table.normal_(0, 1.0)
            for token in ("class_token", "cls_token", "pos_embed"):
                if isinstance(getattr(net, token, None), tnn.Parameter):
                    getattr(net, token).normal_(0, 0.5)
        net.eval()
        rng = np.random.default_rng(100 + i)
        x = rng.standard_normal((batch, 3, size, size)).astype(np.float32)
        gray = rng.standard_normal((batch, 1, size, size)).astype(np.float32)
        with torch.no_grad():
            logits = net(torch.from_numpy(x)).numpy()
            logits_gray = net(torch.from_numpy(np.repeat(gray, 3, axis=1))).numpy()
        torch.save(net.state_dict(), os.path.join(out_dir, f"{arch}.pth"))
        np.savez(os.path.join(out_dir, f"{arch}.npz"), x=x, gray=gray, logits=logits, logits_gray=logits_gray)
        print(f"[{versions}] {arch}: saved", flush=True)


def arch_spec(arch):
    """(podlet model class with its fixed keywords, loader, the default suite's plain-torch
    rebuild at full size) of `arch`."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import test_import_timm as tti
    import test_import_weights as tiw
    import test_swin as tsw
    from podlet import models
    vit_b = lambda patch: tiw.TorchViT(224, patch, 12, 12, 768, 3072)
    timm_vit = lambda width, heads: tti.TimmViT(224, 16, width, 12, heads, 4 * width)
    resnet = lambda name: tiw.TorchResNet(*tiw.TORCH_ARCHS[name], 1000)
    tv_resnet = dict(torchvision_padding=True)
    exact_gelu = dict(approximate_gelu=False)  # timm's ViTs use the exact GELU
    return {
        "resnet18": (models.ResNet18, tv_resnet, models.load_torchvision_resnet, lambda: resnet("resnet18")),
        "resnet34": (models.ResNet34, tv_resnet, models.load_torchvision_resnet, lambda: resnet("resnet34")),
        "resnet50": (models.ResNet50, tv_resnet, models.load_torchvision_resnet, lambda: resnet("resnet50")),
        "swin_t": (models.SwinT, {}, models.load_torchvision_swin,
                   lambda: tsw.TorchSwin(96, (2, 2, 6, 2), (3, 6, 12, 24), 7)),
        "swin_s": (models.SwinS, {}, models.load_torchvision_swin,
                   lambda: tsw.TorchSwin(96, (2, 2, 18, 2), (3, 6, 12, 24), 7)),
        "vit_b_16": (models.ViTB16, {}, models.load_torchvision_vit, lambda: vit_b(16)),
        "vit_b_32": (models.ViTB32, {}, models.load_torchvision_vit, lambda: vit_b(32)),
        "vit_tiny_patch16_224": (models.ViTTiny, exact_gelu, models.load_timm_vit, lambda: timm_vit(192, 3)),
        "vit_small_patch16_224": (models.ViTSmall, exact_gelu, models.load_timm_vit, lambda: timm_vit(384, 6)),
        "swin_tiny_patch4_window7_224": (models.SwinT, {}, models.load_timm_swin,
                                         lambda: tti.TimmSwin(224, 96, (2, 2, 6, 2), (3, 6, 12, 24), 7)),
    }[arch]


def check(in_dir, archs, atol):
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import podlet
    import podlet.numpy as jnp
    from podlet.models import _torch_pth

    failures = 0
    for arch in archs:
        cls, kwargs, loader, rebuild = arch_spec(arch)
        path = os.path.join(in_dir, f"{arch}.pth")
        ref = np.load(os.path.join(in_dir, f"{arch}.npz"))
        real = {k: tuple(np.asarray(v).shape) for k, v in _torch_pth.load(path).items()}
        rebuilt = {k: tuple(v.shape) for k, v in rebuild().state_dict().items()}
        layout_ok = real == rebuilt
        if not layout_ok:
            failures += 1
            diff = sorted(set(real.items()) ^ set(rebuilt.items()))[:8]
            print(f"FAIL {arch}: the default suite's rebuild differs from the library's state_dict: {diff}")
        for what, in_channels, x, want in (("rgb", 3, ref["x"], ref["logits"]),
                                           ("gray", 1, ref["gray"], ref["logits_gray"])):
            v = loader(path, arch, in_channels=in_channels)
            model = cls(num_classes=1000, in_channels=in_channels, **kwargs)
            xin = jnp.asarray(x.transpose(0, 2, 3, 1))
            got = np.asarray(model.apply(v, xin, train=False))
            err = float(np.max(np.abs(got.astype(np.float64) - want)))
            scale = max(1.0, float(np.std(want)))
            ok = err <= atol * scale
            note = ""
            if what == "rgb":
                # A negative control: the same weights with one mid-network matrix
                # mis-mapped (its last axis reversed) must miss torch's logits by far.
                # (a kernel: a key projection's bias, say, cancels in the softmax)
                paths, treedef = podlet.tree_util.tree_flatten_with_path(v)
                leaves = [a for _, a in paths]
                mats = [i for i, (p, a) in enumerate(paths) if getattr(p[-1], "key", None) == "kernel"]
                i = mats[len(mats) // 2]
                leaves[i] = jnp.asarray(np.flip(np.asarray(leaves[i]), -1).copy())
                bad = np.asarray(model.apply(podlet.tree_util.tree_unflatten(treedef, leaves), xin, train=False))
                miss = float(np.max(np.abs(bad.astype(np.float64) - want)))
                ok = ok and miss > 1e3 * atol * scale
                note = f", one mid-network matrix mis-mapped: {miss:.2e}"
            failures += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {arch:28s} {what:4s} max |podlet - torch| = {err:.2e} "
                  f"(logits std {float(np.std(want)):.2f}{note}; {len(real)} keys, "
                  f"rebuild layout {'identical' if layout_ok else 'DIFFERENT'})", flush=True)
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--archs", default=",".join(ARCHS))
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--atol", type=float, default=1e-4)
    ap.add_argument("--produce", metavar="DIR", help=argparse.SUPPRESS)
    a = ap.parse_args()
    archs = [s for s in a.archs.split(",") if s]
    bad = [s for s in archs if s not in ARCHS]
    if bad:
        ap.error(f"unknown --archs {bad}; expected some of {list(ARCHS)}")
    if a.produce:
        produce(a.produce, archs, a.batch, a.size)
        return 0
    if not os.path.exists(TV_PYTHON):
        print(f"{TV_PYTHON} does not exist: run bench/setup_torchvision.sh first", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([TV_PYTHON, os.path.abspath(__file__), "--produce", d, "--archs", ",".join(archs),
                        "--batch", str(a.batch), "--size", str(a.size)], check=True)
        failures = check(d, archs, a.atol)
    print(f"{len(archs)} architectures, {failures} failed checks")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
