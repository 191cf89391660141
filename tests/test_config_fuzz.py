"""Bad experiment configs (issue 29): wrong types, negative and zero sizes, unknown names,
missing files, images a model cannot take, broken YAML. Each is a ConfigError naming the
key, the bad value and what was expected, raised before a model is built or data read.

A table of hand-written bad configs checks the messages; a seeded fuzzer mutates the
smoke config a few hundred times and requires every mutant to be refused with a
ConfigError, or to validate and then build (data sources, model, optimizer, schedule,
loss, the model's abstract init): any other exception is a bug in the validation."""
import copy
import dataclasses
import math
import os
import random
import shutil
import time
import typing

import numpy as np
import pytest
import yaml

import podlet
import podlet.numpy as jnp
import podlet.optim as optax
from podlet.training import config as C
from podlet.training import steps as S
from podlet.training.input import make_data

CONFIGS = os.path.join(os.path.dirname(__file__), "..", "configs")
SMOKE = os.path.join(CONFIGS, "experiments", "smoke.yaml")


@pytest.fixture(scope="module")
def configs(tmp_path_factory):
    """A copy of configs/ (experiments are written beside the shipped ones, so ``model:
    small_cnn`` and ``base: smoke`` resolve) and an empty directory for data."""
    root = tmp_path_factory.mktemp("fuzz")
    shutil.copytree(CONFIGS, root / "configs")
    (root / "empty").mkdir()
    return root


def _one_line_naming_its_source(msg):
    """One line (the podlet command prints it so) that starts with the YAML file, or the
    --set, the bad value came from."""
    return "\n" not in msg and (msg.startswith("--set ") or msg.split(": ")[0].endswith(".yaml")
                                 or msg.startswith("config file "))


def _write(path, text):
    mode = "wb" if isinstance(text, bytes) else "w"
    with open(path, mode) as f:
        f.write(text)
    return str(path)


# ------------------------------------------------------------------ hand-written cases
# (experiment text, --set overrides, substrings the message must hold: the key, the bad
# value and what was expected). Text "" with overrides is the smoke run with those --set
# (None: the text as given, even empty); "{empty}" is an existing empty directory.
SMOKE_BASE = "base: smoke\n"
CASES = {
    # wrong types
    "str_for_int": (SMOKE_BASE + "train: {batch_size: '64'}\n", [],
                    ["train.batch_size", "expected an integer", "'64'"]),
    "float_for_int": (SMOKE_BASE + "train: {epochs: 3.5}\n", [], ["train.epochs", "expected an integer", "3.5"]),
    "bool_for_int": (SMOKE_BASE + "train: {epochs: true}\n", [],
                     ["train.epochs", "expected an integer", "True (bool)"]),
    "list_for_float": (SMOKE_BASE + "train: {learning_rate: [0.1]}\n", [],
                       ["train.learning_rate", "expected a number", "[0.1] (list)"]),
    "word_for_float": (SMOKE_BASE + "train: {learning_rate: fast}\n", [],
                       ["train.learning_rate", "expected a number", "'fast'"]),
    "int_for_bool": (SMOKE_BASE + "train: {use_bfloat16: 1}\n", [], ["train.use_bfloat16", "true or false", "1 (int)"]),
    "scalar_for_list": (SMOKE_BASE + "data: {image_size: 64}\n", [],
                        ["data.image_size", "expected a list of integers", "64 (int)"]),
    "float_in_int_list": (SMOKE_BASE + "data: {image_size: [64, 64.5, 1]}\n", [],
                          ["data.image_size[1]", "expected an integer", "64.5"]),
    "list_for_mapping": (SMOKE_BASE + "data: {splits: [train, validation, test]}\n", [],
                         ["data.splits", "expected a mapping", "['train', 'validation', 'test']"]),
    "int_split_name": (SMOKE_BASE + "data: {splits: {train: 1, validation: validation, test: test}}\n", [],
                       ["data.splits.train", "expected a string", "1 (int)"]),
    "scalar_section": (SMOKE_BASE + "train: 5\n", [], ["train", "expected a mapping of train keys", "5"]),
    "number_for_model": (SMOKE_BASE + "model: 3\n", [], ["model", "expected a name of configs/models/ or a mapping",
                                                         "got 3"]),
    "date_for_name": (SMOKE_BASE + "name: 2024-01-01\n", [],
                      ["name", "expected a string", "datetime.date(2024, 1, 1)"]),
    "null_for_list": ("", ["data.image_size=null"], ["data.image_size", "expected a list of integers", "None"]),
    "huge_int_for_float": ("", [f"train.learning_rate={10 ** 400}"], ["train.learning_rate", "expected a finite number",
                                                                      "too large for a float"]),
    # negative, zero and out-of-range values
    "zero_batch": ("", ["train.batch_size=0"], ["train.batch_size", "expected a value >= 1", "got 0"]),
    "negative_batch": ("", ["train.batch_size=-64"], ["train.batch_size", "expected a value >= 1", "got -64"]),
    "zero_epochs": ("", ["train.epochs=0"], ["train.epochs", "expected a value >= 1", "got 0"]),
    "epochs_beyond_int32": ("", [f"train.epochs={2 ** 31}"], ["train.epochs", "<= 2147483647", "got 2147483648",
                                                             "int32"]),
    "steps_beyond_int32": ("", [f"train.epochs={2 ** 30}"], ["train.epochs", "1073741824 epochs of 38 steps",
                                                            "int32"]),
    "zero_image": ("", ["data.image_size=[0,0,1]"], ["data.image_size", "expected values >= 1", "element 0 is 0"]),
    "negative_image": ("", ["data.image_size=[-64,-64,1]"], ["data.image_size", ">= 1", "element 0 is -64"]),
    "image_two_dims": ("", ["data.image_size=[64,64]"], ["data.image_size", "[height, width, channels]", "[64, 64]"]),
    "one_class": ("", ["data.num_classes=1"], ["data.num_classes", "expected a value >= 2", "got 1"]),
    "zero_lr": ("", ["train.learning_rate=0"], ["train.learning_rate", "expected a value > 0.0", "got 0.0"]),
    "negative_lr": ("", ["train.learning_rate=-3e-3"], ["train.learning_rate", "> 0.0", "got -0.003"]),
    "nan_lr": ("", ["train.learning_rate=.nan"], ["train.learning_rate", "expected a finite number", "nan"]),
    "inf_lr_string": ("", ["train.learning_rate=inf"], ["train.learning_rate", "finite number", "inf"]),
    "lr_beyond_float32": ("", ["train.learning_rate=1e300"], ["train.learning_rate", "float32", "1e+300"]),
    "warmup_beyond_epochs": ("", ["train.warmup_epochs=5"], ["train.warmup_epochs", "5.0 warmup epochs",
                                                             "exceed train.epochs = 3"]),
    "negative_warmup": ("", ["train.warmup_epochs=-1"], ["train.warmup_epochs", ">= 0.0", "got -1.0"]),
    "smoothing_one": ("", ["train.label_smoothing=1"], ["train.label_smoothing", "expected a value < 1.0", "got 1.0"]),
    "smoothing_negative": ("", ["train.label_smoothing=-0.1"], ["train.label_smoothing", ">= 0.0", "got -0.1"]),
    "dropout_override_big": ("", ["train.dropout_rate_override=1.5"], ["train.dropout_rate_override", "< 1.0",
                                                                       "got 1.5"]),
    "model_dropout_negative": ("", ["model.dropout_rate=-0.5"], ["model.dropout_rate", ">= 0.0", "got -0.5"]),
    "ema_one": ("", ["train.ema_decay=1.0"], ["train.ema_decay", "< 1.0", "got 1.0"]),
    "clip_zero": ("", ["train.grad_clip_norm=0"], ["train.grad_clip_norm", "> 0.0", "got 0.0"]),
    "keep_zero": ("", ["train.keep_checkpoints=0"], ["train.keep_checkpoints", ">= 1", "got 0"]),
    "zero_width": ("", ["model.widths=[16,0]"], ["model.widths", ">= 1", "element 1 is 0"]),
    "huge_width": ("", ["model.widths=[16,1000000]"], ["model.widths", "<= 65536", "element 1 is 1000000"]),
    "scale_zero": ("", ["data.scale=0"], ["data.scale", "> 0.0", "got 0.0"]),
    "scale_above_one": ("", ["data.scale=1.5"], ["data.scale", "<= 1.0", "got 1.5"]),
    "negative_class_weight": ("", ["train.class_weights=[1,-1,1,1,1]"], ["train.class_weights", ">= 0",
                                                                         "[1.0, -1.0, 1.0, 1.0, 1.0]"]),
    "zero_class_weights": ("", ["train.class_weights=[0,0,0,0,0]"], ["train.class_weights", "every weight is 0"]),
    "class_weight_count": ("", ["train.class_weights=[1,1]"], ["train.class_weights", "2 weights for 5 classes"]),
    "negative_seed": ("", ["train.seed=-1"], ["train.seed", ">= 0", "got -1"]),
    "seed_beyond_int64": ("", [f"train.seed={2 ** 63}"], ["train.seed", "<= 9223372036854775807", "PRNGKey"]),
    "data_seed_beyond_uint64": ("", [f"data.seed={2 ** 64}"], ["data.seed", "<= 18446744073709551615"]),
    "shuffle_beyond_int64": ("", [f"data.shuffle_buffer_size={2 ** 63}"], ["data.shuffle_buffer_size",
                                                                           "<= 9223372036854775807"]),
    "translate_whole_image": ("", ["data.augmentation.translate_pixels=64"],
                              ["data.augmentation.translate_pixels", "64 pixels", "expected less than 64"]),
    "contrast_reversed": ("", ["data.augmentation.contrast_range=[1.1,0.9]"],
                          ["data.augmentation.contrast_range", "0 < low <= high", "[1.1, 0.9]"]),
    "batch_over_devices": ("", ["train.batch_size=60"], ["train.batch_size", "global batch 60",
                                                         "not divisible by 8 devices"]),
    "batch_over_dataset": ("", ["train.batch_size=4096"], ["train.batch_size", "global batch 4096",
                                                           "exceeds the 2489 training examples"]),
    "empty_name": ("", ["name=''"], ["name", "usable as a directory name", "''"]),
    "name_with_slash": ("", ["name=a/b"], ["name", "no '/'", "'a/b'"]),
    # unknown names
    "unknown_architecture": ("", ["model.architecture=resnet101"],
                             ["model.architecture", "'resnet101'", "expected one of", "'resnet18'", "'vit_tiny'",
                              "'small_cnn'"]),
    "near_architecture": ("", ["model.architecture=resnt34"], ["model.architecture", "did you mean 'resnet34'?"]),
    "unknown_model_file": (SMOKE_BASE + "model: resnet101_gray\n", [],
                           ["'resnet101_gray' names no config file", "'resnet18_gray'", "'small_cnn'"]),
    "unknown_base": ("base: smokey\n", [], ["'smokey' names no config file", "'smoke'"]),
    "unknown_optimizer": ("", ["train.optimizer=lamb"], ["train.optimizer", "'lamb'", "['adamw', 'adam', 'sgd']"]),
    "unknown_loss": ("", ["train.loss_name=hinge"], ["train.loss_name", "'hinge'", "['ce', 'focal']"]),
    "unknown_metric": ("", ["train.selection_metric=f1"], ["train.selection_metric", "'f1'", "macro_f1"]),
    "unknown_nan_policy": ("", ["train.nan_policy=ignore"], ["train.nan_policy", "'ignore'", "['stop', 'skip']"]),
    "unknown_normalization": ("", ["data.normalization.mode=zscore"], ["data.normalization.mode", "'zscore'",
                                                                       "mean_std"]),
    "unknown_key": (SMOKE_BASE + "train: {learnig_rate: 0.1}\n", [], ["'train.learnig_rate'",
                                                                      "did you mean 'learning_rate'?"]),
    "unknown_split_role": ("", ["data.splits={train: train, val: validation, test: test}"],
                           ["--set data.splits=", "data.splits", "expected the keys train, validation and test",
                            "unknown ['val']"]),
    "synthetic_split_name": ("", ["data.splits.test=holdout"], ["data.splits", "'holdout'",
                                                                 "not a synthetic_ddsm split"]),
    "tfds_bad_name": ("", ["data.dataset_name=not a name!", "data.data_dir={empty}"],
                      ["data.dataset_name", "'not a name!'", "dataset[/config][:x.y.z]"]),
    # missing files
    "missing_data_dir": ("", ["data.dataset_name=hdf5", "data.data_dir={empty}/nope"],
                         ["data.data_dir", "empty/nope does not exist"]),
    "data_dir_unset": ("", ["data.dataset_name=hdf5"], ["data.data_dir", "'hdf5' is read from files"]),
    "no_hdf5_shards": ("", ["data.dataset_name=hdf5", "data.data_dir={empty}"],
                       ["data.data_dir", "no HDF5 shard for the train split", "train*.h5"]),
    "no_tfds_build": ("", ["data.dataset_name=curated_breast_imaging_ddsm/patches:3.0.0", "data.data_dir={empty}"],
                      ["data.data_dir", "curated_breast_imaging_ddsm/patches/3.0.0 is not a directory"]),
    "missing_init_from": ("", ["train.init_from={empty}/weights.h5"], ["train.init_from",
                                                                       "weights.h5 does not exist"]),
    "init_from_kind": ("", ["train.init_from={empty}/weights.bin"], ["train.init_from", "weights.bin",
                                                                      "expected a podlet checkpoint (.h5)"]),
    "torchvision_into_cnn": ("", ["train.init_from={empty}/r.pth"], ["train.init_from",
                                                                      "torchvision state_dicts hold ResNets",
                                                                      "'small_cnn'"]),
    # images a model cannot take
    "small_cnn_too_small": ("", ["model.widths=[8,8,8,8,8,8]", "data.image_size=[16,16,1]"],
                            ["data.image_size", "16x16 is too small for small_cnn's 6 stages", "32x32"]),
    "vit_patch": ("", ["model=vit_tiny", "data.image_size=[72,72,1]"],
                  ["data.image_size", "72x72 is not a multiple of the ViT patch size 16", "vit_tiny's patch size"]),
    "vit_patch_set": ("", ["model=vit_tiny", "model.patch_size=12"],
                      ["data.image_size", "64x64 is not a multiple of the ViT patch size 12", "model.patch_size"]),
    "vit_heads": ("", ["model=vit_tiny", "model.num_heads=5"], ["model.num_heads", "hidden_size 192",
                                                                "not divisible by 5 heads"]),
    "resnet_widths_default_stages": ("", ["model=resnet18_gray", "model.stage_sizes=null", "model.widths=[8,16]"],
                                     ["model.widths", "2 widths for 4 stages",
                                      "resnet18's default stage_sizes [2, 2, 2, 2]"]),
    "vit_key_on_resnet": ("", ["model=resnet_tiny", "model.patch_size=8"], ["model.patch_size", "a ViT key"]),
    "channels": ("", ["data.image_size=[64,64,3]"], ["data.image_size", "3 channels", "model.in_channels is 1"]),
    "synthetic_not_square": ("", ["data.image_size=[64,48,1]"], ["data.image_size", "square 1-channel",
                                                                 "[64, 48, 1]"]),
    "synthetic_too_large": ("", ["data.image_size=[8192,8192,1]"], ["data.image_size", "16 <= n <= 4096",
                                                                    "[8192, 8192, 1]"]),
    "synthetic_classes": ("", ["data.num_classes=3", "train.class_weights=null"],
                          ["data.num_classes", "synthetic_ddsm has 5 classes", "got 3"]),
    # the files themselves
    "list_root": ("- train\n- data\n", [],
                  ["expected a mapping of keys at the top level", "got list ['train', 'data']"]),
    "scalar_root": ("just words\n", [], ["expected a mapping of keys at the top level", "got str 'just words'"]),
    "empty_file": ("", None, ["the file is empty"]),
    "comments_only": ("# nothing here\n", [], ["the file is empty (or only comments)"]),
    "syntax_error": (SMOKE_BASE + "train:\n  epochs: [3\n  seed: 1\n", [], ["not valid YAML at line 4"]),
    "tab_indent": (SMOKE_BASE + "train:\n\tepochs: 3\n", [], ["not valid YAML at line 3, column 1",
                                                             "found character '\\t'"]),
    "duplicate_key": (SMOKE_BASE + "train:\n  epochs: 3\n  epochs: 4\n", [],
                      ["not valid YAML at line 4", "key 'epochs' appears twice", "first at line 3"]),
    "not_utf8": (b"name: \xff\xfe\xfa\n", [], ["not valid YAML"]),
    "set_without_value": ("", ["train.epochs"], ["--set 'train.epochs': expected KEY=VALUE"]),
    "set_bad_yaml": ("", ["train.class_weights=[1, 2"], ["--set 'train.class_weights=[1, 2'",
                                                          "the value is not valid YAML"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_config_is_a_named_error(configs, case):
    text, overrides, expected = CASES[case]
    empty = str(configs / "empty")
    if overrides is not None and not text:
        text = SMOKE_BASE  # a --set on the smoke run
    path = _write(configs / "configs" / "experiments" / f"bad_{case}.yaml", text)
    overrides = [o.replace("{empty}", empty) for o in overrides or []]
    with pytest.raises(C.ConfigError) as ei:
        C.load_config(path, overrides, num_devices=8)
    msg = str(ei.value)
    assert _one_line_naming_its_source(msg), msg
    for part in expected:
        assert part in msg, f"{case}: {part!r} not in {msg!r}"


def test_config_file_itself(configs):
    with pytest.raises(C.ConfigError, match=r"nope\.yaml does not exist"):
        C.load_config(configs / "nope.yaml")
    with pytest.raises(C.ConfigError, match=r"experiments is a directory, not a YAML file"):
        C.load_config(configs / "configs" / "experiments")


# ----------------------------------------------------------------- the models' limits

def _logits(model, shape):
    x = jnp.ones(shape, jnp.float32)
    v = model.init(podlet.random.PRNGKey(0), x, train=False)
    return np.asarray(model.apply(v, x, train=False))


def test_input_size_rules_are_the_models_own(configs):
    """validate's smallest images are where the models actually stop working."""
    from podlet import models
    from podlet.training.small_cnn import SmallCNN

    def check(arch_overrides, size):
        C.validate(C.config_from_dict({"model": arch_overrides,
                                       "data": {"dataset_name": "hdf5", "data_dir": "unused", "image_size": size,
                                                "augmentation": {"enabled": False}},
                                       "train": {"batch_size": 8}}),
                   num_devices=8, check_data=False)

    # small_cnn: a 2x2 'VALID' pool between stages; 4 stages need 8 px, 2 stages 2 px
    for widths, need in (([16, 32, 64, 96], 8), ([4, 4], 2)):
        check({"architecture": "small_cnn", "widths": widths}, [need, need, 1])
        assert np.isfinite(_logits(SmallCNN(widths=widths), (1, need, need, 1))).all()
        with pytest.raises(C.ConfigError, match=f"too small for small_cnn's {len(widths)} stages"):
            check({"architecture": "small_cnn", "widths": widths}, [need - 1, need, 1])
        assert np.isnan(_logits(SmallCNN(widths=widths), (1, need - 1, need, 1))).all()
    # ResNets pad 'SAME' at every stride: even 1 x 1 survives the downsampling
    check({"architecture": "resnet18", "stage_sizes": [1, 1], "widths": [8, 16]}, [1, 1, 1])
    assert np.isfinite(_logits(models.ResNet18(stage_sizes=[1, 1], widths=[8, 16]), (1, 1, 1, 1))).all()
    # ViTs: whole patches only
    check({"architecture": "vit_tiny", "num_layers": 1}, [16, 32, 1])
    with pytest.raises(C.ConfigError, match="24x32 is not a multiple of the ViT patch size 16"):
        check({"architecture": "vit_tiny", "num_layers": 1}, [24, 32, 1])


# ---------------------------------------------------------------------------- fuzzer

FUZZ_SEED = 29
FUZZ_MUTANTS = 400
ODD_VALUES = ["64", "abc", "", [1, 2], {"a": 1}, True, False, None, 3, 2.5, [], {}, "1e-3", "null", "[1"]
HUGE = [10 ** 6, 2 ** 31, 2 ** 63, 2 ** 64, 10 ** 30, 10 ** 400, 1e30, 1e300]
ODD_STRINGS = ["", " ", "../x", "a/b", "\t", "ü", "resnet", "small_cnn", "adamw", "x" * 40, "~", "0", "true", "null",
               "mean_std", "hdf5", "train", "macro_f1", ".", "vit_small"]


def _nodes(tree, path=()):
    """(path, value) of every mapping, list and leaf below `tree` (list elements too)."""
    for k, v in tree.items() if isinstance(tree, dict) else enumerate(tree):
        yield path + (k,), v
        if isinstance(v, (dict, list)):
            yield from _nodes(v, path + (k,))


def _parent(tree, path):
    for k in path[:-1]:
        tree = tree[k]
    return tree


def _choices(path):
    """The admissible values of the schema field at `path`, if it has a list of them."""
    cls, choices = C.ExperimentConfig, None
    for k in path:
        fields = {f.name: f for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {}
        if k not in fields:
            return None
        choices = fields[k].metadata.get("choices")
        cls = typing.get_type_hints(cls)[k]
    return choices


def _near_miss(rng, s):
    if not s:
        return rng.choice(ODD_STRINGS)
    i = rng.randrange(len(s))
    op = rng.randrange(3)
    if op == 0:
        return s[:i] + s[i + 1:]
    if op == 1:
        return s[:i] + rng.choice("abcxyz_0") + s[i:]
    return s[:i] + s[i].upper() + s[i + 1:]


def _mutate(rng, tree):
    """One random mutation of `tree` in place; returns a description."""
    nodes = list(_nodes(tree))
    path, value = rng.choice(nodes)
    parent = _parent(tree, path)
    key = path[-1]
    # weighted so that about a fifth of the mutants still validate and get built
    op = rng.choice(["type", "type", "negate", "zero", "huge", "nan", "string", "delete", "delete", "unknown",
                     "choice", "choice", "choice", "scale", "scale", "scale", "list", "section"])
    where = ".".join(map(str, path))
    if op == "type":
        new = rng.choice(ODD_VALUES)
    elif op == "negate":
        new = -value if isinstance(value, (int, float)) and not isinstance(value, bool) else -1
    elif op == "zero":
        new = rng.choice([0, 0.0])
    elif op == "huge":
        new = rng.choice(HUGE) * rng.choice([1, -1])
    elif op == "nan":
        new = rng.choice([math.nan, math.inf, -math.inf, "nan", "-inf"])
    elif op == "string":
        new = _near_miss(rng, value) if isinstance(value, str) else rng.choice(ODD_STRINGS)
    elif op == "delete":
        del parent[key]
        return f"delete {where}"
    elif op == "unknown":
        target = value if isinstance(value, dict) and value else parent
        if isinstance(target, dict):
            sibling = rng.choice(list(target)) if target else "x"
            name = rng.choice([_near_miss(rng, str(sibling)), f"bogus_{rng.randrange(100)}"])
            target[name] = rng.choice([1, "x", None, [1]])
            return f"add unknown key {name!r} beside {where}"
        new = rng.choice(ODD_VALUES)
    elif op == "choice":
        choices = _choices(tuple(k for k in path if isinstance(k, str)))
        new = rng.choice(list(choices)) if choices else rng.choice(ODD_STRINGS)
    elif op == "scale":  # valid-looking changes, so that many mutants validate and get built
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            new = value
        else:
            f = rng.choice([0.5, 2, 3, 0.25, 4])
            new = type(value)(value * f)
    elif op == "list":
        if isinstance(value, list):
            new = rng.choice([value + value[-1:], value[:-1], [], value[::-1], value * 2])
        else:
            new = [value]
    else:  # a whole section replaced
        section = rng.choice(["model", "data", "train"])
        new = rng.choice([None, 5, "small_cnn", "resnet_tiny", "vit_tiny", "synthetic_64", [1], "nope"])
        tree[section] = new
        return f"{section} = {new!r}"
    parent[key] = new
    return f"{where}: {value!r} -> {new!r}"


def _text_mutation(rng, text):
    """Damage to the YAML text itself."""
    lines = text.splitlines(keepends=True)
    op = rng.choice(["truncate", "duplicate_line", "tab", "colon", "bracket"])
    i = rng.randrange(len(lines))
    if op == "truncate":
        cut = rng.randrange(len(text))
        return text[:cut], f"truncated at byte {cut}"
    if op == "duplicate_line":
        lines.insert(i, lines[i])
    elif op == "tab":
        lines[i] = "\t" + lines[i]
    elif op == "colon":
        lines[i] = lines[i].replace(":", " ", 1)
    else:
        lines[i] = lines[i].rstrip("\n") + " [\n"
    return "".join(lines), f"{op} at line {i + 1}"


_shapes = {}
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml when present: the sample stays fast


def _build(cfg):
    """What training builds from a config, without training: data sources, schedule,
    optimizer (one update), loss, and the model's init and forward pass on abstract
    inputs (shapes only)."""
    t, d = cfg.train, cfg.data
    data = make_data(cfg)
    # the input pipelines, as the loop asks for them (their seeds and sizes reach C++ here;
    # no batch is produced)
    data._dataset("train", training=True, batch_size=t.batch_size)
    data._dataset("validation", training=False, batch_size=t.eval_batch_size or t.batch_size)
    podlet.random.PRNGKey(t.seed)
    spe = data.num_examples("train") // t.batch_size
    assert spe >= 1
    C.check_total_steps(cfg, spe)
    spe = min(spe, t.max_steps_per_epoch or spe)
    schedule = S.create_learning_rate_schedule(t, spe)
    total = t.epochs * spe
    lrs = [float(schedule(s)) for s in (0, int(round(t.warmup_epochs * spe)), total)]
    assert all(math.isfinite(x) and x >= 0 for x in lrs), lrs
    tx = S.create_optimizer(t, schedule)
    params = {"w": jnp.ones((3,), jnp.float32)}
    updates, _ = tx.update({"w": jnp.full((3,), 0.5, jnp.float32)}, tx.init(params), params)
    assert np.isfinite(np.asarray(updates["w"])).all()
    k = d.num_classes
    loss = optax.classification_loss(jnp.zeros((2, k), jnp.float32), jnp.array([0, 1], jnp.int32), k,
                                     loss_name=t.loss_name, label_smoothing=t.label_smoothing,
                                     class_weights=None if t.class_weights is None else tuple(t.class_weights),
                                     gamma=t.focal_gamma)
    assert math.isfinite(float(loss))
    model = S.build_model(cfg)
    key = repr(S.model_definition(cfg))
    if key not in _shapes:
        x = podlet.ShapeDtypeStruct((1, *d.image_size), jnp.float32)
        _shapes[key] = podlet.eval_shape(
            lambda rng, x: model.apply(model.init(rng, x, train=False), x, train=False),
            podlet.random.PRNGKey(0), x).shape
    assert tuple(_shapes[key]) == (1, k), _shapes[key]


def test_fuzzed_configs_are_refused_by_name_or_build(configs):
    rng = random.Random(FUZZ_SEED)
    smoke = C.config_to_dict(C.load_config(SMOKE, num_devices=8))
    path = configs / "configs" / "experiments" / "mutant.yaml"
    outcomes = {"refused": 0, "built": 0}
    failures = []
    t0 = time.process_time()
    for n in range(FUZZ_MUTANTS):
        tree = copy.deepcopy(smoke)
        what = [_mutate(rng, tree) for _ in range(rng.choice([1, 1, 2, 3]))]
        text = yaml.dump(tree, Dumper=_Dumper, sort_keys=False)
        if rng.random() < 0.1:
            text, how = _text_mutation(rng, text)
            what.append(how)
        _write(path, text)
        try:
            cfg = C.load_config(path, num_devices=8)
        except C.ConfigError as e:
            msg = str(e)
            if not _one_line_naming_its_source(msg):
                failures.append((n, what, f"unclear ConfigError: {msg!r}"))
            outcomes["refused"] += 1
            continue
        except Exception as e:  # noqa: BLE001  (every other exception is a finding)
            failures.append((n, what, f"load_config raised {type(e).__name__}: {e}"))
            continue
        try:
            _build(cfg)
            outcomes["built"] += 1
        except Exception as e:  # noqa: BLE001
            failures.append((n, what, f"validated, then building raised {type(e).__name__}: {e}"))
    cpu_seconds = time.process_time() - t0
    assert not failures, "\n".join(f"mutant {n} ({'; '.join(w)}): {why}" for n, w, why in failures[:10])
    # the sample exercises both outcomes, and stays cheap (about 7 s of CPU on the 2-core host)
    assert outcomes["refused"] > 200 and outcomes["built"] > 50, outcomes
    assert cpu_seconds < 30, cpu_seconds
