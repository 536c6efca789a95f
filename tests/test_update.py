"""The agent update on a tiny real model: micro-batching, LoRA, KL reference, bad input."""

from __future__ import annotations

import copy

import pytest
import torch

from vlcohort.training.agent import build_agent
from vlcohort.training.update import update_agent
from vlcohort.config import load_config
from vlcohort.rollout.base import SamplingParams
from vlcohort.data.synthetic import make_dataset
from vlcohort.training.logprobs import completion_logprobs

BASE = ["method=gt_reward", "agents=[{name: A, path: 'tiny:qwen2_5_vl'}]",
        "rollout.prompts_per_step=2", "rollout.rollouts_per_prompt=4",
        "rollout.max_new_tokens=8", "optim.lr=1e-2", "optim.warmup_ratio=0",
        "optim.schedule=constant", "grpo.max_grad_norm=0"]


@pytest.fixture(autouse=True)
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


def _setup(*overrides):
    cfg = load_config(None, [*BASE, *overrides])
    agent = build_agent(cfg.agents[0], cfg)
    problems = make_dataset(("shape_colour",), n=2, seed=0)
    rendered = [agent.adapter.render(p) for p in problems]
    torch.manual_seed(0)
    rollouts = agent.engine.generate(rendered, 4, SamplingParams(max_new_tokens=8), seed=0)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5, -1.0, 1.0, 0.0, 0.0])  # [N = B x G]
    return cfg, agent, rendered, rollouts, adv


def _params(model):
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("agg", ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"])
def test_micro_batches_give_the_full_batch_step(agg):
    """One optimizer step from 4 micro-batches of 2 == one step from the full batch of 8."""
    results = []
    for micro in (8, 2):
        cfg, agent, rendered, rollouts, adv = _setup(f"grpo.micro_batch_seqs={micro}",
                                                      f"grpo.loss_agg={agg}", "optim.lr=1e-3")
        # AdamW's first step moves every weight by ~lr whatever the gradient's size; use
        # SGD so that the update is proportional to the accumulated gradient itself.
        agent.optimizer = torch.optim.SGD([p for p in agent.model.parameters() if p.requires_grad], lr=1.0)
        before = _params(agent.model)
        update_agent(agent, rendered, rollouts, adv, cfg.grpo, 1.0, length_norm=8)
        after = _params(agent.model)
        results.append({n: after[n] - before[n] for n in before})
    full, micro = results
    moved = [n for n in full if full[n].abs().max() > 0]
    assert moved, "the update changed nothing"
    for n in full:
        assert torch.allclose(full[n], micro[n], atol=1e-6, rtol=1e-4), n


def test_update_moves_logprobs_in_the_advantage_direction():
    cfg, agent, rendered, rollouts, adv = _setup("optim.lr=1e-3")
    from vlcohort.training.update import micro_batches

    def seq_logp():
        (_, tb), = micro_batches(agent, rendered, rollouts, 8)
        with torch.no_grad():
            lp = completion_logprobs(agent.adapter, agent.model, tb)
        return (lp * tb.completion_mask).sum(1)  # [N]

    before = seq_logp()
    stats = update_agent(agent, rendered, rollouts, adv, cfg.grpo, 1.0, length_norm=8)
    delta = seq_logp() - before
    assert stats["grad_norm"] > 0
    assert float((delta * adv).sum()) > 0  # positive-advantage sequences became likelier
    assert 0.99 < stats["is/mean"] < 1.01  # the hf engine samples from the policy itself


def test_kl_reference_is_a_frozen_copy():
    cfg, agent, rendered, rollouts, adv = _setup("grpo.kl_coef=0.1")
    assert agent.ref_model is not None
    ref_before = _params(agent.ref_model) or {n: p.clone() for n, p in agent.ref_model.named_parameters()}
    stats = update_agent(agent, rendered, rollouts, adv, cfg.grpo, 1.0, length_norm=8)
    assert "kl" in stats
    for n, p in agent.ref_model.named_parameters():
        assert not p.requires_grad
    assert all(torch.equal(p, dict(agent.ref_model.named_parameters())[n])
               for n, p in ref_before.items())


def test_lora_trains_adapters_only_and_uses_the_base_as_reference():
    cfg, agent, rendered, rollouts, adv = _setup("agents.0.lora_rank=4", "grpo.kl_coef=0.1")
    assert agent.uses_lora and agent.ref_model is None  # no second copy
    trainable = [n for n, p in agent.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    frozen = {n: p.detach().clone() for n, p in agent.model.named_parameters() if not p.requires_grad}
    stats = update_agent(agent, rendered, rollouts, adv, cfg.grpo, 1.0, length_norm=8)
    assert stats["grad_norm"] > 0 and "kl" in stats
    assert all(torch.equal(p, frozen[n]) for n, p in agent.model.named_parameters() if n in frozen)


def test_gradient_checkpointing_and_bf16_autocast_run():
    cfg, agent, rendered, rollouts, adv = _setup("agents.0.gradient_checkpointing=true",
                                                  "agents.0.autocast_bf16=true")
    stats = update_agent(agent, rendered, rollouts, adv, cfg.grpo, 1.0, length_norm=8)
    assert stats["grad_norm"] > 0 and stats["skipped_updates"] == 0


def test_nan_rollout_logprobs_are_masked_and_counted():
    cfg, agent, rendered, rollouts, adv = _setup()
    rollouts.logprobs[0, 0] = float("nan")
    rollouts.logprobs[1, 0] = float("inf")
    stats = update_agent(agent, rendered, rollouts, adv, cfg.grpo, 1.0, length_norm=8)
    assert stats["is/nonfinite_tokens"] == 2
    assert stats["skipped_updates"] == 0 and stats["grad_norm"] > 0


def test_non_finite_loss_skips_the_update():
    cfg, agent, rendered, rollouts, adv = _setup()
    before = _params(agent.model)
    stats = update_agent(agent, rendered, rollouts, torch.full_like(adv, float("nan")),
                         cfg.grpo, 1.0, length_norm=8)
    assert stats["skipped_updates"] == 1
    assert all(torch.equal(before[n], p) for n, p in _params(agent.model).items())
