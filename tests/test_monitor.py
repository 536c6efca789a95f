"""Collapse / divergence detection (vlcohort/monitoring/monitor.py), its metrics, and `vlcohort plot`."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from vlcohort.answers.voting import majority_vote
from vlcohort.cli import main
from vlcohort.config import MonitorConfig, load_config
from vlcohort.monitoring.metrics import read_metrics
from vlcohort.monitoring.monitor import Monitor, answer_diversity, group_reward_std, spike_ratio
from vlcohort.typed_yaml import ConfigError

# ============================================================================ the metrics


def test_group_std_is_within_groups_not_over_all_rollouts():
    rewards = torch.tensor([[1.0, 1.0, 0.0, 0.0],   # std 0.5
                            [1.0, 1.0, 1.0, 1.0],   # std 0
                            [0.0, 0.0, 0.0, 0.0]])  # std 0 (e.g. the teacher abstained)
    assert group_reward_std(rewards) == pytest.approx(0.5 / 3)
    # the std over all 12 rewards (agent/<a>/reward/std): 6 ones, 6 zeros
    assert float(rewards.std(unbiased=False)) == pytest.approx(0.5)
    # every group uniform but groups differ: no learning signal, though reward/std is 0.5
    assert group_reward_std(torch.tensor([[1.0, 1.0], [0.0, 0.0]])) == 0.0


def test_answer_diversity_counts_equivalence_classes_not_strings():
    opts = ["30°", "40°", "45°"]
    votes = [majority_vote(["C", "(C)", "C. 45°", "45°", "B"], opts),  # C and B: 2
             majority_vote([None, None, None], opts),                 # nothing parsed: 0
             majority_vote(["1/2", "0.5", "\\frac{1}{2}", "2", None]),  # 1/2 and 2: 2
             majority_vote(["A", "A", None, "A"], opts)]               # 1
    assert answer_diversity(votes) == pytest.approx((2 + 0 + 2 + 1) / 4)


# ============================================================================ the monitor


def _records(agent="A", **series):
    """Step records 1..n from per-metric series (None: the key is absent that step)."""
    n = max(len(v) for v in series.values())
    out = []
    for i in range(n):
        rec = {"step": i + 1}
        for key, values in series.items():
            if i < len(values) and values[i] is not None:
                rec[f"agent/{agent}/{key.replace('__', '/')}"] = values[i]
        out.append(rec)
    return out


def _run(monitor, records):
    """step -> warnings, and step -> flags, over a record sequence."""
    warned, flags = {}, {}
    for rec in records:
        found = monitor.check(rec, rec["step"])
        if found:
            warned[rec["step"]] = found
        flags[rec["step"]] = dict(monitor.flags)
    return warned, flags


def test_reward_collapse_fires_after_patience_steps_below_threshold():
    m = Monitor(MonitorConfig(collapse_threshold=0.1, collapse_patience=3), ["A"])
    stds = [0.40, 0.35, 0.03, 0.02, 0.03, 0.01, 0.30, 0.02, 0.02, 0.02]
    warned, flags = _run(m, _records(reward__group_std=stds))
    assert list(warned) == [5, 10]  # 3 in a row below 0.04 at steps 3-5; reset at 7; 8-10
    (w,) = warned[5]
    assert (w.agent, w.signal, w.step) == ("A", "reward_collapse", 5)
    assert w.message.startswith("reward_collapse: agent A at step 5: group reward std 0.03")
    assert "of its step-1 value" in w.message and "for 3 steps (< 0.1)" in w.message
    assert [flags[s]["monitor/A/reward_collapse"] for s in range(1, 11)] == \
        [0, 0, 0, 0, 1, 1, 0, 0, 0, 1]


def test_reward_collapse_reference_is_first_non_zero_value():
    """A zero first-step std cannot normalise anything: the first non-zero value becomes
    the reference; until then a zero std counts as below the threshold."""
    m = Monitor(MonitorConfig(collapse_threshold=0.1, collapse_patience=2), ["A"])
    warned, _ = _run(m, _records(reward__group_std=[0.0, 0.0, 0.5, 0.02, 0.02]))
    assert list(warned) == [2, 5]
    assert "group reward std 0 in every step so far (2 steps)" in warned[2][0].message
    assert "of its step-3 value 0.5" in warned[5][0].message


def test_degeneration_on_shrinking_and_growing_completions():
    cfg = MonitorConfig(length_factor=3.0, length_patience=2)
    warned, flags = _run(Monitor(cfg, ["A"]), _records(completion_len=[20, 22, 6, 6, 5]))
    assert list(warned) == [4]  # 6 < 20 / 3 from step 3; patience 2
    assert warned[4][0].message.startswith(
        "degeneration: agent A at step 4: mean completion length shrank to 6.0 tokens")
    assert flags[5]["monitor/A/degeneration"] == 1
    warned, _ = _run(Monitor(cfg, ["A"]), _records(completion_len=[10, 30, 30, 31, 31]))
    assert list(warned) == [5]  # exactly 3x is inside the range; 31 is not
    assert "grew to 31.0 tokens" in warned[5][0].message


def test_divergence_on_a_loss_spike_above_the_running_median_and_floor():
    cfg = MonitorConfig(spike_factor=10.0, spike_window=3, loss_floor=1.0)
    losses = [0.1, -0.2, 0.15, 0.12, 3.0, 4.0, 0.1]
    warned, flags = _run(Monitor(cfg, ["A"]), _records(loss=losses))
    assert list(warned) == [5]  # 3.0 = 20x median(|-0.2|, .15, .12); warned once
    msg = warned[5][0].message
    assert msg.startswith("divergence: agent A at step 5: loss 3 is 20x the median |loss| 0.15")
    assert [flags[s]["monitor/A/divergence"] for s in range(1, 8)] == [0, 0, 0, 0, 1, 1, 0]
    # a 500x jump that stays under the floor is noise around 0, not a divergence
    warned, _ = _run(Monitor(cfg, ["A"]), _records(loss=[1e-3, 1e-3, 1e-3, 0.5]))
    assert not warned
    # the baseline is not checked before the window is full
    warned, _ = _run(Monitor(cfg, ["A"]), _records(loss=[0.01, 0.01, 5.0]))
    assert not warned


def test_divergence_on_a_non_finite_kl_at_once():
    cfg = MonitorConfig(spike_window=5)
    warned, _ = _run(Monitor(cfg, ["A"]), _records(kl=[0.0, float("nan")], loss=[0.1, 0.1]))
    assert list(warned) == [2]
    assert warned[2][0].message == "divergence: agent A at step 2: kl is nan"


def test_warnings_name_the_agent_that_trips_only():
    m = Monitor(MonitorConfig(collapse_patience=2), ["A", "B"])
    recs = [{"step": s, "agent/A/reward/group_std": a, "agent/B/reward/group_std": b}
            for s, (a, b) in enumerate([(0.4, 0.4), (0.01, 0.4), (0.01, 0.35)], 1)]
    warned, flags = _run(m, recs)
    assert [(w.agent, w.step) for w in warned[3]] == [("A", 3)]
    assert flags[3]["monitor/B/reward_collapse"] == 0


def test_spike_ratio_is_robust_to_one_earlier_spike():
    assert spike_ratio(2.0, [0.1, 100.0, 0.1]) == pytest.approx(20.0)
    assert spike_ratio(1.0, [0.0, 0.0]) == math.inf
    assert spike_ratio(0.0, [0.0]) == 0.0


_value = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(stds=st.lists(_value, min_size=2, max_size=25), data=st.data())
def test_state_round_trip_warns_as_the_straight_run(stds, data):
    """Checkpoint the monitor state anywhere (through JSON, as state.json does), resume:
    the warnings and flags are those of the uninterrupted sequence."""
    n = len(stds)
    lens = data.draw(st.lists(st.floats(1, 40), min_size=n, max_size=n))
    losses = data.draw(st.lists(st.floats(-3, 3), min_size=n, max_size=n))
    recs = _records(reward__group_std=stds, completion_len=lens, loss=losses)
    cfg = MonitorConfig(collapse_threshold=0.5, collapse_patience=2, length_factor=2.0,
                        length_patience=2, spike_window=3, spike_factor=3.0, loss_floor=0.5)
    straight = _run(Monitor(cfg, ["A"]), recs)
    cut = data.draw(st.integers(1, n - 1))
    first = Monitor(cfg, ["A"])
    w1, f1 = _run(first, recs[:cut])
    resumed = Monitor(cfg, ["A"])
    resumed.load_state(json.loads(json.dumps(first.state())))
    w2, f2 = _run(resumed, recs[cut:])
    assert straight == ({**w1, **w2}, {**f1, **f2})


# ============================================================================ config


@pytest.mark.parametrize("override, key", [
    ("monitor.stop_on=[collapse]", "monitor.stop_on.0"),
    ("monitor.length_factor=1", "monitor.length_factor"),
    ("monitor.collapse_patience=0", "monitor.collapse_patience"),
    ("monitor.collapse_threshold=0", "monitor.collapse_threshold"),
    ("monitor.kl_floor=-1", "monitor.kl_floor"),
])
def test_bad_monitor_config_names_the_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(None, [override])


def test_stop_on_needs_an_enabled_monitor():
    with pytest.raises(ConfigError, match="monitor.stop_on needs monitor.enable"):
        load_config(None, ["monitor.enable=false", "monitor.stop_on=[divergence]"])


# ============================================================================ a real run

# One tiny agent, ground-truth reward, answers read as the last capital letter (as in
# tests/test_train.py): a few cheap steps that really update.
FAST = ["method=gt_reward", "agents=[{name: A, path: 'tiny:qwen2_5_vl'}]",
        "reward.answer_style=last_letter", "data.tasks=[shape_colour, shape_kind]",
        "data.num_problems=16", "rollout.prompts_per_step=2", "rollout.rollouts_per_prompt=4",
        "rollout.max_new_tokens=8", "grpo.micro_batch_seqs=8", "optim.lr=1e-3",
        "optim.warmup_ratio=0", "log.plot=false", "log.tensorboard=false", "run.seed=4",
        "arms=[]", "eval.every=0", "reward.min_share=0", "grpo.kl_coef=0", "run.threads=1"]


@pytest.fixture
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


def test_stop_on_saves_then_stops_and_resume_keeps_the_monitor_state(tmp_path, capsys,
                                                                       _tiny_cache):
    """A threshold of 2x the step-1 value trips reward collapse at step 1: the warning lands
    in metrics.jsonl and on stderr, the run saves and stops. Resumed, it goes on without
    warning again: the streak is already past its patience (a fresh monitor would warn at
    step 2)."""
    run = tmp_path / "run"
    rc = main(["train", *FAST, "run.steps=3", "monitor.collapse_threshold=2.0",
               "monitor.collapse_patience=1", "monitor.stop_on=[reward_collapse]",
               f"run.output_dir={run}"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "warning: reward_collapse: agent A at step 1:" in err
    assert "stopped at step 1 by the monitor" in err and "--resume" in err
    (rec,) = read_metrics(run / "metrics.jsonl")
    assert rec["monitor/A/reward_collapse"] == 1.0
    assert rec["monitor/warnings"][0].startswith("reward_collapse: agent A at step 1:")
    assert rec["agent/A/reward/group_std"] >= 0 and rec["agent/A/answer_diversity"] >= 0
    state = json.loads((run / "checkpoints/step-1/state.json").read_text())
    assert state["monitor"]["agents"]["A"]["collapse_streak"] == 1

    assert main(["train", "--resume", str(run)]) == 0
    recs = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in recs] == [1, 2, 3]
    assert [r["monitor/A/reward_collapse"] for r in recs] == [1.0, 1.0, 1.0]
    assert not any("monitor/warnings" in r for r in recs[1:])
    assert "warning:" not in capsys.readouterr().err


# ============================================================================ vlcohort plot


def _fake_run(folder, agents, agreement, steps=30, eval_every=10, seed=0):
    """A metrics.jsonl shaped like a real run's, with made-up but plausible series."""
    import random

    rng = random.Random(seed)
    folder.mkdir(parents=True)
    lines = [{"step": 0, **{f"eval/{a}/all/acc": 0.25 for a in agents}}] if eval_every else []
    for s in range(1, steps + 1):
        rec = {"step": s, "cohort/agreement": (min(1.0, s / steps + rng.random() * 0.1)
                                               if agreement else None)}
        for i, a in enumerate(agents):
            rec[f"agent/{a}/reward/group_std"] = 0.45 * math.exp(-s / (10 + 5 * i + 9 * seed)) + 0.01
            rec[f"agent/{a}/completion_len"] = 8 + 2 * math.sin(s / 3 + i) + rng.random()
            rec[f"agent/{a}/pseudo_label/acc"] = min(1.0, 0.3 + s / steps * (0.7 - 0.3 * i - 0.2 * seed))
            if eval_every and s % eval_every == 0:
                rec[f"eval/{a}/all/acc"] = 0.25 + 0.7 * s / steps / (1 + i)
        lines.append(rec)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return folder


def test_plot_two_runs_side_by_side(tmp_path, capsys):
    from PIL import Image

    co = _fake_run(tmp_path / "co_rl", ["A", "B"], agreement=True)
    tt = _fake_run(tmp_path / "ttrl", ["A"], agreement=False, eval_every=0, seed=1)
    out = tmp_path / "out" / "dynamics.png"
    assert main(["plot", str(co), str(tt), "--out", str(out)]) == 0
    assert f"plot: {out}" in capsys.readouterr().out
    assert out.stat().st_size > 60_000  # five empty panels with titles: ~30 kB
    rgb = np.asarray(Image.open(out).convert("RGB"), dtype=np.int32)  # [H, W, 3]
    assert rgb.std() > 20
    # lines in each agent's colour (matplotlib's first two: blue A, orange B), not only
    # black axes and text
    for colour in ((31, 119, 180), (255, 127, 14)):
        assert (np.abs(rgb - colour).sum(-1) < 60).mean() > 1e-3, colour

    # a single run (what `vlcohort train` draws at the end) still works
    from vlcohort.analysis.plots import plot_dynamics

    one = plot_dynamics(co / "metrics.jsonl", tmp_path / "one.png")
    assert one.stat().st_size > 20_000


def test_plot_labels_runs_that_share_a_name_by_path(tmp_path):
    from vlcohort.analysis.plots import load_runs

    a = _fake_run(tmp_path / "x" / "co_rl", ["A"], agreement=False, steps=3)
    b = _fake_run(tmp_path / "y" / "co_rl", ["A"], agreement=False, steps=3)
    c = _fake_run(tmp_path / "ttrl", ["A"], agreement=False, steps=3)
    assert [label for label, _ in load_runs([a, b, c])] == [str(a), str(b), "ttrl"]


def test_plot_errors_name_the_folder_file_and_line(tmp_path, capsys):
    out = str(tmp_path / "p.png")
    (tmp_path / "nometrics").mkdir()
    assert main(["plot", str(tmp_path / "nometrics"), "--out", out]) == 1
    err = capsys.readouterr().err
    assert f"{tmp_path / 'nometrics'}: no metrics.jsonl in it" in err

    assert main(["plot", str(tmp_path / "absent"), "--out", out]) == 1
    assert "absent: no such folder" in capsys.readouterr().err

    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "metrics.jsonl").write_text("")
    assert main(["plot", str(tmp_path / "empty"), "--out", out]) == 1
    assert f"{tmp_path / 'empty' / 'metrics.jsonl'}: no training step logged" in \
        capsys.readouterr().err

    bad = _fake_run(tmp_path / "bad", ["A"], agreement=False, steps=4, eval_every=0)
    lines = (bad / "metrics.jsonl").read_text().splitlines()
    lines[2] = lines[2][:25]  # a line cut mid-write
    (bad / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    good = _fake_run(tmp_path / "good", ["A"], agreement=False, steps=4)
    assert main(["plot", str(good), str(bad), "--out", out]) == 1
    err = capsys.readouterr().err
    assert f"{bad / 'metrics.jsonl'}, line 3: not valid JSON" in err
    assert not (tmp_path / "p.png").exists()
