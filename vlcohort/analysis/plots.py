"""The training-dynamics panels of the paper, from one or more runs' ``metrics.jsonl``.

Panels: held-out accuracy (``eval/<a>/all/acc``, when any run logged it), group reward std
normalised to its first step, completion length, pseudo-label accuracy, and agreement
between the agents' votes. One line per run and agent, labelled ``<run>/<agent>`` (just
``<agent>`` for a single run): the colour names the agent, the line style the run, so a
Co-RL run and a TTRL run lie side by side (``vlcohort plot RUN_DIR RUN_DIR --out f.png``).
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

from vlcohort.monitoring.metrics import MetricsFileError, read_metrics

LINE_STYLES = ("-", "--", ":", "-.")


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


def plot_runs(runs: list[str | Path], out_png: str | Path) -> Path:
    """Draw the training-dynamics panels of ``runs`` (folders or metrics files) into
    ``out_png``; return its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    check_out(out_png)
    loaded = load_runs(list(runs))
    many = len(loaded) > 1
    agents: list[str] = []  # colour per agent name, the same across runs
    for _, records in loaded:
        agents += [n for n in agent_names(records) if n not in agents]
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    has_eval = any(k.startswith("eval/") and k.endswith("/all/acc")
                   for _, records in loaded for r in records for k in r)
    # (title, per-agent key or None for the per-run agreement, normalise)
    panels = ([("held-out accuracy (all tasks)", "eval", False)] if has_eval else []) + [
        ("group reward std / its step-1 value", "std", True),
        ("completion length (tokens)", "completion_len", False),
        ("pseudo-label accuracy", "pseudo_label/acc", False),
        ("agreement between agents' votes", None, False)]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.8), squeeze=False)
    for ax, (title, key, normalise) in zip(axes[0], panels):
        drawn = 0
        for r_i, (label, records) in enumerate(loaded):
            style = LINE_STYLES[r_i % len(LINE_STYLES)]
            if key is None:
                xs, ys = _series(records, "cohort/agreement")
                if ys:
                    ax.plot(xs, ys, style, color="black", label=label if many else None)
                    drawn += 1
                continue
            for n in agent_names(records):
                full = (f"eval/{n}/all/acc" if key == "eval" else
                        f"agent/{n}/{_group_std_key(records)}" if key == "std" else
                        f"agent/{n}/{key}")
                xs, ys = _series(records, full)
                if not ys:
                    continue
                ax.plot(xs, normalise_to_first(ys) if normalise else ys, style,
                        marker="o" if key == "eval" else None, markersize=3,
                        color=colours[agents.index(n) % len(colours)],
                        label=f"{label}/{n}" if many else n)
                drawn += 1
        if not drawn:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
        elif key in ("completion_len", None) and ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small")  # always drawn panels; one legend says it all
        ax.set_title(title)
        ax.set_xlabel("step")
    return _save(fig, out_png)


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
