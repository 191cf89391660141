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
key and the file (or ``--set``) it came from.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import os
import typing
from typing import Any, Optional

import yaml

from .._src.errors import PodletError

__all__ = ["ConfigError", "ModelConfig", "NormalizationConfig", "AugmentationConfig", "DataConfig",
           "TrainConfig", "ExperimentConfig", "load_config", "config_from_dict", "config_to_dict",
           "dump_config", "validate", "METRIC_MODES", "SYNTHETIC_CLASS_NAMES"]


class ConfigError(PodletError):
    """A config key is unknown, mistyped or impossible; the message names key and file."""


#: selection_metric -> "max" or "min" (which way is better).
METRIC_MODES = {"macro_f1": "max", "balanced_accuracy": "max", "accuracy": "max", "roc_auc": "max",
                "loss": "min"}

SYNTHETIC_CLASS_NAMES = ("BACKGROUND", "BENIGN_CALCIFICATION", "BENIGN_MASS", "MALIGNANT_CALCIFICATION",
                         "MALIGNANT_MASS")


def _f(default=dataclasses.MISSING, *, choices=None, lo=None, hi=None, lo_open=False, hi_open=False,
       doc=""):
    """A schema field with its admissible values (checked by ``validate``)."""
    meta = {"choices": choices, "lo": lo, "hi": hi, "lo_open": lo_open, "hi_open": hi_open, "doc": doc}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda d=default: type(d)(d), metadata=meta)
    if dataclasses.is_dataclass(default) and isinstance(default, type):
        return dataclasses.field(default_factory=default, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


# ------------------------------------------------------------------------------ schema

@dataclasses.dataclass
class ModelConfig:
    """The network (``configs/models/*.yaml``).

    ResNets take ``stage_sizes``/``widths`` overrides (a smaller ResNet is ``architecture:
    resnet18`` with ``stage_sizes: [1, 1]``); ViTs take ``patch_size``, ``hidden_size``,
    ``num_layers``, ``num_heads``, ``mlp_dim`` overrides; ``small_cnn`` (the seed's smoke
    network, podlet.training.small_cnn) takes ``widths``.
    """
    architecture: str = _f("resnet34", choices=("resnet18", "resnet34", "resnet50", "vit_tiny", "vit_small",
                                                "small_cnn"))
    stage_sizes: Optional[list[int]] = _f(None)
    widths: Optional[list[int]] = _f(None)
    in_channels: int = _f(1, lo=1)
    dropout_rate: float = _f(0.0, lo=0.0, hi=1.0, hi_open=True)
    stochastic_depth_rate: float = _f(0.0, lo=0.0, hi=1.0, hi_open=True)
    patch_size: Optional[int] = _f(None, lo=1)
    hidden_size: Optional[int] = _f(None, lo=1)
    num_layers: Optional[int] = _f(None, lo=1)
    num_heads: Optional[int] = _f(None, lo=1)
    mlp_dim: Optional[int] = _f(None, lo=1)


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
    seed: int = _f(0, lo=0)
    splits: dict = _f({"train": "train", "validation": "validation", "test": "test"})
    image_size: list[int] = _f([224, 224, 1])
    num_classes: int = _f(5, lo=2)
    scale: float = _f(1.0, lo=0.0, hi=1.0, lo_open=True)
    cache: bool = _f(False)
    shuffle_buffer_size: int = _f(8192, lo=1)
    prefetch_batches: int = _f(4, lo=0)
    drop_remainder: bool = _f(True)
    normalization: NormalizationConfig = _f(NormalizationConfig)
    augmentation: AugmentationConfig = _f(AugmentationConfig)


@dataclasses.dataclass
class TrainConfig:
    """The optimisation recipe (the seed's ``TrainConfig``) and what the loop needs."""
    seed: int = _f(0)
    epochs: int = _f(25, lo=1)
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


def _read_yaml(path):
    try:
        with open(path) as f:
            tree = yaml.safe_load(f)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if tree is None:
        tree = {}
    if not isinstance(tree, dict):
        raise ConfigError(f"{path}: expected a mapping of keys at the top level, got {type(tree).__name__}")
    return tree


def _configs_root(path):
    """configs/ for a file in configs/<section>/ (where named references are looked up)."""
    return os.path.dirname(os.path.dirname(os.path.abspath(path)))


def _resolve_ref(name, kind, referrer):
    """A section or base reference: a path (``*.yaml``, relative to the referring file)
    or a name looked up in ``configs/<kind>/``."""
    if not isinstance(name, str):
        raise ConfigError(f"{referrer}: a reference to configs/{kind}/ must be a name, got {name!r}")
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
        value = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError as e:
        raise ConfigError(f"--set {item!r}: value is not valid YAML: {e}") from None
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
        return f"a list of {_type_name(typing.get_args(tp)[0])[2:]}s".replace("an ", "").replace("a ", "")
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    return str(tp)


def _coerce(value, tp, where):
    """`value` as type `tp`, or a ConfigError naming `where`."""
    def bad():
        return ConfigError(f"{where}: expected {_type_name(tp)}, got {value!r} ({type(value).__name__})")

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
            return float(value)
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
                raise ConfigError(f"{where}: expected a mapping, got {v!r}")
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


def validate(cfg: ExperimentConfig, *, num_devices=None, origin=None, default_origin="<config>"):
    """Checks value ranges and the relations between keys; raises ConfigError naming the
    first offending key and its file."""
    origin = origin or {}

    def err(key, msg):
        return ConfigError(f"{origin.get(key, default_origin)}: {key}: {msg}")

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
                raise err(key, f"expected one of {list(m['choices'])}, got {v!r}")
            vals = v if isinstance(v, list) else [v]
            for x in vals:
                if not isinstance(x, (int, float)) or isinstance(x, bool):
                    continue
                if isinstance(x, float) and not math.isfinite(x):
                    raise err(key, f"expected a finite number, got {x!r}")
                lo, hi = m.get("lo"), m.get("hi")
                if lo is not None and (x < lo or (m["lo_open"] and x == lo)):
                    raise err(key, f"expected a value {'>' if m['lo_open'] else '>='} {lo}, got {x!r}")
                if hi is not None and (x > hi or (m["hi_open"] and x == hi)):
                    raise err(key, f"expected a value {'<' if m['hi_open'] else '<='} {hi}, got {x!r}")

    walk(cfg, "")
    m, d, t = cfg.model, cfg.data, cfg.train
    is_vit = m.architecture.startswith("vit")
    if is_vit:
        for k in ("stage_sizes", "widths"):
            if getattr(m, k) is not None:
                raise err(f"model.{k}", f"a ResNet key, but model.architecture is {m.architecture!r}")
    else:
        if m.architecture == "small_cnn" and m.stage_sizes is not None:
            raise err("model.stage_sizes", "a ResNet key, but model.architecture is 'small_cnn' (use widths)")
        for k in ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim"):
            if getattr(m, k) is not None:
                raise err(f"model.{k}", f"a ViT key, but model.architecture is {m.architecture!r}")
        for k in ("stage_sizes", "widths"):
            v = getattr(m, k)
            if v is not None and (not v or any(x < 1 for x in v)):
                raise err(f"model.{k}", f"expected a non-empty list of positive integers, got {v}")
        if m.stage_sizes is not None and m.widths is not None and len(m.stage_sizes) != len(m.widths):
            raise err("model.widths", f"{len(m.widths)} widths for {len(m.stage_sizes)} stages "
                      f"(model.stage_sizes {m.stage_sizes})")
    if len(d.image_size) != 3 or any(x < 1 for x in d.image_size):
        raise err("data.image_size", f"expected [height, width, channels] of positive integers, got {d.image_size}")
    if d.image_size[2] != m.in_channels:
        raise err("data.image_size", f"{d.image_size[2]} channels, but model.in_channels is {m.in_channels}")
    if is_vit:
        p = m.patch_size or 16
        if d.image_size[0] % p or d.image_size[1] % p:
            raise err("data.image_size", f"{d.image_size[:2]} is not a multiple of the ViT patch size {p}")
        if m.hidden_size and m.num_heads and m.hidden_size % m.num_heads:
            raise err("model.num_heads", f"hidden_size {m.hidden_size} is not divisible by {m.num_heads} heads")
    missing = {"train", "validation", "test"} - set(d.splits)
    extra = set(d.splits) - {"train", "validation", "test"}
    if missing or extra:
        raise err("data.splits", f"expected the keys train, validation and test; "
                  f"missing {sorted(missing)}, unknown {sorted(extra)}")
    if d.dataset_name != "synthetic_ddsm" and d.data_dir is None:
        raise err("data.data_dir", f"dataset {d.dataset_name!r} is read from files: set data.data_dir")
    if t.class_weights is not None:
        if len(t.class_weights) != d.num_classes:
            raise err("train.class_weights", f"{len(t.class_weights)} weights for {d.num_classes} classes")
        if any(w < 0 for w in t.class_weights):
            raise err("train.class_weights", f"weights must be >= 0, got {t.class_weights}")
    if t.warmup_epochs > t.epochs:
        raise err("train.warmup_epochs", f"{t.warmup_epochs} warmup epochs exceed train.epochs = {t.epochs}")
    n = num_devices or t.num_devices or _default_devices()
    if t.batch_size % n:
        raise err("train.batch_size", f"the global batch {t.batch_size} is not divisible by {n} devices")
    eb = t.eval_batch_size or t.batch_size
    if eb % n:
        raise err("train.eval_batch_size", f"{eb} is not divisible by {n} devices")
    c = d.augmentation.contrast_range
    if c is not None and (len(c) != 2 or not 0 < c[0] <= c[1]):
        raise err("data.augmentation.contrast_range", f"expected [low, high] with 0 < low <= high, got {c}")
    return cfg
