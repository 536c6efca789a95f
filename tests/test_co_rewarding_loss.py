"""Co-rewarding's published update options (issue 39, item 4), each against the published
formula re-derived by hand on fixed inputs (github.com/tmlr-group/Co-rewarding, read, not
copied), then each on in a real tiny run:

* ``grpo.view_loss=sum``: Co-rewarding-I's loss, ``Co-rewarding-I/verl/workers/actor/
  dp_actor.py`` ``update_policy``: the original and the rephrased rollouts split alike into
  micro-batches, micro-batch k of each taken together, loss_k = (token_mean(orig_k) +
  token_mean(reph_k)) / gradient_accumulation, summed over k (verl's ``agg_loss``
  "token-mean" on each, KL term included in each);
* ``grpo.kl_reference=teacher``: Co-rewarding-II's KL, ``run_corewarding-II.sh``
  (``kl_loss_coef=0.001``, ``kl_loss_type=low_var_kl``) with its reference model moved by
  the EMA (``ref.sliding_average``): the reference log-probs are the EMA teacher's.
"""

from __future__ import annotations

import pytest
import torch

from vlcohort.cli import main
from vlcohort.config import load_config
from vlcohort.monitoring.metrics import read_metrics
from vlcohort.training import grpo
from vlcohort.training.co_rewarding import wording_groups
from vlcohort.training.update import OptimizerStep, micro_denominator, step_normaliser
from vlcohort.typed_yaml import ConfigError


@pytest.fixture(autouse=True)
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


# ------------------------------------------------------------------ fixed inputs, by hand

# B = 2 questions, G = 2 rollouts: prompts [q0, q1, q0', q1'] (originals, then rephrasings,
# reward_sources.cross_view_partners), rows 0-3 asked, 4-7 rephrased; T = 4.
LENGTHS = [4, 1, 3, 2, 2, 4, 1, 3]
N, T = 8, 4
MASK = torch.tensor([[t < n for t in range(T)] for n in LENGTHS])
OLD = torch.tensor([[-0.5, -1.0, -0.2, -2.0], [-0.7, -0.1, -0.3, -0.4], [-1.5, -0.2, -0.9, -0.1],
                    [-0.3, -0.6, -0.8, -1.1], [-0.9, -0.4, -0.2, -0.6], [-0.1, -1.3, -0.5, -0.7],
                    [-2.0, -0.3, -0.4, -0.2], [-0.6, -0.8, -1.2, -0.5]])
SHIFT = torch.tensor([[0.3, -0.1, 0.05, 0.4], [-0.4, 0.2, 0.0, 0.1], [0.1, 0.5, -0.3, 0.0],
                      [-0.05, 0.0, 0.25, -0.2], [0.2, -0.3, 0.1, 0.0], [0.0, 0.15, -0.25, 0.3],
                      [-0.35, 0.1, 0.0, 0.2], [0.05, -0.1, 0.4, -0.15]])
REF = OLD + torch.tensor([0.2, -0.3, 0.1, 0.0]).expand(N, T)
ADV = torch.tensor([1.0, -1.0, 0.5, -0.5, -1.2, 1.2, 0.7, -0.7])
CLIP, KL_COEF = 0.2, 0.005  # Co-rewarding-I's run: kl_loss_coef 0.005, low_var_kl


def published_token_terms(logp: torch.Tensor, rows: slice) -> torch.Tensor:
    """verl's per-token policy loss + kl_coef x low_var_kl on ``rows`` [n, T], written out:
    ratio = exp(logp - old); pg = max(-A ratio, -A clip(ratio, 1 -+ eps));
    kl = ref - logp; low_var_kl = clamp(exp(kl) - kl - 1, -10, 10)."""
    ratio = torch.exp(logp[rows] - OLD[rows])
    a = ADV[rows][:, None]
    pg = torch.maximum(-a * ratio, -a * torch.clamp(ratio, 1 - CLIP, 1 + CLIP))
    kl = REF[rows] - logp[rows]
    return pg + KL_COEF * torch.clamp(torch.exp(kl) - kl - 1, -10, 10)


def token_mean(x: torch.Tensor, rows: slice) -> torch.Tensor:
    """verl's ``masked_mean``: sum(x m) / sum(m) over the rows' tokens."""
    m = MASK[rows].float()
    return (x * m).sum() / m.sum()


def published_loss(logp: torch.Tensor, micro: int) -> torch.Tensor:
    """Co-rewarding-I's dp_actor.py update_policy on this batch: mini-batch = each
    wording's 4 rows, micro-batches of ``micro`` rows, gradient_accumulation = 4 / micro,
    pair k = (original micro-batch k, rephrased micro-batch k)."""
    ga = 4 // micro
    total = torch.zeros(())
    for k in range(ga):
        o, r = slice(k * micro, (k + 1) * micro), slice(4 + k * micro, 4 + (k + 1) * micro)
        total = total + (token_mean(published_token_terms(logp, o), o)
                         + token_mean(published_token_terms(logp, r), r)) / ga
    return total


def ours(logp: torch.Tensor, micro: int, agg: str, groups: torch.Tensor | None) -> torch.Tensor:
    """The update's loss on the same batch: its step normaliser and one ``policy_loss`` per
    micro-batch of ``micro`` rows, summed as their gradients accumulate."""
    mbs = [(slice(s, s + micro), None) for s in range(0, N, micro)]
    minib = list(range(len(mbs)))
    opt = OptimizerStep(None, 1.0)
    denom = step_normaliser(MASK.float(), mbs, minib, agg, opt, groups, None if groups is None else 2)
    total = torch.zeros(())
    for j, (rows, _) in enumerate(mbs):
        loss, _ = grpo.policy_loss(logp[rows], OLD[rows], ADV[rows], MASK[rows], clip_low=CLIP,
                                   clip_high=CLIP, ref_logp=REF[rows], kl_coef=KL_COEF,
                                   kl_kind="low_var_kl", agg=agg, denom=micro_denominator(denom, j))
        total = total + loss
    return total


GROUPS = torch.tensor(wording_groups([2, 3, 0, 1])).repeat_interleave(2)  # [N] 0 asked, 1 rephrased


def test_wording_groups_follow_the_pairing():
    assert GROUPS.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert wording_groups([1, 0, 3, 2]) == (0, 1, 0, 1)  # two blocks (data shards)


@pytest.mark.parametrize("micro", [2, 4])
def test_view_loss_sum_is_the_published_co_rewarding_i_loss(micro):
    """bnpo with view_loss=sum == dp_actor.py's sum of the two wordings' micro-batch token
    means over gradient_accumulation, value and gradient; today's joint losses are not."""
    logp = (OLD + SHIFT).clone().requires_grad_(True)
    want = published_loss(logp, micro)
    (g_want,) = torch.autograd.grad(want, logp)
    got = ours(logp, micro, "bnpo", GROUPS)
    (g_got,) = torch.autograd.grad(got, logp)
    assert float(got.detach()) == pytest.approx(float(want.detach()), rel=1e-6, abs=1e-7)
    assert torch.allclose(g_got, g_want, atol=1e-7)
    # the numbers, re-derived once more by hand on the first pair (micro 2): not weak
    assert abs(float(want.detach())) > 1e-3
    logp = logp.detach()
    want = want.detach()
    joint_bnpo = ours(logp, micro, "bnpo", None)
    joint_token = ours(logp, micro, "token_mean", None)
    # equal micro-batch counts per wording: the joint bnpo is half the published loss
    assert float(joint_bnpo) == pytest.approx(float(want) / 2, rel=1e-6)
    assert float(joint_token) != pytest.approx(float(want), rel=1e-3)


def test_view_loss_sum_with_token_mean_sums_each_wordings_token_mean():
    """token_mean with view_loss=sum: token_mean(asked rows) + token_mean(rephrased rows),
    whatever the micro-batches (here one holding rows of both wordings: micro 8, and
    micro 4 / 2); with one micro-batch per wording it is the published loss too."""
    logp = (OLD + SHIFT).clone()
    asked, reph = slice(0, 4), slice(4, 8)
    want = (token_mean(published_token_terms(logp, asked), asked)
            + token_mean(published_token_terms(logp, reph), reph))
    for micro in (8, 4, 2):
        assert float(ours(logp, micro, "token_mean", GROUPS)) == pytest.approx(float(want), rel=1e-6)
    assert float(published_loss(logp, 4)) == pytest.approx(float(want), rel=1e-6)
    # bnpo over one micro-batch holding both wordings: each wording's part its own mean
    assert float(ours(logp, 8, "bnpo", GROUPS)) == pytest.approx(float(want), rel=1e-6)


def test_group_denominators_by_hand():
    """Per row: bnpo K_v x the micro-batch's own tokens of wording v; token_mean the
    wording's tokens in the step. Micro-batches [0:4] (asked) and [4:8] (rephrased)."""
    masks = [MASK[:4].float(), MASK[4:].float()]
    groups = [GROUPS[:4], GROUPS[4:]]
    bnpo = grpo.group_denominators(masks, groups, "bnpo", 2)
    tm = grpo.group_denominators(masks, groups, "token_mean", 2)
    asked, reph = sum(LENGTHS[:4]), sum(LENGTHS[4:])  # 10 and 10 tokens
    assert [d.tolist() for d in bnpo] == [[asked] * 4, [reph] * 4]  # K_v = 1
    assert [d.tolist() for d in tm] == [[asked] * 4, [reph] * 4]
    # micro-batches of 2: bnpo K_v = 2 x own count, token_mean the wording's whole count
    masks = [MASK[s:s + 2].float() for s in range(0, 8, 2)]
    groups = [GROUPS[s:s + 2] for s in range(0, 8, 2)]
    assert [d.tolist() for d in grpo.group_denominators(masks, groups, "bnpo", 2)] == [
        [10.0, 10.0], [10.0, 10.0], [12.0, 12.0], [8.0, 8.0]]
    assert [d.tolist() for d in grpo.group_denominators(masks, groups, "token_mean", 2)] == [
        [10.0, 10.0]] * 4


def test_default_update_is_unchanged():
    """No groups (grpo.view_loss=joint, the default): the step normaliser is today's."""
    mbs = [(slice(s, s + 2), None) for s in range(0, N, 2)]
    opt = OptimizerStep(None, 1.0)
    assert torch.equal(step_normaliser(MASK.float(), mbs, [0, 1, 2, 3], "bnpo", opt),
                       grpo.micro_batch_denominators([MASK[s:s + 2] for s in range(0, 8, 2)], "bnpo"))
    assert torch.equal(step_normaliser(MASK.float(), mbs, [0, 1, 2, 3], "token_mean", opt),
                       grpo.aggregate_denominator(MASK, "token_mean"))


# ------------------------------------------------------------------ the teacher as KL reference


def test_teacher_reference_is_the_ema_teachers_logprobs_and_the_published_kl(tmp_path):
    """grpo.kl_reference=teacher: the reference pass gives the EMA teacher's log-probs (a
    separate model holding the teacher's weights gives the same), the policy is bit for
    bit itself after it, and the loss's KL term is 0.001 x token_mean(low_var_kl) against
    them, as run_corewarding-II.sh's kl_loss_coef / kl_loss_type with verl's formula."""
    import copy

    from vlcohort.data.problems import Problem
    from vlcohort.processors import adapter_for, tiny_model_path
    from vlcohort.training.agent import Agent
    from vlcohort.training.co_rewarding import TeacherState
    from vlcohort.training.ema import EMATeacher
    from vlcohort.training.logprobs import completion_logprobs
    from vlcohort.training.update import reference_logprobs

    adapter = adapter_for(tiny_model_path("tiny:qwen2", cache_dir=tmp_path))
    model = adapter.load_model().eval()
    teacher = EMATeacher(model, "cpu")
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():  # the policy moves; the teacher follows a quarter of the way
        for p in model.parameters():
            if p.dim() >= 2:
                p.add_(torch.randn(p.shape, generator=gen) * 0.1)
    teacher.update(0.25)
    agent = Agent(name="A", adapter=adapter, model=model, source_state=TeacherState(teacher, "cpu"),
                  kl_reference="teacher")
    rendered = [adapter.render(Problem(id=f"p{i}", text=f"What is {i} + {i}?")) for i in range(2)]
    ids = [[11, 12, 13], [14, 15]]
    batch = adapter.encode_training(adapter.encode_prompts(rendered), ids)
    T = 3
    mask = torch.tensor([[True, True, True], [True, True, False]])
    before = [p.detach().clone() for p in model.parameters()]
    with torch.no_grad():
        ref = reference_logprobs(agent, [(slice(0, 2), batch)], T, 1.0)  # [2, T]
        logp = completion_logprobs(adapter, model, batch, 1.0)[:, :T]
        apart = copy.deepcopy(model)  # a second model holding the teacher's weights
        for n, p in apart.named_parameters():
            if n in teacher.shadow:
                p.copy_(teacher.shadow[n].to(p.dtype))
        want_ref = completion_logprobs(adapter, apart, batch, 1.0)[:, :T]
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), before))
    assert torch.allclose(ref[mask], want_ref[mask], atol=1e-5)
    assert not torch.allclose(ref[mask], logp[mask], atol=1e-3)  # not the policy's: not weak
    # the loss's KL term: advantages 0 leave it alone
    loss, st = grpo.policy_loss(logp, logp, torch.zeros(2), mask, ref_logp=ref, kl_coef=0.001,
                                kl_kind="low_var_kl")
    kl = ref - logp
    hand = torch.clamp(torch.exp(kl) - kl - 1, -10, 10)
    assert float(loss) == pytest.approx(0.001 * float(hand[mask].mean()), rel=1e-5)
    agent.source_state = None  # no teacher: a config error naming the key
    with pytest.raises(ConfigError, match="grpo.kl_reference=teacher"):
        reference_logprobs(agent, [(slice(0, 2), batch)], T, 1.0)


def test_bad_settings_are_config_errors(tmp_path):
    base = ["agents=[{name: A, path: 'tiny:qwen2'}, {name: B, path: 'tiny:qwen2', "
            "reward_source: self_vote}]", "arms=[]"]
    with pytest.raises(ConfigError, match="kl_reference"):
        load_config(None, ["method=co_rewarding_ii", "grpo.kl_reference=ema", *base])
    with pytest.raises(ConfigError, match=r"grpo.kl_reference=teacher.*\['B'\]"):
        load_config(None, ["method=co_rewarding_ii", "grpo.kl_reference=teacher",
                           "grpo.kl_coef=0.001", *base])
    with pytest.raises(ConfigError, match="view_loss"):
        load_config(None, ["method=co_rewarding_ii", "grpo.view_loss=both", *base])
    cfg = load_config(None, ["method=co_rewarding_ii", *base])
    assert (cfg.grpo.kl_reference, cfg.grpo.view_loss) == ("start", "joint")


# ------------------------------------------------------------------ real tiny runs

RUN = ["reward.answer_style=last_letter", "rollout.prompts_per_step=2",
       "rollout.rollouts_per_prompt=8", "rollout.max_new_tokens=16", "grpo.micro_batch_seqs=8",
       "optim.lr=1e-3", "optim.warmup_ratio=0", "log.plot=false", "log.tensorboard=false",
       "run.seed=4", "arms=[]", "eval.every=0", "reward.min_share=0", "reward.tie=first",
       "reward.format_weight=0.5", "prompt.system_prompt=You are a helpful assistant."]


def _text_data(tmp_path, n=6):
    import json

    path, rw = tmp_path / "train.jsonl", tmp_path / "rephrased.jsonl"
    rows, rewrites = [], []
    for i in range(n):
        a, b = i + 1, i + 2
        rows.append({"id": f"q{i}", "question": f"What is {a} + {b}?",
                     "options": [str(a + b), str(a + b + 1), str(a * b + 3)], "answer": "A"})
        rewrites.append({"id": f"q{i}", "question": f"Add {b} to {a}. What do you get?"})
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    rw.write_text("\n".join(json.dumps(r) for r in rewrites) + "\n")
    return path, rw


def test_co_rewarding_i_trains_with_the_published_loss(tmp_path):
    """method co_rewarding_i with grpo.view_loss=sum and loss_agg=bnpo for two steps: it
    trains, and its step-1 loss differs from the joint loss's (same rollouts: the same seed)."""
    path, rw = _text_data(tmp_path)
    agents = f"agents=[{{name: A, path: 'tiny:qwen2', view: {{rewrite_file: '{rw}'}}}}]"
    common = ["train", "method=co_rewarding_i", agents, "data.source=file", f"data.path={path}",
              *RUN, "run.steps=2", "grpo.loss_agg=bnpo"]
    summed, joint = tmp_path / "sum", tmp_path / "joint"
    assert main([*common, "grpo.view_loss=sum", f"run.output_dir={summed}"]) == 0
    assert main([*common, f"run.output_dir={joint}"]) == 0
    a, b = read_metrics(summed / "metrics.jsonl"), read_metrics(joint / "metrics.jsonl")
    assert [r["step"] for r in a] == [1, 2]
    assert "agent/A/loss" in a[0] and "agent/A/loss" in b[0], "no update at step 1: weak test"
    assert a[0]["agent/A/reward/mean"] == b[0]["agent/A/reward/mean"]  # the same rollouts
    assert a[0]["agent/A/loss"] != pytest.approx(b[0]["agent/A/loss"], rel=1e-3)


def test_co_rewarding_ii_trains_with_its_kl_towards_the_teacher(tmp_path):
    """method co_rewarding_ii with the published KL (0.001, low_var_kl, towards the EMA
    teacher) for two steps: no reference copy is loaded, the KL is logged and > 0 once the
    policy has moved from its teacher."""
    common = ["train", "method=co_rewarding", "agents=[{name: A, path: 'tiny:qwen2_5_vl'}]",
              "data.tasks=[shape_colour, shape_kind]", "data.num_problems=16", *RUN,
              "run.steps=2", "grpo.kl_coef=0.001", "grpo.kl_kind=low_var_kl",
              "grpo.kl_reference=teacher", "reward.ema.alpha_start=0.5", "reward.ema.alpha_end=0.1"]
    run = tmp_path / "ii"
    assert main([*common, f"run.output_dir={run}"]) == 0
    recs = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in recs] == [1, 2]
    assert all("agent/A/kl" in r for r in recs), "no KL term: weak test"
    assert recs[1]["agent/A/kl"] > 0  # the policy of step 2 is not its teacher
