"""The agent update on a tiny real model: micro-batching, LoRA, KL reference, bad input."""

from __future__ import annotations

import pytest
import torch

from vlcohort.config import load_config
from vlcohort.data.synthetic import make_dataset
from vlcohort.rollout.base import SamplingParams
from vlcohort.training.agent import build_agent
from vlcohort.training.logprobs import completion_logprobs
from vlcohort.training.update import update_agent

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


def test_is_rejection_drops_a_completion_from_the_update_and_its_normaliser():
    """grpo.is_mode=rejection: a completion whose weights fall outside [is_low, is_high]
    leaves the loss mask and the normaliser; token_mask keeps it in the normaliser."""
    from vlcohort.training.update import optimizer_step, update_batch

    def batch(mode):
        cfg, agent, rendered, rollouts, adv = _setup(f"grpo.is_mode={mode}")
        rollouts.logprobs[0] -= 5.0  # sequence 0: every token's w = e^5 > is_high = 2
        ub = update_batch(agent, rendered, rollouts, adv, cfg.grpo, 1.0,
                          optimizer_step(agent, cfg.grpo), None)
        return cfg, agent, rendered, rollouts, adv, ub

    cfg, agent, rendered, rollouts, adv, ub = batch("rejection")
    n0 = float(ub.comp_mask[0].sum())
    assert n0 > 0 and float(ub.mask[0].sum()) == 0.0  # out of the loss
    assert float(ub.denoms[0]) == float(ub.comp_mask.sum()) - n0  # and of the token count
    assert ub.old is not None and ub.is_weights is not None  # computed once, up front
    stats = update_agent(agent, rendered, rollouts, adv, cfg.grpo, 1.0, length_norm=8)
    assert abs(stats["is/frac_rejected"] - n0 / float(ub.comp_mask.sum())) < 1e-6
    assert stats["grad_norm"] > 0 and stats["is/nonfinite_tokens"] == 0

    *_, ub_tm = batch("token_mask")
    assert float(ub_tm.denoms[0]) == float(ub_tm.comp_mask.sum())  # weight 0, still counted
    assert ub_tm.is_weights is None  # per micro-batch, from each forward, as before


@pytest.mark.parametrize("overrides", [
    ["grpo.policy_loss=gspo", "grpo.clip_low=3e-4", "grpo.clip_high=4e-4"],
    ["grpo.policy_loss=cispo", "grpo.clip_high=4.0"],
    ["grpo.clip_ratio_c=3", "grpo.ppo_epochs=2"],
    ["grpo.is_level=sequence", "grpo.is_batch_norm=true"],
])
def test_policy_loss_variants_and_is_options_train(overrides):
    cfg, agent, rendered, rollouts, adv = _setup(*overrides)
    stats = update_agent(agent, rendered, rollouts, adv, cfg.grpo, 1.0, length_norm=8)
    assert stats["grad_norm"] > 0 and stats["skipped_updates"] == 0


# ------------------------------------------------------------------------- the update loop


def test_resumed_reference_is_the_run_starting_weights(tmp_path):
    """Bug 2: after a resume the KL reference is the run's starting weights (agents.N.path),
    not a copy of the resumed policy. Through the real save / build / restore path; the
    trained policy is the start + 0.01 everywhere. LoRA: the reference is the base model
    with the adapters disabled, whose weights are the path's."""
    from vlcohort.processors import adapter_for
    from vlcohort.processors.tiny import tiny_model_path
    from vlcohort.recipes.driver import restore_agents
    from vlcohort.training.checkpoint import save_checkpoint

    cfg = load_config(None, [*BASE, "grpo.kl_coef=0.1"])
    start = {n: p.detach() for n, p in
             adapter_for(tiny_model_path(cfg.agents[0].path)).load_model().named_parameters()}
    agent = build_agent(cfg.agents[0], cfg)
    with torch.no_grad():
        for p in agent.model.parameters():
            p.add_(0.01)  # "trained"
    folder = save_checkpoint(tmp_path, 2, [agent], [agent.optimizer], [agent.scheduler], {})
    resumed = build_agent(cfg.agents[0], cfg, weights_from=str(folder / "A"))
    restore_agents(folder, [resumed])
    ref = dict(resumed.ref_model.named_parameters())
    policy = dict(resumed.model.named_parameters())
    assert ref.keys() == start.keys()
    assert max(float((ref[n] - start[n]).abs().max()) for n in start) == 0.0
    assert abs(max(float((policy[n] - ref[n]).abs().max()) for n in start) - 0.01) < 1e-6
    assert all(not p.requires_grad for p in ref.values()) and not resumed.ref_model.training

    # LoRA: resume from a checkpoint whose adapters are non-zero; the reference pass (the
    # base with adapters disabled) gives the starting model's log-probs, the policy others
    cfg, agent, rendered, rollouts, adv = _setup("agents.0.lora_rank=4", "grpo.kl_coef=0.1")
    with torch.no_grad():
        for n, p in agent.model.named_parameters():
            if "lora_B" in n:
                p.fill_(0.05)
    folder = save_checkpoint(tmp_path / "lora", 2, [agent], [agent.optimizer], [agent.scheduler], {})
    resumed = build_agent(cfg.agents[0], cfg, weights_from=str(folder / "A"))
    restore_agents(folder, [resumed])
    from vlcohort.training.update import micro_batches, policy_logprobs, reference_logprobs
    mbs = micro_batches(resumed, rendered, rollouts, 8)
    T = rollouts.logprobs.shape[1]
    base = adapter_for(tiny_model_path(cfg.agents[0].path)).load_model().eval()
    with torch.no_grad():
        ref_lp = reference_logprobs(resumed, mbs, T, 1.0)
        pol_lp = policy_logprobs(resumed, mbs, T, 1.0)
        start_lp = completion_logprobs(resumed.adapter, base, mbs[0][1])
    assert torch.equal(ref_lp[:, :start_lp.shape[1]], start_lp)
    assert float((pol_lp - ref_lp).abs().max()) > 1e-3


def _dropout_model(tmp_path, p: float) -> str:
    """A copy of the tiny Qwen2.5-VL whose config has attention dropout ``p`` everywhere."""
    import json
    import shutil

    from vlcohort.processors.tiny import tiny_model_path

    folder = tmp_path / f"dropout-{p}"
    shutil.copytree(tiny_model_path("tiny:qwen2_5_vl"), folder)
    config = json.loads((folder / "config.json").read_text())

    def set_dropout(d):
        for k, v in d.items():
            if isinstance(v, dict):
                set_dropout(v)
            elif k == "attention_dropout":
                d[k] = p
    set_dropout(config)
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


@pytest.mark.parametrize("disable", [True, False])
def test_disable_dropout_makes_the_first_ratio_exactly_one(tmp_path, disable):
    """Item 9: with a checkpoint whose attention dropout is 0.5, the update's train-mode
    forward equals the eval-mode old log-probs exactly when grpo.disable_dropout is on
    (first-epoch ratio 1, ppo_kl 0 with lr 0), and differs when it is off."""
    from vlcohort.training.update import optimizer_step, pad_to, update_batch

    path = _dropout_model(tmp_path, 0.5)
    cfg, agent, rendered, rollouts, adv = _setup(
        f"agents.0.path={path}", "grpo.ppo_epochs=2", f"grpo.disable_dropout={str(disable).lower()}")
    ub = update_batch(agent, rendered, rollouts, adv, cfg.grpo, 1.0,
                      optimizer_step(agent, cfg.grpo), None)  # old: eval mode, no grad
    T = ub.rollout_logp.shape[1]
    agent.model.train()
    logp = torch.cat([pad_to(agent.logprobs(tb, 1.0), T) for _, tb in ub.batches]).detach()
    agent.model.eval()
    m = ub.mask.bool()
    ratio = torch.exp(logp - ub.old)[m]  # the first epoch's ratio
    for group in agent.optimizer.param_groups:
        group["lr"] = 0.0  # the policy stays the old one in every epoch
    stats = update_agent(agent, rendered, rollouts, adv, cfg.grpo, 1.0, length_norm=8)
    if disable:
        assert torch.equal(ratio, torch.ones_like(ratio))
        assert stats["ppo_kl"] == 0.0 and stats["clip_frac"] == 0.0
    else:
        assert float((ratio - 1).abs().max()) > 1e-3
        assert stats["ppo_kl"] != 0.0


def test_mask_truncated_completions_leave_the_loss_and_its_normaliser():
    """Item 10: completions cut at max_new_tokens (finished False) leave the loss mask and
    the token_mean normaliser. Hand check with SGD (lr 1, no clipping): the update equals
    one in which those rows have advantage 0 (no surrogate, KL off) scaled by
    D_all / D_finished, the token counts from the completions' lengths."""
    from vlcohort.training.update import optimizer_step, update_batch

    finished = [True, False, True, False, True, True, True, True]
    lengths = None
    deltas = []
    for mask_truncated in (True, False):
        cfg, agent, rendered, rollouts, adv = _setup(
            f"grpo.mask_truncated_completions={str(mask_truncated).lower()}",
            "grpo.micro_batch_seqs=2")
        rollouts.finished = list(finished)
        lengths = [len(c) for c in rollouts.completions]
        ub = update_batch(agent, rendered, rollouts, adv, cfg.grpo, 1.0,
                          optimizer_step(agent, cfg.grpo), None)
        rows_out = [i for i, f in enumerate(finished) if not f]
        if mask_truncated:
            assert float(ub.mask[rows_out].sum()) == 0.0
            assert float(ub.denoms[0]) == sum(n for n, f in zip(lengths, finished) if f)
        else:
            assert torch.equal(ub.mask, ub.comp_mask) and float(ub.denoms[0]) == sum(lengths)
            adv = adv.clone()
            adv[rows_out] = 0.0
        agent.optimizer = torch.optim.SGD([p for p in agent.model.parameters() if p.requires_grad], lr=1.0)
        before = _params(agent.model)
        update_agent(agent, rendered, rollouts, adv, cfg.grpo, 1.0, length_norm=8)
        after = _params(agent.model)
        deltas.append({n: after[n] - before[n] for n in before})
    masked, zeroed = deltas
    scale = sum(lengths) / sum(n for n, f in zip(lengths, finished) if f)
    assert any(float(d.abs().max()) > 0 for d in masked.values())
    for n in masked:
        assert torch.allclose(masked[n], zeroed[n] * scale, atol=1e-6, rtol=1e-4), n


def _hand_step(agent, rendered, rollouts, adv, prompts, old, T, denom, opt):
    """One SGD step written out: the policy loss of ``prompts``' rows (G = 4 each) with the
    given old log-probs and normaliser, backward, step. Returns the rows' ratio mean."""
    from vlcohort.training import grpo
    from vlcohort.training.update import micro_batches, pad_to

    rows = [b * 4 + g for b in prompts for g in range(4)]
    sub = rollouts.select_prompts(prompts)
    (_, tb), = micro_batches(agent, [rendered[b] for b in prompts], sub, len(rows))
    agent.model.train()
    logp = pad_to(completion_logprobs(agent.adapter, agent.model, tb), T)  # [n, T]
    mask = pad_to(tb.completion_mask.float(), T)  # [n, T]
    loss, st = grpo.policy_loss(logp, old[rows], adv[rows], mask, denom=denom)
    opt.zero_grad()
    loss.backward()
    opt.step()
    agent.model.eval()
    return st["ratio_mean"]


def test_mini_batches_take_one_step_each_with_their_own_normaliser(monkeypatch):
    """Item 12: mini_batch_seqs = N / 2 at ppo_epochs = 1 takes two optimizer steps, each
    normalised by its own mini-batch's tokens; the second sees the policy moved by the
    first (ratio != 1, clipping active). Checked against the two SGD steps written out by
    hand (old log-probs from before the first step, normalisers from the completions'
    lengths). mini_batch_seqs = 0: one full-batch step, on-policy old, as before."""
    import vlcohort.training.update as upd
    from vlcohort.training.update import micro_batches, optimizer_step, update_batch

    over = ["grpo.is_mode='off'", "grpo.micro_batch_seqs=2"]
    lr = 0.5
    for mini in (4, 0):
        cfg, agent, rendered, rollouts, adv = _setup(*over, f"grpo.mini_batch_seqs={mini}")
        lengths = [len(c) for c in rollouts.completions]
        ub = update_batch(agent, rendered, rollouts, adv, cfg.grpo, 1.0,
                          optimizer_step(agent, cfg.grpo), None)
        if mini:
            assert ub.mini_batches == [[0, 1], [2, 3]] and ub.old is not None
            assert [float(d) for d in ub.denoms] == [sum(lengths[:4]), sum(lengths[4:])]
        else:
            assert ub.mini_batches == [[0, 1, 2, 3]] and ub.old is None  # on-policy
            assert [float(d) for d in ub.denoms] == [sum(lengths)]
        agent.optimizer = torch.optim.SGD(
            [p for p in agent.model.parameters() if p.requires_grad], lr=lr)
        steps, ratios = [], []
        real_step, real_loss = agent.optimizer.step, upd.grpo.policy_loss

        def counted_step(*a, **k):
            steps.append(1)
            return real_step(*a, **k)

        def recorded_loss(*a, **k):
            loss, st = real_loss(*a, **k)
            ratios.append(st["ratio_mean"])
            return loss, st
        agent.optimizer.step = counted_step
        monkeypatch.setattr(upd.grpo, "policy_loss", recorded_loss)
        stats = update_agent(agent, rendered, rollouts, adv, cfg.grpo, 1.0, length_norm=8)
        monkeypatch.setattr(upd.grpo, "policy_loss", real_loss)
        got = _params(agent.model)

        # by hand, on a fresh copy of the same start
        _, hand, rend_h, ro_h, adv_h = _setup(*over)
        T = ro_h.logprobs.shape[1]
        (_, tb_all), = micro_batches(hand, rend_h, ro_h, 8)
        with torch.no_grad():
            old = upd.pad_to(completion_logprobs(hand.adapter, hand.model, tb_all), T)  # [8, T]
        sgd = torch.optim.SGD([p for p in hand.model.parameters() if p.requires_grad], lr=lr)
        if mini:
            r1 = _hand_step(hand, rend_h, ro_h, adv_h, [0], old, T, sum(lengths[:4]), sgd)
            r2 = _hand_step(hand, rend_h, ro_h, adv_h, [1], old, T, sum(lengths[4:]), sgd)
            assert len(steps) == 2 and stats["skipped_updates"] == 0
            assert ratios[:2] == [1.0, 1.0] and all(abs(r - 1) > 1e-3 for r in ratios[2:])
            assert r1 == 1.0 and abs(r2 - 1) > 1e-3
            assert stats["clip_frac"] > 0
            assert abs(stats["clip_frac"] - stats["clip_frac_low"] - stats["clip_frac_high"]) < 1e-9
            assert stats["ppo_kl"] != 0.0
        else:
            _hand_step(hand, rend_h, ro_h, adv_h, [0, 1], old, T, sum(lengths), sgd)
            assert len(steps) == 1 and ratios == [1.0] * 4 and stats["ppo_kl"] == 0.0
        want = _params(hand.model)
        for n in want:
            assert torch.allclose(got[n], want[n], atol=1e-6, rtol=1e-4), (mini, n)


def _perturb(model, scale=0.02):
    """Move the policy away from its reference, the same way every call."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(scale * torch.randn(p.shape, generator=g))


def test_kl_in_reward_charges_the_summed_k1_to_the_reward_before_the_advantages():
    """Item 2: grpo.kl_in_reward: reward_i - kl_coef x sum over completion i's tokens of
    (old - ref), with old and ref computed here from the policy and the reference model;
    the advantages are the group normalisation of those rewards (an all-equal group of
    task rewards gets a signal from the KL alone); the update has no KL loss term (it
    equals a kl_coef = 0 update from the same old log-probs)."""
    from vlcohort.recipes.step import Selection, kl_penalised
    from vlcohort.training import grpo
    from vlcohort.training.rewards import Reward, Scored
    from vlcohort.training.update import OldLogprobs, kl_reward, micro_batches

    coef = 0.5
    cfg, agent, rendered, rollouts, adv = _setup(f"grpo.kl_coef={coef}", "grpo.kl_in_reward=true")
    _perturb(agent.model)
    lengths = [len(c) for c in rollouts.completions]
    (_, tb), = micro_batches(agent, rendered, rollouts, 8)
    with torch.no_grad():
        old = completion_logprobs(agent.adapter, agent.model, tb)  # [8, T]
        ref = completion_logprobs(agent.adapter, agent.ref_model, tb)  # [8, T]
    want = torch.tensor([coef * float((old[i, :n] - ref[i, :n]).sum()) for i, n in enumerate(lengths)])
    kr = kl_reward(agent, rendered, rollouts, cfg.grpo, 1.0)
    torch.testing.assert_close(kr.penalty, want, atol=1e-5, rtol=1e-5)
    assert float(want.abs().min()) > 0
    k1_mean = sum(float((old[i, :n] - ref[i, :n]).sum()) for i, n in enumerate(lengths)) / sum(lengths)
    assert abs(kr.kl - k1_mean) < 1e-5

    task = torch.tensor([[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])  # [P, G]
    sel = Selection(prompts=(0, 1), rollouts=rollouts, rendered=tuple(rendered))
    rewards, reward = kl_penalised(agent, sel, Reward(labels=["A", "A"], scored=Scored(
        task, torch.ones(2, dtype=torch.bool), task.bool())), cfg)
    torch.testing.assert_close(rewards, task - want.reshape(2, 4), atol=1e-5, rtol=1e-5)
    assert torch.equal(reward.scored.rewards, task)  # the logged task reward is untouched
    assert reward.metrics["kl"] == kr.kl
    advs = grpo.group_advantages(rewards)
    assert bool((advs[1] != 0).any())  # all-correct group: a signal from the KL alone

    cached = reward.old
    torch.testing.assert_close(cached.logprobs[:, :old.shape[1]], old)
    stats = update_agent(agent, rendered, rollouts, adv, cfg.grpo, 1.0, length_norm=8, old=cached)
    assert "kl" not in stats  # no KL term in the loss
    cfg0, plain, rend0, ro0, adv0 = _setup("grpo.kl_coef=0")
    _perturb(plain.model)
    update_agent(plain, rend0, ro0, adv0, cfg0.grpo, 1.0, length_norm=8,
                 old=OldLogprobs(cached.logprobs))
    want_params, got_params = _params(plain.model), _params(agent.model)
    assert all(torch.equal(want_params[n], got_params[n]) for n in want_params)


def _step_record(agent, rendered, rollouts, advantages):
    """A one-agent Rewarded for ``recipes.step.update`` (both prompts trained)."""
    from vlcohort.recipes.step import Rewarded, Selection
    from vlcohort.training.rewards import Reward, Scored

    zeros = torch.zeros(2, 4)
    return Rewarded(selection=Selection(prompts=(0, 1), rollouts=rollouts, rendered=tuple(rendered)),
                    advantages=advantages,
                    reward=Reward(labels=["A", "A"], scored=Scored(
                        zeros, torch.ones(2, dtype=torch.bool), zeros.bool())))


@pytest.mark.parametrize("kl_coef", [0.5, 0.0])
def test_kl_term_alone_still_takes_an_update_step(kl_coef):
    """Item 15: no prompt has a non-zero advantage, but kl_coef > 0: the step still takes
    an update with the KL term alone (the policy, moved away from its reference, moves);
    with kl_coef = 0 nothing is trained, as before."""
    from types import SimpleNamespace

    from vlcohort.recipes.step import Round, update
    from vlcohort.training.distributed import Layout, step_plan

    cfg, agent, rendered, rollouts, _ = _setup(f"grpo.kl_coef={kl_coef}")
    _perturb(agent.model)
    layout = Layout(n_agents=1)
    a = _step_record(agent, rendered, rollouts, torch.zeros(2, 4))
    run = SimpleNamespace(cfg=cfg, local=[0], agents=[agent], layout=layout)
    before = _params(agent.model)
    updated, _ = update(run, Round(problems=(), plan=step_plan(layout, 2, False), generated=(),
                                   answered=(), rewarded={0: a}))
    after = _params(agent.model)
    assert not updated[0].has_signal
    if kl_coef:
        assert "loss" in updated[0].metrics and updated[0].metrics["kl"] > 0 and updated[0].metrics["grad_norm"] > 0
        assert any(not torch.equal(before[n], after[n]) for n in before)
    else:
        assert "loss" not in updated[0].metrics
        assert all(torch.equal(before[n], after[n]) for n in before)


def test_logged_loss_leaves_out_a_skipped_epoch(monkeypatch):
    """Item 15: ppo_epochs = 2, four micro-batches each; the second epoch's second
    micro-batch has a NaN loss, so that epoch's step is skipped. The logged loss is the
    first epoch's (the sum of its four micro-batch losses), not the mean of it and the
    skipped epoch's first micro-batch over two epochs; grad_norm is the first step's."""
    import vlcohort.training.update as upd

    cfg, agent, rendered, rollouts, adv = _setup("grpo.ppo_epochs=2", "grpo.micro_batch_seqs=2")
    real = upd.grpo.policy_loss
    losses = []

    def nan_on_sixth(*args, **kwargs):
        loss, st = real(*args, **kwargs)
        losses.append(float(loss))
        return (loss * float("nan") if len(losses) == 6 else loss), st

    monkeypatch.setattr(upd.grpo, "policy_loss", nan_on_sixth)
    norms = []
    real_clip = torch.nn.utils.clip_grad_norm_
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_",
                        lambda *a, **k: norms.append(float(real_clip(*a, **k))) or norms[-1])
    adv = adv.abs()  # advantages of one sign: the first epoch's loss is clearly non-zero
    stats = upd.update_agent(agent, rendered, rollouts, adv, cfg.grpo, 1.0, length_norm=8)
    assert len(losses) == 6 and stats["skipped_updates"] == 1
    assert abs(sum(losses[:4])) > 0.1
    assert stats["loss"] == pytest.approx(sum(losses[:4]), abs=1e-9)
    assert len(norms) == 1 and stats["grad_norm"] == pytest.approx(norms[0])


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_policy_entropy_is_the_first_forward_token_mean_entropy(temperature):
    """Item 14: policy_entropy = the mean over completion tokens of H(softmax(logits / T))
    of the policy as it sampled (first epoch, on-policy), computed here from the model's
    logits; clip fractions and ppo_kl are logged (0 on-policy with one step)."""
    from vlcohort.training.update import micro_batches

    cfg, agent, rendered, rollouts, adv = _setup()
    (_, tb), = micro_batches(agent, rendered, rollouts, 8)
    with torch.no_grad():
        hidden = agent.adapter.decoder_hidden_states(agent.model, tb.inputs)  # [N, L, H]
        P, T = tb.prompt_len, tb.completion_ids.shape[1]
        logits = agent.adapter.lm_head(agent.model)(hidden[:, P - 1: P + T - 1]).double()
    suppressed = agent.adapter.suppressed_token_ids()
    logits[..., suppressed] = float("-inf")
    p = torch.softmax(logits / temperature, dim=-1)  # [N, T, V]
    h = -(p * torch.where(p > 0, p.log(), torch.zeros_like(p))).sum(-1)  # [N, T]
    m = tb.completion_mask.double()
    want = float((h * m).sum() / m.sum())
    stats = update_agent(agent, rendered, rollouts, adv, cfg.grpo, temperature, length_norm=8)
    assert stats["policy_entropy"] == pytest.approx(want, rel=1e-5)
    assert stats["ppo_kl"] == 0.0 and stats["clip_frac_low"] == 0.0 and stats["clip_frac_high"] == 0.0
    from vlcohort.monitoring.metrics import documented
    for key in ("policy_entropy", "clip_frac_low", "clip_frac_high", "ppo_kl"):
        assert documented(f"agent/A/{key}"), key


def test_is_batch_norm_normalises_over_the_tokens_the_loss_keeps():
    """``grpo.is_batch_norm`` makes the mean applied IS weight 1 over the loss's tokens:
    with ``mask_truncated_completions`` a truncated completion's tokens leave the loss, so
    they must not enter the mean (they did, and every gradient was rescaled by it)."""
    from vlcohort.training.update import optimizer_step, update_batch

    finished = [True, False, True, False, True, True, True, True]
    cfg, agent, rendered, rollouts, adv = _setup(
        "grpo.mask_truncated_completions=true", "grpo.is_batch_norm=true", "grpo.is_cap=100")
    rollouts.finished = list(finished)
    for i, f in enumerate(finished):  # truncated rows: rollout log-probs 1 nat lower, weight ~e
        if not f:
            rollouts.logprobs[i, :len(rollouts.completions[i])] -= 1.0
    ub = update_batch(agent, rendered, rollouts, adv, cfg.grpo, 1.0, optimizer_step(agent, cfg.grpo), None)
    w, m = ub.is_weights.weights, ub.mask  # [N, T]
    assert float(m.sum()) > 0 and float(m[[1, 3]].sum()) == 0.0
    assert float((w * m).sum() / m.sum()) == pytest.approx(1.0, rel=1e-5)
