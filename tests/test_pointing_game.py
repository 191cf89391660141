"""The pointing game on the synthetic mammography patches, where every lesion's mask is
known: a small ResNet trained here for a few hundred steps has its Grad-CAM maximum
inside the lesion far more often than a uniformly random point would."""
import numpy as np

import podlet
import podlet.numpy as jnp
import podlet.optim as optax
from podlet import data, explain, models

SIZE, STEPS, BATCH = 64, 400, 32


def _images(src, indices):
    x = np.stack([np.asarray(src.get(int(i))["image"]) for i in indices]).astype(np.float32)
    return (x / 255.0 - 0.5) / 0.25


def _train(model, x, y, steps, seed=0):
    v = model.init(podlet.random.PRNGKey(seed), jnp.zeros((1, SIZE, SIZE, 1)), train=False)
    tx = optax.adamw(3e-3, weight_decay=1e-4)

    @podlet.jit
    def step(params, stats, opt, xb, yb):
        def loss_fn(p):
            logits, upd = model.apply({"params": p, "batch_stats": stats}, xb, train=True, mutable=["batch_stats"])
            return optax.softmax_cross_entropy_with_integer_labels(logits, yb).mean(), upd["batch_stats"]
        (_, stats), g = podlet.value_and_grad(loss_fn, has_aux=True)(params)
        u, opt = tx.update(g, opt, params)
        return optax.apply_updates(params, u), stats, opt

    params, stats, opt = v["params"], v["batch_stats"], tx.init(v["params"])
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        idx = rng.integers(0, len(y), BATCH)
        params, stats, opt = step(params, stats, opt, jnp.asarray(x[idx]), jnp.asarray(y[idx]))
    return {"params": params, "batch_stats": stats}


def test_grad_cam_points_at_lesions():
    threads = podlet.config.num_threads
    # One thread: a busy shared machine makes spinning worker threads crawl, and the
    # result is the same bits at any thread count.
    podlet.config.update("num_threads", 1)
    try:
        train = data.synthetic_ddsm("train", image_size=SIZE, scale=0.05, seed=0)
        x, y = _images(train, range(len(train))), np.asarray(train.labels())
        model = models.ResNet(stage_sizes=[1, 1], num_filters=8, num_classes=5)
        variables = _train(model, x, y, STEPS)

        test = data.synthetic_ddsm("test", image_size=SIZE, scale=0.02, seed=1)
        labels = np.asarray(test.labels())
        lesion_idx = [i for i in range(len(test)) if labels[i] != 0][:96]
        xt = _images(test, lesion_idx)
        masks = np.stack([test.lesion(i)["mask"] for i in lesion_idx])
        cams = np.concatenate([np.asarray(explain.grad_cam(model, variables, xt[s:s + 32],
                                                           target_class=labels[lesion_idx[s:s + 32]]))
                               for s in range(0, len(xt), 32)])
    finally:
        podlet.config.update("num_threads", threads)
    acc = explain.pointing_game(cams, masks=masks)
    chance = explain.random_baseline(masks)
    print(f"pointing game: {acc:.3f} on {len(xt)} lesion patches; random point: {chance:.3f}")
    assert chance < 0.15
    assert acc > 2.5 * chance and acc > chance + 0.15
