"""The cohort trainer end to end on tiny real models (CPU, offline)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers.train import FAST
from vlcohort.cli import main
from vlcohort.config import load_config
from vlcohort.monitoring.metrics import read_metrics


@pytest.fixture(autouse=True)
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


def _strip_timing(records):
    return [{k: v for k, v in r.items() if not k.startswith("timing/")} for r in records]


def test_resume_is_exact(tmp_path):
    """6 straight steps == 3 steps, SIGKILL, resume for 3 more (metrics and final weights)."""
    straight, parted = tmp_path / "straight", tmp_path / "parted"
    common = [*FAST, "run.steps=6", "checkpoint.every=3"]
    assert main(["train", *common, f"run.output_dir={straight}"]) == 0

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "vlcohort", "train", *common,
                             f"run.output_dir={parted}"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    marker = parted / "checkpoints" / "step-3" / "state.json"
    deadline = time.time() + 300
    while not marker.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert marker.exists(), "the run died before its step-3 checkpoint"
    done_at_kill = len(read_metrics(parted / "metrics.jsonl"))
    assert done_at_kill < 6, "the run finished before it could be killed: weak test"

    assert main(["train", "--resume", str(parted)]) == 0
    a, b = read_metrics(straight / "metrics.jsonl"), read_metrics(parted / "metrics.jsonl")
    assert [r["step"] for r in b] == [1, 2, 3, 4, 5, 6]
    assert _strip_timing(a) == _strip_timing(b)
    assert any("agent/A/loss" in r for r in a[3:]), "no update after the resume point: weak test"
    wa = load_file(straight / "checkpoints/step-6/A/model.safetensors")
    wb = load_file(parted / "checkpoints/step-6/A/model.safetensors")
    w3 = load_file(parted / "checkpoints/step-3/A/model.safetensors")
    assert wa.keys() == wb.keys()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert any(not torch.equal(wa[k], w3[k]) for k in wa)


def test_checkpoint_loads_with_transformers(tmp_path):
    from transformers import AutoModelForImageTextToText

    run = tmp_path / "run"
    assert main(["train", *FAST, "run.steps=1", f"run.output_dir={run}"]) == 0
    model = AutoModelForImageTextToText.from_pretrained(run / "checkpoints/step-1/A")
    assert type(model).__name__.endswith("ForConditionalGeneration")
    assert (run / "checkpoints/latest").read_text().strip() == "step-1"
    assert not [p for p in (run / "checkpoints").iterdir() if p.name.startswith(".")]


def test_two_agent_peer_vote_runs_and_logs_every_metric(tmp_path):
    run = tmp_path / "pair"
    args = ["train", "method=co_rl", "reward.answer_style=last_letter", "arms=[]",
            "eval.every=0", "agents.0.warmup.steps=0", "agents.0.warmup.uniform_steps=0",
            "agents.1.warmup.steps=0", "agents.1.warmup.uniform_steps=0",
            "data.tasks=[shape_colour]", "data.num_problems=8", "rollout.prompts_per_step=2",
            "rollout.rollouts_per_prompt=4", "rollout.max_new_tokens=8",
            "grpo.micro_batch_seqs=4", "run.steps=2", "log.tensorboard=false",
            f"run.output_dir={run}"]
    assert main(args) == 0
    recs = read_metrics(run / "metrics.jsonl")
    assert len(recs) == 2
    for name in ("A", "B"):
        labelled = recs[0].get(f"agent/{name}/pseudo_label/acc") is not None
        for key in ("reward/mean", "reward/std", "teacher_abstain", "parse_rate",
                    "completion_len", "pseudo_label/acc" if labelled else "acc", "lr"):
            assert f"agent/{name}/{key}" in recs[0], key
    assert "cohort/agreement" in recs[0] and "timing/rollout" in recs[0]
    from vlcohort.monitoring.metrics import documented

    undocumented = {k for r in recs for k in r if not documented(k)}
    assert not undocumented, f"metrics missing from METRIC_DOCS / README: {undocumented}"
    assert (run / "plots/dynamics.png").stat().st_size > 1000
    cfg = load_config(run / "config.yaml")
    assert cfg.reward.source == "peer_vote" and len(cfg.agents) == 2


def test_resume_without_checkpoint_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "config.yaml").write_text(
        (load_config(None, FAST).__class__ and "") or "")  # an empty config: the defaults
    assert main(["train", "--resume", str(tmp_path)]) == 1
    assert "no complete checkpoint" in capsys.readouterr().err


def test_bad_records_are_skipped_counted_and_replaced(tmp_path):
    from vlcohort.data.problems import Problem
    from vlcohort.data.stream import ProblemStream
    from vlcohort.data.synthetic import make_dataset
    from vlcohort.recipes.cohort import setup
    from vlcohort.recipes.step import train_step

    cfg = load_config(None, [*FAST, "run.steps=1", f"run.output_dir={tmp_path / 'run'}"])
    run = setup(cfg)
    good = make_dataset(("shape_colour",), n=3, seed=0)
    bad = [
        Problem("missing", "What colour?", [str(tmp_path / "nope.png")]),
        Problem("corrupt", "What colour?", [b"not an image at all"]),
        Problem("placeholders", "Compare <image1> and <image2>.", [good[0].images[0]]),
        Problem("empty", "   ", []),
    ]
    run.stream = ProblemStream(bad + good, seed=0, shuffle=False)
    record = train_step(run, 1)  # B = 2: the two first good problems, after 4 skips
    assert run.skipped_records == {"image_not_found": 1, "image_unreadable": 1,
                                   "placeholder_mismatch": 1, "empty_question": 1}
    assert record["agent/A/parse_rate"] >= 0.0
    assert run.stream.pos.index == 6


def test_dataset_shorter_than_the_run_cycles_epochs(tmp_path):
    run = tmp_path / "run"
    assert main(["train", *FAST, "data.num_problems=3", "run.steps=4",
                 f"run.output_dir={run}"]) == 0  # 4 steps x 2 prompts = 8 > 3 problems
    state = json.loads((run / "checkpoints/step-4/state.json").read_text())
    assert state["stream"]["epoch"] == 2


def test_repeated_non_finite_losses_stop_the_run(tmp_path, monkeypatch, capsys):
    """Fault injection: every loss is NaN. Each update is skipped; after run.max_bad_steps
    such steps in a row the run stops with a message (and a checkpoint)."""
    import vlcohort.training.update as agent_mod

    real = agent_mod.grpo.policy_loss

    def nan_loss(*args, **kwargs):
        loss, stats = real(*args, **kwargs)
        return loss * float("nan"), stats

    monkeypatch.setattr(agent_mod.grpo, "policy_loss", nan_loss)
    run = tmp_path / "run"
    rc = main(["train", *FAST, "run.steps=30", "run.max_bad_steps=2", f"run.output_dir={run}"])
    assert rc == 1
    assert "steps in a row with a NaN / inf loss" in capsys.readouterr().err
    recs = read_metrics(run / "metrics.jsonl")
    assert sum(r.get("agent/A/skipped_updates", 0) for r in recs) == 2
    assert len(recs) < 30


def test_ctrl_c_saves_a_checkpoint(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "vlcohort", "train", *FAST, "run.steps=50",
                             f"run.output_dir={run}"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while proc.poll() is None and time.time() < deadline:
        if (run / "metrics.jsonl").is_file() and (run / "metrics.jsonl").read_text().count("\n") >= 1:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    assert "vlcohort train --resume" in err
    folder = run / "checkpoints" / (run / "checkpoints/latest").read_text().strip()
    steps_logged = len(read_metrics(run / "metrics.jsonl"))
    assert json.loads((folder / "state.json").read_text())["step"] == steps_logged


def test_decouple_gives_each_agent_its_own_shard(tmp_path, monkeypatch):
    import vlcohort.recipes.step as train_mod
    from vlcohort.recipes.cohort import setup
    from vlcohort.recipes.step import train_step

    cfg = load_config(None, [*FAST, "data.decouple=true", "data.num_problems=8",
                             "agents=[{name: A, path: 'tiny:qwen2_5_vl'}, {name: B, path: 'tiny:internvl3_5'}]",
                             "rollout.rollouts_per_prompt=8", "run.steps=2",
                             f"run.output_dir={tmp_path / 'run'}"])
    run = setup(cfg)
    shard_ids = [{p.id for p in shard.problems} for shard in run.shards]
    assert not shard_ids[0] & shard_ids[1] and len(shard_ids[0] | shard_ids[1]) == 8

    trained_on: dict[str, set] = {"A": set(), "B": set()}
    real_update = train_mod.update_agent

    def spy(agent, rendered, rollouts, advantages, *args, **kwargs):
        trained_on[agent.name] |= {r.problem_id for r in rendered}
        assert len(rollouts.completions) == len(rendered) * 8 == advantages.shape[0]
        return real_update(agent, rendered, rollouts, advantages, *args, **kwargs)

    monkeypatch.setattr(train_mod, "update_agent", spy)
    seen_by_engine = []
    real_generate = run.agents[0].engine.generate

    def generate_spy(rendered, *args, **kwargs):
        seen_by_engine.append({r.problem_id for r in rendered})
        return real_generate(rendered, *args, **kwargs)

    monkeypatch.setattr(run.agents[0].engine, "generate", generate_spy)
    for step in (1, 2, 3, 4):
        train_step(run, step)
    assert all(len(s) == 4 for s in seen_by_engine)  # A answers all A x B prompts
    assert seen_by_engine[0] & shard_ids[1]  # including B's
    assert trained_on["A"] <= shard_ids[0] and trained_on["B"] <= shard_ids[1]
    assert trained_on["A"] or trained_on["B"], "no update happened: weak test"


def test_rollouts_select_prompts_keeps_rows_in_order():
    import torch as _t

    from vlcohort.rollout.base import Rollouts

    ro = Rollouts(prompts=None, completions=[[i] for i in range(6)], texts=[str(i) for i in range(6)],
                  logprobs=_t.arange(6.0).unsqueeze(1), finished=[True] * 6, group_size=2)
    sub = ro.select_prompts([2, 0])
    assert sub.completions == [[4], [5], [0], [1]] and sub.texts == ["4", "5", "0", "1"]
    assert sub.logprobs.squeeze(1).tolist() == [4.0, 5.0, 0.0, 1.0] and sub.group_size == 2


def test_resume_drops_a_metrics_line_cut_mid_write(tmp_path):
    """A run killed while writing metrics.jsonl leaves a cut last line; resume drops it
    (and the steps after the checkpoint) instead of failing on it."""
    run = tmp_path / "run"
    assert main(["train", *FAST, "run.steps=2", "checkpoint.every=1",
                 f"run.output_dir={run}"]) == 0
    metrics = run / "metrics.jsonl"
    metrics.write_text(metrics.read_text() + '{"step": 3, "agent/A/rew')  # the cut line
    assert main(["train", "--resume", str(run), "run.steps=3"]) == 0
    assert [r["step"] for r in read_metrics(metrics)] == [1, 2, 3]


def test_kl_in_reward_and_mini_batches_run_end_to_end_and_log_documented_metrics(tmp_path):
    """Issue 14 items 2, 12, 14 through the trainer: the KL charged to the reward (step 4
    has no task signal, every reward 0, and still trains on the KL penalty's), two
    mini-batches per step; every logged key is documented and the update's own metrics
    (policy entropy, clip fractions, ppo_kl) are there."""
    from vlcohort.monitoring.metrics import documented

    run = tmp_path / "run"
    assert main(["train", *FAST, "grpo.kl_coef=0.1", "grpo.kl_in_reward=true", "run.steps=4",
                 "grpo.mini_batch_seqs=8", "grpo.micro_batch_seqs=4",
                 f"run.output_dir={run}"]) == 0
    recs = read_metrics(run / "metrics.jsonl")
    assert not {k for r in recs for k in r if not documented(k)}
    updated = [r for r in recs if "agent/A/loss" in r]
    assert len(updated) >= 2, "fewer than two updates ran: weak test"
    for key in ("policy_entropy", "clip_frac_low", "clip_frac_high", "ppo_kl", "kl"):
        assert all(f"agent/A/{key}" in r for r in updated), key
    assert all(r["agent/A/policy_entropy"] > 0 for r in updated)
    assert any(r["agent/A/ppo_kl"] != 0 for r in updated)  # the second mini-batch moved
    kl_only = [r for r in updated if r["agent/A/reward/std"] == 0]
    assert kl_only and all(r["agent/A/kl"] != 0 for r in kl_only)
