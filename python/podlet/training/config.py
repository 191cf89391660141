"""Experiment configs: YAML files laid out like the seed's, checked against a typed schema.

    configs/models/resnet34_gray.yaml      model keys (stage_sizes, widths, in_channels, ...)
    configs/data/conservative_aug.yaml     data keys (dataset_name, image_size, augmentation, ...)
    configs/experiments/final_best.yaml    composes them by name and sets the train keys:

        name: resnet34_final_best
        model: resnet34_gray                       # -> ../models/resnet34_gray.yaml
        data: conservative_aug                     # -> ../data/conservative_aug.yaml
        train: {seed: 21, epochs: 35, batch_size: 256, ...}

A section may also be a mapping ``{base: <name>, <key>: <override>, ...}``, and an
experiment may start from another with a top-level ``base: <experiment name>`` (mappings
merge key by key, lists and scalars are replaced). ``load_config(path, overrides=
["train.learning_rate=5e-4"])`` applies command-line overrides last.

Every key is checked: unknown keys, wrong types and impossible values (a batch the
devices cannot split, a negative learning rate) raise :class:`ConfigError` naming the
key and the file (or ``--set``) it came from, the bad value and what was expected. So
are images a model cannot take (a small_cnn input its pools shrink to nothing, a ViT
input that is not whole patches), the synthetic set's own limits, files the config
names that do not exist (``data.data_dir`` and its shards, ``train.init_from``), YAML
syntax errors (with the line), duplicated keys, empty files and non-mapping files. All
of it before a model is built or data read (``tests/test_config_fuzz.py`` mutates the
smoke config a few hundred times: each mutant is refused this way or builds).
"""
from __future__ import annotations

import dataclasses
import difflib
import glob
import math
import os
import re
import typing
from typing import Any, Optional

import yaml

from .._src.errors import PodletError

__all__ = ["ConfigError", "ModelConfig", "NormalizationConfig", "AugmentationConfig", "DataConfig",
           "TrainConfig", "ExperimentConfig", "load_config", "config_from_dict", "config_to_dict",
           "dump_config", "validate", "check_total_steps", "METRIC_MODES", "SYNTHETIC_CLASS_NAMES"]


class ConfigError(PodletError):
    """A config key is unknown, mistyped or impossible; the message names key and file."""


#: selection_metric -> "max" or "min" (which way is better).
METRIC_MODES = {"macro_f1": "max", "balanced_accuracy": "max", "accuracy": "max", "roc_auc": "max",
                "loss": "min"}

SYNTHETIC_CLASS_NAMES = ("BACKGROUND", "BENIGN_CALCIFICATION", "BENIGN_MASS", "MALIGNANT_CALCIFICATION",
                         "MALIGNANT_MASS")


def _f(default=dataclasses.MISSING, *, choices=None, lo=None, hi=None, lo_open=False, hi_open=False,
       doc="", why=""):
    """A schema field with its admissible values (checked by ``validate``); `why` says, in
    the error, where a limit comes from."""
    meta = {"choices": choices, "lo": lo, "hi": hi, "lo_open": lo_open, "hi_open": hi_open, "doc": doc,
            "why": why}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda d=default: type(d)(d), metadata=meta)
    if dataclasses.is_dataclass(default) and isinstance(default, type):
        return dataclasses.field(default_factory=default, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


# ------------------------------------------------------------------------------ schema

# Limits that come from the code a value is passed to, not from taste.
_INT64_MAX = (1 << 63) - 1
_UINT64_MAX = (1 << 64) - 1
_INT32_MAX = (1 << 31) - 1
_FLOAT32_MAX = 3.4028234663852886e38
# Sizes no model or image of this application can need; beyond them a value is a typo,
# and the model would fail to allocate (its initialisers materialise width-sized arrays
# even under eval_shape) or trace for hours (depth) instead of saying so.
_MAX_WIDTH = 1 << 16
_MAX_DEPTH = 1024
_MAX_SIDE = 1 << 16
_MAX_CLASSES = 1 << 20
_SIZE_WHY = "a larger value is not a model or image this application can build"
_SYNTHETIC_SPLITS = ("train", "validation", "test")
_SYNTHETIC_SIDES = (16, 4096)  # podlet.data.synthetic_ddsm's image_size range

@dataclasses.dataclass
class ModelConfig:
    """The network (``configs/models/*.yaml``).

    ResNets take ``stage_sizes``/``widths`` overrides (a smaller ResNet is ``architecture:
    resnet18`` with ``stage_sizes: [1, 1]``); ViTs take ``patch_size``, ``hidden_size``,
    ``num_layers``, ``num_heads``, ``mlp_dim`` overrides; Swins (``swin_tiny``,
    ``swin_small``: torchvision's swin_t / swin_s) take none; ``small_cnn`` (the seed's
    smoke network, podlet.training.small_cnn) takes ``widths``.
    """
    architecture: str = _f("resnet34", choices=("resnet18", "resnet34", "resnet50", "vit_tiny", "vit_small",
                                                "vit_b16", "vit_b32", "swin_tiny", "swin_small", "small_cnn"))
    stage_sizes: Optional[list[int]] = _f(None, lo=1, hi=_MAX_DEPTH, why=_SIZE_WHY)
    widths: Optional[list[int]] = _f(None, lo=1, hi=_MAX_WIDTH, why=_SIZE_WHY)
    in_channels: int = _f(1, lo=1, hi=_MAX_SIDE, why=_SIZE_WHY)
    dropout_rate: float = _f(0.0, lo=0.0, hi=1.0, hi_open=True)
    stochastic_depth_rate: float = _f(0.0, lo=0.0, hi=1.0, hi_open=True)
    patch_size: Optional[int] = _f(None, lo=1, hi=_MAX_SIDE, why=_SIZE_WHY)
    hidden_size: Optional[int] = _f(None, lo=1, hi=_MAX_WIDTH, why=_SIZE_WHY)
    num_layers: Optional[int] = _f(None, lo=1, hi=_MAX_DEPTH, why=_SIZE_WHY)
    num_heads: Optional[int] = _f(None, lo=1, hi=_MAX_WIDTH, why=_SIZE_WHY)
    mlp_dim: Optional[int] = _f(None, lo=1, hi=_MAX_WIDTH, why=_SIZE_WHY)


@dataclasses.dataclass
class NormalizationConfig:
    """The seed's ``normalize_image``: pixels/255, then ``mean_std`` or ``minus_one_to_one``."""
    mode: str = _f("mean_std", choices=("mean_std", "minus_one_to_one"))
    mean: float = _f(0.5)
    std: float = _f(0.25, lo=0.0, lo_open=True)


@dataclasses.dataclass
class AugmentationConfig:
    """Training-time augmentation; the defaults are the seed's conservative recipe
    (6-pixel translation, 10 degree rotation, brightness delta 0.05, mild contrast, no flip:
    left/right carries diagnostic information)."""
    enabled: bool = _f(True)
    translate_pixels: int = _f(6, lo=0)
    rotation_degrees: float = _f(10.0, lo=0.0, hi=180.0)
    brightness_delta: float = _f(0.05, lo=0.0, hi=1.0)
    contrast_range: Optional[list[float]] = _f([0.9, 1.1])
    horizontal_flip: bool = _f(False)


@dataclasses.dataclass
class DataConfig:
    """The input pipeline (``configs/data/*.yaml``).

    ``dataset_name: synthetic_ddsm`` is the embedded synthetic patch set (split sizes are
    CBIS-DDSM's times ``scale``; ``seed`` selects the dataset, independent of the training
    seed, so a seed sweep trains on the same data); a TFDS name such as
    ``curated_breast_imaging_ddsm/patches:3.0.0`` with ``data_dir`` reads a user's TFDS
    build; ``hdf5`` reads ``<data_dir>/<split>*.h5`` shards (``podlet data export``).
    """
    dataset_name: str = _f("synthetic_ddsm")
    data_dir: Optional[str] = _f(None)
    seed: int = _f(0, lo=0, hi=_UINT64_MAX, why="the synthetic set's seed is an unsigned 64-bit integer")
    splits: dict[str, str] = _f({"train": "train", "validation": "validation", "test": "test"})
    image_size: list[int] = _f([224, 224, 1], lo=1, hi=_MAX_SIDE, why=_SIZE_WHY)
    num_classes: int = _f(5, lo=2, hi=_MAX_CLASSES, why=_SIZE_WHY)
    scale: float = _f(1.0, lo=0.0, hi=1.0, lo_open=True)
    cache: bool = _f(False)
    shuffle_buffer_size: int = _f(8192, lo=1)
    prefetch_batches: int = _f(4, lo=0)
    drop_remainder: bool = _f(True)
    normalization: NormalizationConfig = _f(NormalizationConfig)
    augmentation: AugmentationConfig = _f(AugmentationConfig)


@dataclasses.dataclass
class TrainConfig:
    """The optimisation recipe (the seed's ``TrainConfig``) and what the loop needs.

    Fine-tuning keys: ``layer_decay`` in (0, 1] gives each layer of a ViT, Swin or ResNet
    (per stage) the learning rate ``learning_rate * layer_decay ** (L + 1 - layer)``
    (patch embedding layer 0, block i layer i + 1, final norm and head L + 1; the Swin
    patch merging goes with the stage it ends); ``freeze_backbone_epochs`` (0 <= N <
    epochs) trains only the classifier for the first N epochs. Both build the optimizer
    as optax's ``multi_transform`` over parameter labels (podlet.training.layer_decay).
    """
    seed: int = _f(0, lo=0, hi=_INT64_MAX, why="podlet.random.PRNGKey takes a 64-bit seed and the input "
                   "pipeline's shuffle and augmentation seeds are unsigned")
    epochs: int = _f(25, lo=1, hi=_INT32_MAX, why="the optimizer counts steps in int32")
    batch_size: int = _f(256, lo=1, doc="global: split over the devices")
    learning_rate: float = _f(5e-4, lo=0.0, lo_open=True)
    warmup_epochs: float = _f(3.0, lo=0.0)
    weight_decay: float = _f(1e-4, lo=0.0)
    optimizer: str = _f("adamw", choices=("adamw", "adam", "sgd"))
    loss_name: str = _f("ce", choices=("ce", "focal"))
    focal_gamma: float = _f(2.0, lo=0.0)
    class_weights: Optional[list[float]] = _f(None)
    label_smoothing: float = _f(0.0, lo=0.0, hi=1.0, hi_open=True)
    dropout_rate_override: Optional[float] = _f(None, lo=0.0, hi=1.0, hi_open=True)
    ema_decay: Optional[float] = _f(None, lo=0.0, hi=1.0, hi_open=True)
    use_bfloat16: bool = _f(True)
    grad_clip_norm: Optional[float] = _f(1.0, lo=0.0, lo_open=True)
    selection_metric: str = _f("macro_f1", choices=tuple(METRIC_MODES))
    early_stopping_patience: Optional[int] = _f(None, lo=1, doc="epochs without improvement")
    # What the loop needs beyond the seed's keys.
    eval_batch_size: Optional[int] = _f(None, lo=1, doc="default: batch_size")
    max_steps_per_epoch: Optional[int] = _f(None, lo=1, doc="cap on steps per epoch (smoke runs)")
    num_devices: Optional[int] = _f(None, lo=1, doc="devices in all, split evenly over the processes of a "
                                    "multi-process run; default: podlet.device_count()")
    keep_checkpoints: int = _f(3, lo=1, doc="the last N are kept, and the best")
    nan_policy: str = _f("stop", choices=("stop", "skip"))
    log_every_steps: int = _f(1, lo=1)
    init_from: Optional[str] = _f(None, doc="pretrained weights to start from (podlet export/import)")
    # Fine-tuning (podlet.training.layer_decay).
    layer_decay: Optional[float] = _f(None, lo=0.0, hi=1.0, lo_open=True,
                                      doc="layer-wise LR decay (BEiT/Swin fine-tuning): layer i of L trains at "
                                      "learning_rate * layer_decay ** (L + 1 - i), the head at learning_rate; "
                                      "ViT, Swin and ResNets (per stage), not small_cnn")
    freeze_backbone_epochs: int = _f(0, lo=0, doc="the first N epochs train the head alone (every other param "
                                     "gets zero updates and no weight decay), then everything trains")


@dataclasses.dataclass
class ExperimentConfig:
    name: str = _f("experiment")
    description: str = _f("")
    model: ModelConfig = _f(ModelConfig)
    data: DataConfig = _f(DataConfig)
    train: TrainConfig = _f(TrainConfig)

    @property
    def class_names(self):
        if self.data.dataset_name == "synthetic_ddsm":
            return list(SYNTHETIC_CLASS_NAMES)
        return [f"class_{i}" for i in range(self.data.num_classes)]


_SECTIONS = {"model": "models", "data": "data"}


# ----------------------------------------------------------------------------- loading

class _Raw:
    """A merged plain-dict config plus where each dotted key came from."""

    def __init__(self):
        self.tree: dict = {}
        self.origin: dict[str, str] = {}

    def merge(self, tree, origin, prefix=""):
        _merge_into(self.tree, tree, origin, self.origin, prefix)


def _merge_into(dst, src, origin, origins, prefix):
    for k, v in src.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            _merge_into(dst[k], v, origin, origins, key + ".")
        else:
            dst[k] = _copy(v)
            for o in [o for o in origins if o.startswith(key + ".")]:
                del origins[o]
            _record(origins, key, v, origin)


def _record(origins, key, v, origin):
    origins[key] = origin
    if isinstance(v, dict):
        for k2, v2 in v.items():
            _record(origins, f"{key}.{k2}", v2, origin)


def _copy(v):
    if isinstance(v, dict):
        return {k: _copy(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_copy(x) for x in v]
    return v


class _Loader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a key given twice in one mapping: PyYAML keeps the
    last silently, so a duplicated ``epochs:`` would quietly win over the first."""


def _construct_mapping(loader, node, deep=False):
    seen = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # "<<: *base" may be overridden key by key
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.setdefault(key, key_node.start_mark)
        except TypeError:  # unhashable: construct_mapping below says so
            continue
        if first is not key_node.start_mark:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} appears twice in one mapping (first at line {first.line + 1})",
                key_node.start_mark)
    return loader.construct_mapping(node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _yaml_error(e):
    """One line for a YAML error: the problem, its line and column (1-based)."""
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None)
    if mark is None or problem is None:
        return " ".join(str(e).split())
    where = f"at line {mark.line + 1}, column {mark.column + 1}"
    context = getattr(e, "context", None)
    cmark = getattr(e, "context_mark", None)
    if context and cmark is not None and cmark.line != mark.line:
        context = f"{context} (line {cmark.line + 1})"
    return f"{where}: {problem}" + (f", {context}" if context else "")


def _read_yaml(path):
    try:
        with open(path, "rb") as f:  # bytes: PyYAML detects the encoding and reports bad bytes
            tree = yaml.load(f, Loader=_Loader)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {path} is a directory, not a YAML file") from None
    except OSError as e:
        raise ConfigError(f"config file {path} cannot be read: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML {_yaml_error(e)}") from None
    if tree is None:
        raise ConfigError(f"{path}: the file is empty (or only comments); expected a mapping of config keys")
    if not isinstance(tree, dict):
        raise ConfigError(f"{path}: expected a mapping of keys at the top level, got {type(tree).__name__} "
                          f"{_short(tree)}")
    return tree


def _short(v, n=60):
    r = repr(v)
    return r if len(r) <= n else r[:n - 3] + "..."


def _configs_root(path):
    """configs/ for a file in configs/<section>/ (where named references are looked up)."""
    return os.path.dirname(os.path.dirname(os.path.abspath(path)))


def _resolve_ref(name, kind, referrer):
    """A section or base reference: a path (``*.yaml``, relative to the referring file)
    or a name looked up in ``configs/<kind>/``."""
    if not isinstance(name, str):
        raise ConfigError(f"{referrer}: a reference to configs/{kind}/ must be a name, got {name!r}")
    if not name or "\0" in name:
        raise ConfigError(f"{referrer}: {name!r} is not a name of configs/{kind}/")
    if name.endswith((".yaml", ".yml")):
        p = name if os.path.isabs(name) else os.path.join(os.path.dirname(os.path.abspath(referrer)), name)
    else:
        p = os.path.join(_configs_root(referrer), kind, name + ".yaml")
    if not os.path.isfile(p):
        avail = sorted(f[:-5] for f in os.listdir(os.path.dirname(p)) if f.endswith(".yaml")) \
            if os.path.isdir(os.path.dirname(p)) else []
        raise ConfigError(f"{referrer}: {name!r} names no config file (looked for {p}); "
                          f"available in {os.path.dirname(p)}: {avail}")
    return p


def _load_section(value, section, referrer, raw, seen):
    """Merges a section given as a name, a path, or a mapping with an optional ``base``."""
    kind = _SECTIONS[section]
    if isinstance(value, str):
        value = {"base": value}
    if not isinstance(value, dict):
        raise ConfigError(f"{referrer}: {section}: expected a name of configs/{kind}/ or a mapping, "
                          f"got {value!r}")
    value = dict(value)
    base = value.pop("base", None)
    if base is not None:
        p = _resolve_ref(base, kind, referrer)
        if p in seen:
            raise ConfigError(f"{referrer}: {section}.base {base!r} includes itself ({' -> '.join(seen + [p])})")
        _load_section(_read_yaml(p), section, p, raw, seen + [p])
    raw.merge({section: value}, referrer)


def _load_experiment(path, raw, seen):
    tree = _read_yaml(path)
    base = tree.pop("base", None)
    if base is not None:
        p = _resolve_ref(base, "experiments", path)
        if p in seen:
            raise ConfigError(f"{path}: base {base!r} includes itself ({' -> '.join(seen + [p])})")
        _load_experiment(p, raw, seen + [p])
    for section in _SECTIONS:
        if section in tree:
            value = tree.pop(section)
            if isinstance(value, str) or (isinstance(value, dict) and "base" in value):
                _clear_section(raw, section)  # naming a file means that model/data, not a blend
            _load_section(value, section, path, raw, seen)
    raw.merge(tree, path)


def _clear_section(raw, section):
    raw.tree.pop(section, None)
    for k in [k for k in raw.origin if k.startswith(section + ".")]:
        del raw.origin[k]


def _parse_override(item):
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. train.learning_rate=5e-4")
    key, text = item.split("=", 1)
    key = key.strip()
    try:
        value = yaml.load(text, Loader=_Loader) if text.strip() else None
    except yaml.YAMLError as e:
        raise ConfigError(f"--set {item!r}: the value is not valid YAML ({_yaml_error(e)})") from None
    tree = value
    for part in reversed(key.split(".")):
        if not part:
            raise ConfigError(f"--set {item!r}: empty component in key {key!r}")
        tree = {part: tree}
    return tree


def load_config(path, overrides=(), *, num_devices=None) -> ExperimentConfig:
    """Loads, composes, overrides (``["train.learning_rate=5e-4", ...]``) and validates an
    experiment. `num_devices` (default: ``train.num_devices`` or
    ``podlet.device_count()``) is what the batch must divide into."""
    path = os.fspath(path)
    raw = _Raw()
    _load_experiment(path, raw, [os.path.abspath(path)])
    for item in overrides:
        tree = _parse_override(item)
        section = next(iter(tree))
        if section in _SECTIONS and isinstance(tree[section], str):
            # --set model=resnet18 swaps the whole section for another file.
            _clear_section(raw, section)
            _load_section(tree[section], section, path, raw, [])
            continue
        raw.merge(tree, f"--set {item}")
    cfg = config_from_dict(raw.tree, origin=raw.origin, default_origin=path)
    validate(cfg, num_devices=num_devices, origin=raw.origin, default_origin=path)
    return cfg


# -------------------------------------------------------------------------- typing

def _type_name(tp):
    if tp is float:
        return "a number"
    if tp is int:
        return "an integer"
    if tp is bool:
        return "true or false"
    if tp is str:
        return "a string"
    if tp is dict:
        return "a mapping"
    origin = typing.get_origin(tp)
    if origin is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return f"{_type_name(args[0])} or null"
    if origin is list:
        inner = typing.get_args(tp)[0]
        return {int: "a list of integers", float: "a list of numbers", str: "a list of strings"}.get(
            inner, f"a list of {_type_name(inner)}")
    if origin is dict:
        return "a mapping of names to strings"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    return str(tp)


def _coerce(value, tp, where):
    """`value` as type `tp`, or a ConfigError naming `where`."""
    def bad():
        return ConfigError(f"{where}: expected {_type_name(tp)}, got {_short(value)} ({type(value).__name__})")

    origin = typing.get_origin(tp)
    if origin is typing.Union:
        if value is None:
            return None
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return _coerce(value, inner, where)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise bad()
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise bad()
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                return float(value)
            except OverflowError:  # an int beyond any float
                raise ConfigError(f"{where}: expected a finite number, got {_short(value)} "
                                  f"(too large for a float)") from None
        if isinstance(value, str):
            # PyYAML follows YAML 1.1, where 5e-4 (no dot) is a string, not a float.
            try:
                return float(value)
            except ValueError:
                pass
        raise bad()
    if tp is str:
        if isinstance(value, str):
            return value
        raise bad()
    if tp is dict:
        if isinstance(value, dict):
            return dict(value)
        raise bad()
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise bad()
        (inner,) = typing.get_args(tp)
        return [_coerce(v, inner, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise bad()
        kt, vt = typing.get_args(tp)
        return {_coerce(k, kt, f"{where} (a key)"): _coerce(v, vt, f"{where}.{k}") for k, v in value.items()}
    raise TypeError(f"unsupported schema type {tp}")


def _build(cls, tree, prefix, origin, default_origin):
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for k, v in tree.items():
        key = f"{prefix}{k}"
        where = f"{origin.get(key, default_origin)}: {key}"
        if k not in fields:
            near = difflib.get_close_matches(str(k), list(fields), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ConfigError(f"{origin.get(key, default_origin)}: unknown key {key!r}{hint}; "
                              f"{prefix.rstrip('.') or 'the top level'} takes {sorted(fields)}")
        tp = hints[k]
        if dataclasses.is_dataclass(tp):
            if not isinstance(v, dict):
                raise ConfigError(f"{where}: expected a mapping of {key} keys, got {_short(v)}")
            kwargs[k] = _build(tp, v, key + ".", origin, default_origin)
        else:
            kwargs[k] = _coerce(v, tp, where)
    return cls(**kwargs)


def config_from_dict(tree, *, origin=None, default_origin="<dict>") -> ExperimentConfig:
    """An ExperimentConfig from plain nested dicts (as ``config_to_dict`` writes them);
    types are checked, values are not (see ``validate``)."""
    if not isinstance(tree, dict):
        raise ConfigError(f"{default_origin}: expected a mapping at the top level, got {tree!r}")
    return _build(ExperimentConfig, tree, "", origin or {}, default_origin)


def config_to_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)


def dump_config(cfg) -> str:
    """The resolved config as YAML (every key; ``load_config`` reads it back to an equal config)."""
    return yaml.safe_dump(config_to_dict(cfg), sort_keys=False, default_flow_style=None)


# ---------------------------------------------------------------------- validation

def _default_devices():
    import podlet
    if hasattr(podlet, "device_count"):
        return podlet.device_count()  # every process's devices (the local ones in a single process)
    return int(os.environ.get("PODLET_NUM_DEVICES", "8"))


def _arch_defaults(arch):
    """The keyword defaults of `arch`'s model (stage_sizes of a ResNet, patch_size,
    hidden_size and num_heads of a ViT, widths of small_cnn), read from the model code so
    that the checks below follow it."""
    import functools
    if arch == "small_cnn":
        from .small_cnn import SmallCNN as ctor
    else:
        from .. import models
        ctor = models.MODELS[arch]
    keywords = dict(ctor.keywords) if isinstance(ctor, functools.partial) else {}
    cls = ctor.func if isinstance(ctor, functools.partial) else ctor
    defaults = {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
    return {**defaults, **keywords}


def _synthetic_train_size(d):
    """How many examples the synthetic set's train split has (its C++ source counts them
    without generating an image)."""
    from ..data import synthetic_ddsm
    return len(synthetic_ddsm(d.splits["train"], image_size=d.image_size[0], scale=d.scale, seed=d.seed))


def _check_data_files(d, err):
    """The files a dataset other than the synthetic one is read from exist (a stat and a
    glob: nothing is opened)."""
    data_dir = os.path.expanduser(d.data_dir)
    if not os.path.isdir(data_dir):
        what = "is not a directory" if os.path.exists(data_dir) else "does not exist"
        raise err("data.data_dir", f"{data_dir} {what} (dataset {d.dataset_name!r} is read from it)")
    if d.dataset_name == "hdf5":
        for role, split in d.splits.items():
            pattern = os.path.join(data_dir, f"{split}*.h5")  # what training reads (input.py)
            if not glob.glob(pattern):
                raise err("data.data_dir", f"no HDF5 shard for the {role} split in {data_dir}: nothing matches "
                          f"{pattern} (`podlet data export --format hdf5` writes them)")
        return
    from ..data import tfds
    try:
        tfds.parse_name(d.dataset_name)
    except ValueError:
        raise err("data.dataset_name", f"{d.dataset_name!r} is neither 'synthetic_ddsm', 'hdf5' nor a TFDS name "
                  f"'dataset[/config][:x.y.z]' such as {tfds.DEFAULT_NAME!r}") from None
    for role, split in d.splits.items():
        if not re.fullmatch(r"\w+", split):
            raise err("data.splits", f"{role}: {split!r} is not a TFDS split name (a whole split such as "
                      f"'train'; slices are not supported)", at=f"data.splits.{role}")
    try:
        vdir = tfds._version_dir(data_dir, d.dataset_name)
    except FileNotFoundError as e:
        raise err("data.data_dir", str(e)) from None
    info = os.path.join(vdir, "dataset_info.json")
    if not os.path.isfile(info):
        raise err("data.data_dir", f"TFDS dataset {d.dataset_name!r}: {info} does not exist")


_TORCHVISION_ARCHS = ("resnet", "swin_", "vit_")  # architectures podlet.models.load_pretrained reads from .pth


def _check_init_from(value, arch, err):
    path = os.path.expanduser(value)
    if not path.endswith((".h5", ".pth", ".pt", ".msgpack")):
        raise err("train.init_from", f"{value!r}: expected a podlet checkpoint (.h5), a torchvision state_dict "
                  f"(.pth, .pt) or Flax variables (.msgpack)")
    if path.endswith((".pth", ".pt")) and not arch.startswith(_TORCHVISION_ARCHS):
        raise err("train.init_from", f"{value!r}: torchvision state_dicts hold ResNets, Swins (swin_tiny, "
                  f"swin_small) or ViTs (vit_b16, vit_b32; timm's also vit_tiny, vit_small), but "
                  f"model.architecture is {arch!r}")
    if not os.path.isfile(path):
        raise err("train.init_from", f"{path} {'is not a file' if os.path.exists(path) else 'does not exist'}")


def validate(cfg: ExperimentConfig, *, num_devices=None, origin=None, default_origin="<config>", check_data=True):
    """Checks value ranges, the relations between keys, that the model can take the
    images, and that the files the config names exist; raises ConfigError naming the
    first offending key, its file, the value and what was expected.

    Nothing is built and no data is read (the synthetic set's split size is computed, and
    files are only looked up), so a bad config fails before training starts.
    `check_data=False` is for a caller that supplies its own dataset: what only the
    configured dataset decides (its files, the synthetic set's sizes, classes and splits)
    is not checked.
    """
    origin = origin or {}

    def err(key, msg, at=None):
        """`at`: the dotted key whose file to name, when it is not `key` (an entry of a mapping)."""
        return ConfigError(f"{origin.get(at or key, origin.get(key, default_origin))}: {key}: {msg}")

    def walk(obj, prefix):
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            key = prefix + f.name
            if dataclasses.is_dataclass(v):
                walk(v, key + ".")
                continue
            m = f.metadata
            if v is None:
                continue
            if m.get("choices") and v not in m["choices"]:
                near = difflib.get_close_matches(str(v), m["choices"], n=1)
                hint = f" (did you mean {near[0]!r}?)" if near else ""
                raise err(key, f"expected one of {list(m['choices'])}, got {v!r}{hint}")
            items = [(f"element {i} ", x) for i, x in enumerate(v)] if isinstance(v, list) else [("", v)]
            why = f" ({m['why']})" if m.get("why") else ""
            for elem, x in items:
                if not isinstance(x, (int, float)) or isinstance(x, bool):
                    continue
                got = f"{elem}is {x!r}" if elem else f"got {x!r}"
                if isinstance(x, float) and not (math.isfinite(x) and abs(x) <= _FLOAT32_MAX):
                    # the pipeline and the train step compute in float32
                    raise err(key, f"expected a finite number within float32's range (|x| <= 3.4e38), {got}")
                lo, hi = m.get("lo"), m.get("hi")
                if isinstance(x, int):  # every integer ends up in a C++ int64 (or narrower)
                    lo = -_INT64_MAX - 1 if lo is None else lo
                    hi = _INT64_MAX if hi is None else hi
                values = "values" if elem else "a value"
                if lo is not None and (x < lo or (m["lo_open"] and x == lo)):
                    raise err(key, f"expected {values} {'>' if m['lo_open'] else '>='} {lo}, {got}")
                if hi is not None and (x > hi or (m["hi_open"] and x == hi)):
                    raise err(key, f"expected {values} {'<' if m['hi_open'] else '<='} {hi}, {got}{why}")

    walk(cfg, "")
    m, d, t = cfg.model, cfg.data, cfg.train
    if not cfg.name or "/" in cfg.name or "\0" in cfg.name or cfg.name in (".", ".."):
        raise err("name", f"expected a name usable as a directory name (runs/<name>-<time>): not empty, "
                  f"no '/', got {cfg.name!r}")
    arch = _arch_defaults(m.architecture)
    is_vit = m.architecture.startswith("vit")
    if is_vit:
        for k in ("stage_sizes", "widths"):
            if getattr(m, k) is not None:
                raise err(f"model.{k}", f"a ResNet key, but model.architecture is {m.architecture!r}")
        hidden, heads = m.hidden_size or arch["hidden_size"], m.num_heads or arch["num_heads"]
        if hidden % heads:
            key = "model.num_heads" if m.num_heads is not None else "model.hidden_size"
            raise err(key, f"hidden_size {hidden} is not divisible by {heads} heads (attention splits the "
                      f"width evenly over the heads)")
    else:
        if m.architecture.startswith("swin"):
            for k in ("stage_sizes", "widths"):
                if getattr(m, k) is not None:
                    raise err(f"model.{k}", f"a ResNet key, but model.architecture is {m.architecture!r}")
        if m.architecture == "small_cnn" and m.stage_sizes is not None:
            raise err("model.stage_sizes", "a ResNet key, but model.architecture is 'small_cnn' (use widths)")
        for k in ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim"):
            if getattr(m, k) is not None:
                raise err(f"model.{k}", f"a ViT key, but model.architecture is {m.architecture!r}")
        for k in ("stage_sizes", "widths"):
            v = getattr(m, k)
            if v is not None and not v:
                raise err(f"model.{k}", f"expected a non-empty list of positive integers, got {v}")
        if m.architecture != "small_cnn" and m.widths is not None:
            stages = m.stage_sizes if m.stage_sizes is not None else arch["stage_sizes"]
            if len(m.widths) != len(stages):
                src = "model.stage_sizes" if m.stage_sizes is not None else f"{m.architecture}'s default stage_sizes"
                raise err("model.widths", f"{len(m.widths)} widths for {len(stages)} stages ({src} {list(stages)})")
    if len(d.image_size) != 3:
        raise err("data.image_size", f"expected [height, width, channels] of positive integers, got {d.image_size}")
    h, w, c = d.image_size
    if c != m.in_channels:
        raise err("data.image_size", f"{c} channels, but model.in_channels is {m.in_channels}")
    # The smallest image each model takes, from its code:
    if is_vit:  # patches of patch_size x patch_size, stride patch_size, 'VALID'
        p = m.patch_size or arch["patch_size"]
        if h % p or w % p:
            src = "model.patch_size" if m.patch_size is not None else f"{m.architecture}'s patch size"
            raise err("data.image_size", f"{h}x{w} is not a multiple of the ViT patch size {p} ({src})")
    elif m.architecture.startswith("swin"):  # a patch_size x patch_size 'VALID' patch partition; windows pad
        if min(h, w) < arch["patch_size"]:
            raise err("data.image_size", f"{h}x{w} is smaller than one {arch['patch_size']}x{arch['patch_size']} "
                      f"patch of {m.architecture}")
    elif m.architecture == "small_cnn":  # a 2x2 'VALID' max pool (floor(side / 2)) between stages
        n = len(m.widths or arch["widths"])
        need = 2 ** (n - 1)
        if min(h, w) < need:
            raise err("data.image_size", f"{h}x{w} is too small for small_cnn's {n} stages: their {n - 1} 2x2 "
                      f"max pools need at least {need}x{need} pixels (a smaller side pools to nothing and "
                      f"the logits are NaN)")
    # ResNets: every stride-2 convolution and pool is 'SAME', ceil(side / 2) >= 1, so any
    # side >= 1 runs (a 4-stage ResNet's last stage sees 1x1 for any side up to 32).
    missing = {"train", "validation", "test"} - set(d.splits)
    extra = set(d.splits) - {"train", "validation", "test"}
    if missing or extra:
        raise err("data.splits", f"expected the keys train, validation and test; "
                  f"missing {sorted(missing)}, unknown {sorted(extra)}",
                  at=f"data.splits.{sorted(extra)[0]}" if extra else None)
    for role, split in d.splits.items():
        if not split:
            raise err("data.splits", f"{role}: expected a split name, got an empty string", at=f"data.splits.{role}")
    n_train = None
    if not check_data:
        pass  # the caller brings its own dataset: data.* describes nothing that will be read
    elif d.dataset_name == "synthetic_ddsm":
        lo, hi = _SYNTHETIC_SIDES
        if h != w or c != 1 or not lo <= h <= hi:
            raise err("data.image_size", f"synthetic_ddsm makes square 1-channel patches of {lo} to {hi} pixels: "
                      f"expected [n, n, 1] with {lo} <= n <= {hi}, got {d.image_size}")
        if d.num_classes != len(SYNTHETIC_CLASS_NAMES):
            raise err("data.num_classes", f"synthetic_ddsm has {len(SYNTHETIC_CLASS_NAMES)} classes "
                      f"({', '.join(SYNTHETIC_CLASS_NAMES)}), got {d.num_classes}")
        for role, split in d.splits.items():
            if split not in _SYNTHETIC_SPLITS:
                raise err("data.splits", f"{role}: {split!r} is not a synthetic_ddsm split; expected one of "
                          f"{list(_SYNTHETIC_SPLITS)}", at=f"data.splits.{role}")
        n_train = _synthetic_train_size(d)
    elif d.data_dir is None:
        raise err("data.data_dir", f"dataset {d.dataset_name!r} is read from files: set data.data_dir")
    else:
        _check_data_files(d, err)
    a = d.augmentation
    if a.enabled and a.translate_pixels >= min(h, w):
        raise err("data.augmentation.translate_pixels", f"{a.translate_pixels} pixels would shift the whole {h}x{w} "
                  f"image out of view: expected less than {min(h, w)}")
    if t.class_weights is not None:
        if len(t.class_weights) != d.num_classes:
            raise err("train.class_weights", f"{len(t.class_weights)} weights for {d.num_classes} classes")
        if any(x < 0 for x in t.class_weights):
            raise err("train.class_weights", f"weights must be >= 0, got {t.class_weights}")
        if not any(t.class_weights):
            raise err("train.class_weights", f"every weight is 0 (the loss would be 0 and nothing learned), "
                      f"got {t.class_weights}")
    if t.freeze_backbone_epochs >= t.epochs:
        raise err("train.freeze_backbone_epochs", f"expected fewer than train.epochs = {t.epochs} frozen epochs "
                  f"(the backbone must train in some epoch), got {t.freeze_backbone_epochs}")
    if t.layer_decay is not None and m.architecture == "small_cnn":
        raise err("train.layer_decay", f"{t.layer_decay!r}: layer-wise decay needs a network of layers (ViT, Swin, "
                  f"or a ResNet, per stage), but model.architecture is 'small_cnn'")
    if t.warmup_epochs > t.epochs:
        raise err("train.warmup_epochs", f"{t.warmup_epochs} warmup epochs exceed train.epochs = {t.epochs}")
    n = num_devices or t.num_devices or _default_devices()
    if t.batch_size % n:
        raise err("train.batch_size", f"the global batch {t.batch_size} is not divisible by {n} devices")
    eb = t.eval_batch_size or t.batch_size
    if eb % n:
        raise err("train.eval_batch_size", f"{eb} is not divisible by {n} devices")
    if n_train is not None:
        if t.batch_size > n_train:
            raise err("train.batch_size", f"the global batch {t.batch_size} exceeds the {n_train} training examples "
                      f"of synthetic_ddsm at data.scale {d.scale} (raise data.scale or lower the batch)")
        check_total_steps(cfg, n_train // t.batch_size, err)
    c = d.augmentation.contrast_range
    if c is not None and (len(c) != 2 or not 0 < c[0] <= c[1]):
        raise err("data.augmentation.contrast_range", f"expected [low, high] with 0 < low <= high, got {c}")
    if t.init_from:
        _check_init_from(t.init_from, m.architecture, err)
    return cfg


def check_total_steps(cfg, steps_per_epoch, err=None, *, where="<config>"):
    """Raises ConfigError unless the run's step count fits the optimizer's int32 step
    counter (``validate`` checks it for the synthetic set; the loop once a dataset says
    how many steps an epoch has)."""
    t = cfg.train
    spe = min(steps_per_epoch, t.max_steps_per_epoch) if t.max_steps_per_epoch else steps_per_epoch
    if t.epochs * spe > _INT32_MAX:
        err = err or (lambda key, msg: ConfigError(f"{where}: {key}: {msg}"))
        raise err("train.epochs", f"{t.epochs} epochs of {spe} steps are {t.epochs * spe} steps; the optimizer "
                  f"counts steps in int32 (at most {_INT32_MAX})")
