"""The training loop: the seed's pmap'd step, validation, checkpoints, a run directory.

    summary = train(load_config("configs/experiments/smoke.yaml"), "runs/smoke")

A run directory holds:
  config.yaml      the resolved config (every key)
  metrics.jsonl    one JSON object a line: ``kind: "train"`` every ``log_every_steps`` steps
                   (loss, lr actually applied, grad_norm, finite, accuracy, images_per_s)
                   and ``kind: "val"`` every epoch (loss, accuracy, balanced_accuracy,
                   macro_f1, roc_auc, per-class F1, confusion matrix, train_loss)
  checkpoints/     checkpoint_<step>.h5: the last ``keep_checkpoints`` and the best by
                   ``selection_metric`` (see podlet.training.checkpoints)
  plots/           PNGs drawn from metrics.jsonl and the test evaluation
  summary.json     the selected checkpoint and its validation and test metrics

Determinism: two runs of the same config and seed write the same metrics.jsonl except
for the fields in ``TIMING_FIELDS`` (wall-clock measurements). A run stopped at any step
(Ctrl-C saves a checkpoint; SIGKILL loses the steps since the last one) and restarted
with ``resume=True`` restores the checkpoint, restarts the data stream at that step,
truncates metrics.jsonl to it, and ends with the same bits as an uninterrupted run.

Several processes (``mpirun -np P podlet train CONFIG``; in Python, call
``podlet.distributed.initialize()`` before ``train``): the devices are P x the local
devices and ``train.batch_size`` is the global batch, split over all of them. Each
process's input pipeline produces only its own devices' part of every global batch
(the one-process batches, element for element), validation and test logits are gathered
from every process before the metrics are computed, so a run gives the same bits
(params, metrics.jsonl, summary) whatever P. Only process 0 writes the run directory
and prints; decisions that depend on files (the run directory's state, the checkpoint
to resume from or to select) are taken by process 0 and broadcast, and every process
then restores the checkpoint process 0 wrote (the run directory must be on a file system
all processes see). Ctrl-C (SIGINT) or SIGUSR1 on any process stops all of them at the
same step with a checkpoint; ``kill -USR1`` to mpirun reaches every process (mpirun turns
a Ctrl-C into SIGTERM/SIGKILL, after which ``--resume`` continues from the last checkpoint).
"""
from __future__ import annotations

import json
import math
import os
import signal
import threading
import time

import numpy as np

import podlet as jax
from podlet import distributed
from podlet import jax_utils  # noqa: F401  (the seed's flax.jax_utils)
from podlet.metrics import classification_metrics
from podlet.training import checkpoints as ckpt
from podlet.training import config as C
from podlet.training import steps as S
from podlet.training.input import make_data

__all__ = ["train", "evaluate_run", "TIMING_FIELDS", "NonFiniteError", "TrainingInterrupted", "RunDirError"]

#: metrics.jsonl fields that measure wall-clock time (they differ between identical runs).
TIMING_FIELDS = ("images_per_s", "step_seconds", "epoch_seconds", "eval_seconds")


class NonFiniteError(FloatingPointError):
    """The loss or gradient norm of a step was NaN/Inf (``nan_policy: stop``)."""

    def __init__(self, step, loss, grad_norm):
        super().__init__(f"step {step}: loss {loss} / grad norm {grad_norm} is not finite; the state of step "
                         f"{step - 1} is kept (set train.nan_policy: skip to skip such steps)")
        self.step = step


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C: a checkpoint was saved at ``step``; ``--resume`` continues from it."""

    def __init__(self, step, path):
        super().__init__(f"interrupted at step {step}; checkpoint saved to {path}")
        self.step, self.path = step, path


class RunDirError(ValueError):
    """The run directory cannot be used as asked (exists without --resume, config differs)."""


# ------------------------------------------------------------------------- run dir files

def _atomic_write(path, text):
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_metrics(run_dir, kind=None):
    """The records of a run's metrics.jsonl (of one ``kind`` if given)."""
    out = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                if kind is None or r.get("kind") == kind:
                    out.append(r)
    return out


def _truncate_metrics(path, step):
    """Drops records after `step` (logged by a run that died before its next checkpoint)."""
    if not os.path.exists(path):
        return
    with open(path) as f:
        lines = [ln for ln in f if ln.strip() and json.loads(ln)["step"] <= step]
    _atomic_write(path, "".join(lines))


def _diff_configs(a, b, prefix=""):
    out = []
    for k in sorted(set(a) | set(b)):
        va, vb = a.get(k), b.get(k)
        if isinstance(va, dict) and isinstance(vb, dict):
            out += _diff_configs(va, vb, prefix + k + ".")
        elif va != vb:
            out.append(f"{prefix}{k}: run has {va!r}, given {vb!r}")
    return out


def default_run_dir(cfg, root="runs"):
    return os.path.join(root, f"{cfg.name}-{time.strftime('%Y%m%d-%H%M%S')}")


# ------------------------------------------------------------------------------ helpers

def _shard(x, n):
    """[B, ...] -> [n, B/n, ...] (the seed's per-device reshape)."""
    return x.reshape((n, x.shape[0] // n) + x.shape[1:])


def _scalars(metrics):
    """Device 0's values of the pmap'd step metrics, as Python numbers."""
    return {k: np.asarray(v)[0].item() for k, v in metrics.items()}


class _SigintFlag:
    """Turns the first Ctrl-C into a flag checked between steps (a second one aborts).

    With several processes SIGUSR1 counts too, and the processes agree after every step
    (any flag stops all of them at that step). Under mpirun a Ctrl-C never reaches the
    processes as SIGINT (mpirun ends the job with SIGTERM, then SIGKILL: resume continues
    from the last checkpoint), but mpirun forwards SIGUSR1: ``kill -USR1 <mpirun's pid>``
    saves a checkpoint and exits every process with 130."""

    def __init__(self):
        self.set = False
        self._old = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            sigs = [signal.SIGINT] + ([signal.SIGUSR1] if jax.process_count() > 1 else [])
            self._old = {s: signal.signal(s, self._handle) for s in sigs}
        return self

    def _handle(self, signum, frame):
        if self.set:
            raise KeyboardInterrupt
        self.set = True

    def __exit__(self, *exc):
        for s, old in self._old.items():
            signal.signal(s, old)


def _device_count(cfg):
    """(global, local) devices the run uses: ``train.num_devices`` devices in all (each of
    P processes gets num_devices / P, set as ``podlet.config.update("num_devices", n)``),
    or all devices of every process."""
    n, p = cfg.train.num_devices, jax.process_count()
    if n is not None:
        if n % p:
            raise C.ConfigError(f"train.num_devices: {n} devices do not split evenly over {p} processes")
        if n // p != jax.local_device_count():
            jax.config.update("num_devices", n // p)
    return jax.device_count(), jax.local_device_count()


def _check_distributed():
    """mpirun started several processes but nobody joined them: each would train alone and
    write the same run directory."""
    world = os.environ.get("OMPI_COMM_WORLD_SIZE")
    if distributed.launched_by_mpirun() and world and int(world) > 1 and not distributed.is_initialized():
        raise RuntimeError(f"this process is one of {world} started by mpirun, but podlet.distributed."
                           f"initialize() was not called: call it before train() (the podlet command does)")


def _shard_args():
    """The keyword arguments that make a dataset yield this process's part of each batch."""
    p = jax.process_count()
    return {} if p == 1 else {"num_shards": p, "shard_index": jax.process_index()}


def _check_shardable(data):
    """With several processes the dataset must serve parts of batches (see input.py)."""
    if jax.process_count() == 1:
        return
    import inspect
    for name in ("train_batches", "eval_batches"):
        params = inspect.signature(getattr(data, name)).parameters
        if not ({"num_shards", "shard_index"} <= set(params)
                or any(q.kind is inspect.Parameter.VAR_KEYWORD for q in params.values())):
            raise TypeError(f"{type(data).__name__}.{name} takes no num_shards/shard_index: with "
                            f"{jax.process_count()} processes each must read its part of every batch "
                            f"(see podlet.training.input)")


def _on_process_0(fn):
    """fn() on process 0; every process returns its result, or raises its exception (a
    copy of it on the other processes), so file-based decisions are taken once."""
    if jax.process_count() == 1:
        return fn()
    res = err = None
    if jax.process_index() == 0:
        try:
            res = fn()
        except Exception as e:  # noqa: BLE001  (re-raised on every process below)
            err = e
    ok, value = distributed.broadcast_object(_portable(err) if err is not None else (True, res))
    if err is not None:
        err.raised_on_every_process = True
        raise err
    if not ok:
        value.raised_on_every_process = True
        value.copy_of_process_0 = True
        raise value
    return value


def _portable(e):
    """(False, e) if e survives pickling, else (False, RuntimeError naming its type)."""
    import pickle
    try:
        pickle.loads(pickle.dumps(e))
        return False, e
    except Exception:  # noqa: BLE001
        return False, RuntimeError(f"process 0: {type(e).__name__}: {e}")


# --------------------------------------------------------------------------- evaluation

class _Evaluator:
    def __init__(self, cfg, data, n_local):
        self.cfg, self.data, self.n = cfg, data, n_local
        self.batch_size = cfg.train.eval_batch_size or cfg.train.batch_size
        self.p_eval = jax.pmap(S.make_eval_step(), axis_name=S.AXIS)

    def __call__(self, rstate, role, use_ema=True):
        """Metrics of `role` ("validation" or "test") for the replicated state. With several
        processes each evaluates its part of every batch and the logits are gathered, in
        the one-process order, before the metrics are computed (on every process)."""
        t0 = time.perf_counter()
        params = rstate.ema_params if (use_ema and rstate.ema_params is not None) else rstate.params
        logits, labels, masks = [], [], []
        for b in self.data.eval_batches(role, self.batch_size, **_shard_args()):
            out = np.asarray(self.p_eval(rstate, params, _shard(b["image"], self.n)))
            logits.append(out.reshape(-1, out.shape[-1]))
            labels.append(b["label"])
            masks.append(b["mask"])
        logits, labels, masks = np.stack(logits), np.stack(labels), np.stack(masks)  # [batches, part, ...]
        if jax.process_count() > 1:
            from podlet.experimental import multihost_utils
            # [processes, batches, part, ...] -> batch by batch, each the processes' parts in order
            g = multihost_utils.process_allgather((logits, labels, masks))
            logits, labels, masks = (np.swapaxes(a, 0, 1) for a in g)
        keep = masks.reshape(-1) > 0
        logits = logits.reshape(-1, logits.shape[-1])[keep]
        labels = labels.reshape(-1)[keep]
        z = logits.astype(np.float64) - logits.max(axis=1, keepdims=True)
        probs = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
        m = classification_metrics(labels, probs, class_names=self.data.class_names,
                                   loss=S.host_loss(logits, labels, self.cfg))
        m["eval_seconds"] = time.perf_counter() - t0
        return m


def _val_record(m, step, epoch, train_loss, epoch_seconds, n_images):
    return {"kind": "val", "step": step, "epoch": epoch, "train_loss": train_loss,
            "loss": m["loss"], "accuracy": m["accuracy"], "balanced_accuracy": m["balanced_accuracy"],
            "macro_f1": m["macro_f1"], "roc_auc": m["roc_auc"],
            "per_class_f1": {k: v["f1"] for k, v in m["per_class"].items()},
            "confusion_matrix": m["confusion_matrix"], "epoch_seconds": epoch_seconds,
            "images_per_s": n_images / epoch_seconds if epoch_seconds > 0 else None,
            "eval_seconds": m["eval_seconds"]}


def _better(value, best, mode):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    return best is None or (value > best if mode == "max" else value < best)


# ---------------------------------------------------------------------------------- train

def train(cfg, run_dir=None, *, resume=False, data=None, progress=True, print_fn=print, stop_after_step=None):
    """Trains `cfg` into `run_dir` (default ``runs/<name>-<time>``); returns the summary.

    Args:
      cfg: an ExperimentConfig (``load_config``).
      run_dir: the run directory (created).
      resume: continue from the latest checkpoint in `run_dir` (its config.yaml must equal
        `cfg`); without it, a run directory that already has checkpoints is an error.
      data: the dataset (default ``make_data(cfg)``; ``input.ArrayData`` for arrays).
      progress: show a tqdm progress bar.
      print_fn: where the summary table and notices go (None: silent).
      stop_after_step: stop (as Ctrl-C would, saving a checkpoint) once this step is done.

    Raises:
      NonFiniteError (``nan_policy: stop``), TrainingInterrupted (Ctrl-C, after saving).
    """
    _check_distributed()
    primary = jax.process_index() == 0
    say = (print_fn or (lambda *a, **k: None)) if primary else (lambda *a, **k: None)
    progress = progress and primary
    t_start = time.perf_counter()
    # the default name has the time in it: process 0's
    run_dir = _on_process_0(lambda: os.fspath(run_dir or default_run_dir(cfg)))
    cfg_path = os.path.join(run_dir, "config.yaml")
    ckpt_dir = os.path.join(run_dir, "checkpoints")
    metrics_path = os.path.join(run_dir, "metrics.jsonl")

    def prepare_run_dir():
        os.makedirs(run_dir, exist_ok=True)
        if resume:
            if not os.path.exists(cfg_path):
                raise RunDirError(f"--resume: {run_dir} has no config.yaml (is it a run directory?)")
            saved = C.config_from_dict(__import__("yaml").safe_load(open(cfg_path)), default_origin=cfg_path)
            diff = _diff_configs(C.config_to_dict(saved), C.config_to_dict(cfg))
            if diff:
                raise RunDirError(f"--resume: the config differs from {cfg_path}:\n  " + "\n  ".join(diff))
        else:
            if os.path.isdir(ckpt_dir) and ckpt.CheckpointManager(ckpt_dir).all_steps():
                raise RunDirError(f"{run_dir} already holds checkpoints: pass --resume to continue that run, "
                                  f"or choose another --run-dir")
            _atomic_write(cfg_path, C.dump_config(cfg))
            if os.path.exists(metrics_path):
                os.remove(metrics_path)

    t = cfg.train
    n_dev, n_local = _device_count(cfg)
    # before the run directory is touched: a bad config leaves nothing behind
    C.validate(cfg, num_devices=n_dev, default_origin=cfg_path, check_data=data is None)
    _on_process_0(prepare_run_dir)

    data = data if data is not None else make_data(cfg)
    _check_shardable(data)
    n_train = data.num_examples("train")
    spe = n_train // t.batch_size
    if spe == 0:
        raise C.ConfigError(f"{cfg_path}: train.batch_size: {t.batch_size} exceeds the {n_train} training "
                            f"examples (raise data.scale or lower the batch)")
    C.check_total_steps(cfg, spe, where=cfg_path)
    if t.max_steps_per_epoch:
        spe = min(spe, t.max_steps_per_epoch)
    total_steps = t.epochs * spe

    model = S.build_model(cfg)
    schedule = S.create_learning_rate_schedule(t, spe)
    state = S.create_train_state(cfg, model, schedule, jax.random.PRNGKey(t.seed), steps_per_epoch=spe)
    if t.init_from:
        state = _init_from(state, t.init_from, cfg)
    mode = C.METRIC_MODES[t.selection_metric]
    # Only process 0 has a manager (it writes, prunes and cleans up); the others read the
    # checkpoint files it names.
    mgr = ckpt.CheckpointManager(ckpt_dir, max_to_keep=t.keep_checkpoints, best_metric=t.selection_metric,
                                 best_mode=mode) if primary else None
    config_text = C.dump_config(cfg)
    model_def = S.model_definition(cfg)
    loop = {"best": None, "best_epoch": None, "bad_epochs": 0, "stopped_early": False}
    # resume from the newest checkpoint that verifies; say why each newer one is skipped
    step = _on_process_0(lambda: (mgr.latest_valid_step(on_skip=lambda s, e: say(
        f"warning: not resuming from step {s}: {str(e).splitlines()[0]}")) or 0) if resume else 0)
    if step:
        path = ckpt.checkpoint_path(ckpt_dir, step)
        state = ckpt.restore_checkpoint(path, state)
        loop.update(ckpt.read_metadata(path)["metrics"].get("loop", {}))
        say(f"resuming {run_dir} from step {step}")
    if primary:
        _truncate_metrics(metrics_path, step)

    rstate = jax_utils.replicate(state)
    p_train_step = jax.pmap(S.make_train_step(cfg, schedule), axis_name=S.AXIS, donate_argnums=(0,))
    evaluator = _Evaluator(cfg, data, n_local)

    def save(step, metrics, wait=False):
        if not primary:
            return
        host = jax_utils.unreplicate(rstate)
        mgr.save(step, host, metrics={**metrics, "loop": dict(loop)}, config=config_text, model=model_def,
                 wait=wait)

    def write(rec):
        if primary:
            metrics_file.write(json.dumps(rec) + "\n")
            metrics_file.flush()

    def interrupted(sigint):
        """Ctrl-C here, or on any process (all stop at the same step), or stop_after_step."""
        stop = sigint.set
        if jax.process_count() > 1:
            stop = any(distributed.allgather_object(stop))
        return stop or (stop_after_step is not None and stop_after_step <= step < total_steps)

    bar = None
    metrics_file = open(metrics_path, "a") if primary else None
    try:
        with _SigintFlag() as sigint:
            batches = data.train_batches(t.batch_size, start_step=step, **_shard_args())
            while step < total_steps and not loop["stopped_early"]:
                epoch = step // spe
                if progress:
                    from tqdm.auto import tqdm
                    bar = tqdm(total=spe, initial=step - epoch * spe, desc=f"epoch {epoch + 1}/{t.epochs}",
                               unit="step", leave=False, dynamic_ncols=True)
                t_epoch = time.perf_counter()
                # a run resumed mid-epoch carries the epoch's earlier losses in its checkpoint
                losses = loop.pop("epoch_losses", [])
                stop = False
                while step < (epoch + 1) * spe:
                    t0 = time.perf_counter()
                    b = next(batches)
                    batch = {"image": _shard(b["image"], n_local), "label": _shard(b["label"], n_local)}
                    rstate, m = p_train_step(rstate, batch)
                    m = _scalars(m)
                    step += 1
                    dt = time.perf_counter() - t0
                    if not m["finite"]:
                        say(f"step {step}: non-finite loss {m['loss']} / grad norm {m['grad_norm']}"
                            + (" (step skipped)" if t.nan_policy == "skip" else ""))
                        if t.nan_policy == "stop":
                            raise NonFiniteError(step, m["loss"], m["grad_norm"])
                    else:
                        losses.append(m["loss"])
                    if step % t.log_every_steps == 0 or step == total_steps:
                        write({"kind": "train", "step": step, "epoch": epoch + 1, "loss": m["loss"],
                               "lr": m["lr"], "grad_norm": m["grad_norm"], "accuracy": m["accuracy"],
                               "finite": bool(m["finite"]), "step_seconds": dt,
                               "images_per_s": t.batch_size / dt})
                    if bar is not None:
                        bar.update(1)
                        bar.set_postfix(loss=f"{m['loss']:.4f}", lr=f"{m['lr']:.2e}",
                                        img_s=f"{t.batch_size / dt:,.0f}", refresh=False)
                    stop = interrupted(sigint)
                    if stop:
                        if step % spe == 0:
                            break  # the epoch's end below validates and checkpoints
                        loop["epoch_losses"] = losses
                        save(step, {"epoch": epoch + 1}, wait=True)
                        raise TrainingInterrupted(step, ckpt.checkpoint_path(ckpt_dir, step))
                if bar is not None:
                    bar.close()
                    bar = None
                epoch_seconds = time.perf_counter() - t_epoch
                val = evaluator(rstate, "validation")
                write(_val_record(val, step, epoch + 1, float(np.mean(losses)) if losses else None,
                                  epoch_seconds, len(losses) * t.batch_size))
                value = val[t.selection_metric]
                if _better(value, loop["best"], mode):
                    loop.update(best=value, best_epoch=epoch + 1, bad_epochs=0)
                else:
                    loop["bad_epochs"] += 1
                    if t.early_stopping_patience and loop["bad_epochs"] >= t.early_stopping_patience:
                        loop["stopped_early"] = True
                        say(f"early stopping after epoch {epoch + 1}: {t.selection_metric} has not improved "
                            f"for {loop['bad_epochs']} epochs (best {loop['best']:.4f} at epoch "
                            f"{loop['best_epoch']})")
                scalars = {k: val[k] for k in ("loss", "accuracy", "balanced_accuracy", "macro_f1", "roc_auc")}
                save(step, {"epoch": epoch + 1, **scalars})
                if stop or interrupted(sigint):
                    if primary:
                        mgr.wait_until_finished()
                    raise TrainingInterrupted(step, ckpt.checkpoint_path(ckpt_dir, step))
    finally:
        if bar is not None:
            bar.close()
        if primary:
            metrics_file.close()
            try:
                mgr.wait_until_finished()
            except ckpt.CheckpointError as e:
                say(f"warning: {e}")
    summary = _finish(cfg, run_dir, mgr, state, evaluator, data, loop, step, t_start, say)
    return summary


def _init_from(state, path, cfg):
    """Start from pretrained weights: a podlet checkpoint (.h5: its params, EMA ignored),
    a torchvision or timm ResNet, Swin or ViT state_dict (.pth/.pt; a ViT's position
    embeddings resized to data.image_size) or Flax variables
    (.msgpack). Params and batch stats are replaced (every path must match the model's),
    EMA restarts from them and the optimizer state is fresh."""
    path = os.path.expanduser(path)
    if not os.path.isfile(path):
        raise C.ConfigError(f"train.init_from: {path} does not exist")
    from podlet import models
    bs = state.batch_stats
    if path.endswith(".h5"):
        stored = ckpt.restore_checkpoint(path, {"params": state.params, "batch_stats": state.batch_stats})
        params, bs = stored["params"], stored["batch_stats"]
    elif path.endswith((".pth", ".pt")):
        # image_size: a ViT's position embeddings resized to this run's patch grid
        v = models.load_pretrained(path, cfg.model.architecture, in_channels=cfg.model.in_channels,
                                   num_classes=cfg.data.num_classes, rng=jax.random.PRNGKey(cfg.train.seed),
                                   image_size=cfg.data.image_size)
        v.setdefault("batch_stats", {})  # transformers have none
        ckpt.check_structure(v, {"params": state.params, "batch_stats": state.batch_stats}, path)
        params, bs = v["params"], v["batch_stats"]
    elif path.endswith(".msgpack"):
        v = models.load_flax_params(path, {"params": state.params, "batch_stats": state.batch_stats})
        params, bs = v["params"], v.get("batch_stats", bs)
    else:
        raise C.ConfigError(f"train.init_from: {path}: expected a podlet checkpoint (.h5), a torchvision "
                            f"state_dict (.pth) or Flax variables (.msgpack)")
    return state.replace(params=params, batch_stats=bs,
                         ema_params=params if state.ema_params is not None else None,
                         opt_state=state.tx.init(params))


# ------------------------------------------------------------------------------- finish

def _select(mgr, say):
    """The checkpoint the summary reports: the best by ``selection_metric`` that verifies,
    else the newest that verifies. A damaged file is skipped with a warning naming it and
    why, instead of ending a finished run with an error."""
    def skipped(what):
        return lambda s, e: say(f"warning: not selecting step {s} as the {what} checkpoint: "
                                f"{str(e).splitlines()[0]}")
    mgr.wait_until_finished()
    step = mgr.best_step(on_skip=skipped("best"))
    if step is None:
        step = mgr.resolve("latest", on_skip=skipped("newest"))
    return step


def _finish(cfg, run_dir, mgr, target, evaluator, data, loop, step, t_start, say):
    """Restores the selected checkpoint, evaluates validation and test, writes
    summary.json and plots, prints the table (process 0 selects and writes; every
    process restores and evaluates)."""
    from podlet.training import report
    selected = _on_process_0(lambda: _select(mgr, say))
    path = ckpt.checkpoint_path(os.path.join(run_dir, "checkpoints"), selected)
    state = ckpt.restore_checkpoint(path, target)
    rstate = jax_utils.replicate(state)
    val = evaluator(rstate, "validation")
    test = evaluator(rstate, "test")
    meta = ckpt.read_metadata(path)
    from podlet import models
    h, w, c = cfg.data.image_size
    summary = {
        "name": cfg.name, "run_dir": os.path.abspath(run_dir),
        "selection_metric": cfg.train.selection_metric,
        "selected_step": selected, "selected_epoch": meta["metrics"].get("epoch"),
        "steps": step, "stopped_early": bool(loop["stopped_early"]),
        "num_params": models.count_params(state.params),
        "num_examples": {r: data.num_examples(r) for r in ("train", "validation", "test")},
        "ema": cfg.train.ema_decay is not None,
        "wall_seconds": time.perf_counter() - t_start,
        "validation": {k: v for k, v in val.items() if k != "eval_seconds"},
        "test": {k: v for k, v in test.items() if k != "eval_seconds"},
    }
    if jax.process_index() == 0:
        _atomic_write(os.path.join(run_dir, "summary.json"), json.dumps(summary, indent=2) + "\n")
        try:
            report.plot_run(run_dir)
        except ImportError as e:  # matplotlib missing: the numbers are still there
            say(f"warning: no plots ({e})")
    say(report.summary_table(summary))
    del h, w, c
    return summary


def evaluate_run(run_dir, split="test", checkpoint="best", data=None):
    """Metrics of a run's checkpoint (``best``, ``latest`` or a step) on `split`
    (``test``, ``validation`` or ``train``), with its own resolved config."""
    import yaml
    cfg_path = os.path.join(run_dir, "config.yaml")
    if not os.path.exists(cfg_path):
        raise RunDirError(f"{run_dir} has no config.yaml (is it a run directory?)")
    cfg = C.config_from_dict(yaml.safe_load(open(cfg_path)), default_origin=cfg_path)
    _check_distributed()
    n_dev, n_local = _device_count(cfg)
    C.validate(cfg, num_devices=n_dev, default_origin=cfg_path, check_data=data is None)
    data = data if data is not None else make_data(cfg)
    model = S.build_model(cfg)
    spe = max(data.num_examples("train") // cfg.train.batch_size, 1)
    schedule = S.create_learning_rate_schedule(cfg.train, spe)
    target = S.create_train_state(cfg, model, schedule, jax.random.PRNGKey(cfg.train.seed),
                                  steps_per_epoch=spe)
    ckpt_dir = os.path.join(run_dir, "checkpoints")

    def resolve():
        return ckpt.CheckpointManager(ckpt_dir, max_to_keep=cfg.train.keep_checkpoints,
                                      best_metric=cfg.train.selection_metric,
                                      best_mode=C.METRIC_MODES[cfg.train.selection_metric]).resolve(checkpoint)
    step = _on_process_0(resolve)
    state = ckpt.restore_checkpoint(ckpt.checkpoint_path(ckpt_dir, step), target)
    m = _Evaluator(cfg, data, n_local)(jax_utils.replicate(state), split)
    m["step"] = step
    return m
