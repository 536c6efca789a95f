"""``dynamics.png`` read from the matplotlib Figure itself (line data, labels), not pixels:
a one-step run shows its points, every panel says what it plots, one legend names the
agents (and the runs, side by side)."""

from __future__ import annotations

import json
import math

import matplotlib.pyplot as plt
import pytest

from vlcohort.analysis.plots import PANELS, dynamics_figure, load_runs, plot_runs


def _write_run(folder, agents, steps, agreement=True, eval_steps=(0,)):
    """A ``metrics.jsonl`` with the keys a real cohort run logs for these panels."""
    folder.mkdir(parents=True)
    records = [{"step": 0, **{f"eval/{a}/all/acc": 0.25 for a in agents}}] if 0 in eval_steps else []
    for s in range(1, steps + 1):
        rec = {"step": s, "cohort/agreement": 0.5 if agreement else None}
        for i, a in enumerate(agents):
            rec.update({f"agent/{a}/reward/mean": 0.5 + 0.1 * i, f"agent/{a}/reward/group_std": 0.4,
                        f"agent/{a}/completion_len": 12.0 + i, f"agent/{a}/pseudo_label/acc": 0.75})
            if s in eval_steps:
                rec[f"eval/{a}/all/acc"] = 0.5
        records.append(rec)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


@pytest.fixture
def figure():
    """Figures made by a test, closed after it."""
    made = []

    def make(runs):
        made.append(dynamics_figure(load_runs(runs)))
        return made[-1]

    yield make
    for fig in made:
        plt.close(fig)


def _shown(fig):
    return [ax for ax in fig.axes if ax.get_visible()]


def test_a_one_step_run_shows_points_in_every_panel(tmp_path, figure):
    run = _write_run(tmp_path / "co_rl", ["A", "B"], steps=1, eval_steps=(0, 1))
    fig = figure([run])
    axes = _shown(fig)
    assert [ax.get_title() for ax in axes] == [p.title for p in PANELS]
    for ax, panel in zip(axes, PANELS):
        assert ax.get_ylabel() == panel.ylabel and ax.get_xlabel().startswith("RL step")
        lines = ax.get_lines()
        assert len(lines) == (1 if panel.key is None else 2), panel.title  # agreement: 1
        for line in lines:
            xs, ys = line.get_data()
            assert list(xs) == ([0, 1] if panel.key == "eval" else [1]), panel.title
            assert all(math.isfinite(y) for y in ys)
            assert line.get_marker() not in (None, "", "None", " ")  # a lone point is drawn
            low, high = ax.get_ylim()
            assert all(low < y < high for y in ys) and ax.get_xlim()[0] < min(xs)
    std = axes[[p.key for p in PANELS].index("std")].get_lines()[0].get_ydata()
    assert list(std) == [1.0]  # normalised to its step-1 value
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["A", "B"]


def test_runs_side_by_side_share_one_legend_by_run_and_agent(tmp_path, figure):
    co = _write_run(tmp_path / "co_rl", ["A", "B"], steps=3)
    tt = _write_run(tmp_path / "ttrl", ["A"], steps=2, agreement=False, eval_steps=())
    fig = figure([co, tt])
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "co_rl/A", "co_rl/B", "ttrl/A", "co_rl (agreement)"]
    reward = _shown(fig)[1].get_lines()  # mean reward
    assert [line.get_label() for line in reward] == ["co_rl/A", "co_rl/B", "ttrl/A"]
    assert reward[0].get_linestyle() != reward[2].get_linestyle()  # the run: the line style
    assert reward[0].get_color() == reward[2].get_color()  # the agent: the colour


def test_a_run_without_held_out_accuracy_leaves_no_empty_frame(tmp_path, figure):
    run = _write_run(tmp_path / "ttrl", ["A"], steps=2, agreement=False, eval_steps=())
    fig = figure([run])
    titles = [ax.get_title() for ax in _shown(fig)]
    assert titles == [p.title for p in PANELS if p.key != "eval"]
    agreement = _shown(fig)[-1]
    assert not agreement.get_lines() and "not logged" in agreement.texts[0].get_text()
    assert plot_runs([run], tmp_path / "d.png").stat().st_size > 20_000
