"""The training-dynamics panels of the paper, from one or more runs' ``metrics.jsonl``.

A grid of panels (:data:`PANELS`), x the RL step: held-out accuracy (``eval/<a>/all/acc``,
when any run logged it), mean reward, group reward std normalised to its first step,
completion length, pseudo-label accuracy, and agreement between the agents' votes; each
titled in plain words, its y label naming the value and its unit. One line per run and
agent, with markers (a one-step run shows its points), labelled ``<run>/<agent>`` (just
``<agent>`` for a single run) in one legend over the figure: the colour and marker name
the agent, the line style the run, so a Co-RL run and a TTRL run lie side by side
(``vlcohort plot RUN_DIR RUN_DIR --out f.png``).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from vlcohort.monitoring.metrics import MetricsFileError, read_metrics

LINE_STYLES = ("-", "--", ":", "-.")
#: One marker shape per agent, drawn hollow, so an agent's points show where another's
#: lie on them (two agents at reward 0).
MARKERS = ("o", "s", "^", "D", "v", "P")


class PlotError(ValueError):
    """Runs that cannot be plotted; the message names the folder or file."""


class PlotOutError(PlotError):
    """An output path the plot cannot be written to (the command line exits 2)."""


def supported_formats() -> list[str]:
    """The file extensions matplotlib's Agg canvas writes (png, pdf, svg, ...)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    return sorted(FigureCanvasAgg.get_supported_filetypes())


def check_out(out: str | Path) -> tuple[Path, str]:
    """The file to write for ``--out`` (``.png`` added to a name without an extension, as
    matplotlib does) and its format, or a :class:`PlotOutError` naming the path and what to
    give instead: an unknown extension, a folder, a path under a file. Checked before any
    run is read, so a typo costs nothing."""
    out = Path(out)
    if not out.suffix:
        out = out.with_name(out.name + ".png")
    fmt = out.suffix[1:].lower()
    formats = supported_formats()
    if fmt not in formats:
        raise PlotOutError(f"--out {out}: matplotlib cannot write .{fmt} files; give one of "
                           + ", ".join("." + f for f in formats))
    if out.is_dir():
        raise PlotOutError(f"--out {out}: is a folder; give a file name, e.g. "
                           f"{out / 'dynamics.png'}")
    from vlcohort.run_folder import file_in_the_way

    if (blocker := file_in_the_way(out.parent)) is not None:
        raise PlotOutError(f"--out {out}: {blocker} is a file, not a folder; give a path in a "
                           "folder")
    return out, fmt


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


def normalise_to_first(ys: list[float]) -> list[float]:
    """Divide by the first non-zero value (the step-1 value unless that was 0); a series
    that is all zeros stays as it is."""
    first = next((y for y in ys if y), None)
    return [y / first for y in ys] if first else list(ys)


def metrics_file(run: str | Path) -> Path:
    """A run folder's ``metrics.jsonl`` (a path to the file itself is taken as is)."""
    run = Path(run)
    if run.is_file():
        return run
    path = run / "metrics.jsonl"
    if not path.is_file():
        why = "no such folder" if not run.exists() else "no metrics.jsonl in it"
        raise PlotError(f"{run}: {why}; give a run folder (the run.output_dir of a "
                        "`vlcohort train` run) or its metrics.jsonl")
    return path


def load_runs(runs: list[str | Path]) -> list[tuple[str, list[dict]]]:
    """(label, records) per run. The label is the run folder's name, or the path as given
    when two runs share a name."""
    if not runs:
        raise PlotError("no run folder given")
    paths = [metrics_file(r) for r in runs]
    names = [p.parent.name or str(p.parent) for p in paths]
    clash = Counter(names)
    out = []
    for run, path, name in zip(runs, paths, names):
        try:
            records = read_metrics(path)
        except MetricsFileError as e:
            raise PlotError(str(e)) from None
        if not any(r.get("step", 0) >= 1 for r in records):
            raise PlotError(f"{path}: no training step logged yet (the file is empty or "
                            "holds only the step-0 evaluation)")
        out.append((str(run) if clash[name] > 1 else name, records))
    return out


def _group_std_key(records) -> str:
    """``reward/group_std``; runs logged before it existed have only ``reward/std``."""
    return ("reward/group_std" if any(k.endswith("/reward/group_std") for r in records for k in r)
            else "reward/std")


@dataclass(frozen=True)
class Panel:
    """One panel of the dynamics figure: what it shows, in plain words, and where from."""

    title: str
    ylabel: str  # the value and its unit
    key: str | None  # per-agent metric ("eval": held-out accuracy); None: the cohort's agreement
    normalise: bool = False  # divided by its first non-zero value
    share: bool = False  # a share in [0, 1]: the axis shows all of it


#: The panels, in reading order (held-out accuracy first, when a run logged it).
PANELS = (
    Panel("Held-out accuracy (all tasks)", "share answered right", "eval", share=True),
    Panel("Mean reward of the rollouts", "reward (mean over rollouts)", "reward/mean"),
    Panel("Learning signal: reward spread in a group",
          "group reward std / step-1 value", "std", normalise=True),
    Panel("Completion length", "tokens per completion", "completion_len"),
    Panel("Pseudo-labels that match the gold answer", "share of prompts", "pseudo_label/acc",
          share=True),
    Panel("Agents' votes agree", "share of prompts", None, share=True),
)
#: Panels per row of the grid.
COLUMNS = 3


#: At most about this many markers per series: a long run's line stays a line.
MAX_MARKERS = 40


def _every(xs: list) -> int:
    """Matplotlib's ``markevery`` for a series of ``len(xs)`` points: every point of a
    short run (one or two steps show as points), about :data:`MAX_MARKERS` of a long one."""
    return max(1, math.ceil(len(xs) / MAX_MARKERS))


def _metric_key(panel: Panel, agent: str, records) -> str:
    if panel.key == "eval":
        return f"eval/{agent}/all/acc"
    if panel.key == "std":
        return f"agent/{agent}/{_group_std_key(records)}"
    return f"agent/{agent}/{panel.key}"


def dynamics_figure(loaded: list[tuple[str, list[dict]]]):
    """The training-dynamics figure of ``loaded`` runs (:func:`load_runs`): a grid of
    :data:`PANELS`, each with a title and a y label saying what the value is, x the RL
    step; every series has markers, so a run of one or two steps shows its points; one
    legend for the figure (colour: agent; line style: run, when there are several)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    many = len(loaded) > 1
    agents: list[str] = []  # colour per agent name, the same across runs
    for _, records in loaded:
        agents += [n for n in agent_names(records) if n not in agents]
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    has_eval = any(k.startswith("eval/") and k.endswith("/all/acc")
                   for _, records in loaded for r in records for k in r)
    panels = [p for p in PANELS if has_eval or p.key != "eval"]
    cols = min(COLUMNS, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.0 * cols, 3.4 * rows + 0.6), squeeze=False,
                             layout="constrained")
    steps = [r["step"] for _, records in loaded for r in records if "step" in r]
    first = 0 if has_eval else min(s for s in steps if s >= 1)
    last = max(steps)
    pad = max(0.5, 0.03 * (last - first))
    for ax, panel in zip(axes.flat, panels):
        drawn, top = 0, 0.0
        for r_i, (label, records) in enumerate(loaded):
            style = LINE_STYLES[r_i % len(LINE_STYLES)]
            if panel.key is None:
                xs, ys = _series(records, "cohort/agreement")
                if ys:
                    ax.plot(xs, ys, style, marker="o", markersize=4, color="black",
                            markevery=_every(xs), label=f"{label} (agreement)" if many else None)
                    drawn += 1
                continue
            for n in agent_names(records):
                xs, ys = _series(records, _metric_key(panel, n, records))
                if not ys:
                    continue
                ys = normalise_to_first(ys) if panel.normalise else ys
                a = agents.index(n)
                ax.plot(xs, ys, style, marker=MARKERS[a % len(MARKERS)], markersize=5,
                        markerfacecolor="none", markevery=_every(xs),
                        color=colours[a % len(colours)], label=f"{label}/{n}" if many else n)
                drawn, top = drawn + 1, max(top, *ys)
        if not drawn:
            ax.text(0.5, 0.5, "not logged in this run", ha="center", va="center",
                    transform=ax.transAxes, color="0.4")
        if panel.share:
            ax.set_ylim(-0.05, 1.05)
        elif panel.key in ("std", "completion_len"):  # from 0, so a change is seen to scale
            high = top if top > 0 else 1.0
            ax.set_ylim(-0.05 * high, 1.08 * high)
        ax.set_xlim(first - pad, last + pad)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.set_title(panel.title)
        ax.set_ylabel(panel.ylabel)
        ax.set_xlabel("RL step (0: before training)" if panel.key == "eval" else "RL step")
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    handles: dict[str, object] = {}
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    if handles:
        fig.legend(handles.values(), handles.keys(), loc="outside upper center",
                   ncol=min(len(handles), 6), title="run/agent" if many else "agent")
    return fig


def plot_runs(runs: list[str | Path], out_png: str | Path) -> Path:
    """Draw the training-dynamics panels of ``runs`` (folders or metrics files) into
    ``out_png`` (:func:`dynamics_figure`); return its path."""
    check_out(out_png)
    return _save(dynamics_figure(load_runs(list(runs))), out_png)


def plot_dynamics(metrics_path: str | Path, out_png: str | Path) -> Path:
    """One run's panels (the plot written at the end of ``vlcohort train``)."""
    return plot_runs([metrics_path], out_png)


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
    return _save(fig, out_png)


def _save(fig, out_png: str | Path) -> Path:
    import io

    import matplotlib.pyplot as plt

    from vlcohort.run_folder import RunFolderError, write_bytes

    out, fmt = check_out(out_png)
    if fig.get_layout_engine() is None:  # a constrained layout arranges itself
        fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=90)
    plt.close(fig)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PlotOutError(f"--out {out}: cannot create its folder ({e.strerror or e}); give "
                           "a path you can write") from None
    try:  # atomically, and never through a link at the name (plots/ of a run folder)
        return write_bytes(out, buf.getvalue())
    except RunFolderError as e:
        raise PlotOutError(str(e)) from None
