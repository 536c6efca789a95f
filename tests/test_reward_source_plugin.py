"""A new reward source is one module: this file adds one, with per-agent state kept
across steps and checkpoints, and touches no other file of the project.

``tally_vote`` rewards as the agent's own vote does (TTRL's rule, through the shared
``rewards.label_reward``), and keeps per agent a tally: the steps it has started and the
rollouts it has rewarded so far, logged each step. The tally is its
:class:`~vlcohort.training.reward_sources.AgentState`: the checkpoint saves it in the
agent's folder and a resume restores it, so a run stopped after 2 steps and resumed to 4
logs the tallies of a straight 4-step run; a resume that lost it would count from 0
again. Its config check refuses a setting it cannot run with, and its method preset
chooses it.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from tests.helpers.train import FAST
from vlcohort.cli import main
from vlcohort.config import load_config
from vlcohort.monitoring.metrics import METRIC_DOCS, documented, read_metrics
from vlcohort.training import reward_sources
from vlcohort.training.reward_sources import AgentState, RewardSource, register
from vlcohort.training.rewards import label_reward
from vlcohort.typed_yaml import ConfigError

FILE = "tally.json"


class Tally(AgentState):
    """Steps started and rollouts rewarded by one agent's source so far."""

    def __init__(self) -> None:
        self.steps, self.rewarded = 0, 0

    def save(self, folder: Path, layout) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / FILE).write_text(json.dumps({"steps": self.steps, "rewarded": self.rewarded}))

    def load(self, folder: Path, layout) -> None:
        d = json.loads((folder / FILE).read_text())
        self.steps, self.rewarded = d["steps"], d["rewarded"]

    def describe(self, agent: str) -> str:
        return f"tally of {agent}: {self.steps} steps"


class TallyVote(RewardSource):
    name, methods = "tally_vote", ("tally",)
    metrics = {"agent/<a>/tally/steps": "tally_vote: steps the agent's source has started",
               "agent/<a>/tally/rewarded": "tally_vote: rollouts rewarded so far"}

    def check(self, cfg, agents):
        if cfg.reward.format_weight:
            raise ConfigError("reward.format_weight: tally_vote counts votes only; set it 0")

    def new_state(self, agent, cfg):
        return Tally()

    def before_step(self, cohort, step, timing):
        out = {}
        for i, agent in zip(cohort.local, cohort.agents):
            agent.source_state.steps += 1
            out[i] = {"tally/steps": float(agent.source_state.steps)}
        return out

    def round_inputs(self, cohort, step, prompts, plan, round_, timing):
        return {i: agent.source_state for i, agent in zip(cohort.local, cohort.agents)}

    def reward(self, x):
        got = label_reward("self_vote", x)
        tally = x.extra  # what round_inputs made for this agent: its tally
        tally.rewarded += int((got.scored.rewards > 0).sum())
        return replace(got, metrics={**got.metrics, "tally/rewarded": float(tally.rewarded)})


@pytest.fixture
def tally_source(tmp_path_factory, monkeypatch):
    """The source registered for the test, and gone after it, docs included (the
    registry is the process's: other tests must not see a source no doc lists)."""
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))
    register(TallyVote)
    yield reward_sources.SOURCES["tally_vote"]
    del reward_sources.SOURCES["tally_vote"]
    for key in TallyVote.metrics:
        METRIC_DOCS.pop(key)


ARGS = [a for a in FAST if not a.startswith("method=")] + ["method=tally", "checkpoint.every=1"]


def test_a_registered_source_is_a_choice_with_its_check(tally_source):
    cfg = load_config(None, ARGS)
    assert cfg.reward.source == "tally_vote"  # the method preset chooses it
    own = load_config(None, [*ARGS, "method=ttrl", "agents.0.reward_source=tally_vote"])
    assert own.agents[0].reward_source == "tally_vote"  # or one agent's own source
    with pytest.raises(ConfigError, match="tally_vote counts votes only"):
        load_config(None, [*ARGS, "reward.format_weight=0.1"])
    with pytest.raises(ValueError, match="registered twice"):
        class Other(TallyVote):
            pass
        register(Other)


def test_its_state_survives_a_resume(tally_source, tmp_path, capsys):
    straight, parted = tmp_path / "straight", tmp_path / "parted"
    assert main(["train", *ARGS, "run.steps=4", f"run.output_dir={straight}"]) == 0
    assert "# tally of A: 0 steps" in capsys.readouterr().out
    assert main(["train", *ARGS, "run.steps=2", f"run.output_dir={parted}"]) == 0
    assert json.loads((parted / "checkpoints/step-2/A" / FILE).read_text())["steps"] == 2
    assert main(["train", "--resume", str(parted), "run.steps=4"]) == 0
    a, b = read_metrics(straight / "metrics.jsonl"), read_metrics(parted / "metrics.jsonl")
    keys = ("agent/A/tally/steps", "agent/A/tally/rewarded")
    assert [[r[k] for k in keys] for r in a] == [[r[k] for k in keys] for r in b]
    assert [r["agent/A/tally/steps"] for r in b] == [1.0, 2.0, 3.0, 4.0]
    assert b[-1]["agent/A/tally/rewarded"] > 0  # the vote rewarded something: a real tally
    assert all(documented(k) for r in b for k in r)
