"""Fine-tuning's parameter groups (podlet.training.layer_decay): the layer ids of Swin-T,
ViT-Tiny and ResNet-18 against hand-written tables, the partitioned optimizer against
optax 0.2.8's own multi_transform / conditionally_mask chain (same labels, scales and
inputs, same bits), a frozen backbone held bit-identical through the loop's first epoch
and released after it, without a retrace and across --resume, and the config keys'
named errors."""
import os

import jax
import numpy as np
import optax as ox
import pytest

import podlet
import podlet.numpy as pnp
from podlet import models
from podlet.training import checkpoints as ckpt
from podlet.training import config as C
from podlet.training import layer_decay as LD
from podlet.training import loop
from podlet.training import steps as S
from train_helpers import SMOKE, tiny_config, tiny_data


def _params(model, side=32):
    """The model's param tree as shapes (no weights are computed)."""
    v = podlet.eval_shape(lambda: model.init(podlet.random.PRNGKey(0), pnp.zeros((1, side, side, 1)), train=False))
    return v["params"]


def _by_top(tree):
    """{top-level key (or 'Transformer/<key>'): the set of leaf values below it}."""
    out = {}
    for k, v in tree.items():
        if k == "Transformer":
            for k2, v2 in v.items():
                out[f"Transformer/{k2}"] = set(jax.tree_util.tree_leaves(v2))
        else:
            out[k] = set(jax.tree_util.tree_leaves(v))
    return out


# ------------------------------------------------------------------------- label trees

# Swin-T, depths (2, 2, 6, 2): the blocks are layers 1..12 in order through the stages;
# merge_s (after stage s) goes with stage s's last block; norm and head are layer 13.
SWIN_T_IDS = {
    "patch_embed": 0, "patch_norm": 0,
    "stage_0_block_0": 1, "stage_0_block_1": 2, "merge_0": 2,
    "stage_1_block_0": 3, "stage_1_block_1": 4, "merge_1": 4,
    "stage_2_block_0": 5, "stage_2_block_1": 6, "stage_2_block_2": 7, "stage_2_block_3": 8,
    "stage_2_block_4": 9, "stage_2_block_5": 10, "merge_2": 10,
    "stage_3_block_0": 11, "stage_3_block_1": 12,
    "norm": 13, "head": 13,
}

VIT_TINY_IDS = {
    "embedding": 0, "cls": 0, "Transformer/posembed_input": 0,
    "Transformer/encoderblock_0": 1, "Transformer/encoderblock_1": 2, "Transformer/encoderblock_2": 3,
    "Transformer/encoderblock_3": 4, "Transformer/encoderblock_4": 5, "Transformer/encoderblock_5": 6,
    "Transformer/encoderblock_6": 7, "Transformer/encoderblock_7": 8, "Transformer/encoderblock_8": 9,
    "Transformer/encoderblock_9": 10, "Transformer/encoderblock_10": 11, "Transformer/encoderblock_11": 12,
    "Transformer/encoder_norm": 13, "head": 13,
}

# ResNet-18, stage_sizes (2, 2, 2, 2): per stage; the stem is 0, the classifier 5.
RESNET18_IDS = {
    "conv_init": 0, "bn_init": 0, "ResNetBlock_0": 1, "ResNetBlock_1": 1, "ResNetBlock_2": 2, "ResNetBlock_3": 2,
    "ResNetBlock_4": 3, "ResNetBlock_5": 3, "ResNetBlock_6": 4, "ResNetBlock_7": 4, "Dense_0": 5,
}


@pytest.mark.parametrize("arch,table,num_layers,head", [("swin_tiny", SWIN_T_IDS, 12, "head"),
                                                        ("vit_tiny", VIT_TINY_IDS, 12, "head"),
                                                        ("resnet18", RESNET18_IDS, 4, "Dense_0")])
def test_layer_ids_and_labels_match_the_hand_written_tables(arch, table, num_layers, head):
    model = models.get_model(arch, num_classes=5)
    params = _params(model)
    ids, n = LD.layer_ids(model, params)
    assert n == num_layers
    assert _by_top(ids) == {k: {i} for k, i in table.items()}
    decay = 0.75
    g = LD.param_groups(model, params, layer_decay=decay)
    labels = _by_top(g.labels)
    width = len(str(num_layers + 1))
    for k, i in table.items():
        want = "head" if k == head else f"layer_{i:0{width}d}"
        assert labels[k] == {want}, k
        assert g.scales[want] == (1.0 if k == head else decay ** (num_layers + 1 - i)), k
    assert g.frozen == tuple(sorted(set(g.scales) - {"head"}))
    # without decay: two labels, the classifier and the rest
    g1 = LD.param_groups(model, params)
    assert _by_top(g1.labels) == {k: {"head" if k == head else "backbone"} for k in table}
    assert g1.scales == {"backbone": 1.0, "head": 1.0} and g1.frozen == ("backbone",)


def test_an_unknown_param_name_is_an_error_naming_it():
    model = models.get_model("swin_tiny", num_classes=5)
    params = dict(_params(model))
    params["adapter"] = {"kernel": params["head"]["kernel"]}
    with pytest.raises(ValueError, match=r"SwinTransformer has a param 'adapter' that no layer id rule covers"):
        LD.layer_ids(model, params)
    from podlet.training.small_cnn import SmallCNN
    with pytest.raises(ValueError, match="SmallCNN has no layer ids"):
        LD.param_groups(SmallCNN(), _params(SmallCNN()), layer_decay=0.5)


# ------------------------------------------------------------- optimizer against optax

class _Train:
    """The TrainConfig fields the optimizer reads."""

    def __init__(self, optimizer, clip=1.0, wd=0.05, layer_decay=0.6, freeze=0):
        self.optimizer, self.grad_clip_norm, self.weight_decay = optimizer, clip, wd
        self.layer_decay, self.freeze_backbone_epochs = layer_decay, freeze


def _oracle(t, labels, scales, frozen, freeze_steps):
    """optax's own chain for the same groups, written out (the schedule is optax's)."""
    sched = ox.warmup_cosine_decay_schedule(1e-3, 1e-2, 2, 12, 0.0)

    def opt(lr):
        if t.optimizer == "adamw":
            return ox.adamw(lr, weight_decay=t.weight_decay)
        if t.optimizer == "adam":
            return ox.adam(lr)
        return ox.sgd(lr, momentum=0.9)

    def released(step):
        return step >= freeze_steps

    txs = {}
    for label, s in scales.items():
        if freeze_steps and label in frozen:
            txs[label] = ox.conditionally_mask(opt(lambda c, s=s: s * sched(c + freeze_steps)), released)
        else:
            txs[label] = opt(sched if s == 1.0 else (lambda c, s=s: s * sched(c)))
    chain = []
    if freeze_steps:
        mask = jax.tree_util.tree_map(lambda lab: lab in frozen, labels)
        chain.append(ox.masked(ox.conditionally_mask(ox.identity(), released), mask))
    if t.grad_clip_norm is not None:
        chain.append(ox.clip_by_global_norm(t.grad_clip_norm))
    chain.append(ox.multi_transform(txs, labels))
    return ox.chain(*chain)


@pytest.mark.parametrize("optimizer,layer_decay,freeze", [("adamw", 0.6, 0), ("adamw", 0.6, 2), ("adam", 0.6, 2),
                                                           ("sgd", 0.6, 0), ("adamw", None, 2)])
def test_partitioned_optimizer_matches_optax_multi_transform(optimizer, layer_decay, freeze):
    model = models.VisionTransformer(num_classes=5, patch_size=8, hidden_size=16, num_layers=3, num_heads=2,
                                     mlp_dim=32)
    shapes = _params(model, side=16)
    rng = np.random.default_rng(0)
    rand = lambda: jax.tree_util.tree_map(lambda s: rng.normal(size=s.shape).astype(np.float32), shapes)  # noqa
    params = rand()
    g = LD.param_groups(model, shapes, layer_decay=layer_decay)
    n = 3
    want_scales = ({"head": 1.0, **{f"layer_{i}": layer_decay ** (n + 1 - i) for i in range(n + 2)}}
                   if layer_decay else {"head": 1.0, "backbone": 1.0})
    assert g.scales == want_scales
    t = _Train(optimizer, layer_decay=layer_decay, freeze=freeze)
    spe = 1  # one step per epoch: `freeze` epochs are `freeze` optimizer steps
    tx = S.create_optimizer(t, podlet.optim.warmup_cosine_decay_schedule(1e-3, 1e-2, 2, 12, 0.0), groups=g,
                            steps_per_epoch=spe)
    tx_ref = _oracle(t, g.labels, want_scales, g.frozen, freeze * spe)
    pp, pj = jax.tree_util.tree_map(pnp.asarray, params), params
    sp, sj = tx.init(pp), tx_ref.init(pj)
    # optax-shaped state: the same pytree, node for node
    assert str(podlet.tree_util.tree_structure(sp)) == str(jax.tree_util.tree_structure(sj))
    update, update_ref = podlet.jit(tx.update), jax.jit(tx_ref.update)
    for step in range(5):
        grads = rand()
        up, sp = update(jax.tree_util.tree_map(pnp.asarray, grads), sp, pp)
        uj, sj = update_ref(grads, sj, pj)
        pp, pj = podlet.optim.apply_updates(pp, up), ox.apply_updates(pj, uj)
        # the same numbers up to the global norm's summation order (podlet's and jax's
        # reductions add the squares in different orders: an ulp in the clip scale)
        for a, b in zip(jax.tree_util.tree_leaves(pp) + jax.tree_util.tree_leaves(sp),
                        jax.tree_util.tree_leaves(pj) + jax.tree_util.tree_leaves(sj)):
            assert np.asarray(a).dtype == np.asarray(b).dtype
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-8,
                                       err_msg=f"step {step}")
        same = [np.array_equal(np.asarray(a), b) for a, b in
                zip(jax.tree_util.tree_leaves({k: v for k, v in pp.items() if k != "head"}),
                    jax.tree_util.tree_leaves({k: v for k, v in params.items() if k != "head"}))]
        assert len(same) > 10 and len(set(same)) == 1, same
        same = same[0]
        # frozen for the first `freeze` steps (then moved), whatever the weight decay
        assert same == (step < freeze), step


def test_create_optimizer_needs_the_groups_and_the_epoch_length():
    t = _Train("adamw", freeze=1)
    sched = podlet.optim.constant_schedule(1e-3)
    with pytest.raises(ValueError, match="need the parameter groups"):
        S.create_optimizer(t, sched)
    model = models.VisionTransformer(num_classes=5, patch_size=8, hidden_size=16, num_layers=1, num_heads=2,
                                     mlp_dim=32)
    shapes = _params(model, side=16)
    params = jax.tree_util.tree_map(lambda s: pnp.zeros(s.shape, s.dtype), shapes)
    tx = S.create_optimizer(t, sched, groups=LD.param_groups(model, shapes, layer_decay=0.5))
    state = tx.init(params)  # a restore target: the structure of a trained state
    with pytest.raises(ValueError, match="built without the run's steps per epoch"):
        tx.update(params, state, params)


# --------------------------------------------------------------------- in the loop

VIT = ["model=vit_tiny", "model.patch_size=4", "model.hidden_size=16", "model.num_layers=2", "model.num_heads=2",
       "model.mlp_dim=32", "train.layer_decay=0.5", "train.freeze_backbone_epochs=1", "train.ema_decay=null",
       "train.keep_checkpoints=3"]


def _run(run_dir, *extra, resume=False, **kw):
    cfg = tiny_config(*VIT, *extra)
    return loop.train(cfg, run_dir, resume=resume, data=tiny_data(cfg), progress=False, print_fn=None, **kw)


def _state(run_dir, step):
    return ckpt.read_checkpoint(ckpt.checkpoint_path(os.path.join(run_dir, "checkpoints"), step))


def _records(run_dir):
    return [{k: v for k, v in r.items() if k not in loop.TIMING_FIELDS} for r in loop.read_metrics(run_dir)]


@pytest.fixture(scope="module")
def frozen_run(tmp_path_factory):
    """An uninterrupted 3-epoch run (3 steps an epoch), the first epoch frozen; the number
    of times its train step was traced."""
    d = str(tmp_path_factory.mktemp("frozen"))
    traces = []
    make = S.make_train_step

    def counting(cfg, schedule):
        step = make(cfg, schedule)

        def train_step(state, batch):
            traces.append(1)
            return step(state, batch)
        return train_step

    S.make_train_step = counting
    try:
        _run(d)
    finally:
        S.make_train_step = make
    return d, len(traces)


def test_frozen_backbone_holds_still_for_its_epochs_then_trains(frozen_run):
    d, traces = frozen_run
    cfg = tiny_config(*VIT)
    init = S.create_train_state(cfg, S.build_model(cfg), S.create_learning_rate_schedule(cfg.train, 3),
                                podlet.random.PRNGKey(cfg.train.seed), steps_per_epoch=3)
    init = {f"params/{'/'.join(str(getattr(k, 'key', k)) for k in path)}": np.asarray(x)
            for path, x in jax.tree_util.tree_flatten_with_path(init.params)[0]}
    e1, e2 = _state(d, 3), _state(d, 6)  # the checkpoints after epoch 1 (frozen) and 2
    backbone = [k for k in init if not k.startswith("params/head/")]
    head = [k for k in init if k.startswith("params/head/")]
    assert len(backbone) > 10 and len(head) == 2
    for k in backbone:  # bit-identical through the frozen epoch (no update, no weight decay)
        assert e1[k].tobytes() == init[k].tobytes(), k
    assert all(e1[k].tobytes() != init[k].tobytes() for k in head)
    moved = [k for k in backbone if e2[k].tobytes() != e1[k].tobytes()]
    assert len(moved) == len(backbone), sorted(set(backbone) - set(moved))
    # the backbone's Adam starts at its release: its count is 3 after epoch 2, the head's 6
    assert int(e2["opt_state/2/inner_states/head/inner_state/0/count"]) == 6
    assert int(e2["opt_state/2/inner_states/layer_0/inner_state/inner_state/0/count"]) == 3
    assert int(e2["opt_state/2/inner_states/layer_0/inner_state/step"]) == 6
    # one trace for the whole run: the release is a value in the optimizer state
    assert traces == 1
    # the logged LR is the head's, i.e. the run's schedule
    sched = S.create_learning_rate_schedule(cfg.train, 3)
    lrs = [r["lr"] for r in loop.read_metrics(d, "train")]
    np.testing.assert_allclose(lrs, [float(sched(s)) for s in range(9)], rtol=1e-6)


def test_resume_mid_freeze_and_after_is_bit_identical(frozen_run, tmp_path):
    ref = frozen_run[0]
    d = str(tmp_path)
    with pytest.raises(loop.TrainingInterrupted) as e:
        _run(d, stop_after_step=2)  # mid-freeze
    assert e.value.step == 2
    with pytest.raises(loop.TrainingInterrupted) as e:
        _run(d, resume=True, stop_after_step=4)  # after the release, mid-epoch 2
    assert e.value.step == 4
    _run(d, resume=True)
    assert _records(d) == _records(ref)
    a, b = _state(d, 9), _state(ref, 9)
    assert sorted(a) == sorted(b)
    assert all(a[k].tobytes() == b[k].tobytes() for k in a), [k for k in a if a[k].tobytes() != b[k].tobytes()]


def test_a_skipped_step_delays_the_release_and_the_schedule_alike(tmp_path):
    """nan_policy: skip keeps the optimizer state of a non-finite step, counters included:
    the head's schedule (the logged lr) and the release both follow the optimizer's count."""
    cfg = tiny_config(*VIT, "train.nan_policy=skip")
    data = tiny_data(cfg)
    order = np.random.default_rng([cfg.train.seed, 0]).permutation(96)  # epoch 1's shuffle
    data.splits["train"][0][order[16]] = np.nan  # in step 2's batch (16 a step)
    d = str(tmp_path)
    loop.train(cfg, d, data=data, progress=False, print_fn=None)
    recs = loop.read_metrics(d, "train")
    # skipped: step 2, and any later step whose batch the later epochs' shuffles give it
    bad = {r["step"] for r in recs if not r["finite"]}
    assert 2 in bad and not bad & {1, 3, 4, 5, 6}, bad
    sched = S.create_learning_rate_schedule(cfg.train, 3)
    counts = [sum(s not in bad for s in range(1, k)) for k in range(1, 10)]  # the optimizer's, before step k
    assert counts[:6] == [0, 1, 1, 2, 3, 4]
    np.testing.assert_allclose([r["lr"] for r in recs], [float(sched(c)) for c in counts], rtol=1e-6)
    e2 = _state(d, 6)
    assert int(e2["opt_state/2/inner_states/head/inner_state/0/count"]) == 5
    assert int(e2["opt_state/2/inner_states/layer_0/inner_state/step"]) == 5
    # released at the optimizer's 4th update (global step 5): steps 5 and 6 reached Adam
    assert int(e2["opt_state/2/inner_states/layer_0/inner_state/inner_state/0/count"]) == 2


# -------------------------------------------------------------------------- config

@pytest.mark.parametrize("overrides,match", [
    (["train.layer_decay=0"], r"train\.layer_decay: expected a value > 0\.0, got 0\.0"),
    (["train.layer_decay=1.5"], r"train\.layer_decay: expected a value <= 1\.0, got 1\.5"),
    (["train.layer_decay=-0.1"], r"train\.layer_decay: expected a value > 0\.0, got -0\.1"),
    (["train.layer_decay=abc"], r"train\.layer_decay: expected a number, got 'abc' \(str\)"),
    (["train.layer_decay=true"], r"train\.layer_decay: expected a number, got True \(bool\)"),
    (["train.freeze_backbone_epochs=-1"], r"train\.freeze_backbone_epochs: expected a value >= 0, got -1"),
    (["train.freeze_backbone_epochs=1.5"], r"train\.freeze_backbone_epochs: expected an integer, got 1\.5 \(float\)"),
    (["train.freeze_backbone_epochs=3"], r"train\.freeze_backbone_epochs: expected fewer than train\.epochs = 3 "
                                         r"frozen epochs .*got 3"),
    (["train.layer_decay=0.8"], r"train\.layer_decay: 0\.8: layer-wise decay needs a network of layers .*"
                                r"model\.architecture is 'small_cnn'"),
])
def test_config_errors_are_named(overrides, match):
    with pytest.raises(C.ConfigError, match=match) as e:
        C.load_config(SMOKE, overrides, num_devices=8)
    assert str(e.value).startswith(f"--set {overrides[0]}: ")


def test_config_keys_load_and_default_off():
    t = C.load_config(SMOKE, num_devices=8).train
    assert (t.layer_decay, t.freeze_backbone_epochs) == (None, 0)
    t = C.load_config(SMOKE, ["model=vit_tiny", "data.image_size=[64, 64, 1]", "train.layer_decay=1",
                              "train.freeze_backbone_epochs=2"], num_devices=8).train
    assert (t.layer_decay, t.freeze_backbone_epochs) == (1.0, 2)
    # without either key the optimizer is the seed's chain, not a partition
    cfg = tiny_config()
    state = S.create_train_state(cfg, S.build_model(cfg), S.create_learning_rate_schedule(cfg.train, 3),
                                 podlet.random.PRNGKey(0), steps_per_epoch=3)
    assert not any(isinstance(s, podlet.optim.PartitionState) for s in state.opt_state)


def test_a_frozen_run_is_evaluated_and_restored_by_the_tools(frozen_run):
    """`podlet eval` and the export/explain loader rebuild the state without the run's
    epoch length: the optimizer state has one structure whatever the phase."""
    d = frozen_run[0]
    cfg = tiny_config(*VIT)
    m = loop.evaluate_run(d, "test", checkpoint="latest", data=tiny_data(cfg))
    assert m["step"] == 9 and m["num_examples"] == 40
    from podlet import cli
    _, _, variables = cli._run_model(d, "3")  # a checkpoint of the frozen epoch
    np.testing.assert_array_equal(np.asarray(variables["params"]["head"]["kernel"]),
                                  _state(d, 3)["params/head/kernel"])
