"""configs/experiments/swin_tiny_finetune.yaml: the recipe validates, builds torchvision's
swin_t, and ``train.init_from`` puts a torchvision swin_t state_dict (a randomly
initialised plain-torch twin with torchvision's keys, tests/test_swin.py) into the train
state: the gray patch embedding summed from RGB, a new 5-class head, a fresh optimizer;
and the recipe trains (two one-step epochs, the first with the backbone frozen, then
layer-wise decayed learning rates). Images are 32 px so that the full 28M-parameter
model stays cheap; a whole run of the recipe is too slow for the suite on 2 cores (see
the module's docstring of podlet.models.swin and the issue-28 notes)."""
import os

import numpy as np
import pytest
import torch

import podlet
from podlet.models import SwinTransformer
from podlet.training import checkpoints as ckpt, config as C, loop as L, steps as S
from test_swin import TorchSwin

CONFIG = os.path.join(os.path.dirname(__file__), "..", "configs", "experiments", "swin_tiny_finetune.yaml")
SMALL_DATA = ["data.image_size=[32, 32, 1]", "data.augmentation.translate_pixels=2", "data.scale=0.01",
              "train.batch_size=8"]


@pytest.fixture(scope="module")
def swin_t_pth(tmp_path_factory):
    torch.manual_seed(0)
    net = TorchSwin()  # swin_t: width 96, depths [2, 2, 6, 2], 1000 classes, RGB
    path = tmp_path_factory.mktemp("swin") / "swin_t.pth"
    torch.save(net.state_dict(), path)
    return str(path), net.state_dict()


def test_recipe_validates_and_builds_swin_t(swin_t_pth):
    path, _ = swin_t_pth
    cfg = C.load_config(CONFIG, [f"train.init_from={path}"], num_devices=8)
    assert cfg.model.architecture == "swin_tiny" and cfg.data.image_size == [224, 224, 1]
    assert (cfg.train.optimizer, cfg.train.learning_rate, cfg.train.weight_decay) == ("adamw", 1e-4, 0.05)
    model = S.build_model(cfg)
    assert isinstance(model, SwinTransformer)
    assert (model.embed_dim, tuple(model.depths), model.stochastic_depth_rate, model.num_classes) == \
        (96, (2, 2, 6, 2), 0.2, 5)
    assert C.load_config(CONFIG, num_devices=8).train.init_from is None  # the weights are the user's to give
    # a missing file is named before training
    with pytest.raises(C.ConfigError, match="swin_t-704ceda3.pth does not exist"):
        C.load_config(CONFIG, ["train.init_from=/nonexistent/swin_t-704ceda3.pth"], num_devices=8)
    with pytest.raises(C.ConfigError, match=r"model\.stage_sizes: a ResNet key, but model\.architecture is "
                                            r"'swin_tiny'"):
        C.load_config(CONFIG, [f"train.init_from={path}", "model.stage_sizes=[1, 1]"], num_devices=8)
    with pytest.raises(C.ConfigError, match=r"torchvision state_dicts hold ResNets, Swins.*'small_cnn'"):
        C.load_config(CONFIG, [f"train.init_from={path}", "model=small_cnn", "train.layer_decay=null"],
                      num_devices=8)
    with pytest.raises(C.ConfigError, match="2x2 is smaller than one 4x4 patch of swin_tiny"):
        C.load_config(CONFIG, [f"train.init_from={path}", "data.image_size=[2, 2, 1]",
                               "data.dataset_name=hdf5", f"data.data_dir={os.path.dirname(path)}"], num_devices=8)


def test_init_from_torchvision_swin_t(swin_t_pth):
    path, sd = swin_t_pth
    cfg = C.load_config(CONFIG, [f"train.init_from={path}"] + SMALL_DATA, num_devices=8)
    model = S.build_model(cfg)
    state = S.create_train_state(cfg, model, S.create_learning_rate_schedule(cfg.train, 10),
                                 podlet.random.PRNGKey(0))
    new = L._init_from(state, cfg.train.init_from, cfg)
    p = new.params
    np.testing.assert_allclose(np.asarray(p["patch_embed"]["kernel"])[:, :, 0],
                               sd["features.0.0.weight"].numpy().sum(1).transpose(1, 2, 0), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(p["stage_2_block_5"]["attn"]["qkv"]["kernel"]),
                                  sd["features.5.5.attn.qkv.weight"].numpy().T)
    np.testing.assert_array_equal(np.asarray(p["merge_2"]["reduction"]["kernel"]),
                                  sd["features.6.reduction.weight"].numpy().T)
    assert p["head"]["kernel"].shape == (768, 5)
    # a fresh optimizer state over the loaded params, same tree as before
    assert podlet.tree_util.tree_structure(new.opt_state) == podlet.tree_util.tree_structure(state.opt_state)
    assert podlet.tree_util.tree_structure(new.params) == podlet.tree_util.tree_structure(state.params)


def test_recipe_trains_with_layer_decay_and_a_frozen_first_epoch(swin_t_pth, tmp_path):
    """Two one-step epochs of the recipe from the torchvision weights: the frozen first
    epoch moves the head alone; in the second, Adam's first step moves each param by
    about its group's learning rate, the patch embedding 0.75 ** 12 as far as the last
    block."""
    path, _ = swin_t_pth
    cfg = C.load_config(CONFIG, [f"train.init_from={path}"] + SMALL_DATA +
                        ["train.epochs=2", "train.max_steps_per_epoch=1", "train.warmup_epochs=0",
                         "data.scale=0.004", "train.eval_batch_size=64"],  # one eval batch per split
                        num_devices=8)
    assert (cfg.train.layer_decay, cfg.train.freeze_backbone_epochs) == (0.75, 1)
    d = str(tmp_path / "run")
    L.train(cfg, d, progress=False, print_fn=None)
    model = S.build_model(cfg)
    schedule = S.create_learning_rate_schedule(cfg.train, 1)
    start = L._init_from(S.create_train_state(cfg, model, schedule, podlet.random.PRNGKey(0), steps_per_epoch=1),
                         path, cfg).params
    start = {"/".join(str(getattr(k, "key", k)) for k in p): np.asarray(x)
             for p, x in podlet.tree_util.tree_flatten_with_path(start)[0]}
    ckpts = os.path.join(d, "checkpoints")
    e1 = ckpt.read_checkpoint(ckpt.checkpoint_path(ckpts, 1))
    e2 = ckpt.read_checkpoint(ckpt.checkpoint_path(ckpts, 2))
    for k, v in start.items():
        assert (e1[f"params/{k}"].tobytes() == v.tobytes()) == (not k.startswith("head/")), k
    assert "opt_state/2/inner_states/layer_13/inner_state/step" in e2  # the final norm's group

    def moved(k):
        return float(np.mean(np.abs(e2[f"params/{k}"] - e1[f"params/{k}"])))

    lr = float(schedule(1))  # the backbone's first step is the run's second
    last = moved("stage_3_block_1/mlp/fc1/kernel")
    assert last == pytest.approx(lr * 0.75, rel=0.05)
    assert moved("patch_embed/kernel") / last == pytest.approx(0.75 ** 12, rel=0.05)
    assert moved("stage_2_block_0/attn/qkv/kernel") / last == pytest.approx(0.75 ** 7, rel=0.05)
