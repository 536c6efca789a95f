"""CoMAS's loss aggregation and importance sampling against its published trainer, the
formula re-derived by hand (``method: comas``, ``configs/comas_qwen25_3b_x4_comas7.yaml``).

What the published run does (CoMAS's code as read in the public fork github.com/wt-2048/comas,
MARTI / OpenRLHF; scripts/train_comas.sh: micro_train_batch_size 2, train_batch_size
64, packing_samples True, mask_truncated_completions True, actor_num_gpus_per_node 2):

- marti/trainers/ppo/trainer.py ``training_step_actor`` packs a micro-batch's 2
  sequences into one row [1, sum of lengths] and calls marti/models/loss.py
  ``PolicyLoss``: ``masked_mean(loss, action_mask, dim=-1).mean()``, with
  ``masked_mean = (x * m).sum(-1) / m.sum(-1).clamp(min=1)`` (models/model_utils.py)
  over that one row: the micro-batch's token mean. A truncated completion's tokens are
  out of the mask (``_build_truncation_mask``: no EOS at its end), numerator and count.
- ``strategy.backward`` / ``optimizer_step`` are DeepSpeed's engine backward / step with
  ``train_batch_size`` 64 and ``train_micro_batch_size_per_gpu`` 2 on 2 ranks
  (helpers/distributed/deepspeed.py): 16 accumulation steps, each micro-batch's loss
  divided by 16, the 2 ranks' gradients averaged. A step's loss is therefore the mean of
  its 64 / 2 = 32 micro-batch token means: ``grpo.loss_agg=bnpo`` with
  ``micro_batch_seqs=2`` (``grpo.micro_batch_denominators``: K x each micro-batch's own
  tokens).
- The ratio is ``exp(log_probs - old_action_log_probs)``; no log-prob of the vLLM sampler
  is read anywhere: no rollout-vs-policy importance sampling, ``grpo.is_mode=off``.
  (The fork's old log-probs are its trainer's zero fallback, a departure of its own that
  ``vlcohort/recipes/comas.py`` names; the aggregation below is taken at PPO's ratio 1,
  what that fallback's comment means.)

At one optimizer step (one mini-batch, one epoch) our old log-probs are the forward's own,
so the ratio is 1 and a token's PPO loss is -A of its sequence: the published step loss is

    L = 1/K sum_k [ sum_{i in k, finished} n_i (-A_i) / max(1, sum_{i in k, finished} n_i) ]

and d L / d logp of a token of micro-batch k is -A_i / (K x its finished tokens).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from vlcohort.config import load_config
from vlcohort.recipes import comas
from vlcohort.rollout.base import Rollouts
from vlcohort.training import grpo, update

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "configs" / "comas_qwen25_3b_x4_comas7.yaml"
TEXT3 = "agents=[{name: A, path: 'tiny:qwen2'}, {name: B, path: 'tiny:qwen2'}, {name: C, path: 'tiny:qwen2'}]"
TEXT_DATA = ["data.source=file", "data.path=tests/data/real_math.jsonl", "data.preset=math"]
SMALL = ["method=comas", "rollout.prompts_per_step=2", "rollout.rollouts_per_prompt=1",
         "rollout.max_new_tokens=8", "log.plot=false", "log.tensorboard=false", "arms=[]",
         "eval.every=0", "optim.lr=1e-3", "optim.warmup_ratio=0", "comas.rounds=1",
         "run.steps=1"]

# ------------------------------------------------------------------ the fixed example
# Agent A's 6 turns of one step (2 problems, 1 round), taken in this order, so the
# micro-batches of 2 are (solution, critique), (judge, judge), (solution, critique):
KINDS = ["solution", "critique", "judge", "judge", "solution", "critique"]
LENGTHS = [40, 20, 3, 1, 12, 6]  # completion tokens of each turn (distinct: rows are told apart by them)
FINISHED = [True, True, True, True, True, False]  # the last critique cut at max_new_tokens
REWARDS = [1.0, 0.0, 0.0, -1.0, 0.5, 0.5]  # score 3 / its critique, two judges (-1: unreadable), score 2
SPLIT = [(0, 1), (2, 3), (4, 5)]
K = len(SPLIT)


def _hand_advantages() -> list[float]:
    """REINFORCE++ as the published buffer normalises it (``replay_buffer.normalize``):
    mean and biased variance over every token of the batch, each carrying its turn's
    return. Tokens 82, sum n r = 40 - 1 + 6 + 3 = 48."""
    n = sum(LENGTHS)
    mean = sum(n_i * r for n_i, r in zip(LENGTHS, REWARDS)) / n
    var = sum(n_i * (r - mean) ** 2 for n_i, r in zip(LENGTHS, REWARDS)) / n
    return [(r - mean) / math.sqrt(var) for r in REWARDS]


def _published_loss(adv: list[float]) -> float:
    """The published step loss: the mean over the K micro-batches of each one's token
    mean of -A (finished turns only, count clamped to >= 1)."""
    total = 0.0
    for mb in SPLIT:
        kept = [i for i in mb if FINISHED[i]]
        total += sum(LENGTHS[i] * -adv[i] for i in kept) / max(1, sum(LENGTHS[i] for i in kept))
    return total / K


def _published_turn_weights() -> list[float]:
    """Each turn's share of the step's gradient, sum over its tokens of 1 / (K n_k):
    40/180, 20/180, 3/12, 1/12, 12/36, 0."""
    out = [0.0] * len(LENGTHS)
    for mb in SPLIT:
        n_k = sum(LENGTHS[i] for i in mb if FINISHED[i])
        for i in mb:
            out[i] = LENGTHS[i] / (K * n_k) if FINISHED[i] else 0.0
    return out


# hand-worked per-turn gradient weights of the example (the report's numbers):
# published (bnpo over pairs)   0.2222 0.1111 0.2500 0.0833 0.3333 0
# before (token mean over all)  40/76 = 0.5263, 20/76 = 0.2632, 3/76 = 0.0395, 1/76 = 0.0132,
#                               12/76 = 0.1579, 0: the judges' share 4/76 = 5.3% -> 1/3
PUBLISHED_WEIGHTS = [40 / 180, 20 / 180, 3 / 12, 1 / 12, 12 / 36, 0.0]
TOKEN_MEAN_WEIGHTS = [40 / 76, 20 / 76, 3 / 76, 1 / 76, 12 / 76, 0.0]


def _recipe_overrides(mini: int) -> list[str]:
    """The paper recipe's loss settings, ``mini_batch_seqs`` set to the example's size."""
    g = load_config(RECIPE).grpo
    return [f"grpo.loss_agg={g.loss_agg}", f"grpo.is_mode={g.is_mode}",
            f"grpo.micro_batch_seqs={g.micro_batch_seqs}",
            f"grpo.micro_batch_tokens={g.micro_batch_tokens}",
            f"grpo.mask_truncated_completions={str(g.mask_truncated_completions).lower()}",
            f"grpo.kl_coef={g.kl_coef}", f"grpo.clip_low={g.clip_low}",
            f"grpo.clip_high={g.clip_high}", f"grpo.ppo_epochs={g.ppo_epochs}",
            f"grpo.policy_loss={g.policy_loss}", f"grpo.mini_batch_seqs={mini}"]


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """A tiny 3-agent run with the recipe's loss settings, agent A's real turns of one
    discussion step (their rendered prompts), reordered as ``KINDS`` and given the fixed
    completions, lengths, finish flags and rewards above. The sampler's log-probs are
    set to -30 on every token, far from the policy's, so any IS correction would show."""
    from vlcohort.recipes.cohort import setup

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))
        cfg = load_config(None, [*SMALL, TEXT3, *TEXT_DATA, *_recipe_overrides(len(KINDS)),
                                 f"run.output_dir={tmp_path_factory.mktemp('comas') / 'r'}"])
        run = setup(cfg)
        disc = comas.discuss(run, 1, run.stream.problems[:2])
        for t in disc.turns:
            t.valid = t.rendered is not None
        base = comas.agent_batch(disc, 0)
        kinds = [t.kind for t in base.turns]
        assert kinds == ["solution", "solution", "critique", "critique", "judge", "judge"]
        order = [0, 2, 4, 5, 1, 3]
        ordered = comas.shuffled_batch(base, order)
        assert [t.kind for t in ordered.turns] == KINDS
        T = max(LENGTHS)
        completions = [[10 + (7 * j + 3 * i) % 500 for j in range(n)] for i, n in enumerate(LENGTHS)]
        logprobs = torch.zeros(len(LENGTHS), T)
        for i, n in enumerate(LENGTHS):
            logprobs[i, :n] = -30.0
        rollouts = Rollouts(prompts=None, completions=completions, texts=[""] * len(LENGTHS),
                            logprobs=logprobs, finished=list(FINISHED), group_size=1)
        batch = comas.Batch(ordered.turns, ordered.rendered, rollouts,
                            torch.tensor(REWARDS, dtype=torch.float32))
        weights = {k: v.clone() for k, v in run.agents[0].model.state_dict().items()}
        yield run, batch, weights
        run.logger.close()


def _update(run, batch, weights, monkeypatch, **grpo_settings):
    """``comas.update_one`` of agent A on the example from the same starting weights,
    with ``grpo`` settings changed for this call; returns the metrics, the advantages and,
    per trained row (told apart by its token count), the sum of d loss / d logp over its
    tokens divided by -A: the row's gradient weight."""
    agent = run.agents[0]
    agent.model.load_state_dict(weights)
    g = run.cfg.grpo
    saved = {k: getattr(g, k) for k in grpo_settings}
    for k, v in grpo_settings.items():
        setattr(g, k, v)
    real = grpo.policy_loss
    rows: dict[int, float] = {}

    def spy(logp, old_logp, advantages, mask, **kw):
        adv, m = advantages.detach().clone(), mask.detach().to(torch.bool).clone()

        def keep(grad):
            for j in range(grad.shape[0]):
                n = int(m[j].sum())
                w = float(grad[j][m[j]].sum()) / -float(adv[j]) if n else 0.0
                rows[n] = w
        logp.register_hook(keep)
        return real(logp, old_logp, advantages, mask, **kw)

    monkeypatch.setattr(grpo, "policy_loss", spy)
    try:
        metrics, adv = comas.update_one(run, 0, agent, batch)
    finally:
        monkeypatch.setattr(grpo, "policy_loss", real)
        for k, v in saved.items():
            setattr(g, k, v)
    return metrics, adv, rows


def _turn_weights(rows: dict[int, float]) -> list[float]:
    return [rows.get(n, 0.0) if fin else rows.get(0, 0.0) for n, fin in zip(LENGTHS, FINISHED)]


def test_paper_recipe_takes_the_published_loss_and_no_is():
    """The recipe's grpo settings for the published trainer's loss: bnpo over micro-batches
    of 2 (micro_train_batch_size 2, packing_samples), an optimizer step per 64 turns
    (train_batch_size 64: 32 micro-batch token means averaged), no token-budget
    micro-batches (they would regroup the pairs), truncated completions out, IS off."""
    g = load_config(RECIPE).grpo
    assert (g.loss_agg, g.micro_batch_seqs, g.mini_batch_seqs, g.micro_batch_tokens) == ("bnpo", 2, 64, 0)
    assert grpo.AGGREGATIONS[g.loss_agg].per_micro_batch
    assert g.is_mode == "off" and not g.is_batch_norm
    assert g.mask_truncated_completions and g.ppo_epochs == 1 and g.kl_coef == 0.0
    assert (g.policy_loss, g.clip_low, g.clip_high, g.clip_ratio_c) == ("ppo", 0.2, 0.2, 0.0)
    tiny = load_config(ROOT / "configs" / "comas_tiny.yaml").grpo
    assert (tiny.loss_agg, tiny.is_mode) == ("bnpo", "off")


def test_hand_formula_of_the_example():
    """The example worked by hand: the published weights are bnpo's, not a token mean's."""
    assert _published_turn_weights() == pytest.approx(PUBLISHED_WEIGHTS, abs=1e-15)
    assert sum(PUBLISHED_WEIGHTS) == pytest.approx(1.0)  # K micro-batches of weight 1/K each
    assert sum(TOKEN_MEAN_WEIGHTS) == pytest.approx(1.0)
    judges = [i for i, k in enumerate(KINDS) if k == "judge"]
    assert sum(PUBLISHED_WEIGHTS[i] for i in judges) == pytest.approx(1 / 3)
    assert sum(TOKEN_MEAN_WEIGHTS[i] for i in judges) == pytest.approx(4 / 76)


def test_comas_update_loss_equals_the_published_formula(example, monkeypatch):
    """The real comas update path (update_one -> update_agent) with the recipe's settings
    on the fixed turns: the advantages are the published REINFORCE++ ones, the loss is the
    published step loss, each turn's gradient weight is n_i / (K n_k), the truncated
    critique's 0; the sampler's log-probs (-30, far off) change nothing: no IS."""
    run, batch, weights = example
    assert (run.cfg.grpo.loss_agg, run.cfg.grpo.is_mode) == ("bnpo", "off")
    metrics, adv, rows = _update(run, batch, weights, monkeypatch)
    want_adv = _hand_advantages()
    assert adv.tolist() == pytest.approx(want_adv, rel=1e-5)
    assert metrics["skipped_updates"] == 0
    assert metrics["loss"] == pytest.approx(_published_loss(want_adv), rel=1e-4)
    assert _turn_weights(rows) == pytest.approx(PUBLISHED_WEIGHTS, rel=1e-4, abs=1e-6)


def test_the_former_token_mean_and_is_truncation_were_not_published(example, monkeypatch):
    """Before: a token mean over the whole mini-batch weighs every token 1/76 (the judges'
    turns 4/76 of the step, not 1/3), and IS truncation at cap 2 doubles every token's
    loss here (sampler log-probs -30: weight exp(old + 30) capped at 2)."""
    run, batch, weights = example
    adv = _hand_advantages()
    published = _published_loss(adv)
    token_mean = sum(n * -a for n, a, f in zip(LENGTHS, adv, FINISHED) if f) / 76
    metrics, _, rows = _update(run, batch, weights, monkeypatch, loss_agg="token_mean")
    assert metrics["loss"] == pytest.approx(token_mean, rel=1e-4)
    assert _turn_weights(rows) == pytest.approx(TOKEN_MEAN_WEIGHTS, rel=1e-4, abs=1e-6)
    assert abs(token_mean - published) > 0.05
    metrics, _, _ = _update(run, batch, weights, monkeypatch, is_mode="truncate")
    assert metrics["loss"] == pytest.approx(2 * published, rel=1e-4)
    assert metrics["loss"] != pytest.approx(published, rel=1e-2)


def test_mini_batches_average_their_own_micro_batches(example):
    """grpo.mini_batch_seqs=4 on the 6 turns: two optimizer steps, as DeepSpeed steps every
    train_batch_size sequences; the first averages its 2 micro-batch token means (2 x 60,
    2 x 4), the second, partial (our dropped turns can leave one), its single one (1 x 12:
    the truncated critique is out of the count)."""
    run, batch, weights = example
    agent = run.agents[0]
    agent.model.load_state_dict(weights)
    g = run.cfg.grpo
    saved = g.mini_batch_seqs
    g.mini_batch_seqs = 4
    try:
        opt = update.optimizer_step(agent, g)
        adv = torch.tensor(_hand_advantages())
        ub = update.update_batch(agent, batch.rendered, batch.rollouts, adv, g,
                                 run.cfg.rollout.temperature, opt, None)
    finally:
        g.mini_batch_seqs = saved
    assert ub.mini_batches == [[0, 1], [2]]
    assert [d.tolist() for d in ub.denoms] == [[120.0, 8.0], [12.0]]
    assert ub.is_weights is None


def test_two_ranks_of_sixteen_accumulation_steps_are_the_mean_of_32():
    """The published step at its scale, written as DeepSpeed runs it: 2 ranks, each 16
    micro-batches of 2 packed sequences, each micro-batch's masked_mean over its one packed
    row divided by 16, the ranks' gradients averaged; against our bnpo step over the 64
    turns (micro_batch_denominators over 32 micro-batches of 2)."""
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 300, (64,), generator=g)
    lengths[::7] = torch.randint(1, 8, (10,), generator=g)  # some short judge turns
    finished = torch.rand(64, generator=g) > 0.1
    adv = torch.randn(64, generator=g, dtype=torch.float64)
    T = int(lengths.max())
    mask = (torch.arange(T)[None, :] < lengths[:, None]) & finished[:, None]  # [64, T]
    per_token = (-adv)[:, None].expand(64, T).clone()  # PPO at ratio 1: -A on every token

    def marti_micro_batch(rows) -> torch.Tensor:
        packed = torch.cat([per_token[i][: lengths[i]] for i in rows])[None]  # [1, sum n]
        m = torch.cat([mask[i][: lengths[i]] for i in rows])[None].to(packed.dtype)
        return ((packed * m).sum(-1) / m.sum(-1).clamp(min=1.0)).mean()  # PolicyLoss

    pairs = [(2 * k, 2 * k + 1) for k in range(32)]
    ranks = [pairs[:16], pairs[16:]]
    marti = sum(sum(marti_micro_batch(p) / 16 for p in r) for r in ranks) / 2

    masks = [mask[a:b + 1] for a, b in pairs]
    denoms = grpo.micro_batch_denominators(masks, "bnpo")
    ours = sum(grpo.aggregate(per_token[a:b + 1], mask[a:b + 1], "bnpo", denom=d)
               for (a, b), d in zip(pairs, denoms))
    assert float(ours) == pytest.approx(float(marti), rel=1e-12)
    token_mean = float((per_token * mask).sum() / mask.sum())
    assert abs(token_mean - float(marti)) > 1e-3  # and not the former token mean
