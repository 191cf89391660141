"""Shared by the training-application tests: a tiny experiment and an in-memory dataset
whose classes are learnable (a bright bar whose row depends on the class)."""
import os

import numpy as np

from podlet.training import config as C
from podlet.training.input import ArrayData

ROOT = os.path.join(os.path.dirname(__file__), "..")
SMOKE = os.path.join(ROOT, "configs", "experiments", "smoke.yaml")

TINY = ["model=resnet_tiny", "model.stage_sizes=[1]", "model.widths=[8]", "data.image_size=[16,16,1]", "train.batch_size=16",
        "train.eval_batch_size=16", "train.epochs=3", "train.max_steps_per_epoch=3", "train.warmup_epochs=1",
        "train.ema_decay=0.9", "train.keep_checkpoints=2", "train.num_devices=8"]


def tiny_config(*extra):
    return C.load_config(SMOKE, TINY + list(extra), num_devices=8)


def patterns(n, seed, size=16, nan_at=None):
    rng = np.random.default_rng(seed)
    y = (np.arange(n) % 5).astype(np.int32)
    rng.shuffle(y)
    x = rng.integers(0, 80, (n, size, size, 1)).astype(np.float32)
    for i in range(n):
        r = 3 * y[i]
        x[i, r:r + 2, 2:size - 2] += 150
    if nan_at is not None:
        x[nan_at] = np.nan
    return x / 255.0, y


def tiny_data(cfg, nan_at=None):
    return ArrayData({"train": patterns(96, 1, nan_at=nan_at), "validation": patterns(40, 2),
                      "test": patterns(40, 3)}, C.SYNTHETIC_CLASS_NAMES, seed=cfg.train.seed,
                     normalization=cfg.data.normalization)
