"""What a finished run shows: PNG plots from metrics.jsonl and summary.json, and the
one-screen summary table.

    plot_run("runs/smoke-...")   # plots/{loss,val_macro_f1,lr,confusion_matrix,per_class_f1}.png
    print(summary_table(json.load(open(".../summary.json"))))

The LR plot is drawn from the LR each step actually applied (logged), not reconstructed
from the config: the seed's lesson #3.
"""
from __future__ import annotations

import json
import os

import numpy as np

__all__ = ["plot_run", "summary_table", "compare_table"]


def _records(run_dir):
    from podlet.training.loop import read_metrics
    return read_metrics(run_dir)


def _save(fig, path):
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=110, bbox_inches="tight")
    os.replace(tmp, path)


def plot_run(run_dir) -> list[str]:
    """Writes the run's plots into ``run_dir/plots``; returns their paths."""
    import matplotlib
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    recs = _records(run_dir)
    train = [r for r in recs if r["kind"] == "train"]
    val = [r for r in recs if r["kind"] == "val"]
    out_dir = os.path.join(run_dir, "plots")
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    spe = max((r["step"] for r in val), default=1) / max(len(val), 1)

    fig, ax = plt.subplots(figsize=(6, 4))
    if train:
        ax.plot([r["step"] / spe for r in train], [r["loss"] for r in train], lw=0.6, alpha=0.5,
                label="train (per step)")
    if val:
        ax.plot([r["epoch"] for r in val], [r["train_loss"] for r in val], "o-", label="train (epoch mean)")
        ax.plot([r["epoch"] for r in val], [r["loss"] for r in val], "s-", label="validation")
    ax.set(xlabel="epoch", ylabel="loss", title="loss")
    ax.legend()
    paths.append(os.path.join(out_dir, "loss.png"))
    _save(fig, paths[-1])
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([r["epoch"] for r in val], [r["macro_f1"] for r in val], "o-", label="macro-F1")
    ax.plot([r["epoch"] for r in val], [r["balanced_accuracy"] for r in val], "s--", label="balanced accuracy")
    ax.set(xlabel="epoch", ylabel="score", title="validation", ylim=(0, 1))
    ax.legend()
    paths.append(os.path.join(out_dir, "val_macro_f1.png"))
    _save(fig, paths[-1])
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 3))
    ax.plot([r["step"] for r in train], [r["lr"] for r in train])
    ax.set(xlabel="step", ylabel="learning rate", title="learning rate applied (logged)")
    paths.append(os.path.join(out_dir, "lr.png"))
    _save(fig, paths[-1])
    plt.close(fig)

    summary_path = os.path.join(run_dir, "summary.json")
    if os.path.exists(summary_path):
        with open(summary_path) as f:
            test = json.load(f)["test"]
        names = list(test["per_class"])
        cm = np.array(test["confusion_matrix"])
        fig, ax = plt.subplots(figsize=(6, 5))
        norm = cm / np.maximum(cm.sum(axis=1, keepdims=True), 1)
        ax.imshow(norm, cmap="Blues", vmin=0, vmax=1)
        for i in range(cm.shape[0]):
            for j in range(cm.shape[1]):
                ax.text(j, i, str(cm[i, j]), ha="center", va="center",
                        color="white" if norm[i, j] > 0.5 else "black", fontsize=8)
        short = [n.replace("_", "\n") for n in names]
        ax.set_xticks(range(len(names)), short, fontsize=7)
        ax.set_yticks(range(len(names)), short, fontsize=7)
        ax.set(xlabel="predicted", ylabel="true", title="test confusion matrix (selected checkpoint)")
        paths.append(os.path.join(out_dir, "confusion_matrix.png"))
        _save(fig, paths[-1])
        plt.close(fig)

        fig, ax = plt.subplots(figsize=(6, 3.5))
        f1 = [test["per_class"][n]["f1"] for n in names]
        ax.barh(range(len(names)), f1)
        ax.set_yticks(range(len(names)), names, fontsize=7)
        ax.set(xlim=(0, 1), xlabel="F1", title=f"test per-class F1 (macro {test['macro_f1']:.3f})")
        ax.invert_yaxis()
        paths.append(os.path.join(out_dir, "per_class_f1.png"))
        _save(fig, paths[-1])
        plt.close(fig)
    return paths


def _fmt(v):
    if v is None:
        return "-"
    if isinstance(v, float):
        return "nan" if v != v else f"{v:.4f}"
    return str(v)


def summary_table(summary: dict) -> str:
    """The one-screen end-of-run table: run, selection, split metrics, per-class F1."""
    s = summary
    lines = [f"run        {s['run_dir']}",
             f"model      {s['num_params']:,} params; {s['steps']} steps in {s['wall_seconds']:.0f} s"
             + ("; stopped early" if s.get("stopped_early") else ""),
             f"selected   step {s['selected_step']} (epoch {s['selected_epoch']}) by validation "
             f"{s['selection_metric']}" + (" (EMA params)" if s.get("ema") else ""),
             "",
             f"{'':<12}{'loss':>8}{'acc':>8}{'bal_acc':>9}{'macro_f1':>10}{'roc_auc':>9}{'n':>7}"]
    for split in ("validation", "test"):
        m = s[split]
        lines.append(f"{split:<12}{_fmt(m.get('loss')):>8}{_fmt(m['accuracy']):>8}{_fmt(m['balanced_accuracy']):>9}"
                     f"{_fmt(m['macro_f1']):>10}{_fmt(m['roc_auc']):>9}{m['num_examples']:>7}")
    lines += ["", f"{'test per class':<26}{'precision':>10}{'recall':>8}{'f1':>8}{'support':>9}"]
    for name, c in s["test"]["per_class"].items():
        lines.append(f"{name:<26}{_fmt(c['precision']):>10}{_fmt(c['recall']):>8}{_fmt(c['f1']):>8}"
                     f"{c['support']:>9}")
    return "\n".join(lines)


def compare_table(rows: dict, keys=("accuracy", "balanced_accuracy", "macro_f1", "roc_auc")) -> str:
    """``{label: metrics}`` as one line per label (e.g. several runs' test metrics)."""
    head = f"{'':<24}" + "".join(f"{k:>19}" for k in keys)
    return "\n".join([head] + [f"{label:<24}" + "".join(f"{_fmt(m.get(k)):>19}" for k in keys)
                               for label, m in rows.items()])
