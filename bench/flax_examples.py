"""Loss parity of Flax's linen examples run on JAX and on podlet (issue 26).

    .venv/bin/python bench/flax_examples.py /path/to/flax            # a checkout
    .venv/bin/python bench/flax_examples.py /work/.mirror/google+flax/repo --ref v0.12.7
    .venv/bin/python bench/flax_examples.py FLAX --examples imagenet,vae --steps 3

For each example (imagenet, vae, sst2, seq2seq, lm1b) it copies the example's own
``*.py`` files from the given Flax checkout (or bare git directory, read with
``git show REF:examples/...``) into a temporary directory twice: once as is, once with
only the import lines rewritten to podlet's (``REWRITES`` below; nothing else in the
files is touched). Each copy runs in its own subprocess (one device each:
``PODLET_NUM_DEVICES=1``; ``--lm1b-devices N`` gives podlet's lm1b run N devices, over
which lm1b's Mesh shards the batch), which builds the model and train state the way the
example's train.py does, and runs the example's own train step a few times on one
fixed random batch. The podlet run starts from JAX's initial parameters (copied leaf by
leaf by key path, so the two trees must agree) and the same batch and keys; the
script prints both losses per step and their largest relative difference.

Input pipelines (TensorFlow / TFDS), clu and ml_collections are not needed: when they
are not installed, stand-in modules that only satisfy the import lines are put on the
path of both copies. Nothing is fetched and no Flax code is kept in the repo.
"""
import argparse
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile
import time

EXAMPLES = ("imagenet", "vae", "sst2", "seq2seq", "lm1b")

# Import lines only. Order matters: the more specific patterns first.
REWRITES = [
    (r"^(\s*)import jax\.numpy as jnp\b", r"\1import podlet.numpy as jnp"),
    (r"^(\s*)from jax import numpy as jnp\b", r"\1import podlet.numpy as jnp"),
    (r"^(\s*)import jax$", r"\1import podlet as jax"),
    (r"^(\s*)from jax import (lax|random|tree_util)\b", r"\1from podlet import \2"),
    (r"^(\s*)from jax\.experimental import mesh_utils\b", r"\1from podlet.experimental import mesh_utils"),
    (r"^(\s*)from jax\.sharding import ", r"\1from podlet.sharding import "),
    (r"^(\s*)from flax import linen as nn\b", r"\1from podlet import nn"),
    (r"^(\s*)import flax\.linen as nn\b", r"\1from podlet import nn"),
    (r"^(\s*)from flax\.linen import partitioning as nn_partitioning\b",
     r"\1from podlet.nn import partitioning as nn_partitioning"),
    (r"^(\s*)from flax import (struct|jax_utils)\b", r"\1from podlet import \2"),
    (r"^(\s*)from flax\.training import ", r"\1from podlet.training import "),
    (r"^(\s*)from flax\.metrics import tensorboard\b", r"\1from podlet.metrics import tensorboard"),
    (r"^(\s*)import optax$", r"\1import podlet.optim as optax"),
]

STUBS = {
    # module name -> source of a stand-in, used only when the real one is missing
    "ml_collections": (
        "class ConfigDict(dict):\n"
        "  def __getattr__(self, k):\n"
        "    try: return self[k]\n"
        "    except KeyError: raise AttributeError(k)\n"
        "  def __setattr__(self, k, v): self[k] = v\n"
        "FrozenConfigDict = ConfigDict\n"),
}
GENERIC_STUB = (
    "class _Any:\n"
    "  def __init__(self, *a, **k): pass\n"
    "  def __call__(self, *a, **k): return _Any()\n"
    "  def __getattr__(self, k): return _Any()\n"
    "  def __mro_entries__(self, bases): return (object,)\n"
    "  def __or__(self, o): return self\n"
    "  __ror__ = __or__\n"
    "def __getattr__(name): return _Any()\n")
GENERIC_STUB_NAMES = ("clu", "clu.metric_writers", "clu.periodic_actions", "tensorflow",
                      "tensorflow_datasets", "tensorflow_text", "sentencepiece",
                      "tensorboard", "tensorboard.plugins", "tensorboard.plugins.hparams",
                      "tensorboard.plugins.hparams.api")


def rewrite_imports(src):
    out = []
    for line in src.splitlines(keepends=True):
        for pat, rep in REWRITES:
            new = re.sub(pat, rep, line)
            if new != line:
                line = new
                break
        out.append(line)
    return "".join(out)


def example_files(flax, ref, example):
    """{name: source} of the example's non-test .py files."""
    d = os.path.join(flax, "examples", example)
    if os.path.isdir(d):
        names = [f for f in os.listdir(d) if f.endswith(".py")]
        read = lambda f: open(os.path.join(d, f)).read()  # noqa: E731
    else:  # a bare git directory (e.g. the mirror)
        ls = subprocess.run(["git", "-C", flax, "ls-tree", "--name-only", f"{ref}:examples/{example}"],
                            check=True, capture_output=True, text=True).stdout.split()
        names = [f for f in ls if f.endswith(".py")]
        read = lambda f: subprocess.run(  # noqa: E731
            ["git", "-C", flax, "show", f"{ref}:examples/{example}/{f}"],
            check=True, capture_output=True, text=True).stdout
    return {f: read(f) for f in names if not f.endswith("_test.py")}


def write_stubs(root):
    import importlib.util
    for name in list(STUBS) + list(GENERIC_STUB_NAMES):
        if importlib.util.find_spec(name.split(".")[0]) is not None:
            continue
        parts = name.split(".")
        d = os.path.join(root, *parts)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "__init__.py"), "w") as f:
            f.write(STUBS.get(name, GENERIC_STUB))


# ----------------------------------------------------------------------------------
# The runs, one per side and example, in a subprocess whose sys.path starts with the
# example's (rewritten) copy.

def _np_tree(tree):
    import numpy as np
    return {k: np.asarray(v) for k, v in _flatten(tree).items()}


def _flatten(tree, prefix=""):
    if hasattr(tree, "items"):
        out = {}
        for k, v in tree.items():
            out.update(_flatten(v, f"{prefix}/{k}"))
        return out
    return {prefix: tree}


def _load_into(tree, flat, jnp, prefix=""):
    """tree with every leaf replaced by flat[path] (the two trees must have one set of paths)."""
    if hasattr(tree, "items"):
        return {k: _load_into(v, flat, jnp, f"{prefix}/{k}") for k, v in tree.items()}
    if prefix not in flat:
        raise KeyError(f"podlet variable {prefix} is not in JAX's tree")
    v = flat[prefix]
    if tuple(v.shape) != tuple(tree.shape):
        raise ValueError(f"{prefix}: JAX shape {v.shape}, podlet shape {tuple(tree.shape)}")
    return jnp.asarray(v)


def _same_paths(ours, theirs, what):
    a, b = set(_flatten(ours)), set(theirs)
    if a != b:
        raise KeyError(f"{what} paths differ: only podlet {sorted(a - b)[:5]}, only JAX {sorted(b - a)[:5]}")


class _Init:
    """Hands JAX's initial variables to the podlet side (and records them on the JAX side)."""

    def __init__(self, side, path):
        self.side, self.path = side, path
        self.saved = pickle.load(open(path, "rb")) if side == "podlet" else {}

    def sync(self, name, tree, jnp):
        if self.side == "jax":
            self.saved[name] = _np_tree(tree)
            return tree
        _same_paths(tree, self.saved[name], name)
        return _load_into(tree, self.saved[name], jnp)

    def data(self, name, make):
        if self.side == "jax":
            self.saved[name] = make()
        return self.saved[name]

    def close(self):
        if self.side == "jax":
            pickle.dump(self.saved, open(self.path, "wb"))


def _f(x):
    import numpy as np
    return float(np.asarray(x))


def run_imagenet(side, init, steps):
    import functools
    import numpy as np
    import jax_or_podlet as jax
    import models
    import train
    from jax_or_podlet_training import common_utils
    jnp = jax.numpy
    cfg = train.ml_collections.ConfigDict()
    for k, v in dict(warmup_epochs=1, num_epochs=3, momentum=0.9, half_precision=False).items():
        setattr(cfg, k, v)
    model = train.create_model(model_cls=models.ResNet18, half_precision=False)
    lr_fn = train.create_learning_rate_fn(cfg, 0.1, steps_per_epoch=2)
    state = train.create_train_state(jax.random.key(0), cfg, model, 32, lr_fn)
    state = state.replace(params=init.sync("params", state.params, jnp),
                          batch_stats=init.sync("batch_stats", state.batch_stats, jnp))
    rs = np.random.RandomState(0)
    images = init.data("image", lambda: rs.normal(size=(8, 32, 32, 3)).astype(np.float32))
    labels = init.data("label", lambda: rs.randint(0, 1000, size=(8,)).astype(np.int32))
    p_train_step = jax.pmap(functools.partial(train.train_step, learning_rate_fn=lr_fn),
                            in_axes=(None, 0), out_axes=(None, 0), axis_name="batch")
    batch = common_utils.shard({"image": images, "label": labels})
    out = []
    for _ in range(steps):
        state, metrics = p_train_step(state, batch)
        m = common_utils.get_metrics([metrics])
        out.append({k: _f(v[0]) for k, v in m.items()})
    return out


def run_vae(side, init, steps):
    import numpy as np
    import jax_or_podlet as jax
    import models
    import train
    jnp, random = jax.numpy, jax.random
    latents, bs = 20, 16
    rng = random.key(0)
    rng, key = random.split(rng)
    init_data = jnp.ones((bs, 784), jnp.float32)
    params = models.model(latents).init(key, init_data, rng)["params"]
    params = init.sync("params", params, jnp)
    state = train.train_state.TrainState.create(apply_fn=models.model(latents).apply, params=params,
                                                tx=train.optax.adam(1e-3))
    rng, z_key, eval_rng = random.split(rng, 3)
    z = random.normal(z_key, (64, latents))
    rs = np.random.RandomState(0)
    batch = jnp.asarray(init.data("batch", lambda: (rs.rand(bs, 784) > 0.5).astype(np.float32)))
    out = []
    for _ in range(steps):
        rng, key = random.split(rng)
        state = train.train_step(state, batch, key, latents)
        metrics, comparison, sample = train.eval_f(state.params, batch, z, eval_rng, latents)
        out.append({k: _f(v) for k, v in metrics.items()})
        out[-1]["sample_mean"] = _f(jnp.mean(sample))
    return out


def run_sst2(side, init, steps):
    import numpy as np
    import jax_or_podlet as jax
    import train
    jnp = jax.numpy
    cfg = train.ml_collections.ConfigDict()
    for k, v in dict(embedding_size=16, hidden_size=8, vocab_size=50, output_size=1, dropout_rate=0.5,
                     word_dropout_rate=0.1, unk_idx=1, learning_rate=0.1, momentum=0.9,
                     weight_decay=3e-6, seed=0).items():
        setattr(cfg, k, v)
    model = train.model_from_config(cfg)
    rng = jax.random.key(cfg.seed)
    state = train.create_train_state(rng, cfg, model)
    state = state.replace(params=init.sync("params", state.params, jnp))
    rs = np.random.RandomState(0)
    batch = init.data("batch", lambda: {
        "token_ids": rs.randint(2, 50, size=(4, 7)).astype(np.int32),
        "length": np.array([7, 3, 5, 1], np.int32),
        "label": np.array([1, 0, 1, 0], np.int32)})
    train_step_fn = jax.jit(train.train_step)
    rngs = {"dropout": jax.random.key(1)}
    out = []
    for _ in range(steps):
        state, metrics = train_step_fn(state, batch, rngs)
        out.append({"loss": _f(metrics.loss), "accuracy": _f(metrics.accuracy), "count": int(metrics.count)})
    return out


def run_seq2seq(side, init, steps):
    import random as pyrandom
    import numpy as np
    import jax_or_podlet as jax
    import train
    jnp = jax.numpy
    train.FLAGS(["seq2seq", "--hidden_size=32", "--max_len_query_digit=2"])
    ctable = train.CTable("0123456789+= ", train.FLAGS.max_len_query_digit)
    state = train.get_train_state(jax.random.key(0), ctable)
    state = state.replace(params=init.sync("params", state.params, jnp))
    pyrandom.seed(0)
    batch = init.data("batch", lambda: {k: np.asarray(v) for k, v in ctable.get_batch(8).items()})
    batch = {k: jnp.asarray(v) for k, v in batch.items()}
    out = []
    for _ in range(steps):
        state, metrics = train.train_step(state, batch, jax.random.key(1), ctable.eos_id)
        out.append({k: _f(v) for k, v in metrics.items()})
    inferred = train.decode(state.params, batch["query"], jax.random.key(2), ctable)
    out[-1]["decoded_sum"] = _f(jnp.sum(jnp.argmax(inferred, -1)))
    return out


def run_lm1b(side, init, steps):
    import functools
    import numpy as np
    import jax_or_podlet as jax
    import models
    import temperature_sampler  # noqa: F401  (predict_step's sampler)
    import train
    import utils
    jnp = jax.numpy
    Mesh, NamedSharding, P = train.Mesh, train.NamedSharding, train.P
    # train.train_and_evaluate's model, optimizer, mesh and jitted steps, at a small size
    # (configs/default.py's mesh axes and logical axis rules; its ICI parallelism set to
    # data parallel, every device on the 'data' axis: podlet does not split parameters)
    config = train.ml_collections.ConfigDict()
    for k, v in dict(per_device_batch_size=2, max_target_length=16, mesh_axes=["data", "fsdp", "tensor"],
                     logical_axis_rules=[["mlp", "tensor"], ["vocab", "tensor"], ["embed", "fsdp"],
                                         ["heads", "tensor"]],
                     data_sharding=["data"], dcn_data_parallelism=-1, dcn_fsdp_parallelism=1,
                     dcn_tensor_parallelism=1, ici_data_parallelism=-1, ici_fsdp_parallelism=1,
                     ici_tensor_parallelism=1).items():
        setattr(config, k, v)
    cfg = models.TransformerConfig(vocab_size=40, output_vocab_size=40, logits_via_embedding=False,
                                   dtype=jnp.float32, emb_dim=16, num_heads=2, num_layers=2,
                                   qkv_dim=16, mlp_dim=32, max_len=16, dropout_rate=0.1,
                                   attention_dropout_rate=0.1, deterministic=False, decode=False,
                                   kernel_init=jax.nn.initializers.xavier_uniform(),
                                   bias_init=jax.nn.initializers.normal(stddev=1e-6))
    eval_cfg = cfg.replace(deterministic=True)
    pred_cfg = cfg.replace(deterministic=True, decode=True)
    mesh = Mesh(utils.create_device_mesh(config), config.mesh_axes)
    rng = jax.random.PRNGKey(0)
    rng, init_rng = jax.random.split(rng)
    rng, inference_rng = jax.random.split(rng)
    m = models.TransformerLM(eval_cfg)
    lr_fn = train.create_learning_rate_schedule(learning_rate=0.01, warmup_steps=2)
    tx = train.optax.adamw(lr_fn, b1=0.9, b2=0.98, eps=1e-9, weight_decay=0.1)
    state, ann = utils.setup_initial_state(m, tx, config, init_rng, mesh)
    state = state.replace(params=init.sync("params", state.params, jnp))
    data_sharding = NamedSharding(mesh, P(config.data_sharding))
    jit_train_step = jax.jit(train.train_step, in_shardings=(ann, data_sharding, None),
                             out_shardings=(ann, None), static_argnums=(2, 3, 4), donate_argnums=0)
    jit_eval_step = jax.jit(train.eval_step, in_shardings=(ann.params, data_sharding), out_shardings=None,
                            static_argnums=(2, 3))
    jit_pred_step = jax.jit(jax.vmap(train.predict_step, in_axes=(
        0, jax.tree_util.tree_map(lambda x: None, state.params), 0, None, None,
        jax.tree_util.tree_map(lambda x: None, pred_cfg), None, None)),
        in_shardings=(data_sharding, ann.params, data_sharding), out_shardings=data_sharding,
        static_argnums=(3, 4, 5, 6, 7))
    rs = np.random.RandomState(0)
    inputs = init.data("inputs", lambda: np.concatenate(
        [rs.randint(1, 40, size=(4, 12)), np.zeros((4, 4))], 1).astype(np.int32))
    batch = jax.tree_util.tree_map(lambda x: jnp.array(x), {"inputs": inputs})
    out = []
    for _ in range(steps):
        state, metrics = jit_train_step(state, batch, cfg, lr_fn, 0.0, rng)
        out.append({k: _f(v) for k, v in metrics.items()})
    ev = jit_eval_step(state.params, batch, eval_cfg)
    out[-1].update({"eval_" + k: _f(v) for k, v in ev.items()})
    # generate_prediction's call: one prompt per device (padded to the device count), a
    # leading device axis; top_k=1 makes the sample independent of the per-device keys
    n_dev = jax.local_device_count()
    prompt = np.zeros((n_dev, 1, 16), np.int32)
    prompt[:, 0, :4] = inputs[0, :4]
    pred = jit_pred_step(jnp.asarray(prompt), state.params, jax.random.split(inference_rng, n_dev), 2, 16,
                         pred_cfg, 1e-3, 1)
    out[-1]["predict_sum"] = _f(jnp.sum(pred[0]))
    return out


RUNS = {"imagenet": run_imagenet, "vae": run_vae, "sst2": run_sst2, "seq2seq": run_seq2seq,
        "lm1b": run_lm1b}


def side_main(side, example, pkl, steps, stubs):
    """Runs in the subprocess: one side of one example; prints one JSON line."""
    import importlib
    import types
    if side == "jax":
        import flax.io  # noqa: F401  (before the stand-ins: flax.io picks gfile by whether tensorflow exists)
        import jax
        from flax.training import common_utils, train_state
        sys.modules["jax_or_podlet"] = jax
        pkg = types.ModuleType("jax_or_podlet_training")
        pkg.common_utils = common_utils
        pkg.train_state = train_state
        sys.modules["jax_or_podlet_training"] = pkg
    else:
        import podlet
        from podlet.training import common_utils, train_state
        sys.modules["jax_or_podlet"] = podlet
        pkg = types.ModuleType("jax_or_podlet_training")
        pkg.common_utils = common_utils
        pkg.train_state = train_state
        sys.modules["jax_or_podlet_training"] = pkg
    sys.path.append(stubs)
    importlib.invalidate_caches()
    init = _Init(side, pkl)
    t0 = time.time()
    out = RUNS[example](side, init, steps)
    init.close()
    print("RESULT " + json.dumps({"steps": out, "seconds": time.time() - t0,
                                  "devices": sys.modules["jax_or_podlet"].device_count()}))


def compare(a, b):
    worst = 0.0
    for sa, sb in zip(a, b):
        for k in sa:
            x, y = sa[k], sb.get(k, float("nan"))
            worst = max(worst, abs(x - y) / max(abs(x), 1e-6)) if y == y else float("inf")
    return worst


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("flax", nargs="?", help="a Flax checkout, or a bare git directory of one")
    ap.add_argument("--ref", default="HEAD", help="git ref when FLAX is a bare git directory")
    ap.add_argument("--examples", default=",".join(EXAMPLES))
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--keep", help="write the two copies here instead of a temporary directory")
    ap.add_argument("--lm1b-devices", type=int, default=1,
                    help="podlet's device count for lm1b (its data-parallel Mesh spans them; JAX runs on one)")
    ap.add_argument("--side", help=argparse.SUPPRESS)
    ap.add_argument("--example", help=argparse.SUPPRESS)
    ap.add_argument("--pkl", help=argparse.SUPPRESS)
    ap.add_argument("--stubs", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.side:
        return side_main(args.side, args.example, args.pkl, args.steps, args.stubs)
    if not args.flax:
        ap.error("give the path of a Flax checkout")
    root = args.keep or tempfile.mkdtemp(prefix="flax_examples_")
    stubs = os.path.join(root, "_stubs")
    write_stubs(stubs)
    ok = True
    for ex in args.examples.split(","):
        files = example_files(args.flax, args.ref, ex)
        res = {}
        for side in ("jax", "podlet"):
            d = os.path.join(root, side, ex)
            os.makedirs(d, exist_ok=True)
            for name, src in files.items():
                with open(os.path.join(d, name), "w") as f:
                    f.write(src if side == "jax" else rewrite_imports(src))
            ndev = args.lm1b_devices if (ex, side) == ("lm1b", "podlet") else 1
            env = dict(os.environ, PYTHONPATH=d, PODLET_NUM_DEVICES=str(ndev),
                       JAX_PLATFORMS="cpu")
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "--side", side, "--example", ex,
                                "--pkl", os.path.join(root, f"{ex}.pkl"), "--steps", str(args.steps), "--stubs", stubs],
                               cwd=d, env=env, capture_output=True, text=True)
            line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
            if p.returncode or not line:
                res[side] = None
                err = (p.stderr.strip().splitlines() or ["(no output)"])
                print(f"{ex:9s} {side:6s} FAILED: {err[-1]}")
                tb = [x for x in err if x.strip().startswith("File ")]
                for x in tb[-4:]:
                    print("    " + x.strip())
                continue
            res[side] = json.loads(line[0][len("RESULT "):])
        if res.get("jax") and res.get("podlet"):
            worst = compare(res["jax"]["steps"], res["podlet"]["steps"])
            good = worst < 1e-3
            ok &= good
            print(f"{ex:9s} {'MATCH' if good else 'DIFFER'}  max rel diff {worst:.2e}  "
                  f"(jax {res['jax']['seconds']:.1f} s on {res['jax']['devices']} device(s), "
                  f"podlet {res['podlet']['seconds']:.1f} s on {res['podlet']['devices']})")
            for i, (sa, sb) in enumerate(zip(res["jax"]["steps"], res["podlet"]["steps"])):
                for k in sa:
                    print(f"    step {i} {k:12s} jax {sa[k]: .7g}  podlet {sb.get(k, float('nan')): .7g}")
        else:
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
