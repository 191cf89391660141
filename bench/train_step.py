"""One full training step (forward, backward, AdamW) of ResNet-18 and ResNet-34 (and, with
--models, ResNet-50, ViT-Tiny/16, ViT-Small/16 and Swin-T) on 224x224x1 images, 5 classes,
batch 32, in podlet (jit; f32 and bf16 compute; bf16 with its default Winograd 3x3
convolutions and, as podlet-direct, with the direct kernels; as podlet-excess, bf16 under
config allow_excess_precision: a fused chain rounds once, as on a TPU), JAX + Flax + Optax on CPU
(jit; the same model written in Flax below; f32 and bf16) and PyTorch CPU (eager; f32 and
bf16 autocast; the same ResNet in plain torch below), all in one run. Each
framework/model/dtype runs in its own subprocess (its own peak RSS), nice'd, on --threads
threads. Prints images/s, the ratio to podlet (same model and dtype), MFU (model FLOPs /
time / measured peak of the threads used for the dtype; the table says which peak: the
f32 FMA loop for f32; for bf16 the AMX tile loop (TDPBF16PS) where the active ISA is amx,
else the vdpbf16ps loop on AVX512_BF16 hosts, else the f32 FMA loop), trace/compile time
and peak RSS; writes bench/results/train_step.json (or --out).

    nice -n 10 .venv/bin/python bench/train_step.py                   # everything (~15 min)
    nice -n 10 .venv/bin/python bench/train_step.py --rounds 2        # twice, interleaved; best of each
    .venv/bin/python bench/train_step.py --models resnet18 --frameworks podlet --steps 3
    nice -n 10 .venv/bin/python bench/train_step.py --models vit_tiny,vit_small,swin_tiny   # the transformers
    nice -n 10 .venv/bin/python bench/train_step.py --models vit_tiny,swin_tiny --frameworks podlet,podlet-excess,torch,jax

Issue 27's acceptance run (AMX tiles; on an Intel host whose `podlet.cpu_info()["active_isa"]`
is "amx", with nothing else running):

    nice -n 10 .venv/bin/python bench/train_step.py --models resnet18,resnet34,resnet50,vit_tiny,vit_small --dtypes f32,bf16,f32-bf16prec

Models: resnet18, resnet34 (the default), resnet50, vit_tiny, vit_small, swin_tiny.
resnet50 is podlet.models.ResNet50 (bottleneck blocks 1x1 -> 3x3 (stride) -> 1x1 at 4x
the width, stages [3, 4, 6, 3]); its Flax and plain-torch twins are below, beside the
basic-block ResNets'. The transformers are podlet.models.ViTTiny / ViTSmall / SwinT
(dropout and stochastic depth 0, as the ResNets' dropout; softmax cross-entropy and AdamW
as for them); their Flax and plain-torch twins live in bench/_transformer_twins.py
(torchvision is not installed: its swin_t is rebuilt there module for module; it has no
ViT-Tiny/Small, so those follow its VisionTransformer layout). Before anything is timed, a
subprocess checks that every framework's model has podlet's parameter count at --size
(ViT's position embeddings depend on it; tests/test_bench_train_step.py runs the same
check). ViT needs --size a multiple of 16 to use the whole image; Swin-T takes any size >=
4 (maps are padded to whole windows as torchvision does). The transformers have no 3x3
convolution, so they get no podlet-direct row (it would time the same program).

Dtypes: f32, bf16 and f32-bf16prec, a TPU's numerics: the f32 model (f32 params and
activations) run under `default_matmul_precision("bfloat16")` (`config.update(
"jax_default_matmul_precision", "bfloat16")` in the worker): podlet rounds every f32
matmul / convolution operand to bf16 and sums the exact products in f32, one pass (the bf16
kernels: AMX tiles on amx hosts; python/podlet/_src/precision.py), so its MFU is of the
bf16 peak. JAX gets the same flag, which its CPU backend ignores: its f32-bf16prec row is
exact f32 (the notes column says so; the worker checks it with a probe dot and convolution,
as it checks that podlet's products were rounded). PyTorch's counterpart is its plain f32
row (issue 27 compares podlet's f32-bf16prec with it); no separate PyTorch f32-bf16prec
cell is run, and the f32 row is run for it when --dtypes lacks f32.

Model FLOPs per step = the FLOPs of podlet's traced train-step graph (convolutions,
dots and elementwise ops; the same model in every framework). Timed steps follow one
untimed step (compile / warm-up); the figure is the best timed step (shared machine; with --rounds N, of the best round).
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Mapping

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# ResNets: blocks per stage and the block ("basic": two 3x3 convolutions; "bottleneck":
# 1x1 -> 3x3 -> 1x1 to EXPANSION x the stage width), as podlet.models.ResNet18/34/50
RESNETS = {"resnet18": ([2, 2, 2, 2], "basic"), "resnet34": ([3, 4, 6, 3], "basic"),
           "resnet50": ([3, 4, 6, 3], "bottleneck")}
EXPANSION = {"basic": 1, "bottleneck": 4}
NUM_CLASSES = 5
BF16PREC = "f32-bf16prec"  # the f32 model under default_matmul_precision("bfloat16"): a TPU's numerics
DTYPES = ("f32", "bf16", BF16PREC)
sys.path.insert(0, HERE)
import _transformer_twins as twins  # noqa: E402  ViT-Tiny/Small and Swin-T in Flax and plain torch
assert twins.NUM_CLASSES == NUM_CLASSES


def _count(tree):
    """Number of parameters in a pytree (podlet's or jax's: anything whose leaves have .shape)."""
    leaves, stack = [], [tree]
    while stack:
        t = stack.pop()
        if isinstance(t, Mapping):
            stack.extend(t.values())
        elif isinstance(t, (list, tuple)):
            stack.extend(t)
        elif hasattr(t, "shape"):
            leaves.append(int(np.prod(t.shape)))
    return sum(leaves)


def data(batch, size):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, size, size, 1)).astype(np.float32)
    y = rng.integers(0, NUM_CLASSES, batch).astype(np.int32)
    return x, y


def timed_steps(step, steps):
    t0 = time.perf_counter()
    step()
    first = time.perf_counter() - t0
    ts = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        ts.append(time.perf_counter() - t0)
    return first, ts


# ---------------------------------------------------------------------------------
# podlet
# ---------------------------------------------------------------------------------
def podlet_resnet(name, cdt):
    """podlet.models' ResNet-18/34/50 (dropout 0, no stochastic depth) in compute dtype `cdt`."""
    from podlet import models
    stages, block = RESNETS[name]
    block_cls = models.BottleneckResNetBlock if block == "bottleneck" else models.ResNetBlock
    return models.ResNet(stage_sizes=stages, block_cls=block_cls, num_classes=NUM_CLASSES, dtype=cdt)


def products_rounded(jit, lax, jnp):
    """{"dot": bool, "conv": bool}: whether this framework's jitted f32 matmul / convolution
    rounded its operands to bf16 under the flags now set (a probe of what an f32-bf16prec row
    ran: exact f32 products are within ~1e-5 of the float64 result here, bf16 operands ~1e-1)."""
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((64, 64)).astype(np.float32), rng.standard_normal((64, 64)).astype(np.float32)
    x, w = rng.standard_normal((1, 8, 8, 16)).astype(np.float32), rng.standard_normal((3, 3, 16, 8)).astype(np.float32)
    dot = np.asarray(jit(lambda a, b: a @ b)(jnp.asarray(a), jnp.asarray(b)))
    conv = np.asarray(jit(lambda x, w: lax.conv_general_dilated(
        x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")))(jnp.asarray(x), jnp.asarray(w)))
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    xp = np.pad(x64, ((0, 0), (1, 1), (1, 1), (0, 0)))
    conv64 = sum(np.einsum("nhwc,co->nhwo", xp[:, i:i + 8, j:j + 8], w64[i, j]) for i in range(3) for j in range(3))
    return {"dot": bool(np.abs(dot - a.astype(np.float64) @ b).max() > 1e-3),
            "conv": bool(np.abs(conv - conv64).max() > 1e-3)}


def run_podlet(model_name, dtype, batch, size, steps):
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import podlet
    import podlet.numpy as jnp
    from podlet import models, optim, _core
    from podlet._src import fusion
    from podlet.training import train_state

    if dtype == BF16PREC:  # jit's cache key holds the flag: the step below is traced under it
        podlet.config.update("jax_default_matmul_precision", "bfloat16")
    cdt = jnp.bfloat16 if dtype == "bf16" else jnp.float32
    model = podlet_resnet(model_name, cdt) if model_name in RESNETS else twins.podlet_model(model_name, cdt)
    xn, yn = data(batch, size)
    x, y = jnp.asarray(xn), jnp.asarray(yn)
    v = model.init(podlet.random.PRNGKey(0), x[:1], train=False)
    v.setdefault("batch_stats", {})  # the transformers have none: an empty tree through the step
    st = train_state.TrainState.create(apply_fn=model.apply, params=v["params"],
                                       tx=optim.adamw(1e-3, weight_decay=1e-4))
    mutable = ["batch_stats"] if model_name in RESNETS else False

    def train_step(st, bs, x, y):
        def loss_fn(p):
            out = model.apply({"params": p, "batch_stats": bs}, x, train=True, mutable=mutable)
            logits, upd = out if mutable else (out, {"batch_stats": bs})
            return optim.softmax_cross_entropy_with_integer_labels(logits, y).mean(), upd
        (loss, upd), g = podlet.value_and_grad(loss_fn, has_aux=True)(st.params)
        return st.apply_gradients(grads=g), upd["batch_stats"], loss

    j = podlet.jit(train_step)
    t0 = time.perf_counter()
    entry = j.lower(st, v["batch_stats"], x, y)
    t_trace = time.perf_counter() - t0
    t0 = time.perf_counter()
    fusion.executable_graph(entry)
    t_plan = time.perf_counter() - t0
    flops = entry.graph.flops()
    state = {"st": st, "bs": v["batch_stats"]}
    del st, v  # the step replaces the state: holding the initial one would count it twice

    def step():
        s, b, loss = j(state["st"], state["bs"], x, y)
        state["st"], state["bs"] = s, b
        float(loss)

    live0 = _core.memory_stats()[0]
    _core.reset_peak_memory()
    first, ts = timed_steps(step, steps)
    return {"first_step_s": first, "step_s": ts, "compile_s": t_trace + t_plan, "trace_s": t_trace,
            "fusion_s": t_plan, "flops_per_step": flops, "params": _count(state["st"].params),
            "podlet_peak_buffers_bytes": _core.memory_stats()[1], "podlet_live_before_bytes": live0}


# ---------------------------------------------------------------------------------
# JAX + Flax + Optax: the same ResNet as podlet.models.ResNet
# ---------------------------------------------------------------------------------
def flax_resnet(name, cdt):
    """podlet.models' ResNet-18/34/50 (dropout 0, no stochastic depth) written in Flax; `cdt`
    is the compute dtype (params float32)."""
    import jax.numpy as jnp
    import flax.linen as nn

    def bn(train, **kw):
        return nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5, **kw)

    class Block(nn.Module):
        features: int
        stride: int = 1

        @nn.compact
        def __call__(self, x, train):
            r = x
            x = nn.Conv(self.features, (3, 3), self.stride, padding="SAME", use_bias=False, dtype=cdt)(x)
            x = nn.relu(bn(train)(x))
            x = nn.Conv(self.features, (3, 3), 1, padding="SAME", use_bias=False, dtype=cdt)(x)
            x = bn(train, scale_init=nn.initializers.zeros_init())(x)
            if r.shape != x.shape:
                r = nn.Conv(self.features, (1, 1), self.stride, use_bias=False, dtype=cdt)(r)
                r = bn(train)(r)
            return nn.relu(x + r)

    class Bottleneck(nn.Module):  # podlet.models.BottleneckResNetBlock: the stride on the 3x3
        features: int
        stride: int = 1

        @nn.compact
        def __call__(self, x, train):
            r = x
            y = nn.Conv(self.features, (1, 1), use_bias=False, dtype=cdt)(x)
            y = nn.relu(bn(train)(y))
            y = nn.Conv(self.features, (3, 3), self.stride, padding="SAME", use_bias=False, dtype=cdt)(y)
            y = nn.relu(bn(train)(y))
            y = nn.Conv(self.features * 4, (1, 1), use_bias=False, dtype=cdt)(y)
            y = bn(train, scale_init=nn.initializers.zeros_init())(y)
            if r.shape != y.shape:
                r = nn.Conv(self.features * 4, (1, 1), self.stride, use_bias=False, dtype=cdt, name="conv_proj")(r)
                r = bn(train, name="norm_proj")(r)
            return nn.relu(y + r)

    stages, block = RESNETS[name]
    block_cls = Bottleneck if block == "bottleneck" else Block

    class ResNet(nn.Module):
        @nn.compact
        def __call__(self, x, train):
            x = nn.Conv(64, (7, 7), (2, 2), padding="SAME", use_bias=False, dtype=cdt)(x)
            x = nn.relu(bn(train)(x))
            x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
            for i, n in enumerate(stages):
                for j in range(n):
                    x = block_cls(64 * 2 ** i, 2 if i > 0 and j == 0 else 1)(x, train)
            x = jnp.mean(x, axis=(1, 2))
            return jnp.asarray(nn.Dense(NUM_CLASSES, dtype=cdt)(x), jnp.float32)

    return ResNet()


def run_jax(model_name, dtype, batch, size, steps):
    import jax
    import jax.numpy as jnp
    import optax

    if dtype == BF16PREC:  # the same flag as podlet's row; jax's CPU backend ignores it (f32 stays exact)
        jax.config.update("jax_default_matmul_precision", "bfloat16")
    cdt = jnp.bfloat16 if dtype == "bf16" else jnp.float32
    model = flax_resnet(model_name, cdt) if model_name in RESNETS else twins.flax_model(model_name, cdt)
    xn, yn = data(batch, size)
    x, y = jnp.asarray(xn), jnp.asarray(yn)
    v = model.init(jax.random.PRNGKey(0), x[:1], train=False)
    tx = optax.adamw(1e-3, weight_decay=1e-4)
    params, bs, opt = v["params"], v.get("batch_stats", {}), tx.init(v["params"])
    mutable = ["batch_stats"] if model_name in RESNETS else False
    n_params = _count(params)

    @jax.jit
    def train_step(params, bs, opt, x, y):
        def loss_fn(p):
            out = model.apply({"params": p, "batch_stats": bs}, x, train=True, mutable=mutable)
            logits, upd = out if mutable else (out, {"batch_stats": bs})
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), upd
        (loss, upd), g = jax.value_and_grad(loss_fn, has_aux=True)(params)
        u, opt = tx.update(g, opt, params)
        return optax.apply_updates(params, u), upd["batch_stats"], opt, loss

    t0 = time.perf_counter()
    compiled = train_step.lower(params, bs, opt, x, y).compile()
    t_compile = time.perf_counter() - t0
    state = {"p": params, "b": bs, "o": opt}
    del params, bs, opt, v  # as for podlet: only the current state stays alive

    def step():
        p, b, o, loss = compiled(state["p"], state["b"], state["o"], x, y)
        state["p"], state["b"], state["o"] = p, b, o
        float(loss)

    first, ts = timed_steps(step, steps)
    return {"first_step_s": first, "step_s": ts, "compile_s": t_compile, "params": n_params}


# ---------------------------------------------------------------------------------
# PyTorch (eager): the same ResNet in plain torch (torchvision is not installed)
# ---------------------------------------------------------------------------------
def torch_resnet(name):
    """podlet.models' ResNet-18/34/50 in plain torch (NCHW; torchvision's layout, v1.5: the
    bottleneck's stride on its 3x3)."""
    import torch.nn as tnn
    import torch.nn.functional as F

    class Block(tnn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.c1 = tnn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.b1 = tnn.BatchNorm2d(cout, eps=1e-5, momentum=0.1)
            self.c2 = tnn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.b2 = tnn.BatchNorm2d(cout, eps=1e-5, momentum=0.1)
            tnn.init.zeros_(self.b2.weight)
            self.proj = None
            if stride != 1 or cin != cout:
                self.proj = tnn.Sequential(tnn.Conv2d(cin, cout, 1, stride, bias=False), tnn.BatchNorm2d(cout))

        def forward(self, x):
            r = x if self.proj is None else self.proj(x)
            y = F.relu(self.b1(self.c1(x)))
            return F.relu(self.b2(self.c2(y)) + r)

    class Bottleneck(tnn.Module):
        def __init__(self, cin, width, stride):
            super().__init__()
            cout = 4 * width
            self.c1 = tnn.Conv2d(cin, width, 1, bias=False)
            self.b1 = tnn.BatchNorm2d(width, eps=1e-5, momentum=0.1)
            self.c2 = tnn.Conv2d(width, width, 3, stride, 1, bias=False)
            self.b2 = tnn.BatchNorm2d(width, eps=1e-5, momentum=0.1)
            self.c3 = tnn.Conv2d(width, cout, 1, bias=False)
            self.b3 = tnn.BatchNorm2d(cout, eps=1e-5, momentum=0.1)
            tnn.init.zeros_(self.b3.weight)
            self.proj = None
            if stride != 1 or cin != cout:
                self.proj = tnn.Sequential(tnn.Conv2d(cin, cout, 1, stride, bias=False), tnn.BatchNorm2d(cout))

        def forward(self, x):
            r = x if self.proj is None else self.proj(x)
            y = F.relu(self.b1(self.c1(x)))
            y = F.relu(self.b2(self.c2(y)))
            return F.relu(self.b3(self.c3(y)) + r)

    stages, block = RESNETS[name]
    block_cls = Bottleneck if block == "bottleneck" else Block

    class ResNet(tnn.Module):
        def __init__(self):
            super().__init__()
            self.stem = tnn.Conv2d(1, 64, 7, 2, 3, bias=False)
            self.bn = tnn.BatchNorm2d(64)
            blocks, cin = [], 64
            for i, n in enumerate(stages):
                for j in range(n):
                    blocks.append(block_cls(cin, 64 * 2 ** i, 2 if i > 0 and j == 0 else 1))
                    cin = 64 * 2 ** i * EXPANSION[block]
            self.blocks = tnn.Sequential(*blocks)
            self.fc = tnn.Linear(cin, NUM_CLASSES)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.bn(self.stem(x))), 3, 2, 1)
            x = self.blocks(x)
            return self.fc(x.mean((2, 3))).float()

    return ResNet()


def run_torch(model_name, dtype, batch, size, steps, threads):
    import torch
    import torch.nn.functional as F

    if dtype == BF16PREC:
        raise ValueError("PyTorch's counterpart of f32-bf16prec is its f32 row (grid() runs that instead)")
    torch.set_num_threads(threads)
    torch.manual_seed(0)

    model = torch_resnet(model_name) if model_name in RESNETS else twins.torch_model(model_name).build(size)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
    xn, yn = data(batch, size)
    x = torch.from_numpy(xn).permute(0, 3, 1, 2).contiguous()
    y = torch.from_numpy(yn).long()

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
            logits = model(x)
        loss = F.cross_entropy(logits.float(), y)
        loss.backward()
        opt.step()
        float(loss)

    first, ts = timed_steps(step, steps)
    return {"first_step_s": first, "step_s": ts, "compile_s": 0.0,
            "params": sum(p.numel() for p in model.parameters())}


# ---------------------------------------------------------------------------------
def param_counts(model_names, size):
    """{model: {framework: parameter count}} of each model as every framework builds it for
    size x size x 1 images (abstractly where the framework can: eval_shape)."""
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import podlet
    import podlet.numpy as pjnp
    from podlet import models
    import jax
    import jax.numpy as jnp

    out = {}
    for name in model_names:
        if name in RESNETS:
            pm, fm, tm = podlet_resnet(name, pjnp.float32), flax_resnet(name, jnp.float32), torch_resnet(name)
        else:
            pm, fm = twins.podlet_model(name, pjnp.float32), twins.flax_model(name, jnp.float32)
            tm = twins.torch_model(name).build(size)
        shapes = jax.eval_shape(lambda k, x: fm.init(k, x, train=False), jax.random.PRNGKey(0),
                                jax.ShapeDtypeStruct((1, size, size, 1), jnp.float32))
        out[name] = {"podlet": models.param_count(pm, podlet.ShapeDtypeStruct((1, size, size, 1), pjnp.float32),
                                                  train=False),
                     "jax": _count(shapes["params"]), "torch": sum(p.numel() for p in tm.parameters())}
    return out


def run_worker(cmd, timeout, env=None):
    """Runs a worker subprocess; its last 'RESULT {json}' line as a dict, or {"error": ...}."""
    try:
        cp = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        lines = [l for l in cp.stdout.splitlines() if l.startswith("RESULT ")]
        if cp.returncode != 0 or not lines:
            raise RuntimeError(cp.stderr.strip().splitlines()[-1] if cp.stderr.strip() else "no result")
        return json.loads(lines[-1][7:])
    except (subprocess.TimeoutExpired, RuntimeError) as e:
        return {"error": str(e)[:300]}


def worker(a):
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    if a.framework in ("podlet", "podlet-direct", "podlet-excess"):
        os.environ["PODLET_NUM_THREADS"] = str(a.threads)
        # podlet-excess: bf16 values inside a fused elementwise chain kept in f32, one
        # rounding where they leave it (config allow_excess_precision; a TPU's fusions)
        os.environ["PODLET_EXCESS_PRECISION"] = "1" if a.framework == "podlet-excess" else "0"
        # podlet-direct: the same step with Winograd off (the direct kernels, whose bf16
        # products are exact: precision HIGHEST for every conv)
        os.environ["PODLET_CONV_WINOGRAD"] = "0" if a.framework == "podlet-direct" else "1"
        r = run_podlet(a.model, a.dtype, a.batch, a.size, a.steps)
    elif a.framework == "jax":
        r = run_jax(a.model, a.dtype, a.batch, a.size, a.steps)
    else:
        r = run_torch(a.model, a.dtype, a.batch, a.size, a.steps, a.threads)
    r["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if a.dtype == BF16PREC:  # after the timing: what the flag did to this framework's f32 products
        if a.framework == "jax":
            import jax
            r["bf16_products"] = products_rounded(jax.jit, jax.lax, jax.numpy)
        else:
            import podlet
            r["bf16_products"] = products_rounded(podlet.jit, podlet.lax, podlet.numpy)
    print("RESULT " + json.dumps(r), flush=True)


def grid(models, dtypes, frameworks):
    """The (model, dtype, framework) cells of a run, in order. podlet-direct only for the bf16
    ResNets (Winograd is bf16 only, f32 and f32-bf16prec convolutions are direct anyway, and
    only the ResNets have 3x3 convolutions); podlet-excess only for bf16. PyTorch's
    f32-bf16prec cell is its f32 one (its counterpart of the TPU numerics; issue 27
    compares podlet's f32-bf16prec with it), run once."""
    cells = []
    for model in models:
        for dtype in dtypes:
            for fw in frameworks:
                if fw == "podlet-direct" and (dtype != "bf16" or model not in RESNETS):
                    continue
                if fw == "podlet-excess" and dtype != "bf16":
                    continue
                c = (model, "f32" if fw == "torch" and dtype == BF16PREC else dtype, fw)
                if c not in cells:
                    cells.append(c)
    return cells


def mfu_peaks(pk):
    """{dtype: (GFLOP/s, the loop measured)}: each dtype's MFU denominator, from a bench/peak.py
    measure() dict. f32: the f32 FMAs. bf16 and f32-bf16prec (whose products are bf16
    products): the AMX tiles (TDPBF16PS) where the active ISA is amx, else vdpbf16ps on
    AVX512_BF16 hosts whose bf16 GEMMs use it, else the f32 FMAs (bf16 products widen to f32
    there: no bf16 dot, or it is set aside, as on Intel without AMX in use)."""
    f32 = (pk["f32_fma_gflops_all"], "f32 FMA")
    if pk.get("amx_gflops_all"):
        bf16 = (pk["amx_gflops_all"], "AMX tiles")
    elif pk.get("bf16_dot_gflops_all") and pk.get("bf16_gemm_on", "vdpbf16ps") == "vdpbf16ps":
        bf16 = (pk["bf16_dot_gflops_all"], "vdpbf16ps")
    elif pk.get("bf16_dot_gflops_all"):
        bf16 = (f32[0], "f32 FMA (bf16 dot set aside)")
    else:
        bf16 = (f32[0], "f32 FMA (no bf16 dot)")
    return {"f32": f32, "bf16": bf16, BF16PREC: bf16}


def note(r, runs):
    """The notes column of a row: what an f32-bf16prec row's products were (its probe), and
    that PyTorch's f32 row stands for its f32-bf16prec one."""
    if r["dtype"] == BF16PREC and "bf16_products" in r:
        bp = r["bf16_products"]
        if all(bp.values()):
            return "f32 operands rounded to bf16, f32 sums (probed: dot, conv)"
        who = "jax's CPU backend ignores the flag" if r["framework"] == "jax" else "flag NOT applied"
        if not any(bp.values()):
            return f"{who}: f32 exact (probed: dot, conv)"
        return f"{who} in part: bf16 operands in {[k for k, v in bp.items() if v]}, exact in the rest"
    if r["framework"] == "torch" and r["dtype"] == "f32" and any(q["dtype"] == BF16PREC for q in runs):
        return "also PyTorch's counterpart of f32-bf16prec"
    return ""


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="resnet18,resnet34")
    p.add_argument("--frameworks", default="podlet,podlet-direct,jax,torch",
                   help="podlet-direct: podlet with conv_winograd off (bf16 only; f32 and f32-bf16prec never use it); "
                        "podlet-excess: podlet with allow_excess_precision (bf16 only: bf16 chains inside a fusion "
                        "round once, as on a TPU)")
    p.add_argument("--dtypes", default="f32,bf16",
                   help="some of f32, bf16, f32-bf16prec (the f32 model under default_matmul_precision('bfloat16'))")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=2, help="timed steps after one untimed step")
    p.add_argument("--timeout", type=float, default=900, help="seconds per framework/model/dtype")
    p.add_argument("--rounds", type=int, default=1,
                   help="run the whole grid this many times, interleaved, and keep each cell's best round: the "
                        "machine's speed drifts over minutes, and a cell timed once may land in a slow spell")
    p.add_argument("--out", default=os.path.join(HERE, "results", "train_step.json"),
                   help="results JSON (a tiny trial run may go to /tmp instead of over the committed results)")
    p.add_argument("--worker", nargs=3, metavar=("FRAMEWORK", "MODEL", "DTYPE"), help=argparse.SUPPRESS)
    p.add_argument("--param-counts", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        a.framework, a.model, a.dtype = a.worker
        return worker(a)
    if a.param_counts:
        print("RESULT " + json.dumps(param_counts(a.models.split(","), a.size)), flush=True)
        return

    unknown = [m for m in a.models.split(",") if m not in RESNETS and m not in twins.TRANSFORMERS]
    if unknown:
        p.error(f"unknown model(s) {unknown}; expected some of {list(RESNETS) + list(twins.TRANSFORMERS)}")
    unknown = [d for d in a.dtypes.split(",") if d not in DTYPES]
    if unknown:
        p.error(f"unknown dtype(s) {unknown}; expected some of {list(DTYPES)}")
    # The same architecture in every framework: equal parameter counts, checked before anything is timed
    # (in a subprocess, so that no framework is loaded in this one).
    counts = run_worker(["nice", "-n", "10", sys.executable, os.path.abspath(__file__), "--param-counts",
                         "--models", a.models, "--size", str(a.size)], a.timeout)
    if "error" in counts:
        sys.exit(f"parameter counts: {counts['error']}")
    for model, c in counts.items():
        if len(set(c.values())) != 1:
            sys.exit(f"{model}: parameter counts differ between frameworks: {c}")
        print(f"{model}: {next(iter(c.values())):,} parameters in " + ", ".join(c), flush=True)

    sys.path.insert(0, HERE)
    import peak as peak_mod
    pk = peak_mod.measure(reps=20, threads=a.threads)
    peaks = mfu_peaks(pk)
    amx = (f"AMX tiles (TDPBF16PS) {pk['amx_gflops_all']:.1f} GFLOP/s on {a.threads} threads"
           if pk.get("amx_gflops_all") else f"AMX tiles: {pk.get('amx', 'not measured')}")
    bf16_dot = (f"{pk['bf16_dot_gflops_all']:.1f} GFLOP/s on {a.threads} threads" if pk["bf16_dot_gflops_all"]
                else pk["bf16_dot"])
    print(f"ISA {pk['isa']}; peak (measured): f32 FMA {pk['f32_fma_gflops_1thread']:.1f} GFLOP/s x 1 thread, "
          f"{pk['f32_fma_gflops_all']:.1f} on {a.threads} threads; bf16 dot (vdpbf16ps): {bf16_dot}; {amx}. "
          f"MFU is of: " + "; ".join(f"{d} rows, {of} {g:.1f} GFLOP/s" for d, (g, of) in peaks.items()) + ". "
          f"Batch {a.batch}, {a.size}x{a.size}x1, {NUM_CLASSES} classes, {a.threads} threads, {a.steps} timed "
          f"steps; shared machine.", flush=True)
    from _host import host  # bench/_host.py: the CPU the figures come from
    results = {"host": host(), "peak": pk, "mfu_peaks": {d: {"gflops": g, "of": of} for d, (g, of) in peaks.items()},
               "batch": a.batch, "size": a.size, "threads": a.threads, "steps": a.steps,
               "rounds": a.rounds, "param_counts": counts, "runs": []}
    flops = {}
    cells = grid(a.models.split(","), a.dtypes.split(","), a.frameworks.split(","))
    rounds_of = {c: [] for c in cells}
    for rnd in range(a.rounds):
        for model, dtype, fw in cells:
            cmd = ["nice", "-n", "10", sys.executable, os.path.abspath(__file__), "--worker", fw, model, dtype,
                   "--batch", str(a.batch), "--size", str(a.size), "--threads", str(a.threads),
                   "--steps", str(a.steps)]
            t0 = time.perf_counter()
            r = run_worker(cmd, a.timeout)
            r.update(framework=fw, model=model, dtype=dtype, wall_s=time.perf_counter() - t0, round=rnd)
            if "flops_per_step" in r:
                flops[model] = r["flops_per_step"]
            if "step_s" in r:
                t = min(r["step_s"])
                r["images_per_s"] = a.batch / t
                if model in flops:
                    r["mfu"] = flops[model] / t / 1e9 / peaks[dtype][0]
                    r["mfu_of"] = peaks[dtype][1]
            want = counts.get(model, {}).get("podlet")
            if "params" in r and want is not None and r["params"] != want:  # e.g. the torch ResNet, built in its row
                r = {**{k: r[k] for k in ("framework", "model", "dtype", "wall_s", "round")},
                     "error": f"{r['params']:,} parameters, podlet's model has {want:,}"}
            rounds_of[(model, dtype, fw)].append(r)
            print(f"[round {rnd + 1}/{a.rounds}] " + _row(r), flush=True)
    for c in cells:  # each cell's fastest round (its first if every round failed)
        best = max(rounds_of[c], key=lambda r: r.get("images_per_s", 0.0))
        if a.rounds > 1:
            best["other_rounds_images_per_s"] = [r["images_per_s"] for r in rounds_of[c]
                                                 if r is not best and "images_per_s" in r]
        results["runs"].append(best)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(results, f, indent=2)
    print("\n" + table(results))


def _row(r):
    if "error" in r:
        return f"{r['framework']:13s} {r['model']:9s} {r['dtype']:12s} ERROR {r['error']}"
    return (f"{r['framework']:13s} {r['model']:9s} {r['dtype']:12s} {r['images_per_s']:7.2f} img/s  "
            f"step {min(r['step_s']):7.2f} s  compile {r['compile_s']:6.2f} s  "
            f"MFU {100 * r.get('mfu', float('nan')):5.1f}% of {r.get('mfu_of', '-'):9s}  "
            f"RSS {r['peak_rss_bytes'] / 2**20:7.0f} MB  {note(r, [r])}")


def table(results):
    """A Markdown table of a results dict (for the README), with the issue-27 comparisons
    after it."""
    runs = results["runs"]
    peaks = mfu_peaks(results["peak"])  # results written before "mfu_of" was recorded
    ref = {(r["model"], r["dtype"]): r for r in runs if r["framework"] == "podlet" and "images_per_s" in r}
    out = ["| model | framework | dtype | images/s | vs podlet | MFU | MFU of | trace+compile | peak RSS | notes |",
           "| --- | --- | --- | ---: | ---: | ---: | --- | ---: | ---: | --- |"]
    for r in runs:
        if "images_per_s" not in r:
            out.append(f"| {r['model']} | {r['framework']} | {r['dtype']} | error | | | | | | {note(r, runs)} |")
            continue
        base = ref.get((r["model"], r["dtype"]))
        ratio = f"{r['images_per_s'] / base['images_per_s']:.2f}x" if base else "-"
        of = r.get("mfu_of", peaks[r["dtype"]][1]) if "mfu" in r else "-"
        out.append(f"| {r['model']} | {r['framework']} | {r['dtype']} | {r['images_per_s']:.2f} | {ratio} | "
                   f"{100 * r.get('mfu', float('nan')):.1f}% | {of} | {r['compile_s']:.2f} s | "
                   f"{r['peak_rss_bytes'] / 2**20:.0f} MB | {note(r, runs)} |")
    # The targets: podlet against the faster PyTorch (f32 or bf16) and the faster JAX;
    # podlet bf16 against PyTorch and JAX bf16, podlet f32-bf16prec against PyTorch f32.
    for model in dict.fromkeys(r["model"] for r in runs):
        best, ips = {}, {}
        for r in runs:
            if r["model"] == model and "images_per_s" in r:
                fw = r["framework"]
                best[fw] = max(best.get(fw, 0.0), r["images_per_s"])
                ips[(fw, r["dtype"])] = r["images_per_s"]
        for fw in ("podlet", "podlet-direct", "podlet-excess"):
            if fw in best and "torch" in best and "jax" in best:
                out.append(f"\n{model} {fw} (best dtype) {best[fw]:.2f} img/s = {best[fw] / best['torch']:.2f}x the "
                           f"faster PyTorch, {best[fw] / best['jax']:.2f}x the faster JAX.")
        for dtype, torch_dtype in (("bf16", "bf16"), (BF16PREC, "f32")):
            for me in ("podlet", "podlet-excess"):
                mine = ips.get((me, dtype))
                vs = [f"{mine / ips[(fw, d)]:.2f}x {name} {d}" for fw, d, name in
                      (("torch", torch_dtype, "PyTorch"), ("jax", dtype, "JAX")) if mine and (fw, d) in ips]
                if vs:
                    out.append(f"\n{model} {me} {dtype} {mine:.2f} img/s = " + ", ".join(vs) + ".")
    return "\n".join(out)

if __name__ == "__main__":
    main()
