"""The training-dynamics panels of the paper, from a run's ``metrics.jsonl``: reward std
normalised to its first step, completion length, pseudo-label accuracy, agreement."""

from __future__ import annotations

import math
from pathlib import Path

from .metrics import read_metrics


def _series(records, key):
    xs, ys = [], []
    for r in records:
        v = r.get(key)
        if v is not None and not (isinstance(v, float) and math.isnan(v)):
            xs.append(r["step"])
            ys.append(v)
    return xs, ys


def agent_names(records) -> list[str]:
    names = []
    for r in records:
        for k in r:
            if k.startswith("agent/"):
                n = k.split("/")[1]
                if n not in names:
                    names.append(n)
    return names


def plot_dynamics(metrics_path: str | Path, out_png: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_metrics(metrics_path)
    names = agent_names(records)
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
    panels = [("reward/std", "reward std / step-1 value", True),
              ("completion_len", "completion length (tokens)", False),
              ("pseudo_label/acc", "pseudo-label accuracy", False)]
    for ax, (key, title, normalise) in zip(axes, panels):
        for n in names:
            xs, ys = _series(records, f"agent/{n}/{key}")
            if normalise and ys:
                first = next((y for y in ys if y), None)
                ys = [y / first for y in ys] if first else ys
            ax.plot(xs, ys, label=n)
        ax.set_title(title)
        ax.set_xlabel("step")
    xs, ys = _series(records, "cohort/agreement")
    axes[3].plot(xs, ys, color="black")
    axes[3].set_title("agreement between agents' votes")
    axes[3].set_xlabel("step")
    axes[0].legend()
    fig.tight_layout()
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out


def plot_self_play(metrics_path: str | Path, out_png: str | Path) -> Path:
    """R-Few's stability measures of a self-play run over steps (``selfplay/*`` keys):
    question validity, p_hat (mean, share in band), repetition, question length, distinct-2,
    the solver's accuracy on anchors. Solver phases are shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_metrics(metrics_path)
    fig, axes = plt.subplots(1, 5, figsize=(20, 3.6))
    panels = [(("selfplay/question_validity",), "question validity"),
              (("selfplay/p_hat_mean", "selfplay/in_band"), "p_hat mean / share in band"),
              (("selfplay/repetition_share", "selfplay/distinct2"), "repetition share / distinct-2"),
              (("selfplay/question_len",), "question length (words)"),
              (("selfplay/solver/anchor_acc",), "solver accuracy on anchors")]
    solver_steps = [r["step"] for r in records if r.get("selfplay/phase") == 1]
    for ax, (keys, title) in zip(axes, panels):
        for s in solver_steps:
            ax.axvspan(s - 0.5, s + 0.5, color="0.92", lw=0)
        for key in keys:
            xs, ys = _series(records, key)
            ax.plot(xs, ys, marker=".", label=key.rsplit("/", 1)[-1])
        ax.set_title(title)
        ax.set_xlabel("step (shaded: solver phase)")
        if len(keys) > 1:
            ax.legend()
    fig.tight_layout()
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out
