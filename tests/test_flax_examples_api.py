"""The API patterns of Flax's linen examples (imagenet, vae, sst2, seq2seq, lm1b), each
written here in our own small code and run on podlet and on JAX/Flax/Optax from the same
params and inputs (issue 26). `bench/flax_examples.py` runs the examples themselves."""
import functools

import numpy as np
import pytest

import flax.linen as fnn
import jax
import jax.numpy as jjnp
import optax
from flax.training import common_utils as f_common_utils
from flax.training import train_state as f_train_state

import podlet
import podlet.numpy as pjnp
import podlet.optim as poptax
from podlet import lax as plax
from podlet import nn as pnn
from podlet.training import common_utils as p_common_utils
from podlet.training import train_state as p_train_state
from podlet.experimental import mesh_utils as pmesh


@pytest.fixture(autouse=True, scope="module")
def _quick_jax_compiles():
    """The oracle's XLA compiles dominate this file's time: compile them without XLA's
    optimisation passes (the comparisons here are within tolerances that hold either way)
    and restore the setting for the other files, whose oracles must be JAX's default
    build (several compare bits). Never XLA_FLAGS: set at import, it would reach every
    test file of the session."""
    before = jax.config.read("jax_disable_most_optimizations")
    jax.config.update("jax_disable_most_optimizations", True)
    yield
    jax.config.update("jax_disable_most_optimizations", before)


def to_podlet(tree):
    return jax.tree_util.tree_map(lambda x: pjnp.asarray(np.asarray(x)), tree)


def to_jax(tree):
    """podlet's init (cheap) handed to Flax: JAX's apply fails on any name or shape that differs."""
    return podlet.tree_util.tree_map(lambda x: jjnp.asarray(np.asarray(x)), tree)


def close(a, b, rtol=1e-5, atol=1e-6):
    la, lb = jax.tree_util.tree_leaves(a), podlet.tree_util.tree_leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        np.testing.assert_allclose(np.asarray(y), np.asarray(x), rtol=rtol, atol=atol)


@pytest.fixture
def one_device():
    """JAX's CPU has one device: run podlet's pmap on one as well (BatchNorm's batch
    statistics are per device)."""
    old = podlet.local_device_count()
    podlet.config.update("num_devices", 1)
    yield
    podlet.config.update("num_devices", old)


# ---------------------------------------------------------------------------------
# imagenet: BatchNorm ResNet, TrainState subclass with batch_stats, sgd+nesterov on a
# warmup + cosine schedule, common_utils.onehot / shard, pmap(in_axes=(None, 0),
# out_axes=(None, 0)) with lax.pmean of grads, batch stats and a metrics dict.

def _resnet_twin(nn):
    class Block(nn.Module):
        filters: int

        @nn.compact
        def __call__(self, x):
            conv = functools.partial(nn.Conv, use_bias=False, dtype=jjnp.float32)
            norm = functools.partial(nn.BatchNorm, use_running_average=False, momentum=0.9, epsilon=1e-5)
            y = norm(scale_init=nn.initializers.zeros_init())(conv(self.filters, (3, 3))(x))
            r = norm(name="norm_proj")(conv(self.filters, (1, 1), name="conv_proj")(x))
            return nn.relu(r + y)

    class Net(nn.Module):
        num_classes: int = 10

        @nn.compact
        def __call__(self, x, train: bool = True):
            x = nn.Conv(4, (3, 3), (2, 2), padding=[(1, 1), (1, 1)], use_bias=False, name="conv_init")(x)
            x = nn.relu(nn.BatchNorm(use_running_average=not train, name="bn_init")(x))
            x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
            x = Block(4)(x)
            x = jjnp.mean(x, axis=(1, 2)) if nn is fnn else pjnp.mean(x, axis=(1, 2))
            return nn.Dense(self.num_classes)(x)

    return Net()


def _imagenet_step(jax_, jnp, nn, optax_, common_utils, train_state, lax):
    class TrainState(train_state.TrainState):
        batch_stats: object
        dynamic_scale: object

    lr_fn = optax_.join_schedules(
        schedules=[optax_.linear_schedule(init_value=0.0, end_value=0.1, transition_steps=2),
                   optax_.cosine_decay_schedule(init_value=0.1, decay_steps=4)],
        boundaries=[2])

    def train_step(state, batch):
        def loss_fn(params):
            logits, new_model_state = state.apply_fn(
                {"params": params, "batch_stats": state.batch_stats}, batch["image"], mutable=["batch_stats"])
            one_hot = common_utils.onehot(batch["label"], num_classes=10)
            loss = jnp.mean(optax_.softmax_cross_entropy(logits=logits, labels=one_hot))
            l2 = sum(jnp.sum(x ** 2) for x in jax_.tree_util.tree_leaves(params) if x.ndim > 1)
            return loss + 1e-4 * 0.5 * l2, (new_model_state, logits)

        aux, grads = jax_.value_and_grad(loss_fn, has_aux=True)(state.params)
        grads = lax.pmean(grads, axis_name="batch")
        new_model_state, logits = aux[1]
        metrics = lax.pmean({"loss": aux[0], "accuracy": jnp.mean(jnp.argmax(logits, -1) == batch["label"])},
                            axis_name="batch")
        metrics["learning_rate"] = lr_fn(state.step)
        new_state = state.apply_gradients(grads=grads,
                                          batch_stats=lax.pmean(new_model_state["batch_stats"], "batch"))
        return new_state, metrics

    return TrainState, lr_fn, jax_.pmap(train_step, in_axes=(None, 0), out_axes=(None, 0), axis_name="batch")


def test_imagenet_pattern(one_device):
    rs = np.random.RandomState(0)
    image = rs.normal(size=(4, 16, 16, 3)).astype(np.float32)
    label = rs.randint(0, 10, size=(4,)).astype(np.int32)
    fm, pm = _resnet_twin(fnn), _resnet_twin(pnn)
    variables = to_jax(podlet.jit(pm.init)(podlet.random.key(0), pjnp.ones((1, 16, 16, 3))))
    results = []
    for jax_, jnp, nn, optax_, cu, ts, lax, m, v in (
            (jax, jjnp, fnn, optax, f_common_utils, f_train_state, jax.lax, fm, variables),
            (podlet, pjnp, pnn, poptax, p_common_utils, p_train_state, plax, pm, to_podlet(variables))):
        TrainState, lr_fn, step = _imagenet_step(jax_, jnp, nn, optax_, cu, ts, lax)
        tx = optax_.sgd(learning_rate=lr_fn, momentum=0.9, nesterov=True)
        state = jax_.jit(lambda v: TrainState.create(apply_fn=m.apply, params=v["params"], tx=tx,
                                                     batch_stats=v["batch_stats"], dynamic_scale=None))(v)
        batch = cu.shard({"image": image, "label": label})
        assert batch["image"].shape == (1, 4, 16, 16, 3)
        out = []
        for _ in range(3):
            state, metrics = step(state, batch)
            out.append({k: float(np.asarray(x)[0]) for k, x in cu.get_metrics([metrics]).items()})
        results.append((out, state.params, state.batch_stats, int(state.step)))
    (fo, fp, fb, fs), (po, pp, pb, ps) = results
    assert fs == ps == 3
    for a, b in zip(fo, po):
        assert a.keys() == b.keys()
        for k in a:
            np.testing.assert_allclose(b[k], a[k], rtol=1e-5, atol=1e-6)
    assert fo[2]["learning_rate"] == pytest.approx(0.1)
    close(fp, pp, rtol=1e-4, atol=1e-5)
    close(fb, pb, rtol=1e-4, atol=1e-5)


def test_pmap_out_axes_prefix():
    n = podlet.local_device_count()
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    f = podlet.pmap(lambda s, v: ({"s": s * 2.0, "m": plax.pmean(v, "i")}, v + s),
                    in_axes=(None, 0), out_axes=({"s": None, "m": None}, 0), axis_name="i")
    (d, y) = f(pjnp.float32(1.5), x)
    assert np.asarray(d["s"]).shape == () and float(d["s"]) == 3.0
    np.testing.assert_allclose(np.asarray(d["m"]), x.mean(0), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(y), x + 1.5)
    g = podlet.pmap(lambda v: v * 2.0, out_axes=1, axis_name="i")
    np.testing.assert_array_equal(np.asarray(g(np.ones((n, 2), np.float32))), np.full((2, n), 2.0))
    bad = podlet.pmap(lambda v: (v, v), out_axes=(None, 0), axis_name="i")
    with pytest.raises(ValueError, match=r"out_axes=None for output \[0\]"):
        bad(x)


# ---------------------------------------------------------------------------------
# vae: setup() submodules, a method called through nn.apply, reparameterisation with
# random.normal, vmap'd KL and Bernoulli log-likelihood (log_sigmoid, expm1), adam.

def _vae_twin(nn, jnp, random):
    class Encoder(nn.Module):
        latents: int

        @nn.compact
        def __call__(self, x):
            x = nn.relu(nn.Dense(12, name="fc1")(x))
            return nn.Dense(self.latents, name="fc2_mean")(x), nn.Dense(self.latents, name="fc2_logvar")(x)

    class Decoder(nn.Module):
        @nn.compact
        def __call__(self, z):
            return nn.Dense(20, name="fc2")(nn.relu(nn.Dense(12, name="fc1")(z)))

    class VAE(nn.Module):
        latents: int = 3

        def setup(self):
            self.encoder = Encoder(self.latents)
            self.decoder = Decoder()

        def __call__(self, x, z_rng):
            mean, logvar = self.encoder(x)
            z = mean + random.normal(z_rng, logvar.shape) * jnp.exp(0.5 * logvar)
            return self.decoder(z), mean, logvar

        def generate(self, z):
            return nn.sigmoid(self.decoder(z))

    return VAE()


def _vae_losses(jax_, jnp, nn):
    @jax_.vmap
    def kl(mean, logvar):
        return -0.5 * jnp.sum(1 + logvar - jnp.square(mean) - jnp.exp(logvar))

    @jax_.vmap
    def bce(logits, labels):
        logits = nn.log_sigmoid(logits)
        return -jnp.sum(labels * logits + (1.0 - labels) * jnp.log(-jnp.expm1(logits)))

    return kl, bce


def test_vae_pattern():
    rs = np.random.RandomState(1)
    batch = (rs.rand(5, 20) > 0.5).astype(np.float32)
    z = rs.normal(size=(4, 3)).astype(np.float32)
    res = []
    for side in ("jax", "podlet"):
        jax_, jnp, nn, optax_, ts = ((jax, jjnp, fnn, optax, f_train_state) if side == "jax"
                                     else (podlet, pjnp, pnn, poptax, p_train_state))
        m = _vae_twin(nn, jnp, jax_.random)
        kl, bce = _vae_losses(jax_, jnp, nn)
        rng, key = jax_.random.split(jax_.random.key(0))
        if side == "jax":  # podlet's init, handed to Flax, whose apply checks every name and shape
            p0 = podlet.jit(_vae_twin(pnn, pjnp, podlet.random).init)(
                podlet.random.key(1), pjnp.ones((5, 20)), podlet.random.key(2))["params"]
        state = jax_.jit(lambda p: ts.TrainState.create(apply_fn=m.apply, params=p, tx=optax_.adam(1e-2)))(
            to_jax(p0) if side == "jax" else p0)

        @jax_.jit
        def step(state, key):
            def loss_fn(params):
                recon, mean, logvar = m.apply({"params": params}, batch, key)
                return bce(recon, batch).mean() + kl(mean, logvar).mean()

            loss, grads = jax_.value_and_grad(loss_fn)(state.params)
            return state.apply_gradients(grads=grads), loss

        out = []
        for _ in range(2):
            rng, key = jax_.random.split(rng)
            state, loss = step(state, key)
            out.append(float(loss))
        gen = jax_.jit(lambda p: nn.apply(lambda vae: vae.generate(z), m)({"params": p}))(state.params)
        res.append((out, gen, state.params))
    close(*[r[0] for r in res], rtol=1e-5)
    close(res[0][1], res[1][1], rtol=1e-5, atol=1e-6)
    close(res[0][2], res[1][2], rtol=1e-4, atol=1e-6)


# ---------------------------------------------------------------------------------
# seq2seq: nn.RNN(LSTMCell, return_carry=True) with seq_lengths; a custom RNNCellBase
# decoder drawing from make_rng('lstm') (random.categorical, nn.one_hot) under
# nn.RNN(split_rngs=...), with a tuple initial_carry; a jit'd value_and_grad step.

def _seq2seq_twin(nn, jax_, jnp, teacher_force):
    class DecoderCell(nn.RNNCellBase):
        features: int
        teacher_force: bool
        vocab_size: int

        @nn.compact
        def __call__(self, carry, x):
            lstm_state, last_prediction = carry
            if not self.teacher_force:
                x = last_prediction
            lstm_state, y = nn.LSTMCell(self.features)(lstm_state, x)
            logits = nn.Dense(features=self.vocab_size)(y)
            token = jax_.random.categorical(self.make_rng("lstm"), logits)
            prediction = jax_.nn.one_hot(token, self.vocab_size, dtype=jnp.float32)
            return (lstm_state, prediction), (logits, prediction)

        @property
        def num_feature_axes(self):
            return 1

    class Seq2seq(nn.Module):
        @nn.compact
        def __call__(self, enc_in, dec_in):
            encoder = nn.RNN(nn.LSTMCell(6), return_carry=True, name="encoder")
            decoder = nn.RNN(DecoderCell(dec_in.shape[-1], teacher_force, 5),
                             split_rngs={"params": False, "lstm": True}, name="decoder")
            lengths = jnp.argmax(jnp.argmax(enc_in, axis=-1) == 1, axis=-1)
            state, _ = encoder(enc_in, seq_lengths=lengths)
            return decoder(dec_in[:, :-1], initial_carry=(state, dec_in[:, 0]))

    return Seq2seq()


def test_seq2seq_pattern():
    rs = np.random.RandomState(2)
    enc = np.eye(5, dtype=np.float32)[rs.randint(2, 5, size=(3, 4))]
    enc[:, 2] = np.eye(5)[1]  # eos
    dec = np.eye(5, dtype=np.float32)[rs.randint(0, 5, size=(3, 4))]
    res = []
    for side in ("jax", "podlet"):
        jax_, jnp, nn, optax_, ts = ((jax, jjnp, fnn, optax, f_train_state) if side == "jax"
                                     else (podlet, pjnp, pnn, poptax, p_train_state))
        m = _seq2seq_twin(nn, jax_, jnp, teacher_force=True)
        if side == "jax":
            r1, r2 = podlet.random.split(podlet.random.key(0))
            p0 = podlet.jit(_seq2seq_twin(pnn, podlet, pjnp, True).init)({"params": r1, "lstm": r2}, enc, dec)
            params = to_jax(p0["params"])
        else:
            params = p0["params"]
        state = jax_.jit(lambda p: ts.TrainState.create(apply_fn=m.apply, params=p, tx=optax_.adam(0.01)))(params)

        @jax_.jit
        def step(state, batch, rng):
            key = jax_.random.fold_in(rng, state.step)

            def loss_fn(params):
                logits, _ = state.apply_fn({"params": params}, batch["q"], batch["a"], rngs={"lstm": key})
                return -jnp.mean(jnp.sum(nn.log_softmax(logits) * batch["a"][:, 1:], -1)), logits

            (loss, logits), grads = jax_.value_and_grad(loss_fn, has_aux=True)(state.params)
            return state.apply_gradients(grads=grads), loss

        out = []
        for _ in range(2):
            state, loss = step(state, {"q": enc, "a": dec}, jax_.random.key(1))
            out.append(float(loss))
        sampler = _seq2seq_twin(nn, jax_, jnp, teacher_force=False)
        _, pred = jax_.jit(sampler.apply)({"params": state.params}, enc, dec, rngs={"lstm": jax_.random.key(3)})
        res.append((out, state.params, pred))
    close(res[0][0], res[1][0], rtol=1e-5)
    close(res[0][1], res[1][1], rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(res[1][2]), np.asarray(res[0][2]))


# ---------------------------------------------------------------------------------
# sst2: an Embed-like param made in setup(), word dropout through make_rng('dropout') and
# nn.module.merge_param, nn.Dropout, a bidirectional LSTM built from
# nn.transforms.scan(OptimizedLSTMCell, variable_broadcast='params', in_axes=1,
# out_axes=1) with vmap'd per-row sequence flips, a struct.PyTreeNode of metrics with a
# plain int field, optax.chain(sgd(momentum), add_decayed_weights), jit'd step with fold_in.

def _sst2_twin(nn, jax_, jnp):
    @jax_.vmap
    def flip(inputs, lengths):
        return jnp.flip(jnp.roll(inputs, inputs.shape[0] - lengths, axis=0), axis=0)

    class WordDropout(nn.Module):
        rate: float
        deterministic: bool | None = None

        @nn.compact
        def __call__(self, ids, deterministic=None):
            deterministic = nn.module.merge_param("deterministic", self.deterministic, deterministic)
            if deterministic:
                return ids
            mask = jax_.random.bernoulli(self.make_rng("dropout"), p=self.rate, shape=ids.shape)
            return jnp.where(mask, jnp.array([1]), ids)

    class LSTM(nn.Module):
        hidden: int

        @functools.partial(nn.transforms.scan, variable_broadcast="params", in_axes=1, out_axes=1,
                           split_rngs={"params": False})
        @nn.compact
        def __call__(self, carry, x):
            return nn.OptimizedLSTMCell(self.hidden)(carry, x)

        def initialize_carry(self, shape):
            return nn.OptimizedLSTMCell(self.hidden, parent=None).initialize_carry(jax_.random.key(0), shape)

    class Classifier(nn.Module):
        def setup(self):
            self.embedding = self.param("embedding", nn.initializers.normal(stddev=0.1), (12, 5), jnp.float32)
            self.word_dropout = WordDropout(0.2)
            self.dropout = nn.Dropout(rate=0.5)
            self.fwd, self.bwd = LSTM(4), LSTM(4)
            self.out = nn.Dense(1, use_bias=False)

        def __call__(self, ids, lengths, deterministic=None):
            x = self.embedding[self.word_dropout(ids, deterministic=deterministic)]
            x = self.dropout(x, deterministic=deterministic)
            _, f = self.fwd(self.fwd.initialize_carry(x[:, 0].shape), x)
            _, b = self.bwd(self.bwd.initialize_carry(x[:, 0].shape), flip(x, lengths))
            h = jnp.concatenate([f, flip(b, lengths)], -1)
            h = h[jnp.arange(h.shape[0]), lengths - 1]
            return self.out(nn.tanh(h))

    return Classifier()


def test_sst2_pattern():
    rs = np.random.RandomState(3)
    batch = {"ids": rs.randint(2, 12, size=(3, 6)).astype(np.int32),
             "length": np.array([6, 2, 4], np.int32), "label": np.array([1, 0, 1], np.int32)}
    p0 = podlet.jit(functools.partial(_sst2_twin(pnn, podlet, pjnp).init, deterministic=True))(
        podlet.random.key(0), pjnp.ones((2, 3), pjnp.int32), pjnp.ones((2,), pjnp.int32))["params"]
    assert set(p0) == {"embedding", "fwd", "bwd", "out"} and "OptimizedLSTMCell_0" in p0["fwd"]
    res = []
    for side in ("jax", "podlet"):
        jax_, jnp, nn, optax_, ts, struct = ((jax, jjnp, fnn, optax, f_train_state, __import__("flax").struct)
                                             if side == "jax" else
                                             (podlet, pjnp, pnn, poptax, p_train_state, podlet.struct))
        m = _sst2_twin(nn, jax_, jnp)

        class Metrics(struct.PyTreeNode):
            loss: object
            count: int | None = None

        tx = optax_.chain(optax_.sgd(learning_rate=0.1, momentum=0.9), optax_.add_decayed_weights(1e-3))
        state = jax_.jit(lambda p: ts.TrainState.create(apply_fn=m.apply, params=p, tx=tx))(
            to_jax(p0) if side == "jax" else p0)

        @jax_.jit
        def step(state, batch, rngs):
            rngs = {k: jax_.random.fold_in(r, state.step) for k, r in rngs.items()}

            def loss_fn(params):
                logits = state.apply_fn({"params": params}, batch["ids"], batch["length"], deterministic=False,
                                        rngs=rngs)
                return jnp.mean(optax_.sigmoid_binary_cross_entropy(logits[:, 0], batch["label"])), logits

            (loss, logits), grads = jax_.value_and_grad(loss_fn, has_aux=True)(state.params)
            return state.apply_gradients(grads=grads), Metrics(loss=loss, count=logits.shape[0])

        out = []
        for _ in range(2):
            state, metrics = step(state, batch, {"dropout": jax_.random.key(1)})
            assert metrics.count == 3
            out.append(float(metrics.loss))
        res.append((out, state.params))
    close(res[0][0], res[1][0], rtol=1e-5)
    close(res[0][1], res[1][1], rtol=1e-4, atol=1e-6)


# ---------------------------------------------------------------------------------
# sst2 / imagenet log through flax.metrics.tensorboard: podlet.metrics.tensorboard writes
# the same TFRecord-framed event files without TensorFlow.

def _crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    crc ^= 0xFFFFFFFF
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def test_tensorboard_summary_writer(tmp_path):
    import struct as st
    from podlet.metrics import tensorboard
    w = tensorboard.SummaryWriter(str(tmp_path))
    w.scalar("train_loss", np.float32(0.25), 7)
    w.text("note", "hello", 1)
    w.hparams({"lr": 0.1, "model": {"depth": 2}})
    w.close()
    with pytest.raises(ValueError, match="closed"):
        w.scalar("x", 1.0, 0)
    (path,) = list(tmp_path.iterdir())
    assert path.name.startswith("events.out.tfevents.")
    raw, records = path.read_bytes(), []
    while raw:
        (n,) = st.unpack("<Q", raw[:8])
        assert st.unpack("<I", raw[8:12])[0] == _crc32c(raw[:8])
        data = raw[12:12 + n]
        assert st.unpack("<I", raw[12 + n:16 + n])[0] == _crc32c(data)
        records.append(data)
        raw = raw[16 + n:]
    assert len(records) == 4 and b"brain.Event:2" in records[0]
    # Event{step: 7 (field 2), summary (5){value (1){tag (1): "train_loss", simple_value (2): 0.25}}}
    assert b"\x10\x07" in records[1] and b"\x0a\x0atrain_loss\x15" + st.pack("<f", 0.25) in records[1]
    assert b"hello" in records[2] and b"text" in records[2]
    assert b"| model.depth | 2 |" in records[3] and b"| lr | 0.1 |" in records[3]


# ---------------------------------------------------------------------------------
# lm1b: nn.Embed shared for input and output (attend), MultiHeadDotProductAttention with
# combine_masks(make_attention_mask, make_causal_mask) in training and with the
# autoregressive cache (decode=True, mutable=['cache']) in sampling, a temperature /
# top-k sampler in lax.while_loop (top_k, categorical, take_along_axis,
# dynamic_update_slice), label smoothing through common_utils.onehot(on_value,
# off_value), adamw on join_schedules(linear warmup, rsqrt decay).

def _lm_twin(nn, jnp, decode):
    class LM(nn.Module):
        @nn.compact
        def __call__(self, ids, train: bool = False):
            emb = nn.Embed(11, 8, embedding_init=nn.initializers.normal(stddev=1.0), name="embed")
            x = emb(ids.astype(jnp.int32))
            mask = None if decode else nn.combine_masks(nn.make_attention_mask(ids > 0, ids > 0),
                                                        nn.make_causal_mask(ids))
            y = nn.MultiHeadDotProductAttention(
                num_heads=2, qkv_features=8, kernel_init=nn.initializers.xavier_uniform(),
                bias_init=nn.initializers.normal(stddev=1e-6), use_bias=False, broadcast_dropout=False, dropout_rate=0.1,
                deterministic=not train, decode=decode)(nn.LayerNorm()(x), mask=mask)
            x = x + nn.Dropout(rate=0.1)(y, deterministic=not train)
            return emb.attend(nn.LayerNorm()(x))

    return LM()


def _lm_sample(jax_, jnp, lax, model, params, cache, prompt, key):
    steps = prompt.shape[1]

    def body(s):
        i, seqs, cache, tok, rng = s
        rng, sub = jax_.random.split(rng)
        logits, new_vars = model.apply({"params": params, "cache": cache}, tok, mutable=["cache"])
        vals, idxs = lax.top_k(logits[:, 0], 3)
        pick = jax_.random.categorical(sub, vals / 0.7).astype(jnp.int32)[:, None]
        nxt = jnp.take_along_axis(idxs, pick, axis=-1)[:, 0]
        nxt = jnp.where(seqs[:, i + 1] == 0, nxt, seqs[:, i + 1])
        return i + 1, lax.dynamic_update_slice(seqs, nxt[:, None], (0, i + 1)), new_vars["cache"], nxt[:, None], rng

    init = (jnp.array(0), prompt, cache, prompt[:, :1], key)
    return lax.while_loop(lambda s: s[0] < steps - 1, body, init)[1]


def test_lm1b_pattern():
    rs = np.random.RandomState(4)
    ids = np.concatenate([rs.randint(1, 11, size=(2, 5)), np.zeros((2, 2))], 1).astype(np.int32)
    prompt = ids.copy()
    prompt[:, 2:] = 0
    pm = _lm_twin(pnn, pjnp, decode=False)
    p0 = podlet.jit(pm.init)(podlet.random.key(0), pjnp.ones((2, 7), pjnp.int32))["params"]
    res = []
    for side in ("jax", "podlet"):
        jax_, jnp, nn, optax_, ts, cu, lax = ((jax, jjnp, fnn, optax, f_train_state, f_common_utils, jax.lax)
                                              if side == "jax" else
                                              (podlet, pjnp, pnn, poptax, p_train_state, p_common_utils, plax))
        m, dm = _lm_twin(nn, jnp, False), _lm_twin(nn, jnp, True)
        lr = optax_.join_schedules([optax_.linear_schedule(0.0, 0.01, 2), lambda c: 0.01 * (c + 2) ** -0.5 * 2 ** 0.5],
                                   [2])
        tx = optax_.adamw(lr, b1=0.9, b2=0.98, eps=1e-9, weight_decay=0.1)
        state = jax_.jit(lambda p: ts.TrainState.create(apply_fn=m.apply, params=p, tx=tx))(
            to_jax(p0) if side == "jax" else p0)

        @jax_.jit
        def step(state, inputs, rng):
            rng = jax_.random.fold_in(rng, state.step)
            weights = jnp.where(inputs > 0, 1, 0).astype(jnp.float32)

            def loss_fn(params):
                logits = m.apply({"params": params}, inputs, train=True, rngs={"dropout": rng})
                targets = cu.onehot(inputs, 11, on_value=0.9, off_value=0.01)
                loss = -jnp.sum(targets * nn.log_softmax(logits), axis=-1)
                return (loss * weights).sum() / weights.sum()

            loss, grads = jax_.value_and_grad(loss_fn)(state.params)
            return state.apply_gradients(grads=grads), loss

        out = []
        for _ in range(2):
            state, loss = step(state, ids, jax_.random.key(1))
            out.append(float(loss))

        @jax_.jit
        def predict(params, prompt, key):
            cache = dm.init(jax_.random.key(0), jnp.ones(prompt.shape, jnp.int32))["cache"]
            return _lm_sample(jax_, jnp, lax, dm, params, cache, prompt, key)

        res.append((out, state.params, predict(state.params, prompt, jax_.random.key(5))))
    close(res[0][0], res[1][0], rtol=1e-5)
    close(res[0][1], res[1][1], rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(res[1][2]), np.asarray(res[0][2]))
    assert (np.asarray(res[1][2])[:, :2] == ids[:, :2]).all()
    # the cache collection: flax's names, shapes and dtypes; one position per call
    dm = _lm_twin(pnn, pjnp, True)
    cache = dm.init(podlet.random.key(0), pjnp.ones((2, 7), pjnp.int32))["cache"]
    want = jax.eval_shape(_lm_twin(fnn, jjnp, True).init, jax.random.key(0), jjnp.ones((2, 7), jjnp.int32))["cache"]
    def spec(tree):
        return [(jax.tree_util.keystr(p), tuple(x.shape), str(x.dtype))
                for p, x in jax.tree_util.tree_leaves_with_path(tree)]

    assert spec(want) == spec(to_jax(cache))
    with pytest.raises(ValueError, match=r"Autoregressive cache shape error, expected query shape \(2, 1, 2, 4\)"):
        dm.apply({"params": res[1][1], "cache": cache}, pjnp.ones((2, 2), pjnp.int32), mutable=["cache"])


# lm1b's mesh and logical partitioning: every initializer wrapped in
# nn.with_logical_partitioning, the state's partition specs read from eval_shape
# (nn.get_partition_spec), turned into shardings with nn.logical_to_mesh_sharding under
# set_mesh + nn_partitioning.axis_rules, init jitted with out_shardings and unboxed
# (isinstance nn.spmd.LogicallyPartitioned), the train step jitted with in_shardings /
# out_shardings / donate_argnums over a Mesh from mesh_utils.create_device_mesh.
# podlet runs the batch axis over 2 devices (data parallel), JAX over its one.

LM1B_RULES = [["mlp", "tensor"], ["vocab", "tensor"], ["embed", "fsdp"], ["heads", "tensor"]]


def _partitioned_lm(nn):
    class LM(nn.Module):
        @nn.compact
        def __call__(self, ids, train: bool = False):
            emb = nn.Embed(11, 8, embedding_init=nn.with_logical_partitioning(nn.initializers.normal(stddev=1.0),
                                                                              ("vocab", "embed")))
            x = emb(ids.astype("int32"))
            ln = dict(bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)),
                      scale_init=nn.with_logical_partitioning(nn.initializers.ones, ("embed",)))
            h = nn.Dense(16, kernel_init=nn.with_logical_partitioning(nn.initializers.xavier_uniform(),
                                                                      ("embed", "mlp")),
                         bias_init=nn.with_logical_partitioning(nn.initializers.normal(stddev=1e-6), ("mlp",)))(
                nn.LayerNorm(**ln)(x))
            h = nn.Dropout(rate=0.1)(nn.relu(h), deterministic=not train)
            x = x + nn.Dense(8, kernel_init=nn.with_logical_partitioning(nn.initializers.xavier_uniform(),
                                                                         ("mlp", "embed")))(h)
            return emb.attend(nn.LayerNorm(**ln)(x))
    return LM()


def test_lm1b_mesh_pattern():
    rs = np.random.RandomState(7)
    ids = np.concatenate([rs.randint(1, 11, size=(4, 5)), np.zeros((4, 2))], 1).astype(np.int32)
    res = []
    for side in ("jax", "podlet"):
        if side == "jax":
            from flax.linen import partitioning as nn_partitioning
            from jax.experimental import mesh_utils
            from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
            jax_, jnp, nn, optax_, ts, cu, n_data = jax, jjnp, fnn, optax, f_train_state, f_common_utils, 1
        else:
            from podlet.nn import partitioning as nn_partitioning
            from podlet.experimental import mesh_utils
            from podlet.sharding import Mesh, NamedSharding, PartitionSpec as P
            jax_, jnp, nn, optax_, ts, cu, n_data = podlet, pjnp, pnn, poptax, p_train_state, p_common_utils, 2
        m = _partitioned_lm(nn)
        mesh = Mesh(mesh_utils.create_device_mesh((n_data, 1, 1), jax_.devices()[:n_data]), ["data", "fsdp", "tensor"])
        tx = optax_.adamw(0.01, b1=0.9, b2=0.98, eps=1e-9, weight_decay=0.1)

        def init_state(key):
            variables = m.init(key, jnp.ones((2, 7), jnp.float32))
            return ts.TrainState.create(apply_fn=m.apply, params=variables["params"], tx=tx)

        abstract = jax_.eval_shape(init_state, jax_.random.key(0))
        logical = nn.get_partition_spec(abstract)
        assert logical.params["Dense_0"]["kernel"] == P("embed", "mlp")
        with jax_.set_mesh(mesh), nn_partitioning.axis_rules(LM1B_RULES):
            ann = nn.logical_to_mesh_sharding(logical, mesh, LM1B_RULES)
            state = jax_.jit(init_state, in_shardings=None, out_shardings=ann)(jax_.random.key(0))
        boxed = jax_.tree_util.tree_map(np.array, state.params)  # copies: the step donates the state
        state = jax_.tree_util.tree_map(lambda x: x.unbox() if isinstance(x, nn.spmd.LogicallyPartitioned) else x,
                                        state, is_leaf=lambda x: isinstance(x, nn.spmd.LogicallyPartitioned))
        data = NamedSharding(mesh, P(["data"]))

        def train_step(state, batch, label_smoothing, dropout_rng):
            inputs = batch["inputs"]
            weights = jnp.where(inputs > 0, 1, 0).astype(jnp.float32)
            rng = jax_.random.fold_in(dropout_rng, state.step)

            def loss_fn(params):
                logits = m.apply({"params": params}, inputs, train=True, rngs={"dropout": rng})
                targets = cu.onehot(inputs, 11, on_value=1.0 - label_smoothing, off_value=label_smoothing / 10)
                loss = -jnp.sum(targets * nn.log_softmax(logits), axis=-1)
                return (loss * weights).sum() / weights.sum()

            loss, grads = jax_.value_and_grad(loss_fn)(state.params)
            return state.apply_gradients(grads=grads), loss

        step = jax_.jit(train_step, in_shardings=(ann, data, None), out_shardings=(ann, None), static_argnums=(2,),
                        donate_argnums=0)
        batch = jax_.tree_util.tree_map(lambda x: jnp.array(x), {"inputs": ids})
        if side == "podlet":  # JAX's initial params (XLA's jitted normal init differs from eager by an ulp)
            state = state.replace(params=jax.tree_util.tree_map(pjnp.asarray, res[0][2]))
        init_params = jax_.tree_util.tree_map(np.array, state.params)
        out = []
        for _ in range(3):
            state, loss = step(state, batch, 0.1, jax_.random.key(1))
            out.append(float(loss))
        res.append((out, state.params, init_params, boxed, logical, ann))
    (jl, jp, j0, jb, jlog, jann), (pl, pp, p0, pb, plog, pann) = res
    def specs(tu, tree):
        return [(tu.keystr(k), repr(getattr(v, "spec", v))) for k, v in tu.tree_leaves_with_path(tree)]
    assert specs(podlet.tree_util, plog) == specs(jax.tree_util, jlog)
    assert specs(podlet.tree_util, pann) == specs(jax.tree_util, jann)
    assert ("['Dense_0']['kernel']", "P('fsdp', 'tensor')") in specs(podlet.tree_util, pann.params)
    assert str(podlet.tree_util.tree_structure(pb)) == str(jax.tree_util.tree_structure(jb))
    close(jb, pb, rtol=1e-6, atol=1e-7)  # podlet's own init: Flax's names, shapes and values
    close(jl, pl, rtol=1e-5)
    close(jp, pp, rtol=1e-4, atol=1e-6)
    # a model-parallel layout (a 'tensor' axis of size 2 over the 'mlp' dimension) is refused by name
    mp = podlet.sharding.Mesh(pmesh.create_device_mesh((1, 1, 2), podlet.devices()[:2]), ["data", "fsdp", "tensor"])
    shard = pnn.logical_to_mesh_sharding(plog, mp, LM1B_RULES)
    with pytest.raises(NotImplementedError, match=r"\['Dense_0'\]\['kernel'\].*mesh axis 'tensor' \(size 2\)"):
        podlet.jit(lambda p: p, in_shardings=(shard.params,))(p0)
