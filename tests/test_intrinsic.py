"""Intrinsic reward sources: self-certainty (INTUITOR) and entropy (RENT).

The per-token statistics come from the core's chunked LM-head loop
(``vlcohort/training/logprobs.py``; its model-free tests are in ``test_logprobs.py``); here
they are checked against a direct computation on the full logits of an ordinary
``model(**inputs)`` forward of tiny real models, and the rewards, the advantages and whole
training runs are checked from config.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

from tests.helpers.train import FAST as TRAIN_FAST
from vlcohort.cli import main
from vlcohort.config import load_config
from vlcohort.data.problems import Problem
from vlcohort.data.synthetic import make_dataset
from vlcohort.monitoring.metrics import documented, read_metrics
from vlcohort.processors import adapter_for, tiny_model_path
from vlcohort.processors.tiny import sharpen
from vlcohort.rollout.base import SamplingParams
from vlcohort.training import grpo
from vlcohort.training.agent import build_agent
from vlcohort.training.logprobs import completion_logprobs, completion_token_stats
from vlcohort.training.rewards import intrinsic_rewards, intrinsic_scored
from vlcohort.training.update import token_stats, update_agent
from vlcohort.typed_yaml import ConfigError

FAST = [*TRAIN_FAST, "checkpoint.at_end=false"]
FAMILIES = ["qwen2_5_vl", "qwen2"]  # a VLM with suppressed placeholder ids, a text LM


@pytest.fixture(autouse=True)
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """name -> (adapter, model). Weights re-drawn larger: a fresh tiny model is nearly
    uniform, which would make every comparison trivially close."""
    folder = tmp_path_factory.mktemp("tiny-intrinsic")
    out = {}
    for name in FAMILIES:
        adapter = adapter_for(tiny_model_path(f"tiny:{name}", cache_dir=folder))
        model = sharpen(adapter.load_model(), seed=3)
        out[name] = (adapter, model)
    return out


def _batch(adapter, G: int = 1):
    """Two prompts (an image each for a VLM) with completions of different lengths, so the
    batch has right padding; each prompt repeated G times."""
    if adapter.is_multimodal:
        probs = make_dataset(("shape_colour",), n=2, seed=1)
    else:
        probs = [Problem(id="t0", text="What is 2 + 3?", options=["4", "5"], gold="B"),
                 Problem(id="t1", text="Name a prime number below ten.", gold="7")]
    rendered = [adapter.render(p) for p in probs for _ in range(G)]
    prompts = adapter.encode_prompts(rendered)
    texts = ["The answer is B, because the picture shows it clearly.", "A", "<answer>C</answer>",
             "I think it is 7 or maybe 5."]
    completions = [adapter.tokenizer.encode(texts[n % len(texts)], add_special_tokens=False)
                   for n in range(len(rendered))]
    return adapter.encode_training(prompts, completions)


def _direct(adapter, model, tb, temperature: float = 1.0):
    """Reference: full [N, C, V] logits of an ordinary forward, KL(U || p) through
    ``F.kl_div`` over the allowed ids and H(p) through ``Categorical.entropy``."""
    with torch.no_grad():
        logits = model(**tb.inputs).logits.float()  # [N, P + C, V]
    P, C = tb.prompt_len, tb.completion_ids.shape[1]
    z = logits[:, P - 1: P + C - 1] / temperature  # [N, C, V]
    allowed = torch.ones(z.shape[-1], dtype=torch.bool)
    allowed[adapter.suppressed_token_ids()] = False
    za = z[..., allowed]  # [N, C, V'] the distribution lives on the allowed ids
    logp = torch.log_softmax(za, -1)
    uniform = torch.full_like(logp, 1.0 / za.shape[-1])
    kl = F.kl_div(logp, uniform, reduction="none").sum(-1)  # [N, C] KL(U || p)
    ent = torch.distributions.Categorical(logits=za).entropy()  # [N, C]
    return kl, ent, za


@pytest.mark.parametrize("name", FAMILIES)
def test_stats_match_a_direct_computation_on_full_logits(loaded, name):
    adapter, model = loaded[name]
    tb = _batch(adapter, G=2)
    mask = tb.completion_mask.bool()
    assert (~mask).any(), "no padding in the batch: weak test"
    with torch.no_grad():
        st = completion_token_stats(adapter, model, tb)
        lp = completion_logprobs(adapter, model, tb)
    kl, ent, za = _direct(adapter, model, tb)
    assert torch.equal(st.logprobs, lp)  # the same chunk loop, the same numbers
    assert torch.allclose(st.self_certainty[mask], kl[mask], atol=1e-4)
    assert torch.allclose(st.entropy[mask], ent[mask], atol=1e-4)
    # padded positions hold 0; real values are not trivial
    assert not st.self_certainty[~mask].any() and not st.entropy[~mask].any()
    assert float(st.self_certainty[mask].min()) > 1e-3
    assert float(st.entropy[mask].max()) < math.log(za.shape[-1])


@pytest.mark.parametrize("name", FAMILIES)
def test_chunked_equals_unchunked(loaded, name):
    adapter, model = loaded[name]
    tb = _batch(adapter)
    with torch.no_grad():
        whole = completion_token_stats(adapter, model, tb, chunk_tokens=10_000)
        chunked = completion_token_stats(adapter, model, tb, chunk_tokens=1)
    for key in ("logprobs", "self_certainty", "entropy"):
        assert torch.allclose(getattr(whole, key), getattr(chunked, key), atol=1e-6), key


@pytest.mark.parametrize("name", FAMILIES)
def test_a_completion_alone_and_padded_in_a_batch(loaded, name):
    """Right padding after a short completion changes neither its statistics nor its reward."""
    adapter, model = loaded[name]
    tb = _batch(adapter)  # row 1 is the short one, padded to row 0's length
    n = int(tb.completion_mask[1].sum())
    assert n < tb.completion_mask.shape[1]
    alone = adapter.encode_training(
        adapter.encode_prompts([adapter.render(p) for p in (
            make_dataset(("shape_colour",), n=2, seed=1) if adapter.is_multimodal else
            [Problem(id="t1", text="Name a prime number below ten.", gold="7")])][-1:]),
        [tb.completion_ids[1, :n].tolist()])
    with torch.no_grad():
        st = completion_token_stats(adapter, model, tb)
        st1 = completion_token_stats(adapter, model, alone)
    assert torch.allclose(st.self_certainty[1, :n], st1.self_certainty[0], atol=1e-5)
    assert torch.allclose(st.entropy[1, :n], st1.entropy[0], atol=1e-5)
    # whatever sits in padded positions, the rewards read only real tokens
    mask = tb.completion_mask.float()
    noisy_sc = st.self_certainty.masked_fill(mask == 0, float("inf"))
    noisy_ent = st.entropy.masked_fill(mask == 0, float("nan"))
    for source in ("self_certainty", "entropy"):
        clean = intrinsic_rewards(source, st.self_certainty, st.entropy, mask, 2)
        noisy = intrinsic_rewards(source, noisy_sc, noisy_ent, mask, 2)
        assert torch.allclose(clean, noisy)
    expected = st1.self_certainty[0].mean()
    got = intrinsic_rewards("self_certainty", st.self_certainty, st.entropy, mask, 2)[0, 1]
    assert torch.allclose(got, expected, atol=1e-5)
    got = intrinsic_rewards("entropy", st.self_certainty, st.entropy, mask, 2)[0, 1]
    assert torch.allclose(got, -st1.entropy[0].mean(), atol=1e-5)


@pytest.mark.parametrize("name", FAMILIES)
def test_temperature_setting(loaded, name):
    """Unscaled (default): the statistics ignore the sampler's temperature, the log-probs
    do not. Scaled: the statistics are of softmax(logits / T)."""
    adapter, model = loaded[name]
    tb = _batch(adapter)
    mask = tb.completion_mask.bool()
    with torch.no_grad():
        t1 = completion_token_stats(adapter, model, tb, temperature=1.0)
        raw = completion_token_stats(adapter, model, tb, temperature=0.5)
        scaled = completion_token_stats(adapter, model, tb, temperature=0.5,
                                        stats_temperature_scaled=True)
        lp = completion_logprobs(adapter, model, tb, temperature=0.5)
    assert torch.equal(raw.logprobs, lp) and torch.equal(scaled.logprobs, lp)
    assert not torch.allclose(raw.logprobs, t1.logprobs)
    assert torch.allclose(raw.self_certainty, t1.self_certainty, atol=1e-6)
    assert torch.allclose(raw.entropy, t1.entropy, atol=1e-6)
    kl, ent, _ = _direct(adapter, model, tb, temperature=0.5)
    assert torch.allclose(scaled.self_certainty[mask], kl[mask], atol=1e-4)
    assert torch.allclose(scaled.entropy[mask], ent[mask], atol=1e-4)
    # a colder distribution is more certain and has less entropy
    assert float(scaled.self_certainty[mask].mean()) > float(raw.self_certainty[mask].mean())
    assert float(scaled.entropy[mask].mean()) < float(raw.entropy[mask].mean())


@pytest.mark.parametrize("scale", ["group", "none"])
def test_the_log_v_constant_cancels_in_group_normalisation(loaded, scale):
    """INTUITOR's code rewards logsumexp(z) - mean(z) = KL(U || p) + log V; ours keeps the
    -log V. Both give the same advantages, since a constant cancels in every group."""
    adapter, model = loaded["qwen2"]
    G = 4
    tb = _batch(adapter, G=G)
    with torch.no_grad():
        st = completion_token_stats(adapter, model, tb)
    mask = tb.completion_mask.float()
    ours = intrinsic_rewards("self_certainty", st.self_certainty, st.entropy, mask, G)  # [B, G]
    _, _, za = _direct(adapter, model, tb)
    per_token = torch.logsumexp(za, -1) - za.mean(-1)  # [N, C] INTUITOR's form
    theirs = ((per_token * mask).sum(1) / mask.sum(1)).reshape(-1, G)  # [B, G]
    log_v = math.log(za.shape[-1])
    assert torch.allclose(theirs - ours, torch.full_like(ours, log_v), atol=1e-4)
    a_ours = grpo.group_advantages(ours, scale=scale)
    a_theirs = grpo.group_advantages(theirs, scale=scale)
    assert a_ours.abs().max() > 0.1  # the groups really do differ
    assert torch.allclose(a_ours, a_theirs, atol=1e-3)


def test_entropy_reward_is_the_negative_mean_token_entropy():
    ent = torch.tensor([[1.0, 3.0, 9.0], [2.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    r = intrinsic_rewards("entropy", torch.zeros_like(ent), ent, mask, 2)
    assert r.tolist() == [[-2.0, -2.0]]
    with pytest.raises(ValueError, match="unknown intrinsic reward source"):
        intrinsic_rewards("vibes", ent, ent, mask, 2)


@pytest.mark.parametrize("epochs", [1, 2])
def test_the_intrinsic_pass_serves_as_the_old_logprobs(epochs):
    """Passing the intrinsic pass's log-probs (and micro-batches) into the update gives the
    same step as letting the update find its own old log-probs (the on-policy shortcut
    with one epoch, a no-grad pass with two)."""
    cfg = load_config(None, [*FAST, "method=intuitor", "rollout.rollouts_per_prompt=4",
                             "rollout.max_new_tokens=8", "grpo.micro_batch_seqs=4",
                             f"grpo.ppo_epochs={epochs}", "grpo.max_grad_norm=0"])
    agent = build_agent(cfg.agents[0], cfg)
    rendered = [agent.adapter.render(p) for p in make_dataset(("shape_colour",), n=2, seed=0)]
    rollouts = agent.engine.generate(rendered, 4, SamplingParams(max_new_tokens=8), seed=0)
    st = token_stats(agent, rendered, rollouts, cfg.grpo, 1.0, temperature_scaled=False)
    rewards = intrinsic_rewards("self_certainty", st.self_certainty, st.entropy, st.mask, 4)
    adv = grpo.group_advantages(rewards).reshape(-1)  # [N]
    start = {n: p.detach().clone() for n, p in agent.model.named_parameters()}
    deltas = []
    for reuse in (False, True):
        with torch.no_grad():
            for n, p in agent.model.named_parameters():
                p.copy_(start[n])
        # SGD: the step is proportional to the gradient (AdamW's first step is ~lr * sign)
        agent.optimizer = torch.optim.SGD(agent.model.parameters(), lr=1.0)
        update_agent(agent, rendered, rollouts, adv, cfg.grpo, 1.0, length_norm=8,
                     old=st.old() if reuse else None)
        deltas.append({n: p.detach() - start[n] for n, p in agent.model.named_parameters()})
    assert any(d.abs().max() > 0 for d in deltas[0].values()), "the update changed nothing"
    for n in deltas[0]:
        assert torch.allclose(deltas[0][n], deltas[1][n], atol=1e-6, rtol=1e-4), n


def test_prompts_of_other_shards_and_non_finite_rewards_give_no_signal():
    r = torch.tensor([[1.0, 2.0], [float("nan"), 0.5]])  # [2 owned prompts, G]
    sc = intrinsic_scored(r, 4, [1, 3])  # agent owns prompts 1 and 3 of 4 (decouple)
    assert sc.valid.tolist() == [False, True, False, False]
    assert sc.rewards.tolist() == [[0.0, 0.0], [1.0, 2.0], [0.0, 0.0], [0.0, 0.0]]
    adv = grpo.group_advantages(sc.rewards, valid=sc.valid)  # [4, G]: no error on the NaN
    assert adv[[0, 2, 3]].eq(0).all() and adv[1].abs().sum() > 0
    assert sc.select([1, 3]).valid.tolist() == [True, False]


# ------------------------------------------------------------------ config and training


def test_method_presets_and_per_agent_override():
    one = "agents=[{name: A, path: 'tiny:qwen2'}]"
    assert load_config(None, ["method=intuitor", one]).reward.source == "self_certainty"
    cfg = load_config(None, ["method=rent", one])
    assert cfg.reward.source == "entropy" and not cfg.reward.intrinsic_temperature_scaled
    cfg = load_config(None, ["method=co_rl", "agents.1.reward_source=self_certainty"])
    assert cfg.reward.source == "peer_vote" and cfg.agents[1].reward_source == "self_certainty"
    with pytest.raises(ConfigError, match=r"agents\.1\.reward_source: .luck. is not one of"):
        load_config(None, ["method=co_rl", "agents.1.reward_source=luck"])
    with pytest.raises(ConfigError, match=r"agents\.0\.reward_source=peer_vote needs at least 2"):
        load_config(None, ["method=intuitor", one, "agents.0.reward_source=peer_vote"])
    assert load_config(None, ["method=intuitor", "arms=[intuitor, rent]", one]).arms == ["intuitor", "rent"]


def _text_problems(path):
    """A small local JSONL of text multiple-choice problems (for the text-only model)."""
    rows = [{"id": f"q{i}", "question": f"What is {i} + {i}?",
             "options": [str(2 * i), str(2 * i + 1), str(2 * i + 2)], "answer": "A"}
            for i in range(8)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _check_run(run, agents_with_stats, steps):
    recs = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in recs] == list(range(1, steps + 1))
    undocumented = {k for r in recs for k in r if not documented(k)}
    assert not undocumented, undocumented
    for name in agents_with_stats:
        for r in recs:
            assert r[f"agent/{name}/self_certainty"] > 0 and r[f"agent/{name}/entropy"] > 0
            assert r[f"agent/{name}/teacher_abstain"] == 0.0
    assert any(f"agent/{n}/loss" in r for r in recs for n in agents_with_stats), "never updated"
    return recs


def test_intuitor_one_agent_trains_from_config(tmp_path):
    run = tmp_path / "intuitor"
    assert main(["train", *FAST, "method=intuitor", "run.steps=2", "log.plot=false",
                 f"run.output_dir={run}"]) == 0
    recs = _check_run(run, ["A"], 2)
    r = recs[0]
    assert r["agent/A/reward/std"] > 0 and "timing/intrinsic" in r
    # the reward is a per-completion mean of the logged per-token quantity
    assert 0 < r["agent/A/reward/mean"] < 2 * r["agent/A/self_certainty"]
    assert load_config(run / "config.yaml").reward.source == "self_certainty"


def test_rent_one_text_agent_trains_from_config(tmp_path):
    """Text-only model, local data file, two PPO epochs (the intrinsic pass's log-probs are
    the old log-probs) and temperature-scaled statistics."""
    run = tmp_path / "rent"
    data = _text_problems(tmp_path / "text.jsonl")
    assert main(["train", *FAST, "method=rent", "agents=[{name: T, path: 'tiny:qwen2'}]",
                 "data.source=file", f"data.path={data}", "data.preset=generic",
                 "grpo.ppo_epochs=2", "rollout.temperature=0.8",
                 "reward.intrinsic_temperature_scaled=true", "run.steps=2",
                 f"run.output_dir={run}"]) == 0
    recs = _check_run(run, ["T"], 2)
    r = recs[0]
    # entropy reward: minus a per-completion mean of the logged per-token entropy
    assert r["agent/T/reward/mean"] < 0 and abs(r["agent/T/reward/mean"]) < 2 * r["agent/T/entropy"]
    assert 0.99 < r["agent/T/is/mean"] < 1.01


def test_cohort_with_one_intrinsic_agent_and_one_peer_vote_agent(tmp_path):
    """A learns from B's votes; B is rewarded by its own self-certainty, and still votes."""
    run = tmp_path / "mixed"
    assert main(["train", *FAST, "method=co_rl",
                 "agents=[{name: A, path: 'tiny:qwen2_5_vl'}, "
                 "{name: B, path: 'tiny:qwen2_5_vl', reward_source: self_certainty}]",
                 "rollout.max_new_tokens=8", "run.steps=2", f"run.output_dir={run}"]) == 0
    recs = _check_run(run, ["B"], 2)
    for r in recs:
        assert "agent/A/self_certainty" not in r  # A's reward is a peer vote: no pass
        assert "agent/B/pseudo_label/acc" not in r  # B has no teacher
        assert r["cohort/agreement"] is not None and 0 <= r["cohort/agreement"] <= 1
        assert "agent/A/vote/acc" in r and "agent/B/vote/acc" in r
    cfg = load_config(run / "config.yaml")
    assert cfg.reward.source == "peer_vote" and cfg.agents[1].reward_source == "self_certainty"
