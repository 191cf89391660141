"""Experiment configs: the shipped YAML files load, compose and round-trip; every bad key,
type or value is an error naming the key and the file it came from."""
import glob
import os
import textwrap

import pytest
import yaml

from podlet.training import config as C

ROOT = os.path.join(os.path.dirname(__file__), "..", "configs")
EXPERIMENTS = sorted(glob.glob(os.path.join(ROOT, "experiments", "*.yaml")))


@pytest.mark.parametrize("path", EXPERIMENTS, ids=os.path.basename)
def test_shipped_experiments_load_and_round_trip(path, tmp_path):
    cfg = C.load_config(path, num_devices=8)
    assert cfg.name == os.path.basename(path)[:-5]
    resolved = tmp_path / "config.yaml"
    resolved.write_text(C.dump_config(cfg))
    assert C.load_config(resolved, num_devices=8) == cfg


def test_seed_final_best_recipe_is_exact():
    cfg = C.load_config(os.path.join(ROOT, "experiments", "resnet34_final_best.yaml"), num_devices=8)
    m, t = cfg.model, cfg.train
    assert (m.architecture, m.stage_sizes, m.widths, m.in_channels) == ("resnet34", [3, 4, 6, 3],
                                                                       [64, 128, 256, 512], 1)
    assert (m.dropout_rate, m.stochastic_depth_rate) == (0.1, 0.05)
    assert (t.seed, t.epochs, t.batch_size, t.learning_rate, t.warmup_epochs, t.weight_decay) == (
        21, 35, 256, 7e-4, 3, 2e-4)
    assert (t.optimizer, t.loss_name, t.class_weights, t.label_smoothing) == (
        "adamw", "focal", [0.5, 1.0, 1.0, 1.3, 1.3], 0.03)
    assert (t.dropout_rate_override, t.ema_decay, t.use_bfloat16, t.grad_clip_norm, t.selection_metric) == (
        0.15, 0.999, True, 1.0, "macro_f1")
    # tuned and final_best share every hyperparameter (the seed's non-determinism lesson)
    tuned = C.load_config(os.path.join(ROOT, "experiments", "resnet34_tuned.yaml"), num_devices=8)
    assert tuned.train == t and tuned.model == m and tuned.data == cfg.data


def test_composition_and_ablation_delta():
    weak = C.load_config(os.path.join(ROOT, "experiments", "resnet34_aug_weak.yaml"), num_devices=8)
    cons = C.load_config(os.path.join(ROOT, "experiments", "resnet34_aug_conservative.yaml"), num_devices=8)
    assert weak.train == cons.train and weak.model == cons.model
    a, b = weak.data.augmentation, cons.data.augmentation
    assert (a.translate_pixels, a.rotation_degrees, a.brightness_delta, a.contrast_range) == (4, 8.0, 0.0, None)
    assert (b.translate_pixels, b.rotation_degrees, b.brightness_delta) == (6, 10.0, 0.05)
    vit = C.load_config(os.path.join(ROOT, "experiments", "vit_tiny_baseline.yaml"), num_devices=8)
    # naming another model file replaces the section: no ResNet keys leak into the ViT
    assert vit.model.architecture == "vit_tiny" and vit.model.stage_sizes is None
    assert vit.train.learning_rate == 5e-4 and vit.train.early_stopping_patience == 10


def test_overrides():
    p = os.path.join(ROOT, "experiments", "smoke.yaml")
    cfg = C.load_config(p, ["train.learning_rate=5e-4", "train.class_weights=[1, 2, 1, 1, 1]",
                            "data.augmentation.enabled=false", "model=resnet18_gray", "train.ema_decay=null"],
                        num_devices=8)
    assert cfg.train.learning_rate == 5e-4 and cfg.train.class_weights == [1.0, 2.0, 1.0, 1.0, 1.0]
    assert cfg.data.augmentation.enabled is False and cfg.train.ema_decay is None
    assert cfg.model.architecture == "resnet18" and cfg.model.stage_sizes == [2, 2, 2, 2]


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text))
    return str(p)


@pytest.fixture
def tree(tmp_path):
    _write(tmp_path, "models/m.yaml", "architecture: resnet18\nstage_sizes: [1, 1]\nwidths: [8, 16]\n")
    _write(tmp_path, "data/d.yaml", "image_size: [32, 32, 1]\nscale: 0.01\n")
    return tmp_path


def _exp(tree, body):
    return _write(tree, "experiments/e.yaml", "model: m\ndata: d\n" + textwrap.dedent(body))


@pytest.mark.parametrize("body,overrides,match", [
    ("train: {learning_rate: -0.001}\n", [], r"e\.yaml: train\.learning_rate: expected a value > 0.0, got -0\.001"),
    ("train: {learnig_rate: 0.1}\n", [], r"e\.yaml: unknown key 'train\.learnig_rate' \(did you mean 'learning_rate'\?\)"),
    ("train: {batch_size: 100}\n", [], r"e\.yaml: train\.batch_size: the global batch 100 is not divisible by 8 devices"),
    ("train: {epochs: ten}\n", [], r"e\.yaml: train\.epochs: expected an integer, got 'ten'"),
    ("train: {use_bfloat16: 1}\n", [], r"train\.use_bfloat16: expected true or false, got 1"),
    ("train: {loss_name: hinge}\n", [], r"train\.loss_name: expected one of \['ce', 'focal'\], got 'hinge'"),
    ("train: {class_weights: [1, 1]}\n", [], r"train\.class_weights: 2 weights for 5 classes"),
    ("", ["train.learning_rate=-5e-4"], r"--set train\.learning_rate=-5e-4: train\.learning_rate: expected a value > 0"),
    ("", ["train.bogus=1"], r"--set train\.bogus=1: unknown key 'train\.bogus'"),
    ("", ["train.learning_rate"], r"--set 'train\.learning_rate': expected KEY=VALUE"),
    ("", ["model=nope"], r"'nope' names no config file"),
    ("", ["model.architecture=small_cnn"], r"model\.stage_sizes: a ResNet key, but model\.architecture is 'small_cnn'"),
    ("", ["model.architecture=vit_tiny"], r"model\.stage_sizes: a ResNet key, but model\.architecture is 'vit_tiny'"),
    ("colour: red\n", [], r"e\.yaml: unknown key 'colour'"),
    ("train: {warmup_epochs: 30, epochs: 10}\n", [], r"train\.warmup_epochs: 30\.0 warmup epochs exceed train\.epochs = 10"),
    ("", ["data.image_size=[32,32,3]"], r"data\.image_size: 3 channels, but model\.in_channels is 1"),
])
def test_errors_name_key_and_file(tree, body, overrides, match):
    with pytest.raises(C.ConfigError, match=match):
        C.load_config(_exp(tree, body), overrides, num_devices=8)


def test_error_in_referenced_file_names_that_file(tree):
    _write(tree, "models/m.yaml", "architecture: resnet18\nstage_sizes: [1, 1]\nwidths: [8]\n")
    with pytest.raises(C.ConfigError, match=r"models/m\.yaml: model\.widths: 1 widths for 2 stages"):
        C.load_config(_exp(tree, ""), num_devices=8)
    _write(tree, "models/m.yaml", "architecture: resnet18\ndropout: 0.1\n")
    with pytest.raises(C.ConfigError, match=r"models/m\.yaml: unknown key 'model\.dropout' \(did you mean 'dropout_rate'"):
        C.load_config(_exp(tree, ""), num_devices=8)


def test_bad_files(tmp_path):
    with pytest.raises(C.ConfigError, match="does not exist"):
        C.load_config(tmp_path / "missing.yaml")
    p = _write(tmp_path, "experiments/bad.yaml", "train: [1, 2\n")
    with pytest.raises(C.ConfigError, match=r"bad\.yaml: not valid YAML"):
        C.load_config(p)
    p = _write(tmp_path, "experiments/self.yaml", "base: self\n")
    with pytest.raises(C.ConfigError, match="includes itself"):
        C.load_config(p)


def test_yaml11_exponent_without_dot_is_a_float(tree):
    # PyYAML reads 5e-4 as the string '5e-4'; the schema still takes it as a number.
    assert yaml.safe_load("a: 5e-4")["a"] == "5e-4"
    cfg = C.load_config(_exp(tree, "train: {learning_rate: 5e-4}\n"), num_devices=8)
    assert cfg.train.learning_rate == 5e-4
