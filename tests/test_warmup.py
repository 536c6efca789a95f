"""Warm-up: the supervised and uniform terms on a tiny real model, and reuse by fingerprint."""

from __future__ import annotations

import math

import pytest
import torch

from vlcohort.config import load_config
from vlcohort.data.synthetic import make_dataset
from vlcohort.training.agent import build_agent
from vlcohort.training.logprobs import completion_logprobs
from vlcohort.training.warmup import (
    answer_ids,
    fingerprint,
    reusable,
    save_fingerprint,
    supervised_loss,
    uniform_loss,
    warm_up,
)

TEMPLATE = "<answer>{}</answer>"


@pytest.fixture(autouse=True)
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    import os

    os.environ["VLCOHORT_CACHE"] = str(tmp_path_factory.getbasetemp() / "vlcohort-cache")
    cfg = load_config(None, ["method=ttrl", "agents=[{name: A, path: 'tiny:qwen2_5_vl'}]"])
    return build_agent(cfg.agents[0])


def test_answer_completion_ends_with_the_stop_token(agent):
    ids = answer_ids(agent.adapter, "C", TEMPLATE)
    assert ids[-1] == agent.adapter.stop_token_ids()[0]
    assert agent.adapter.tokenizer.decode(ids[:-1]) == "<answer>C</answer>"


def test_uniform_loss_equals_its_definition(agent):
    adapter, model = agent.adapter, agent.model
    problems = make_dataset(("fg_colour",), n=3, seed=1, shuffle_options=False)
    rendered = [adapter.render(p) for p in problems]
    with torch.no_grad():
        loss, mass = uniform_loss(adapter, model, rendered, problems, TEMPLATE)
        # direct: sequence log-probs of the 4 answers, one problem at a time
        total, masses = 0.0, []
        for p, r in zip(problems, rendered):
            seq = []
            for k in "ABCD":
                c = answer_ids(adapter, k, TEMPLATE)
                b = adapter.encode_training(adapter.encode_prompts([r]), [c])
                seq.append(float(completion_logprobs(adapter, model, b).sum()))
            lse = math.log(sum(math.exp(s) for s in seq))
            spread = -sum(s - lse for s in seq) / 4 - math.log(4)
            total += -lse + spread
            masses.append(math.exp(lse))
    assert float(loss) == pytest.approx(total / 3, rel=1e-4)
    assert mass == pytest.approx(sum(masses) / 3, rel=1e-4)


def test_uniform_term_is_zero_plus_format_when_uniform():
    # spread term: -mean(log softmax) - log K is 0 exactly for equal candidates
    seq = torch.full((1, 4), -3.0)
    spread = -torch.log_softmax(seq, 1).mean(1) - math.log(4)
    assert float(spread) == pytest.approx(0.0, abs=1e-6)


def test_warm_up_learns_and_saves(tmp_path):
    cfg = load_config(None, [
        "method=ttrl", "agents=[{name: A, path: 'tiny:qwen2_5_vl'}]", "data.shuffle_options=false",
        "agents.0.warmup.steps=40", "agents.0.warmup.uniform_steps=5",
        "agents.0.warmup.batch_size=16", "agents.0.warmup.tasks=[fg_colour]",
        "agents.0.warmup.uniform_tasks=[bg_colour]"])
    mc = cfg.agents[0]
    agent = build_agent(mc)
    probe = make_dataset(("fg_colour",), n=16, seed=99, shuffle_options=False)
    rendered = [agent.adapter.render(p, cfg.prompt.system_prompt, cfg.prompt.instruction) for p in probe]
    with torch.no_grad():
        before = float(supervised_loss(agent.adapter, agent.model, rendered, probe, TEMPLATE))
    stats = warm_up(agent, mc, cfg, tmp_path / "A", seed=0, log=lambda *_: None)
    with torch.no_grad():
        after = float(supervised_loss(agent.adapter, agent.model, rendered, probe, TEMPLATE))
    assert after < 0.5 * before  # held-out: the format (and some colour) was learned
    assert "uniform_loss" in stats and 0 < stats["format_mass"] <= 1
    assert (tmp_path / "A" / "model.safetensors").is_file()
    key = fingerprint(mc, cfg, 0)
    assert not reusable(tmp_path / "A", key)
    save_fingerprint(tmp_path / "A", key, stats)
    assert reusable(tmp_path / "A", key)
    mc.warmup.steps = 41
    assert fingerprint(mc, cfg, 0) != key
