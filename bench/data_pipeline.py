"""Images/s of the seed's conservative input pipeline at 224x224, podlet vs torch.

Both sides read the same pre-decoded uint8 patches from memory (what a TFDS cache or a
decoded shard gives), then: shuffle (buffer 1024) -> /255 and mean_std -> roll by up to 6
px -> bilinear rotation up to 10 degrees (zero fill) -> brightness +-0.05 -> contrast
[0.9, 1.1] -> batch 32 (drop_remainder), on 2 worker threads/processes.

* podlet: podlet.data.Dataset on TBB (2 threads) with prefetch(2).
* torch: a torch.utils.data.DataLoader (num_workers=2, shuffle, drop_last) whose
  Dataset does the same work per example with plain torch 2.13.0 ops (torch.roll,
  F.affine_grid + F.grid_sample bilinear/zeros, arithmetic).
* torchvision: the same DataLoader with torchvision.transforms.v2 (ToDtype+Normalize,
  torch.roll, RandomRotation bilinear, ColorJitter brightness/contrast) in torch 2.14.1 +
  torchvision 0.29.1, which cannot share podlet's .venv (torch is pinned to 2.13.0 there):
  it runs in its own interpreter, `--torchvision-python` (default .venv-torchvision/bin/python,
  made by bench/setup_torchvision.sh: a 5.5 GB CUDA build of torch; skipped with a note
  when absent).

Also measured: the synthetic generator (podlet.data.synthetic_ddsm at 224 px, 2 threads),
which a run without a decoded cache pays per example.

    nice -n 10 .venv/bin/python bench/data_pipeline.py [--batches 60] [--repeats 3]

Writes bench/results/data_pipeline.json.
"""
import argparse
import json
import os
import platform
import time

import numpy as np

MEAN, STD = 0.5, 0.25
AUG = dict(translate=6, rotate=10.0, brightness=0.05, contrast=(0.9, 1.1))


def podlet_rate(images, labels, batches, threads):
    from podlet import data
    src = data.array_source(images, labels)
    ds = (data.Dataset(src).shuffle(1024, seed=0).normalize("mean_std", mean=MEAN, std=STD)
          .augment(**AUG, seed=0).repeat().batch(32, drop_remainder=True).prefetch(2).with_threads(threads))
    it = iter(ds)
    for _ in range(3):
        next(it)
    t = time.perf_counter()
    for _ in range(batches):
        b = next(it)
    dt = time.perf_counter() - t
    it.close()
    assert b["image"].shape == (32, 224, 224, 1)
    return batches * 32 / dt


def loader_rate(loader, batches):
    """Images/s of a torch DataLoader over `batches` batches after 3 warm-up batches."""
    def endless():
        while True:
            yield from loader

    it = endless()
    for _ in range(3):
        next(it)
    t = time.perf_counter()
    for _ in range(batches):
        x, _ = next(it)
    dt = time.perf_counter() - t
    assert tuple(x.shape) == (32, 224, 224, 1)
    return batches * 32 / dt


def torch_rate(images, labels, batches, workers):
    import torch
    import torch.nn.functional as F

    class Seed(torch.utils.data.Dataset):
        def __init__(self, x, y):
            self.x, self.y = x, y

        def __len__(self):
            return len(self.y)

        def __getitem__(self, i):
            x = torch.from_numpy(self.x[i]).permute(2, 0, 1).float() / 255.0  # C,H,W
            x = (x - MEAN) / STD
            t = AUG["translate"]
            dy, dx = (int(v) for v in torch.randint(-t, t + 1, (2,)))
            x = torch.roll(x, shifts=(dy, dx), dims=(1, 2))
            a = float(torch.empty(()).uniform_(-AUG["rotate"], AUG["rotate"])) * np.pi / 180
            c, s = np.cos(a), np.sin(a)
            theta = torch.tensor([[[c, -s, 0.0], [s, c, 0.0]]], dtype=torch.float32)
            grid = F.affine_grid(theta, (1,) + tuple(x.shape), align_corners=True)
            x = F.grid_sample(x[None], grid, mode="bilinear", padding_mode="zeros", align_corners=True)[0]
            x = x + float(torch.empty(()).uniform_(-AUG["brightness"], AUG["brightness"]))
            m = x.mean(dim=(1, 2), keepdim=True)
            x = (x - m) * float(torch.empty(()).uniform_(*AUG["contrast"])) + m
            return x.permute(1, 2, 0), int(self.y[i])

    loader = torch.utils.data.DataLoader(Seed(images, labels), batch_size=32, shuffle=True, drop_last=True,
                                         num_workers=workers, prefetch_factor=2, persistent_workers=True)

    return loader_rate(loader, batches)


def torchvision_rate(images, labels, batches, workers):
    """Runs inside the torchvision interpreter (no podlet there)."""
    import torch
    from torchvision.transforms import v2

    tf = v2.Compose([v2.ToDtype(torch.float32, scale=True), v2.Normalize([MEAN], [STD])])
    aug = v2.Compose([v2.RandomRotation(AUG["rotate"], interpolation=v2.InterpolationMode.BILINEAR, fill=0.0),
                      v2.ColorJitter(brightness=AUG["brightness"], contrast=AUG["contrast"])])

    class Seed(torch.utils.data.Dataset):
        def __init__(self, x, y):
            self.x, self.y = x, y

        def __len__(self):
            return len(self.y)

        def __getitem__(self, i):
            x = tf(torch.from_numpy(self.x[i]).permute(2, 0, 1))
            t = AUG["translate"]
            dy, dx = (int(v) for v in torch.randint(-t, t + 1, (2,)))
            x = aug(torch.roll(x, shifts=(dy, dx), dims=(1, 2)))
            return x.permute(1, 2, 0), int(self.y[i])

    loader = torch.utils.data.DataLoader(Seed(images, labels), batch_size=32, shuffle=True, drop_last=True,
                                         num_workers=workers, prefetch_factor=2, persistent_workers=True)

    return loader_rate(loader, batches), f"torch {torch.__version__}"


def torchvision_subprocess(python, images, labels, batches, workers):
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        np.save(os.path.join(d, "x.npy"), images)
        np.save(os.path.join(d, "y.npy"), labels)
        out = subprocess.run([python, __file__, "--tv-worker", d, "--batches", str(batches), "--threads", str(workers)],
                             capture_output=True, text=True, timeout=1800)
    line = [l for l in out.stdout.splitlines() if l.startswith("TV ")]
    if out.returncode != 0 or not line:
        raise RuntimeError(out.stderr.strip()[-500:])
    rate, version = line[-1][3:].split(" ", 1)
    return float(rate), version


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--examples", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--torchvision-python", default=os.path.join(os.path.dirname(__file__), "..", ".venv-torchvision",
                                                                  "bin", "python"))
    ap.add_argument("--tv-worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.tv_worker:
        x, y = np.load(os.path.join(args.tv_worker, "x.npy")), np.load(os.path.join(args.tv_worker, "y.npy"))
        rate, version = torchvision_rate(x, y, args.batches, args.threads)
        print(f"TV {rate} {version}", flush=True)
        return

    import torch
    from podlet import data
    src = data.synthetic_ddsm("train", 224)
    t = time.perf_counter()
    images, labels, _ = data.read_batch(src, range(args.examples), threads=args.threads)
    gen_rate = args.examples / (time.perf_counter() - t)
    print(f"synthetic_ddsm generation at 224 px, {args.threads} threads: {gen_rate:,.0f} images/s", flush=True)

    have_tv = os.path.exists(args.torchvision_python)
    if not have_tv:
        print(f"no torchvision interpreter at {args.torchvision_python} (bench/setup_torchvision.sh makes one): "
              "torchvision column skipped", flush=True)
    p_rates, t_rates, tv_rates, tv_version = [], [], [], None
    for r in range(args.repeats):  # interleaved: every side sees the same machine load
        p_rates.append(podlet_rate(images, labels, args.batches, args.threads))
        t_rates.append(torch_rate(images, labels, args.batches, args.threads))
        msg = f"repeat {r}: podlet {p_rates[-1]:,.0f} images/s   torch {t_rates[-1]:,.0f} images/s"
        if have_tv:
            rate, tv_version = torchvision_subprocess(args.torchvision_python, images, labels, args.batches, args.threads)
            tv_rates.append(rate)
            msg += f"   torchvision {rate:,.0f} images/s"
        print(msg, flush=True)
    p, tr = float(np.median(p_rates)), float(np.median(t_rates))
    res = dict(
        what="seed conservative pipeline, 224x224x1 uint8 in memory -> float32 batches of 32",
        podlet_images_per_s=round(p, 1), torch_images_per_s=round(tr, 1), ratio=round(p / tr, 2),
        podlet_runs=[round(v, 1) for v in p_rates], torch_runs=[round(v, 1) for v in t_rates],
        synthetic_generation_images_per_s=round(gen_rate, 1), threads=args.threads, batches=args.batches,
        torch=f"torch {torch.__version__} DataLoader(num_workers={args.threads}) with plain torch ops "
              "(roll, affine_grid+grid_sample, arithmetic)",
        machine=dict(cpus=os.cpu_count(), load_avg=[round(v, 2) for v in os.getloadavg()],
                     python=platform.python_version()))
    if tv_rates:
        tv = float(np.median(tv_rates))
        res.update(torchvision_images_per_s=round(tv, 1), ratio_vs_torchvision=round(p / tv, 2),
                   torchvision_runs=[round(v, 1) for v in tv_rates],
                   torchvision=f"{tv_version} + torchvision 0.29.1 DataLoader(num_workers={args.threads}) with "
                               "transforms.v2 (ToDtype, Normalize, roll, RandomRotation bilinear, ColorJitter)")
    print(json.dumps(res, indent=1))
    path = os.path.join(os.path.dirname(__file__), "results", "data_pipeline.json")
    with open(path + ".tmp", "w") as f:
        json.dump(res, f, indent=1)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
