"""Peak memory of a ResNet-18 training step (forward + backward, f32, batch 16,
96x96x1, 5 classes) with and without nn.remat on every residual block
(jax.checkpoint's default policy: the backward pass recomputes each block from its
input). Prints the peak bytes allocated above what was live before the step.

    .venv/bin/python bench/remat_memory.py
"""
import numpy as np

import podlet
from podlet import nn
from podlet.models import resnet
x = np.random.default_rng(0).standard_normal((16, 96, 96, 1)).astype(np.float32)
y = np.random.default_rng(1).integers(0, 5, 16)


class PosBlock(resnet.ResNetBlock):
    def __call__(self, x, train=True):  # train positional, so remat can treat it as static
        return super().__call__(x, train=train)


class RematBlock(nn.Module):
    filters: int
    stride: int = 1
    drop_path_rate: float = 0.0
    dtype: object = None

    @nn.compact
    def __call__(self, x, *, train):
        kw = {} if self.dtype is None else {"dtype": self.dtype}
        blk = nn.remat(PosBlock, static_argnums=(2,))
        return blk(self.filters, stride=self.stride, drop_path_rate=self.drop_path_rate, **kw)(x, train)


res = {}
for name, blk in [("plain", resnet.ResNetBlock), ("remat", RematBlock)]:
    m = resnet.ResNet18(num_classes=5, block_cls=blk)
    v = m.init(podlet.random.PRNGKey(0), x, train=False)
    def loss(p):
        logits, upd = m.apply({"params": p, "batch_stats": v["batch_stats"]}, x, train=True, mutable=["batch_stats"])
        return -(nn.log_softmax(logits) * nn.one_hot(y, 5)).sum(-1).mean()
    step = podlet.jit(podlet.value_and_grad(loss))
    out = step(v["params"]); del out
    podlet._core.reset_peak_memory(); live0 = podlet._core.memory_stats()[0]
    l, g = step(v["params"])
    res[name] = (podlet._core.memory_stats()[1] - live0) / 2**20
    print(name, float(l), f"peak above live {res[name]:.1f} MiB")
print("ratio", res["remat"] / res["plain"])
