"""Does Winograd change what a bf16 network learns? examples/cnn_fashion_mnist.py (the
seed's ResNet block, bf16 compute, focal loss, AdamW + warmup-cosine, EMA) trained twice
on the real Fashion-MNIST with the same seed: once with the direct convolution kernels
(PODLET_CONV_WINOGRAD=0: exact bf16 products) and once with the default Winograd F(2x2,
3x3) 3x3 stride-1 convolutions (the 64- and 128-channel layers; the 1-channel stem and the
stride-2 layers are direct either way). Prints the per-epoch loss and EMA test accuracy of
both and writes bench/results/winograd_training.json.

    nice -n 10 .venv/bin/python bench/winograd_training.py             # 7 epochs, ~8 min
    .venv/bin/python bench/winograd_training.py --epochs 1 --limit-steps 50
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

WORKER = """
import json, sys
sys.path.insert(0, {examples!r})
import podlet, cnn_fashion_mnist
from podlet import _core
res = cnn_fashion_mnist.main({argv!r})
print("RESULT " + json.dumps({{"epochs": res, "winograd_calls": _core.conv_winograd_stats()}}), flush=True)
"""


def run(winograd, argv):
    env = dict(os.environ, PODLET_CONV_WINOGRAD="1" if winograd else "0")
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + env.get("PYTHONPATH", "")
    code = WORKER.format(examples=os.path.join(ROOT, "examples"), argv=argv)
    cp = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if cp.returncode != 0:
        raise RuntimeError(cp.stderr.strip()[-2000:])
    print(cp.stdout, end="", flush=True)
    return json.loads([l for l in cp.stdout.splitlines() if l.startswith("RESULT ")][-1][7:])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=7)
    p.add_argument("--limit-steps", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=os.path.join(HERE, "results", "winograd_training.json"))
    a = p.parse_args()
    argv = ["--epochs", str(a.epochs), "--seed", str(a.seed)]
    if a.limit_steps:
        argv += ["--limit-steps", str(a.limit_steps)]
    runs = {name: run(name == "winograd", argv) for name in ("direct", "winograd")}
    calls = runs["winograd"]["winograd_calls"]
    if not (calls["fwd"] and calls["bwd_data"] and calls["bwd_filter"]):
        raise SystemExit(f"the Winograd run took no Winograd convolutions ({calls}): not an AVX512_BF16 host?")
    if any(runs["direct"]["winograd_calls"][k] for k in ("fwd", "bwd_data", "bwd_filter")):
        raise SystemExit("the direct run took Winograd convolutions")
    print("\n| epoch | loss direct | loss Winograd | test acc. direct | test acc. Winograd |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for d, w in zip(runs["direct"]["epochs"], runs["winograd"]["epochs"]):
        print(f"| {d['epoch']} | {d['loss']:.4f} | {w['loss']:.4f} | {d['test_accuracy']:.4f} | "
              f"{w['test_accuracy']:.4f} |")
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"args": vars(a), "runs": runs}, f, indent=2)
    os.replace(tmp, a.out)


if __name__ == "__main__":
    main()
