"""DAPO's rules (Yu et al., arXiv 2503.14476): the soft overlong penalty (eq. 13,
``reward.overlong_*``) and dynamic sampling (sec. 3.2, ``rollout.dynamic_sampling``), by
hand and end to end on tiny real models (CPU, offline)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from vlcohort.config import load_config
from vlcohort.training.distributed import Layout
from vlcohort.training.grpo import group_advantages
from vlcohort.training.rewards import Reward, Scored, overlong_penalty, with_overlong_penalty
from vlcohort.typed_yaml import ConfigError

ROOT = Path(__file__).resolve().parents[1]

COMMON = ["reward.answer_style=last_letter", "data.tasks=[shape_colour, shape_kind]",
          "data.num_problems=64", "rollout.prompts_per_step=2", "optim.lr=1e-3",
          "optim.warmup_ratio=0", "log.plot=false", "log.tensorboard=false", "run.seed=4",
          "arms=[]", "eval.every=0", "reward.min_share=0", "grpo.kl_coef=0",
          "prompt.system_prompt=You are a helpful assistant."]


@pytest.fixture(autouse=True)
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


# ----------------------------------------------------------------- soft overlong penalty


def test_overlong_penalty_by_hand():
    """L_max = 8, L_cache = 4, penalty 0.5: 0 up to L = 4, then (4 - L) / 4 x 0.5."""
    lengths = torch.tensor([0, 4, 5, 6, 7, 8, 9])
    assert overlong_penalty(lengths, 8, 4, 0.5).tolist() == [0.0, 0.0, -0.125, -0.25, -0.375, -0.5, -0.5]
    assert overlong_penalty(lengths, 8, 0, 0.5).tolist() == [0.0] * 7  # buffer 0: off
    # L_cache = L_max: the penalty grows from the first token, -L / L_max x penalty
    assert overlong_penalty(torch.tensor([[0, 2], [4, 8]]), 8, 8, 1.0).tolist() == [[0.0, -0.25],
                                                                                   [-0.5, -1.0]]


def test_overlong_penalty_is_added_to_prompts_with_a_label_only():
    scored = Scored(rewards=torch.tensor([[1.0, 0.0], [0.0, 0.0]]), valid=torch.tensor([True, False]),
                    correct=torch.tensor([[True, False], [False, False]]))
    out = with_overlong_penalty(scored, torch.tensor([6, 4, 8, 8]), 8, 4, 1.0)  # [P x G] lengths
    assert out.rewards.tolist() == [[0.5, 0.0], [0.0, 0.0]]  # 1 + (4 - 6) / 4; row 2 abstained
    assert out.valid.tolist() == [True, False] and torch.equal(out.correct, scored.correct)


def test_overlong_penalty_reaches_the_reward(tmp_path):
    """With L_cache = L_max = 16 and penalty 0.5 every completion of L tokens is charged
    0.5 x L / 16, so (ground-truth rewards, no format term, gold on every problem) the
    logged mean reward is acc - 0.5 x completion_len / 16."""
    from vlcohort.cli import main
    from vlcohort.monitoring.metrics import read_metrics

    run = tmp_path / "run"
    args = ["train", "method=gt_reward", "agents=[{name: A, path: 'tiny:qwen2_5_vl'}]", *COMMON,
            "rollout.rollouts_per_prompt=4", "rollout.max_new_tokens=16", "grpo.micro_batch_seqs=8",
            "reward.overlong_buffer=16", "reward.overlong_penalty=0.5", "run.steps=2",
            f"run.output_dir={run}"]
    assert main(args) == 0
    for rec in read_metrics(run / "metrics.jsonl"):
        expected = rec["agent/A/acc"] - 0.5 * rec["agent/A/completion_len"] / 16
        assert rec["agent/A/reward/mean"] == pytest.approx(expected, abs=1e-6)
        assert rec["agent/A/completion_len"] > 0  # the penalty is not zero: a real check


# -------------------------------------------------------------------- config checks


@pytest.mark.parametrize("override, match", [
    ("reward.overlong_buffer=33", "reward.overlong_buffer"),
    ("reward.overlong_buffer=-1", "reward.overlong_buffer"),
    ("reward.overlong_penalty=-0.5", "reward.overlong_penalty"),
    ("rollout.dynamic_sampling_max_rounds=-1", "rollout.dynamic_sampling_max_rounds"),
    ("rollout.dynamic_sampling_metric=score", "rollout.dynamic_sampling_metric: 'score' is not one of"),
    ("reward.ring=clockwise", "reward.ring: 'clockwise' is not one of: previous, next"),
    ("reward.min_share_of=valid", "reward.min_share_of: 'valid' is not one of: all, parsed"),
])
def test_bad_values_name_their_key(override, match):
    with pytest.raises(ConfigError, match=match):
        load_config(None, ["rollout.max_new_tokens=32", override])


def test_dynamic_sampling_needs_one_rank_per_agent():
    with pytest.raises(ConfigError, match="ranks_per_agent=1"):
        load_config(None, ["rollout.dynamic_sampling=true", "distributed.ranks_per_agent=2"])
    from vlcohort.recipes.cohort import setup
    from vlcohort.recipes.driver import TrainingError

    cfg = load_config(None, ["rollout.dynamic_sampling=true"])  # ranks_per_agent=0: W / A
    with pytest.raises(TrainingError, match="2 ranks per agent"):
        setup(cfg, layout=Layout(n_agents=2, world_size=4, ranks_per_agent=2))
    with pytest.raises(ConfigError, match="rollout.dynamic_sampling"):
        load_config(ROOT / "configs" / "self_play_tiny.yaml", ["rollout.dynamic_sampling=true"])


def test_refill_decisions_use_every_ranks_signal():
    """Under agent groups each rank sees its own agent's advantages only; the signal of
    every agent is gathered, so all ranks decide on the same refills."""
    from types import SimpleNamespace

    from vlcohort.recipes.step import Rewarded, Selection, signal_groups

    class TwoRanks:  # this rank hosts agent 0; the other rank's piece is agent 1's
        def gather(self, obj, what=""):
            return [obj, {1: [0, 3]}]

    correct = torch.tensor([[False, False], [True, False], [True, True]])
    scored = Scored(rewards=correct.float(), valid=torch.ones(3, dtype=torch.bool), correct=correct)
    mine = Rewarded(selection=Selection(prompts=(0, 1, 2), rollouts=None, rendered=()),
                    reward=Reward([None] * 3, scored), advantages=group_advantages(scored.rewards))
    run = SimpleNamespace(local=[0], layout=TwoRanks())
    assert signal_groups(run, {0: mine}, 2) == [[1], [0, 3]]


def test_a_group_of_one_outcome_is_dropped_whatever_its_shaped_rewards():
    """DAPO keeps a group when 0 < correct < G. The overlong penalty splits the rewards of
    an all-right group (so its advantages are not zero), yet it teaches nothing about the
    task: the default metric (acc) drops it; seq_reward / seq_final_reward, verl's other
    metrics, keep it, as filtering on the advantages did."""
    from types import SimpleNamespace

    from vlcohort.recipes.step import Rewarded, Selection, signal_groups

    class OneRank:
        def gather(self, obj, what=""):
            return [obj]

    # prompt 0 all right, 1 mixed, 2 all wrong, 3 no label; L_max = 8, L_cache = 4
    correct = torch.tensor([[True, True], [True, False], [False, False], [False, False]])
    valid = torch.tensor([True, True, True, False])
    scored = with_overlong_penalty(Scored(correct.float(), valid, correct),
                                   torch.tensor([4, 8, 4, 4, 5, 8, 8, 8]), 8, 4, 1.0)
    assert scored.rewards.tolist() == [[1.0, 0.0], [1.0, 0.0], [-0.25, -1.0], [0.0, 0.0]]
    adv = group_advantages(scored.rewards, valid=valid)  # groups 0, 1, 2 not zero
    assert [bool((a != 0).any()) for a in adv] == [True, True, True, False]
    mine = Rewarded(Selection(prompts=(0, 1, 2, 3), rollouts=None, rendered=()),
                    Reward([None] * 4, scored), adv)
    run = SimpleNamespace(local=[0], layout=OneRank())
    assert signal_groups(run, {0: mine}, 1) == [[1]]  # default: acc
    assert signal_groups(run, {0: mine}, 1, "acc") == [[1]]
    assert signal_groups(run, {0: mine}, 1, "seq_reward") == [[0, 1, 2]]
    assert signal_groups(run, {0: mine}, 1, "seq_final_reward") == [[0, 1, 2]]


# -------------------------------------------------------------- dynamic sampling, end to end


def test_dynamic_sampling_drops_flat_groups_and_refills_from_the_stream(tmp_path, monkeypatch):
    """Two peer-vote agents, B = 2 prompts, G = 4, at most 3 extra rounds. Spies record
    each round's prompts and advantages and what each update receives; the expected
    rounds, kept groups and counts are then derived by hand from those records: under
    metric seq_final_reward the update gets each agent's first B groups with a non-zero
    advantage, in stream order,
    and every agent generates on the same prompts in every round (a peer vote needs its
    teacher's votes there)."""
    import vlcohort.recipes.step as step_mod
    from vlcohort.monitoring.metrics import documented
    from vlcohort.recipes.cohort import setup

    B, cap = 2, 3
    cfg = load_config(None, ["method=co_rl", *COMMON,
                             "agents=[{name: A, path: 'tiny:qwen2_5_vl'}, {name: B, path: 'tiny:qwen2_5_vl'}]",
                             # a random tiny model parses ~20% of its answers: ties taken
                             # first and a format term, so some groups carry a signal
                             "rollout.rollouts_per_prompt=4", "rollout.max_new_tokens=16",
                             "reward.tie=first", "reward.format_weight=0.5",
                             "grpo.micro_batch_seqs=4", "rollout.dynamic_sampling=true",
                             "rollout.dynamic_sampling_metric=seq_final_reward",
                             f"rollout.dynamic_sampling_max_rounds={cap}",
                             f"run.output_dir={tmp_path / 'run'}"])
    run = setup(cfg)
    rounds: list[tuple[list[str], dict[int, torch.Tensor]]] = []
    updates: dict[str, tuple[list[str], torch.Tensor]] = {}
    generated: dict[str, list[list[str]]] = {"A": [], "B": []}
    real_reward, real_update = step_mod.reward, step_mod.update_agent

    def reward_spy(run_, generated, answered, problems, plan, *rest):
        out = real_reward(run_, generated, answered, problems, plan, *rest)
        rounds.append(([p.id for p in problems], {i: r.advantages.clone() for i, r in out.items()}))
        return out

    def update_spy(agent, rendered, rollouts, advantages, *args, **kwargs):
        updates[agent.name] = ([r.problem_id for r in rendered], advantages.clone())
        assert len(rollouts.completions) == len(rendered) * 4 == advantages.shape[0]
        return real_update(agent, rendered, rollouts, advantages, *args, **kwargs)

    monkeypatch.setattr(step_mod, "reward", reward_spy)
    monkeypatch.setattr(step_mod, "update_agent", update_spy)
    for agent in run.agents:
        real_generate = agent.engine.generate

        def generate_spy(rendered, *args, _real=real_generate, _name=agent.name, **kwargs):
            generated[_name].append([r.problem_id for r in rendered])
            return _real(rendered, *args, **kwargs)

        monkeypatch.setattr(agent.engine, "generate", generate_spy)

    refilled_any = updated_any = False
    for step in (1, 2, 3):
        rounds.clear(), updates.clear(), generated["A"].clear(), generated["B"].clear()
        record = step_mod.train_step(run, step)
        ids = [pid for r_ids, _ in rounds for pid in r_ids]  # every round's prompts, in order
        assert len(set(ids)) == len(ids) and all(len(r_ids) == B for r_ids, _ in rounds)
        assert generated["A"] == generated["B"] == [r_ids for r_ids, _ in rounds]
        signal = {}
        for i in (0, 1):
            adv = torch.cat([a[i] for _, a in rounds])  # [P_all, G]
            signal[i] = [k for k in range(len(ids)) if bool((adv[k] != 0).any())]
        extra = len(rounds) - 1
        # the rounds by hand: stop at the first r where every agent has B signal groups
        need = next((r for r in range(cap + 1)
                     if all(sum(k < (1 + r) * B for k in signal[i]) >= B for i in (0, 1))), cap)
        assert extra == need
        for i, name in enumerate(("A", "B")):
            adv = torch.cat([a[i] for _, a in rounds])
            kept = signal[i][:B]
            p = f"agent/{name}/dyn/"
            assert record[p + "rounds"] == extra
            assert record[p + "dropped"] == sum(k not in signal[i] for k in range(B))
            assert record[p + "refilled"] == sum(k >= B for k in kept)
            assert record[p + "groups"] == len(kept) == B - record[p + "dropped"] + record[p + "refilled"]
            if kept:
                got_ids, got_adv = updates[name]
                assert got_ids == [ids[k] for k in kept]
                assert torch.equal(got_adv, adv[kept].reshape(-1))  # no flat group in the update
                updated_any = True
            else:
                assert name not in updates  # nothing to learn from, no KL term: no step
            refilled_any |= record[p + "refilled"] > 0
        assert all(documented(k) for k in record), [k for k in record if not documented(k)]
    assert refilled_any and updated_any, "no refill or no update happened: weak test"


def _spy_rounds(monkeypatch, step_mod):
    """Record each round's prompt ids and every local agent's :class:`Rewarded`, and what
    each update receives (prompt ids, advantages [n x G])."""
    rounds: list[tuple[list[str], dict]] = []
    updates: dict[str, tuple[list[str], torch.Tensor]] = {}
    real_reward, real_update = step_mod.reward, step_mod.update_agent

    def reward_spy(run_, generated, answered, problems, plan, *rest):
        out = real_reward(run_, generated, answered, problems, plan, *rest)
        rounds.append(([p.id for p in problems], dict(out)))
        return out

    def update_spy(agent, rendered, rollouts, advantages, *args, **kwargs):
        updates[agent.name] = ([r.problem_id for r in rendered], advantages.clone())
        return real_update(agent, rendered, rollouts, advantages, *args, **kwargs)

    monkeypatch.setattr(step_mod, "reward", reward_spy)
    monkeypatch.setattr(step_mod, "update_agent", update_spy)
    return rounds, updates


def test_dynamic_sampling_drops_all_right_or_all_wrong_groups_under_the_overlong_penalty(tmp_path, monkeypatch):
    """Ground-truth rewards with L_cache = L_max: every completion is charged for its
    length, so a group whose answers are all wrong (or all right) still has non-zero
    advantages when its lengths differ. DAPO's filter (the default metric, acc) drops it
    all the same: the update gets exactly the first round's groups of mixed correctness."""
    import vlcohort.recipes.step as step_mod
    from vlcohort.recipes.cohort import setup

    cfg = load_config(None, ["method=gt_reward", "agents=[{name: A, path: 'tiny:qwen2_5_vl'}]", *COMMON,
                             "rollout.prompts_per_step=8", "rollout.rollouts_per_prompt=4",
                             "rollout.max_new_tokens=16", "grpo.micro_batch_seqs=4",
                             "reward.overlong_buffer=16", "reward.overlong_penalty=0.5",
                             "rollout.dynamic_sampling=true", "rollout.dynamic_sampling_max_rounds=0",
                             f"run.output_dir={tmp_path / 'run'}"])
    run = setup(cfg)
    rounds, updates = _spy_rounds(monkeypatch, step_mod)
    shaped_but_flat, dropped_any = 0, False
    for step in range(1, 7):
        rounds.clear(), updates.clear()
        record = step_mod.train_step(run, step)
        [(ids, rewarded)] = rounds  # no refill rounds
        r = rewarded[0]
        correct = r.reward.scored.correct  # [B, G]
        mixed = [k for k in range(len(ids)) if 0 < int(correct[k].sum()) < 4]
        shaped_but_flat += sum(k not in mixed and bool((r.advantages[k] != 0).any())
                               for k in range(len(ids)))
        assert record["agent/A/dyn/dropped"] == len(ids) - len(mixed)
        assert record["agent/A/dyn/groups"] == len(mixed)
        # no mixed group at all: the first round's selection, as without dynamic sampling
        kept = mixed or list(range(len(ids)))
        if bool((r.advantages[kept] != 0).any()):
            got_ids, got_adv = updates["A"]
            assert got_ids == [ids[k] for k in kept]
            assert torch.equal(got_adv, r.advantages[kept].reshape(-1))
        else:
            assert "A" not in updates  # no advantage and no KL term: no step
        dropped_any |= bool(mixed) and len(mixed) < len(ids)
    assert shaped_but_flat > 0 and dropped_any, "no group of one outcome had shaped advantages: weak test"


def test_batch_scale_normalises_over_the_groups_each_agent_trains_on(tmp_path, monkeypatch):
    """grpo.adv_scale=batch under data.decouple and dynamic sampling: each agent's update
    gets (r - group mean) / (std of the rewards of the groups it trains on + eps), not a
    std over the step's other shard or the groups it dropped (TRL's scale_rewards="batch"
    over the batch it updates on)."""
    import vlcohort.recipes.step as step_mod
    from vlcohort.recipes.cohort import setup

    B, G = 2, 4
    cfg = load_config(None, ["method=gt_reward", *COMMON,
                             "agents=[{name: A, path: 'tiny:qwen2_5_vl'}, {name: B, path: 'tiny:qwen2_5_vl'}]",
                             "data.decouple=true", f"rollout.rollouts_per_prompt={G}",
                             "rollout.max_new_tokens=16", "grpo.micro_batch_seqs=4",
                             "reward.format_weight=0.5", "grpo.adv_scale=batch",
                             "rollout.dynamic_sampling=true", "rollout.dynamic_sampling_metric=seq_reward",
                             "rollout.dynamic_sampling_max_rounds=1", f"run.output_dir={tmp_path / 'run'}"])
    run = setup(cfg)
    rounds, updates = _spy_rounds(monkeypatch, step_mod)
    checked = widened = 0
    for step in (1, 2, 3, 4):
        rounds.clear(), updates.clear()
        step_mod.train_step(run, step)
        for i, name in enumerate(("A", "B")):
            if name not in updates:
                continue
            by_id = {pid: r[i].final_rewards[k] for ids, r in rounds for k, pid in enumerate(ids)}
            got_ids, got_adv = updates[name]
            first_ids = rounds[0][0]
            assert set(got_ids) <= {pid for ids, _ in rounds for pid in ids[i * B:(i + 1) * B]}  # own shard
            rewards = torch.stack([by_id[pid] for pid in got_ids])  # [n, G]
            centered = rewards - rewards.mean(dim=1, keepdim=True)
            expected = centered / (rewards.std() + 1e-6)  # unbiased, as TRL
            flat = (rewards.amax(dim=1) == rewards.amin(dim=1))[:, None]
            expected = torch.where(flat, torch.zeros_like(expected), expected)
            torch.testing.assert_close(got_adv, expected.reshape(-1), atol=1e-5, rtol=1e-5)
            checked += 1
            # the std the step's first round would have given (both shards, dropped groups in)
            everything = torch.stack([by_id[pid] for pid in first_ids])
            widened += not torch.isclose(everything.std(), rewards.std(), atol=1e-4)
    assert checked and widened, "no update, or no step where the batch mattered: weak test"


def test_the_config_accepts_exactly_the_metrics_the_step_filters_on():
    """config_checks lists the choices without importing the step (torch, the trainer);
    the two lists must not drift apart."""
    from vlcohort.config_checks import CHOICES
    from vlcohort.recipes.step import FILTER_METRICS

    assert set(CHOICES["rollout.dynamic_sampling_metric"]) == set(FILTER_METRICS)
