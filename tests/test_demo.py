"""The Co-RL effect with two tiny real VLMs, end to end on CPU (the embedded demo, shrunk).

Each agent is warmed up on one skill family (A: colour of the top half, B: colour of the
bottom half); then, from the same checkpoints and the same budget, Co-RL (peer votes,
ring) and self-vote (TTRL) train on the mixed, unlabeled stream. Gold answers reach only
the warm-up of each agent's own family and the held-out metrics, never an RL reward.
Co-RL must teach each agent the family it was not warmed up on; self-vote must not.

This is the slowest test of the suite (about 2 minutes on 2 cores).
"""

from __future__ import annotations

import json

import pytest

from vlcohort.cli import main

STEPS = 100


@pytest.fixture(autouse=True)
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


@pytest.mark.slow
def test_co_rl_teaches_the_unseen_skill_and_self_vote_does_not(tmp_path, capsys):
    run = tmp_path / "demo"
    assert main(["train", f"run.output_dir={run}", f"run.steps={STEPS}",
                 f"eval.every={STEPS}", "log.plot=false"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    co, tt = summary["methods"]["co_rl"], summary["methods"]["ttrl"]
    start = summary["start"]
    print(json.dumps({"start": start, "co_rl": co, "ttrl": tt}, indent=1))
    for agent in ("A", "B"):
        assert start[agent]["own"] >= 0.8, f"{agent}'s warm-up did not teach its own family"
        assert start[agent]["unseen"] <= 0.45, f"{agent} knew the unseen family before RL"
    co_unseen = (co["A"]["unseen"] + co["B"]["unseen"]) / 2
    tt_unseen = (tt["A"]["unseen"] + tt["B"]["unseen"]) / 2
    assert co_unseen - tt_unseen >= 0.25, (co_unseen, tt_unseen)
    for agent in ("A", "B"):
        assert co[agent]["own"] >= 0.7, f"Co-RL made {agent} forget its own family"
