"""podlet.models against twins written with flax.linen as the oracle.

Each podlet model (MLP, ResNet with basic and bottleneck blocks, ViT) has a Flax twin
below, written as the seed writes it (the seed's ResNetBlock verbatim, DropPath as a
per-example dropout). Checked on tiny configurations: identical variable trees and
bit-identical ``init`` for the same key; equal logits and BatchNorm running-stat
updates in train mode (dropout and stochastic depth on, same rng) and eval mode, with
Flax's variables copied across; equal loss and gradients of the seed's train-step loss
(``value_and_grad(has_aux=True)`` with ``mutable=['batch_stats']``) within 1e-4; and,
by abstract evaluation only (``eval_shape``), the full-size parameter counts of
ResNet-18/34/50 (gray, 5 classes) and ViT-Tiny/Small equal to the twins'.
"""
import functools
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import jax
import jax.numpy as jnp
import flax.linen as fnn

import podlet
import podlet.numpy as pjnp
from podlet import models

from test_linen_layers import (pkey, jkey, to_podlet, to_jax, spec, assert_same_bits_tree, close, close_tree,
                               drop_path_twin)

BF16 = ml_dtypes.bfloat16
RS = np.random.RandomState(0)
IMG = RS.randn(4, 16, 16, 1).astype(np.float32)       # tiny gray images
LABELS = np.array([0, 3, 1, 4])


# ----------------------------------------------------------------------------- flax twins
nn = fnn                               # the twins below are plain flax.linen code
DropPath = drop_path_twin(fnn, jnp)


class ResNetBlock(nn.Module):          # the seed's block, verbatim
    features: int
    stride: int = 1
    drop_path_rate: float = 0.0
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x, *, train: bool):
        residual = x
        x = nn.Conv(self.features, (3, 3), self.stride,
                    padding="SAME", use_bias=False, dtype=self.dtype)(x)
        x = nn.BatchNorm(use_running_average=not train,
                         momentum=0.9, epsilon=1e-5)(x)
        x = nn.relu(x)
        x = nn.Conv(self.features, (3, 3), 1,
                    padding="SAME", use_bias=False, dtype=self.dtype)(x)
        x = nn.BatchNorm(use_running_average=not train,
                         momentum=0.9, epsilon=1e-5,
                         scale_init=nn.initializers.zeros_init())(x)
        if residual.shape != x.shape:
            residual = nn.Conv(self.features, (1, 1), self.stride,
                               use_bias=False, dtype=self.dtype)(residual)
            residual = nn.BatchNorm(use_running_average=not train,
                                    momentum=0.9, epsilon=1e-5)(residual)
        x = DropPath(self.drop_path_rate)(x, deterministic=not train)
        return nn.relu(x + residual)


class BottleneckResNetBlock(nn.Module):
    features: int
    stride: int = 1
    drop_path_rate: float = 0.0
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, *, train: bool):
        norm = functools.partial(nn.BatchNorm, use_running_average=not train, momentum=0.9, epsilon=1e-5)
        residual = x
        y = nn.relu(norm()(nn.Conv(self.features, (1, 1), use_bias=False, dtype=self.dtype)(x)))
        y = nn.Conv(self.features, (3, 3), self.stride, padding="SAME", use_bias=False, dtype=self.dtype)(y)
        y = nn.relu(norm()(y))
        y = nn.Conv(self.features * 4, (1, 1), use_bias=False, dtype=self.dtype)(y)
        y = norm(scale_init=nn.initializers.zeros_init())(y)
        if residual.shape != y.shape:
            residual = nn.Conv(self.features * 4, (1, 1), self.stride, use_bias=False, dtype=self.dtype,
                               name="conv_proj")(residual)
            residual = norm(name="norm_proj")(residual)
        y = DropPath(self.drop_path_rate)(y, deterministic=not train)
        return nn.relu(y + residual)


class ResNet(nn.Module):
    stage_sizes: Any
    block_cls: Any = ResNetBlock
    num_classes: int = 5
    num_filters: int = 64
    dropout_rate: float = 0.0
    stochastic_depth_rate: float = 0.0
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, *, train: bool):
        norm = functools.partial(nn.BatchNorm, use_running_average=not train, momentum=0.9, epsilon=1e-5)
        x = nn.Conv(self.num_filters, (7, 7), (2, 2), use_bias=False, dtype=self.dtype, name="conv_init")(x)
        x = nn.relu(norm(name="bn_init")(x))
        x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
        total = sum(self.stage_sizes)
        rates = np.linspace(0.0, self.stochastic_depth_rate, total) if total > 1 else [0.0]
        b = 0
        for i, n in enumerate(self.stage_sizes):
            for j in range(n):
                x = self.block_cls(self.num_filters * 2 ** i, stride=2 if i > 0 and j == 0 else 1,
                                   drop_path_rate=float(rates[b]), dtype=self.dtype)(x, train=train)
                b += 1
        x = jnp.mean(x, axis=(1, 2))
        x = nn.Dropout(self.dropout_rate)(x, deterministic=not train)
        return nn.Dense(self.num_classes, dtype=self.dtype)(x).astype(jnp.float32)


class MlpBlock(nn.Module):
    mlp_dim: int
    dropout_rate: float = 0.0
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, *, deterministic):
        dense = functools.partial(nn.Dense, dtype=self.dtype, kernel_init=nn.initializers.xavier_uniform(),
                                  bias_init=nn.initializers.normal(stddev=1e-6))
        d = x.shape[-1]
        x = nn.Dropout(self.dropout_rate)(nn.gelu(dense(self.mlp_dim)(x)), deterministic=deterministic)
        return nn.Dropout(self.dropout_rate)(dense(d)(x), deterministic=deterministic)


class Encoder1DBlock(nn.Module):
    mlp_dim: int
    num_heads: int
    dropout_rate: float = 0.0
    attention_dropout_rate: float = 0.0
    drop_path_rate: float = 0.0
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, inputs, *, deterministic):
        x = nn.LayerNorm(dtype=self.dtype)(inputs)
        x = nn.MultiHeadDotProductAttention(num_heads=self.num_heads, dtype=self.dtype,
                                            kernel_init=nn.initializers.xavier_uniform(), broadcast_dropout=False,
                                            dropout_rate=self.attention_dropout_rate,
                                            deterministic=deterministic)(x, x)
        x = nn.Dropout(self.dropout_rate)(x, deterministic=deterministic)
        x = DropPath(self.drop_path_rate)(x, deterministic) + inputs
        y = nn.LayerNorm(dtype=self.dtype)(x)
        y = MlpBlock(self.mlp_dim, self.dropout_rate, self.dtype)(y, deterministic=deterministic)
        return x + DropPath(self.drop_path_rate)(y, deterministic)


class AddPositionEmbs(nn.Module):
    @nn.compact
    def __call__(self, x):
        return x + self.param("pos_embedding", nn.initializers.normal(stddev=0.02), (1,) + x.shape[1:])


class Encoder(nn.Module):
    num_layers: int
    mlp_dim: int
    num_heads: int
    dropout_rate: float = 0.0
    attention_dropout_rate: float = 0.0
    stochastic_depth_rate: float = 0.0
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, *, train):
        x = AddPositionEmbs(name="posembed_input")(x)
        x = nn.Dropout(self.dropout_rate)(x, deterministic=not train)
        for i in range(self.num_layers):
            rate = self.stochastic_depth_rate * i / max(self.num_layers - 1, 1)
            x = Encoder1DBlock(self.mlp_dim, self.num_heads, self.dropout_rate, self.attention_dropout_rate, rate,
                               self.dtype, name=f"encoderblock_{i}")(x, deterministic=not train)
        return nn.LayerNorm(dtype=self.dtype, name="encoder_norm")(x)


class VisionTransformer(nn.Module):
    num_classes: int = 5
    patch_size: int = 16
    hidden_size: int = 192
    num_layers: int = 12
    num_heads: int = 3
    mlp_dim: int = 768
    dropout_rate: float = 0.0
    attention_dropout_rate: float = 0.0
    stochastic_depth_rate: float = 0.0
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, *, train):
        p = self.patch_size
        x = nn.Conv(self.hidden_size, (p, p), strides=(p, p), padding="VALID", dtype=self.dtype, name="embedding")(x)
        n, h, w, c = x.shape
        x = jnp.reshape(x, (n, h * w, c))
        cls = self.param("cls", nn.initializers.zeros, (1, 1, c))
        x = jnp.concatenate([jnp.tile(cls, (n, 1, 1)), x], axis=1)
        x = Encoder(self.num_layers, self.mlp_dim, self.num_heads, self.dropout_rate, self.attention_dropout_rate,
                    self.stochastic_depth_rate, self.dtype, name="Transformer")(x, train=train)
        x = nn.Dense(self.num_classes, dtype=self.dtype, kernel_init=nn.initializers.zeros, name="head")(x[:, 0])
        return x.astype(jnp.float32)


class MLP(nn.Module):
    features: Any = (512, 256)
    num_classes: int = 10
    dropout_rate: float = 0.0
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, *, train):
        x = x.reshape((x.shape[0], -1))
        for f in self.features:
            x = nn.Dropout(self.dropout_rate)(nn.relu(nn.Dense(f, dtype=self.dtype)(x)), deterministic=not train)
        return nn.Dense(self.num_classes, dtype=self.dtype)(x).astype(jnp.float32)



# ----------------------------------------------------------------------------- harness
SMALL = {
    "resnet_basic": (dict(stage_sizes=[1, 1], num_filters=4, dropout_rate=0.3, stochastic_depth_rate=0.5),
                     lambda kw: models.ResNet(block_cls=models.ResNetBlock, **kw),
                     lambda kw: ResNet(block_cls=ResNetBlock, **kw)),
    "resnet_bottleneck": (dict(stage_sizes=[1, 1], num_filters=2, dropout_rate=0.3, stochastic_depth_rate=0.5),
                          lambda kw: models.ResNet(block_cls=models.BottleneckResNetBlock, **kw),
                          lambda kw: ResNet(block_cls=BottleneckResNetBlock, **kw)),
    "vit": (dict(patch_size=4, hidden_size=8, num_layers=2, num_heads=2, mlp_dim=16, dropout_rate=0.1,
                 attention_dropout_rate=0.2, stochastic_depth_rate=0.3),
            lambda kw: models.VisionTransformer(**kw), lambda kw: VisionTransformer(**kw)),
    "mlp": (dict(features=(12, 8), num_classes=5, dropout_rate=0.25),
            lambda kw: models.MLP(**kw), lambda kw: MLP(**kw)),
}


def build(name, dtype=None):
    kw, P, F = SMALL[name]
    if dtype is None:
        return P(kw), F(kw)
    return P({**kw, "dtype": pjnp.bfloat16}), F({**kw, "dtype": jnp.bfloat16})


def perturbed(fv, seed=0):
    """Flax variables with every param replaced by random values (so zero-initialised
    scales, heads and class tokens do not hide a difference)."""
    rs = np.random.RandomState(seed)
    params = jax.tree_util.tree_map(lambda a: jnp.asarray(rs.randn(*a.shape).astype(a.dtype) * 0.5), fv["params"])
    return {**fv, "params": params}


def loss_fn_for(model, variables, images, rng, train, jnp_, nn_):
    """The seed's train-step loss: apply with mutable batch_stats, softmax cross-entropy."""
    def loss_fn(params):
        out = model.apply({**variables, "params": params}, images, train=train, rngs={"dropout": rng},
                          mutable=["batch_stats"] if train else False)
        logits, updates = out if train else (out, {})
        one_hot = nn_.one_hot(jnp_.asarray(LABELS), 5)
        loss = -jnp_.mean(jnp_.sum(nn_.log_softmax(logits) * one_hot, axis=-1))
        return loss, (logits, updates.get("batch_stats", {}))
    return loss_fn


# ----------------------------------------------------------------------------- tests
@pytest.mark.parametrize("name", list(SMALL))
def test_init_bit_identical(name):
    P, F = build(name)
    pv = P.init(pkey(3), pjnp.asarray(IMG), train=False)
    fv = F.init(jkey(3), jnp.asarray(IMG), train=False)
    assert_same_bits_tree(pv, fv)


def test_expected_param_paths():
    P, _ = build("resnet_basic")
    pv = P.init(pkey(0), pjnp.asarray(IMG), train=False)
    assert sorted(pv["params"]) == ["Dense_0", "ResNetBlock_0", "ResNetBlock_1", "bn_init", "conv_init"]
    assert sorted(pv["params"]["ResNetBlock_1"]) == ["BatchNorm_0", "BatchNorm_1", "BatchNorm_2", "Conv_0", "Conv_1",
                                                     "Conv_2"]
    np.testing.assert_array_equal(np.asarray(pv["params"]["ResNetBlock_0"]["BatchNorm_1"]["scale"]), 0)
    P, _ = build("resnet_bottleneck")
    pv = P.init(pkey(0), pjnp.asarray(IMG), train=False)["params"]
    assert sorted(pv["BottleneckResNetBlock_1"]) == ["BatchNorm_0", "BatchNorm_1", "BatchNorm_2", "Conv_0", "Conv_1",
                                                     "Conv_2", "conv_proj", "norm_proj"]
    np.testing.assert_array_equal(np.asarray(pv["BottleneckResNetBlock_0"]["BatchNorm_2"]["scale"]), 0)
    P, _ = build("vit")
    pv = P.init(pkey(0), pjnp.asarray(IMG), train=False)["params"]
    assert sorted(pv) == ["Transformer", "cls", "embedding", "head"]
    assert sorted(pv["Transformer"]) == ["encoder_norm", "encoderblock_0", "encoderblock_1", "posembed_input"]
    assert pv["Transformer"]["posembed_input"]["pos_embedding"].shape == (1, 17, 8)
    assert sorted(pv["Transformer"]["encoderblock_0"]) == ["LayerNorm_0", "LayerNorm_1", "MlpBlock_0",
                                                           "MultiHeadDotProductAttention_0"]


@pytest.mark.parametrize("name", list(SMALL))
def test_forward_train_and_eval(name):
    P, F = build(name)
    fv = perturbed(F.init(jkey(1), jnp.asarray(IMG), train=False))
    pv = to_podlet(fv)
    # eval: running statistics, no dropout
    close(P.apply(pv, pjnp.asarray(IMG), train=False), F.apply(fv, jnp.asarray(IMG), train=False), rtol=1e-5)
    # train: batch statistics, dropout + stochastic depth from the same rng, stat updates
    got = P.apply(pv, pjnp.asarray(IMG), train=True, rngs={"dropout": pkey(7)}, mutable=["batch_stats"])
    want = F.apply(fv, jnp.asarray(IMG), train=True, rngs={"dropout": jkey(7)}, mutable=["batch_stats"])
    close_tree(got, want, rtol=1e-5)
    assert np.asarray(got[0]).dtype == np.float32


@pytest.mark.parametrize("name", ["resnet_basic", "vit"])
def test_forward_bf16(name):
    P, F = build(name, dtype="bf16")
    fv = perturbed(F.init(jkey(1), jnp.asarray(IMG), train=False))
    # params stay float32 under dtype=bfloat16
    assert {np.asarray(a).dtype for a in jax.tree_util.tree_leaves(fv["params"])} == {np.dtype(np.float32)}
    pv = P.init(pkey(1), pjnp.asarray(IMG), train=False)
    assert spec(pv, podlet.tree_util) == spec(F.init(jkey(1), jnp.asarray(IMG), train=False), jax.tree_util)
    got = P.apply(to_podlet(fv), pjnp.asarray(IMG), train=True, rngs={"dropout": pkey(7)}, mutable=["batch_stats"])
    want = F.apply(fv, jnp.asarray(IMG), train=True, rngs={"dropout": jkey(7)}, mutable=["batch_stats"])
    # bf16 compute (f32 logits): within bf16 tolerance, relative to the logits' scale
    close_tree(got, want, rtol=1e-2)


@pytest.mark.parametrize("name", ["resnet_basic", "resnet_bottleneck", "vit", "mlp"])
def test_train_step_gradients(name):
    P, F = build(name)
    fv = perturbed(F.init(jkey(2), jnp.asarray(IMG), train=False), seed=1)
    pv = to_podlet(fv)
    fl = loss_fn_for(F, fv, jnp.asarray(IMG), jkey(5), True, jnp, fnn)
    pl = loss_fn_for(P, pv, pjnp.asarray(IMG), pkey(5), True, pjnp, podlet.nn)
    # (for the convnets one XLA compile of the whole step beats jax's op-by-op eager
    # compiles; for the ViT it is the other way round)
    vg = jax.value_and_grad(fl, has_aux=True)
    (floss, (flogits, fbs)), fg = (vg if name == "vit" else jax.jit(vg))(fv["params"])
    (ploss, (plogits, pbs)), pg = podlet.jit(podlet.value_and_grad(pl, has_aux=True))(pv["params"])
    close(ploss, floss, rtol=1e-5)
    close(plogits, flogits, rtol=1e-5)
    close_tree(pbs, fbs, rtol=1e-5)
    assert spec(pg, podlet.tree_util) == spec(fg, jax.tree_util)
    jax.tree_util.tree_map(lambda a, b: close(a, b, rtol=1e-4), to_jax(pg), fg)


# ----------------------------------------------------------------------------- full size, abstractly
def _count(tree):
    return sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(tree))


FULL = [
    ("resnet18", lambda: ResNet(stage_sizes=[2, 2, 2, 2]), 11_172_805),
    ("resnet34", lambda: ResNet(stage_sizes=[3, 4, 6, 3]), 21_280_965),
    ("resnet50", lambda: ResNet(stage_sizes=[3, 4, 6, 3], block_cls=BottleneckResNetBlock), 23_512_005),
    ("vit_tiny", lambda: VisionTransformer(), 5_427_077),
    ("vit_small", lambda: VisionTransformer(hidden_size=384, num_heads=6, mlp_dim=1536), 21_470_981),
]


@pytest.mark.parametrize("name,twin,expected", FULL, ids=[f[0] for f in FULL])
def test_full_size_param_counts(name, twin, expected):
    # gray 224x224 patches, 5 classes (the seed's resnet34_gray and friends)
    model = models.get_model(name, num_classes=5, in_channels=1)
    n = models.param_count(model, podlet.ShapeDtypeStruct((1, 224, 224, 1), pjnp.float32), train=False)
    shapes = jax.eval_shape(lambda k, x: twin().init(k, x, train=False), jkey(0),
                            jax.ShapeDtypeStruct((1, 224, 224, 1), jnp.float32))
    assert n == _count(shapes["params"]) == expected
    # the whole variable tree (params and batch_stats) matches, path for path
    pshapes = podlet.eval_shape(lambda k, x: model.init(k, x, train=False), pkey(0),
                                podlet.ShapeDtypeStruct((1, 224, 224, 1), pjnp.float32))
    assert podlet.tree_util.tree_map(lambda s: (tuple(s.shape), np.dtype(s.dtype).name), pshapes) == \
        jax.tree_util.tree_map(lambda s: (tuple(s.shape), np.dtype(s.dtype).name), shapes)


def test_constructors_and_summary():
    assert models.ResNet34().stage_sizes == [3, 4, 6, 3]
    assert models.ResNet50().block_cls is models.BottleneckResNetBlock
    assert (models.ViTSmall().hidden_size, models.ViTSmall().num_heads, models.ViTSmall().mlp_dim) == (384, 6, 1536)
    m = models.ResNet(stage_sizes=[1, 1], widths=[4, 6])
    v = m.init(pkey(0), pjnp.asarray(IMG), train=False)
    assert v["params"]["ResNetBlock_1"]["Conv_0"]["kernel"].shape == (3, 3, 4, 6)
    lines = []
    table = models.summary(m, podlet.ShapeDtypeStruct((1, 16, 16, 1), pjnp.float32), train=False,
                           print_fn=lines.append)
    assert lines == [table]
    total = models.count_params(v["params"]) + models.count_params(v["batch_stats"])
    assert f"Total Parameters: {total:,}" in table
    assert "ResNetBlock_1" in table and "conv_init" in table
    with pytest.raises(ValueError, match="unknown model"):
        models.get_model("resnet1000")
