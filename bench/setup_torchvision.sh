#!/usr/bin/env bash
# Optional: the torchvision peer of bench/data_pipeline.py. torchvision 0.29.1 needs
# torch 2.14.1 (a ~5.5 GB CUDA build; the CPU runs it), which cannot live in podlet's
# .venv (torch is pinned to 2.13.0 there), so it gets its own venv; timm beside it for
# scripts/check_torchvision.py (its models with pretrained=False: no hub). Idempotent.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
V=.venv-torchvision
if [[ -x "$V/bin/python" ]] && "$V/bin/python" -c "import torchvision, timm" 2>/dev/null; then
  echo "[setup_torchvision] $V up to date"; exit 0
fi
python3 -m venv "$V"
"$V/bin/python" -m pip install -q torch==2.14.1 torchvision==0.29.1 timm==1.0.31 numpy
echo "[setup_torchvision] done"
