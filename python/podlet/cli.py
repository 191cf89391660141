"""The ``podlet`` command: train, evaluate and sweep experiments, export data and models.

    podlet train configs/experiments/smoke.yaml [--set train.learning_rate=5e-4] [--run-dir D] [--resume]
    podlet eval RUN_DIR [--split test] [--checkpoint best|latest|STEP]
    podlet sweep CONFIG --seeds 21,22,23          # mean +- std of every metric over seeds
    podlet data export --format tfds|hdf5 --out DIR [--config CONFIG]
    podlet bench [NAME [ARGS ...]]                 # lists bench/, or runs bench/<NAME>.py
    podlet export RUN_DIR --format onnx [--out F] [--no-dynamic-batch]  # the selected checkpoint's inference graph
    podlet explain RUN_DIR [--split test] [-n 16] [--method gradcam|rollout|saliency]  # heatmap overlays

Errors in configs, files and run directories print one line naming the key or file and
exit with status 2; Ctrl-C during training saves a checkpoint and exits with 130.

Several processes: ``mpirun -np 2 podlet train CONFIG`` (likewise ``sweep`` and ``eval``)
joins the processes with ``podlet.distributed.initialize()`` whenever mpirun started
them (``--distributed`` forces it under another MPI launcher). The global batch is then
split over every process's devices, each process reads its part of the data, and only
process 0 writes the run directory and prints. An error on some processes ends the
whole job (MPI_Abort) with its exit status instead of leaving the others waiting.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time

__all__ = ["main"]


class CLIError(Exception):
    pass


def _expected_errors():
    from podlet._src.errors import PodletError
    from podlet.training.input import DataError
    from podlet.training.loop import RunDirError
    return (PodletError, DataError, RunDirError, CLIError, FileNotFoundError)


# ------------------------------------------------------------------------------ commands

def _is_primary():
    import podlet
    return podlet.process_index() == 0


def _join_processes(args):
    """podlet.distributed.initialize() when mpirun started this process (or --distributed)."""
    from podlet import distributed
    if distributed.is_initialized():
        return
    if getattr(args, "distributed", False) or distributed.launched_by_mpirun():
        distributed.initialize()


def cmd_train(args):
    from podlet.training import config as C
    from podlet.training.loop import train
    cfg = C.load_config(args.config, args.set)
    run_dir = args.run_dir
    if args.resume and not run_dir:
        raise CLIError("--resume needs --run-dir (the run to continue)")
    summary = train(cfg, run_dir, resume=args.resume, progress=not args.no_progress)
    if _is_primary():
        print(f"\nrun directory: {summary['run_dir']}")
    return 0


def cmd_eval(args):
    from podlet.training.loop import evaluate_run
    m = evaluate_run(args.run_dir, split=args.split, checkpoint=args.checkpoint)
    if not _is_primary():
        return 0
    if args.json:
        print(json.dumps(m, indent=2))
        return 0
    print(f"{args.run_dir}: checkpoint step {m['step']}, {args.split} split ({m['num_examples']} examples)")
    for k in ("loss", "accuracy", "balanced_accuracy", "macro_f1", "roc_auc"):
        print(f"  {k:<18} {m[k]:.4f}")
    print(f"  {'class':<26}{'precision':>10}{'recall':>8}{'f1':>8}{'support':>9}")
    for name, c in m["per_class"].items():
        print(f"  {name:<26}{c['precision']:>10.4f}{c['recall']:>8.4f}{c['f1']:>8.4f}{c['support']:>9}")
    return 0


def _flatten_scalars(d, prefix=""):
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten_scalars(v, f"{prefix}{k}."))
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("support", "num_examples"):
            out[prefix + k] = float(v)
    return out


def sweep_statistics(summaries) -> dict:
    """``{metric: {"mean", "std", "values"}}`` over runs' test metrics (std with ddof=1,
    0 for a single run)."""
    flat = [_flatten_scalars(s["test"]) for s in summaries]
    out = {}
    for k in flat[0]:
        vals = [f[k] for f in flat if k in f]
        mean = sum(vals) / len(vals)
        std = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else 0.0
        out[k] = {"mean": mean, "std": std, "values": vals}
    return out


def cmd_sweep(args):
    from podlet.training import config as C
    from podlet.training.loop import train
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        raise CLIError(f"--seeds {args.seeds!r}: expected comma-separated integers, e.g. 21,22,23") from None
    if not seeds:
        raise CLIError("--seeds: give at least one seed")
    base = C.load_config(args.config, args.set)
    root = args.run_dir or os.path.join("runs", f"{base.name}-sweep-{time.strftime('%Y%m%d-%H%M%S')}")
    from podlet import distributed
    root = distributed.broadcast_object(root)  # the default name has process 0's time in it
    say = print if _is_primary() else (lambda *a, **k: None)
    summaries = []
    for s in seeds:
        cfg = C.load_config(args.config, list(args.set) + [f"train.seed={s}"])
        say(f"== seed {s} ==")
        summaries.append(train(cfg, os.path.join(root, f"seed_{s}"), progress=not args.no_progress))
    stats = sweep_statistics(summaries)
    if not _is_primary():
        return 0
    with open(os.path.join(root, "sweep.json"), "w") as f:
        json.dump({"seeds": seeds, "test": stats}, f, indent=2)
    print(f"\n{base.name}: test metrics over seeds {seeds} (mean ± std)")
    for k, v in stats.items():
        print(f"  {k:<40} {v['mean']:.4f} ± {v['std']:.4f}")
    print(f"sweep directory: {root}")
    return 0


def cmd_data_export(args):
    """The synthetic dataset's three splits as a TFDS build (``<out>/curated_breast_imaging_ddsm/
    patches/3.0.0/``) or as HDF5 files (``<out>/<split>.h5``); training reads either back
    with ``data.dataset_name`` set to the TFDS name or ``hdf5`` and ``data.data_dir: <out>``."""
    import podlet.data as pdata
    from podlet.data import export as pexport
    size, scale, seed = args.image_size, args.scale, args.seed
    if args.config:
        from podlet.training import config as C
        cfg = C.load_config(args.config, args.set)
        size, scale, seed = cfg.data.image_size[0], cfg.data.scale, cfg.data.seed
    os.makedirs(args.out, exist_ok=True)
    for split in ("train", "validation", "test"):
        src = pdata.synthetic_ddsm(split, image_size=size, scale=scale, seed=seed)
        if args.format == "tfds":
            out = pexport.export_tfds(src, args.out, split)
        else:
            out = pexport.export_hdf5(src, os.path.join(args.out, f"{split}.h5"))
        print(f"{split}: {len(src)} examples -> {out}")
    return 0


def _repo_dir(name):
    for base in (os.getcwd(), os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))):
        d = os.path.join(base, name)
        if os.path.isdir(d):
            return d
    raise CLIError(f"no {name}/ directory here or beside the podlet package (run from the repo root)")


def cmd_bench(args):
    d = _repo_dir("bench")
    available = sorted(f[:-3] for f in os.listdir(d) if f.endswith(".py") and not f.startswith("_"))
    if not args.name:
        print("benchmarks: " + ", ".join(available) + "\nrun: podlet bench NAME [ARGS ...]")
        return 0
    if args.name not in available:
        raise CLIError(f"no benchmark {args.name!r} in {d}; available: {available}")
    print(f"== bench/{args.name}.py {' '.join(args.args)}".rstrip() + " ==", flush=True)
    return subprocess.call([sys.executable, os.path.join(d, args.name + ".py")] + list(args.args))


def _run_model(run_dir, checkpoint):
    """(cfg, model, variables) of a run's checkpoint (EMA params when the run had EMA)."""
    import yaml
    import podlet
    from podlet.training import checkpoints as ckpt
    from podlet.training import config as C
    from podlet.training import steps as S
    cfg_path = os.path.join(run_dir, "config.yaml")
    if not os.path.exists(cfg_path):
        raise CLIError(f"{run_dir} has no config.yaml (is it a run directory?)")
    cfg = C.config_from_dict(yaml.safe_load(open(cfg_path)), default_origin=cfg_path)
    model = S.build_model(cfg)
    state = S.create_train_state(cfg, model, S.create_learning_rate_schedule(cfg.train, 1),
                                 podlet.random.PRNGKey(0))
    mgr = ckpt.CheckpointManager(os.path.join(run_dir, "checkpoints"), best_metric=cfg.train.selection_metric,
                                 best_mode=C.METRIC_MODES[cfg.train.selection_metric])
    state = mgr.restore(state, checkpoint)
    params = state.ema_params if state.ema_params is not None else state.params
    return cfg, model, {"params": params, "batch_stats": state.batch_stats}


def cmd_export(args):
    import podlet.numpy as jnp
    try:
        from podlet import export
    except ImportError as e:
        raise CLIError(f"this podlet has no podlet.export ({e})") from None
    if args.format != "onnx":
        raise CLIError(f"--format {args.format!r}: only onnx is supported")
    cfg, model, variables = _run_model(args.run_dir, args.checkpoint)
    out = args.out or os.path.join(args.run_dir, "model.onnx")
    export.to_onnx(model, variables, jnp.zeros([1] + list(cfg.data.image_size), jnp.float32), out,
                   dynamic_batch=args.dynamic_batch)
    print(f"wrote {out} (batch {'symbolic' if args.dynamic_batch else 'fixed at 1'})")
    return 0


def cmd_explain(args):
    try:
        from podlet import explain
    except ImportError as e:
        raise CLIError(f"this podlet has no podlet.explain ({e})") from None
    fn = getattr(explain, "explain_run", None)
    if fn is None:
        raise CLIError("podlet.explain has no explain_run(run_dir, ...) yet")
    method = {"gradcam": "grad_cam"}.get(args.method, args.method)
    out = fn(args.run_dir, split=args.split, n=args.n, checkpoint=args.checkpoint, method=method, layer=args.layer)
    print(f"wrote {out}")
    return 0


# -------------------------------------------------------------------------------- parser

def build_parser():
    p = argparse.ArgumentParser(prog="podlet", description="podlet: train and evaluate the seed's experiments")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def overrides(q):
        q.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="override a config key, e.g. --set train.learning_rate=5e-4 (repeatable)")

    def distributed_flag(q):
        q.add_argument("--distributed", action="store_true",
                       help="join the MPI processes (podlet.distributed.initialize()); automatic under mpirun")

    q = sub.add_parser("train", help="train an experiment config into a run directory")
    q.add_argument("config", help="configs/experiments/<name>.yaml")
    overrides(q)
    q.add_argument("--run-dir", help="run directory (default runs/<name>-<time>)")
    q.add_argument("--resume", action="store_true", help="continue the run in --run-dir from its latest checkpoint")
    q.add_argument("--no-progress", action="store_true", help="no progress bar")
    distributed_flag(q)
    q.set_defaults(fn=cmd_train)

    q = sub.add_parser("eval", help="evaluate a run's checkpoint")
    q.add_argument("run_dir")
    q.add_argument("--split", default="test", choices=["train", "validation", "test"])
    q.add_argument("--checkpoint", default="best", help="best, latest or a step number")
    q.add_argument("--json", action="store_true", help="print every metric as JSON")
    distributed_flag(q)
    q.set_defaults(fn=cmd_eval)

    q = sub.add_parser("sweep", help="train one config with several seeds; mean and std of every metric")
    q.add_argument("config")
    q.add_argument("--seeds", required=True, help="comma-separated, e.g. 21,22,23")
    overrides(q)
    q.add_argument("--run-dir", help="sweep directory (default runs/<name>-sweep-<time>)")
    q.add_argument("--no-progress", action="store_true")
    distributed_flag(q)
    q.set_defaults(fn=cmd_sweep)

    q = sub.add_parser("data", help="dataset tools")
    dsub = q.add_subparsers(dest="data_command", metavar="DATA_COMMAND")
    dsub.required = True
    e = dsub.add_parser("export", help="write the synthetic dataset as a TFDS directory or HDF5")
    e.add_argument("--format", choices=["tfds", "hdf5"], default="tfds")
    e.add_argument("--out", required=True)
    e.add_argument("--config", help="take image size, scale and seed from an experiment config")
    overrides(e)
    e.add_argument("--image-size", type=int, default=224)
    e.add_argument("--scale", type=float, default=1.0)
    e.add_argument("--seed", type=int, default=0)
    e.set_defaults(fn=cmd_data_export)

    q = sub.add_parser("bench", help="list the benchmarks in bench/, or run one (its own options follow)")
    q.add_argument("name", nargs="?")
    q.add_argument("args", nargs=argparse.REMAINDER)
    q.set_defaults(fn=cmd_bench)

    q = sub.add_parser("export", help="export a run's model (ONNX)")
    q.add_argument("run_dir")
    q.add_argument("--format", default="onnx")
    q.add_argument("--out")
    q.add_argument("--checkpoint", default="best")
    q.add_argument("--dynamic-batch", action=argparse.BooleanOptionalAction, default=True,
                   help="the batch dim of the ONNX input and output is symbolic ('batch', the default); "
                        "--no-dynamic-batch fixes it at 1")
    q.set_defaults(fn=cmd_export)

    q = sub.add_parser("explain", help="heatmap overlays (Grad-CAM, attention rollout) of a run's predictions")
    q.add_argument("run_dir")
    q.add_argument("--split", default="test")
    q.add_argument("-n", type=int, default=16)
    q.add_argument("--method", choices=("gradcam", "grad_cam", "rollout", "saliency"), default=None,
                   help="default by architecture: rollout for a ViT with a class token, gradcam otherwise")
    q.add_argument("--layer", default=None, help="Grad-CAM's layer path, e.g. Transformer/encoderblock_11/LayerNorm_0")
    q.add_argument("--checkpoint", default="best")
    q.set_defaults(fn=cmd_explain)
    return p


_MULTI_PROCESS = ("train", "eval", "sweep")


def main(argv=None):
    args = build_parser().parse_args(argv)
    from podlet.training.loop import NonFiniteError, TrainingInterrupted
    import podlet
    where = ""
    try:
        if args.command in _MULTI_PROCESS:
            _join_processes(args)
        elif os.environ.get("OMPI_COMM_WORLD_SIZE", "1") != "1":
            raise CLIError(f"podlet {args.command} runs in one process; start it without mpirun")
        where = f" (process {podlet.process_index()})" if podlet.process_count() > 1 else ""
        return args.fn(args)
    except TrainingInterrupted as e:  # every process stops at the same step
        if _is_primary():
            print(f"\npodlet: {e}; continue with --resume --run-dir {os.path.dirname(os.path.dirname(e.path))}",
                  file=sys.stderr)
        return 130
    except NonFiniteError as e:  # the pmean'd loss: the same on every process
        if _is_primary():
            print(f"podlet: error: {e}", file=sys.stderr)
        return 3
    except _expected_errors() as e:
        everywhere = getattr(e, "raised_on_every_process", False)
        if not getattr(e, "copy_of_process_0", False):
            print(f"podlet: error{'' if everywhere else where}: {e}", file=sys.stderr)
        # an error of process 0's decision is raised on every process: no one is left waiting
        return 2 if everywhere else _end(2)
    except BaseException:
        if podlet.process_count() > 1:  # the others may be waiting for this process in a collective
            import traceback
            traceback.print_exc()
            _end(1)
        raise


def _end(status):
    """`status`, or, with several processes, the end of the whole job with it: an error
    here may have left the other processes waiting in a collective."""
    import podlet
    if podlet.process_count() > 1:
        from podlet import distributed
        distributed.abort(status)
    return status


if __name__ == "__main__":
    sys.exit(main())
