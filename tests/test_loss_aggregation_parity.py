"""``grpo.loss_agg=bnpo`` and ``dapo`` against TRL's published formulas, re-derived by hand.

TRL's ``GRPOTrainer._compute_loss`` (checked in TRL v0.19.0 through v1.9.0; the Co-RL
launchers pinned a fork of TRL with transformers 4.57):

- ``bnpo``: each micro-batch (``per_device_train_batch_size`` sequences on one rank) gives
  sum(per-token loss x mask) / clamp(sum(mask), min=1), divided by
  ``gradient_accumulation_steps`` (TRL's own division from v0.24, the transformers
  Trainer's before); DDP averages the ranks' gradients. The step's loss is therefore the
  mean over the GA x ranks micro-batches of each micro-batch's token mean.
- ``dapo``: sum(per-token loss x mask) / (num_items_in_batch / num_processes), with
  num_items_in_batch the tokens of the whole step over all ranks: after DDP's average,
  the global token mean, our ``token_mean``.

The expected numbers below are worked out by hand in the comments, not by running TRL.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from vlcohort.training.grpo import AGGREGATIONS, aggregate, micro_batch_denominators, policy_loss

# --------------------------------------------------------------------------------------
# a fixed 8-sequence example, 4 micro-batches of 2 sequences (TRL: per-device batch 2,
# gradient_accumulation_steps 4, one rank)
# --------------------------------------------------------------------------------------

LENGTHS = [3, 1, 2, 2, 4, 1, 1, 2]  # completion tokens of each sequence
VALUES = [1.0, 2.0, 3.0, -1.0, 0.5, 4.0, -2.0, 3.0]  # the per-token loss of each sequence's tokens
T = 4
SPLIT = [slice(0, 2), slice(2, 4), slice(4, 6), slice(6, 8)]
# sequence sums 3, 2, 6, -2, 2, 4, -2, 6; per micro-batch: sums 5, 4, 6, 4 over 4, 4, 5, 3 tokens
# bnpo  = (5/4 + 4/4 + 6/5 + 4/3) / 4 = (1.25 + 1 + 1.2 + 1.333333) / 4 = 1.1958333
# dapo = token_mean = (5 + 4 + 6 + 4) / 16 = 1.1875
BNPO = (5 / 4 + 4 / 4 + 6 / 5 + 4 / 3) / 4
TOKEN_MEAN = 19 / 16
# d loss / d (a token's loss): bnpo 1 / (K x its micro-batch's tokens) = 1/16, 1/16, 1/20, 1/12;
# token_mean 1/16 for every token
BNPO_WEIGHT = [1 / 16, 1 / 16, 1 / 20, 1 / 12]


def _example(dtype=torch.float64):
    mask = torch.zeros(8, T, dtype=torch.bool)
    x = torch.full((8, T), float("nan"), dtype=dtype)  # padding NaN must not leak
    for i, (n, v) in enumerate(zip(LENGTHS, VALUES)):
        mask[i, :n] = True
        x[i, :n] = v
    return x, mask


def _step_loss(x, mask, mode, split=SPLIT):
    """Our update's loss for one optimizer step: each micro-batch's ``aggregate`` with its
    ``micro_batch_denominators`` entry, summed (the gradients accumulate)."""
    denoms = micro_batch_denominators([mask[s] for s in split], mode)
    return sum(aggregate(x[s], mask[s], mode, denom=d) for s, d in zip(split, denoms))


def _trl_bnpo(x, mask, split, ga):
    """TRL's bnpo written out: per micro-batch (x m).sum() / m.sum().clamp(min=1) / GA."""
    xs = torch.where(mask, x, torch.zeros_like(x))
    m = mask.to(x.dtype)
    return sum((xs[s] * m[s]).sum() / m[s].sum().clamp(min=1.0) / ga for s in split)


def _weights(loss_fn, dtype=torch.float64):
    """d step loss / d each token's loss: the per-token weight the aggregation gives."""
    x, mask = _example(dtype)
    leaf = torch.where(mask, x, torch.zeros_like(x)).requires_grad_(True)
    loss = loss_fn(leaf, mask)
    loss.backward()
    return loss.detach(), leaf.grad


def test_bnpo_and_dapo_are_registered_and_token_mean_still_works():
    assert AGGREGATIONS["dapo"] is AGGREGATIONS["token_mean"]
    assert AGGREGATIONS["bnpo"].per_micro_batch
    assert not any(AGGREGATIONS[k].per_micro_batch for k in AGGREGATIONS if k != "bnpo")
    assert "bnpo" in AGGREGATIONS["bnpo"].reference


def test_bnpo_on_the_fixed_example_equals_trl_by_hand():
    x, mask = _example()
    assert micro_batch_denominators([mask[s] for s in SPLIT], "bnpo").tolist() == [16, 16, 20, 12]
    assert abs(float(_step_loss(x, mask, "bnpo")) - BNPO) < 1e-12
    assert abs(float(_trl_bnpo(x, mask, SPLIT, ga=4)) - BNPO) < 1e-12
    loss, w = _weights(lambda leaf, m: _step_loss(leaf, m, "bnpo"))
    for s, expected in zip(SPLIT, BNPO_WEIGHT):
        assert torch.allclose(w[s][mask[s]], torch.tensor(expected, dtype=w.dtype))
    assert float(w[~mask].abs().max()) == 0.0
    _, trl_w = _weights(lambda leaf, m: _trl_bnpo(leaf, m, SPLIT, ga=4))
    assert torch.allclose(w, trl_w, atol=1e-15, rtol=0)


@pytest.mark.parametrize("mode", ["token_mean", "dapo"])
def test_token_mean_and_dapo_are_the_global_token_mean(mode):
    x, mask = _example()
    assert micro_batch_denominators([mask[s] for s in SPLIT], mode).tolist() == [16] * 4
    assert abs(float(_step_loss(x, mask, mode)) - TOKEN_MEAN) < 1e-12
    assert abs(float(aggregate(x, mask, mode)) - TOKEN_MEAN) < 1e-12  # the full batch at once
    _, w = _weights(lambda leaf, m: _step_loss(leaf, m, mode))
    assert torch.allclose(w[mask], torch.tensor(1 / 16, dtype=w.dtype))
    # and not bnpo's: the example's micro-batches hold unequal token counts
    assert abs(BNPO - TOKEN_MEAN) > 5e-3


def test_bnpo_across_ranks_is_the_mean_over_all_micro_batches():
    """2 ranks x GA 2 x per-device 2: rank 0 takes micro-batches 0-1, rank 1 takes 2-3.
    Each rank normalises by its own K = 2; DDP's gradient average over the 2 ranks gives
    1/2 (1/2 (5/4 + 4/4)) + 1/2 (1/2 (6/5 + 4/3)) = the one-rank GA 4 value."""
    x, mask = _example()
    leaf = torch.where(mask, x, torch.zeros_like(x)).requires_grad_(True)
    ranks = [_step_loss(leaf, mask, "bnpo", SPLIT[:2]), _step_loss(leaf, mask, "bnpo", SPLIT[2:])]
    averaged = (ranks[0] + ranks[1]) / 2  # what DDP's average of the two ranks' gradients follows
    assert abs(float(averaged.detach()) - BNPO) < 1e-12
    averaged.backward()
    for s, expected in zip(SPLIT, BNPO_WEIGHT):
        assert torch.allclose(leaf.grad[s][mask[s]], torch.tensor(expected, dtype=leaf.dtype))


def test_bnpo_empty_micro_batch_counts_in_k_as_trl():
    """TRL clamps an empty micro-batch's token count to 1: its loss is 0 and it still
    counts in GA, so the others keep weight 1 / (4 n_k), not 1 / (3 n_k)."""
    x, mask = _example()
    mask[6:8] = False  # micro-batch 3 empty (e.g. every token rejected)
    # (5/4 + 4/4 + 6/5 + 0) / 4 = 0.8625
    assert abs(float(_step_loss(x, mask, "bnpo")) - 0.8625) < 1e-12
    assert abs(float(_trl_bnpo(x, mask, SPLIT, ga=4)) - 0.8625) < 1e-12
    assert micro_batch_denominators([mask[s] for s in SPLIT], "bnpo").tolist() == [16, 16, 20, 4]
    # token_mean: (5 + 4 + 6) / 13
    assert abs(float(_step_loss(x, mask, "token_mean")) - 15 / 13) < 1e-12


def test_bnpo_is_token_mean_for_one_micro_batch_or_equal_counts():
    x, mask = _example()
    whole = [slice(0, 8)]
    assert abs(float(_step_loss(x, mask, "bnpo", whole)) - TOKEN_MEAN) < 1e-12
    assert abs(float(aggregate(x, mask, "bnpo")) - TOKEN_MEAN) < 1e-12
    # micro-batches {0, 1}, {2, 3}, {4}, {5, 6, 7} of 4 tokens each: 3+1, 2+2, 4, 1+1+2
    equal = [torch.tensor([0, 1]), torch.tensor([2, 3]), torch.tensor([4]), torch.tensor([5, 6, 7])]
    assert abs(float(_step_loss(x, mask, "bnpo", equal)) - TOKEN_MEAN) < 1e-12


def test_bnpo_through_policy_loss_gives_trls_gradient():
    """The real loss path: ppo at ratio 1 (old = logp) has per-token loss -A, so with
    A_i = -VALUES[i] the per-token loss is VALUES[i] and d loss / d logp_t = -A_i x weight_t."""
    _, mask = _example()
    adv = -torch.tensor(VALUES, dtype=torch.float64)  # [8]
    logp = (-torch.rand(8, T, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
            ).requires_grad_(True)
    denoms = micro_batch_denominators([mask[s] for s in SPLIT], "bnpo")
    total = 0.0
    for s, d in zip(SPLIT, denoms):
        loss, st = policy_loss(logp[s], logp[s].detach(), adv[s], mask[s], agg="bnpo", denom=d)
        assert abs(st["pg_loss"] - float(loss.detach())) < 1e-12
        loss.backward()
        total += float(loss.detach())
    assert abs(total - BNPO) < 1e-12
    for i, s in enumerate(SPLIT):
        for row in range(s.start, s.stop):
            expected = -float(adv[row]) * BNPO_WEIGHT[i]
            assert torch.allclose(logp.grad[row][mask[row]],
                                  torch.tensor(expected, dtype=torch.float64))
    assert float(logp.grad[~mask].abs().max()) == 0.0


def test_per_token_weights_bnpo_vs_token_mean_on_eight_completions():
    """8 completions of 60-200 tokens in 4 micro-batches of 2 (126, 325, 250, 300 tokens,
    N = 1001): a bnpo token weighs N / (K n_k) = 1.986, 0.770, 1.001, 0.834 times its
    token_mean weight (1 / N): up to 2.6x apart between micro-batches."""
    lengths = [60, 66, 200, 125, 100, 150, 180, 120]
    mask = torch.zeros(8, 200, dtype=torch.bool)
    for i, n in enumerate(lengths):
        mask[i, :n] = True
    leaf = torch.zeros(8, 200, dtype=torch.float64, requires_grad=True)
    _step_loss(leaf, mask, "bnpo").backward()
    bnpo_w = leaf.grad.clone()
    leaf.grad = None
    _step_loss(leaf, mask, "token_mean").backward()
    ratio = [float((bnpo_w[s] / leaf.grad[s])[mask[s]].mean()) for s in SPLIT]
    hand = [1001 / (4 * 126), 1001 / (4 * 325), 1001 / (4 * 250), 1001 / (4 * 300)]
    assert ratio == pytest.approx(hand, rel=1e-12)
    assert [round(r, 3) for r in ratio] == [1.986, 0.770, 1.001, 0.834]


# --------------------------------------------------------------------------------------
# the update's normalisers: step_normaliser, one rank and an agent group
# --------------------------------------------------------------------------------------


class _Layout:
    """An agent group of 2 ranks seen from rank 0: the other rank's value is ``other``."""

    ranks_per_agent = 2

    def __init__(self, other: float):
        self.other, self.calls = other, 0

    def group_sum(self, value: float, what: str = "") -> float:
        self.calls += 1
        return value + self.other


def test_step_normaliser_dapo_is_trls_num_items_over_processes_and_bnpo_stays_local():
    from vlcohort.training.update import DeepSpeedStep, OptimizerStep, step_normaliser

    _, mask = _example()
    mask = mask.float()
    mbs = [(s, None) for s in SPLIT]
    # one rank: token_mean / dapo one normaliser (16 tokens), bnpo [K] = 4 x own tokens
    plain = OptimizerStep(SimpleNamespace(), 0.0)
    for mode in ("token_mean", "dapo"):
        assert float(step_normaliser(mask, mbs, [0, 1, 2, 3], mode, plain)) == 16.0
    assert step_normaliser(mask, mbs, [0, 1, 2, 3], "bnpo", plain).tolist() == [16, 16, 20, 12]
    # rank 0 of 2 holds micro-batches 0-1 (8 tokens), rank 1 the other 8: TRL's dapo
    # normaliser num_items_in_batch / num_processes = 16 / 2 = 8; bnpo: K = 2, own tokens
    layout = _Layout(other=8.0)
    ds = DeepSpeedStep(SimpleNamespace(ds_engine=object(), layout=layout), 0.0)
    assert float(step_normaliser(mask, mbs, [0, 1], "dapo", ds)) == 8.0
    calls = layout.calls
    assert step_normaliser(mask, mbs, [0, 1], "bnpo", ds).tolist() == [8, 8]
    assert layout.calls == calls  # no group-wide sum: DeepSpeed's average gives the 1 / R


# --------------------------------------------------------------------------------------
# a real update of a tiny model
# --------------------------------------------------------------------------------------

BASE = ["method=gt_reward", "agents=[{name: A, path: 'tiny:qwen2_5_vl'}]",
        "rollout.prompts_per_step=2", "rollout.rollouts_per_prompt=4",
        "rollout.max_new_tokens=8", "optim.warmup_ratio=0", "optim.schedule=constant",
        "grpo.max_grad_norm=0", "grpo.is_mode='off'", "grpo.micro_batch_seqs=2"]


@pytest.fixture()
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


def _setup(agg, *overrides):
    from vlcohort.config import load_config
    from vlcohort.data.synthetic import make_dataset
    from vlcohort.rollout.base import SamplingParams
    from vlcohort.training.agent import build_agent

    cfg = load_config(None, [*BASE, f"grpo.loss_agg={agg}", *overrides])
    agent = build_agent(cfg.agents[0], cfg)
    problems = make_dataset(("shape_colour",), n=2, seed=0)
    rendered = [agent.adapter.render(p) for p in problems]
    torch.manual_seed(0)
    rollouts = agent.engine.generate(rendered, 4, SamplingParams(max_new_tokens=8), seed=0)
    agent.optimizer = torch.optim.SGD([p for p in agent.model.parameters() if p.requires_grad], lr=1.0)
    return cfg, agent, rendered, rollouts


def _sgd_delta(agent, rendered, rollouts, adv, cfg):
    from vlcohort.training.update import update_agent

    before = {n: p.detach().clone() for n, p in agent.model.named_parameters() if p.requires_grad}
    stats = update_agent(agent, rendered, rollouts, adv, cfg.grpo, 1.0, length_norm=8)
    after = dict(agent.model.named_parameters())
    return stats, {n: after[n].detach() - before[n] for n in before}


@pytest.mark.usefixtures("_tiny_cache")
def test_real_update_with_bnpo_has_trls_loss_and_gradient():
    """One update of a tiny Qwen2.5-VL, 8 rollouts in 4 micro-batches of 2, one optimizer
    step, IS off, ratio 1: the per-token loss is -A_i. The tiny model writes all 8 tokens,
    so completions marked unfinished leave the loss (mask_truncated_completions) to make
    the micro-batches' token counts unequal, one of them empty. The logged loss is the
    hand bnpo sum_k (sum_{i in k} -A_i L_i) / (4 max(n_k, 1)), L_i the loss tokens of row
    i, n_k its micro-batch's; and the SGD step equals a token_mean step whose advantages
    are scaled by N / (4 n_k), bnpo's per-token weight over token_mean's."""
    adv = torch.tensor([1.0, -1.0, 0.75, -0.5, -1.0, 1.0, 0.25, -0.75])  # [N = B x G]
    finished = [True, False, True, True, False, True, False, False]
    deltas = []
    for agg in ("bnpo", "token_mean"):
        cfg, agent, rendered, rollouts = _setup(agg, "grpo.mask_truncated_completions=true")
        rollouts.finished = list(finished)
        L = [len(c) * f for c, f in zip(rollouts.completions, finished)]
        n = [L[2 * k] + L[2 * k + 1] for k in range(4)]
        N = sum(n)
        hand = sum(sum(-float(adv[i]) * L[i] for i in (2 * k, 2 * k + 1)) / (4 * max(n[k], 1))
                   for k in range(4))
        if agg == "bnpo":
            assert len(set(n)) > 2 and 0 in n, n  # unequal counts, one micro-batch empty
            stats, delta = _sgd_delta(agent, rendered, rollouts, adv, cfg)
            token_mean = sum(-float(adv[i]) * L[i] for i in range(8)) / N
            assert abs(hand - token_mean) > 1e-3  # the example tells the two apart
        else:
            scaled = adv * torch.tensor([N / (4 * max(n[i // 2], 1)) for i in range(8)])
            stats, delta = _sgd_delta(agent, rendered, rollouts, scaled, cfg)
        assert stats["skipped_updates"] == 0
        assert stats["loss"] == pytest.approx(hand, rel=1e-5, abs=1e-7)
        deltas.append(delta)
    bnpo_delta, tm_delta = deltas
    assert any(float(d.abs().max()) > 0 for d in bnpo_delta.values())
    for name in bnpo_delta:
        assert torch.allclose(bnpo_delta[name], tm_delta[name], atol=1e-6, rtol=1e-4), name


# --------------------------------------------------------------------------------------
# the recipes that cite TRL's --loss_type bnpo
# --------------------------------------------------------------------------------------


def test_recipes_citing_loss_type_bnpo_use_trls_bnpo():
    """Each recipe whose header cites ``--loss_type bnpo``: the vision-language launchers
    ran per-device batch 2 x grad-accum 8 x 4 GPUs, so ``bnpo`` over micro-batches of 2
    with 8 micro-batches per rank; the text launchers ran per-device batch 1, where TRL's
    bnpo is each sequence's token mean averaged: ``seq_mean_token_mean``."""
    from pathlib import Path

    from vlcohort.config import load_config

    root = Path(__file__).resolve().parents[1] / "configs"
    cited = [p for p in sorted(root.glob("*.yaml")) if "--loss_type bnpo" in p.read_text()]
    assert len(cited) == 9
    for path in cited:
        text = path.read_text()
        g = load_config(path).grpo
        if g.loss_agg == "bnpo":
            c = load_config(path)
            assert "per-device batch 2 x grad-accum 8 x 4 GPUs" in text, path.name
            per_rank = c.rollout.prompts_per_step * c.rollout.rollouts_per_prompt // c.distributed.ranks_per_agent
            assert g.micro_batch_seqs == 2 and per_rank // g.micro_batch_seqs == 8, path.name
            assert g.micro_batch_tokens == 0 and g.mini_batch_seqs in (0, per_rank), path.name
        else:
            assert g.loss_agg == "seq_mean_token_mean", path.name
            assert "per-device batch of 1 sequence" in text, path.name
