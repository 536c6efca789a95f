"""Shared-prefix updates (``grpo.shared_prefix``): a group's prompt once, then each of its
completions, kept apart by a 4-D attention mask (``Adapter.encode_shared_prefix``,
``vlcohort/training/shared_prefix.py``). Per supported family, in fp32: the shared
batch's log-probs, token statistics and gradients (full fine-tune and LoRA) equal the
unshared padded batch's; a completion never sees a sibling (with a control showing the
check can fail); families that cannot share fall back; and a 3-step training run with it
on equals one with it off.

Supported now: the text adapter's model types (tiny Qwen2 here; the real SmolLM2, a
Llama, in ``bench/shared_prefix.py``). VLM families declare ``shared_prefix = False``."""

from __future__ import annotations

import json

import pytest
import torch

from vlcohort.config import load_config
from vlcohort.data.problems import Problem
from vlcohort.processors import AdapterOptions, adapter_for
from vlcohort.processors.tiny import sharpen, tiny_model_path
from vlcohort.rollout.base import Rollouts
from vlcohort.training.logprobs import completion_logprobs, completion_token_stats
from vlcohort.training.update import micro_batches, row_indices

ATOL = 1e-5  # fp32 log-probs of a tiny model; measured max |shared - padded| ~ 5e-6

TEXTS = ["Which colour is the larger shape, and which is smaller?", "Count it.",
         "What is 2 + 2 ? Answer briefly and show the work in two short lines."]


@pytest.fixture(autouse=True)
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


def _setup(attn: str = "sdpa", spec: str = "tiny:qwen2"):
    adapter = adapter_for(tiny_model_path(spec), AdapterOptions(attn_implementation=attn))
    model = sharpen(adapter.load_model().eval(), 5)  # a peaked distribution: a sharp check
    rendered = [adapter.render(Problem(id=f"p{i}", text=t, images=[])) for i, t in enumerate(TEXTS)]
    return adapter, model, rendered


def _completions(lengths, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(10, 200, (n,), generator=g).tolist() for n in lengths]


# 3 prompts x G = 3: different lengths, an empty completion, a long one
LENGTHS = (5, 17, 0, 9, 2, 30, 1, 12, 7)
G = 3


def _padded(adapter, rendered, comps):
    return adapter.encode_training(adapter.encode_prompts([rendered[n // G] for n in range(len(comps))]),
                                   comps)


def _shared(adapter, model, rendered, comps, order=None):
    """The shared batch of rows ``order`` (default all, in order)."""
    from vlcohort.training.shared_prefix import shared_batch

    order = list(range(len(comps))) if order is None else order
    return shared_batch(adapter, model, rendered, _rollouts(comps), order)


def _rollouts(completions) -> Rollouts:
    T = max(1, max(len(c) for c in completions))
    return Rollouts(prompts=None, completions=completions, logprobs=torch.zeros(len(completions), T),
                    texts=[""] * len(completions), finished=[True] * len(completions),
                    group_size=G)


def _grads(adapter, model, batch, weights) -> dict[str, torch.Tensor]:
    """Gradients of sum(weights x log-probs) over the model's trainable parameters."""
    model.zero_grad(set_to_none=True)
    lp = completion_logprobs(adapter, model, batch)
    (lp * weights).sum().backward()
    return {n: p.grad.detach().clone() for n, p in model.named_parameters()
            if p.requires_grad and p.grad is not None}


def _assert_same_grads(a: dict, b: dict) -> None:
    assert a.keys() == b.keys() and a
    for name in a:
        scale = float(a[name].abs().max())
        diff = float((a[name] - b[name]).abs().max())
        assert diff <= ATOL + 1e-4 * scale, (name, diff, scale)


def _check_same(adapter, model, padded, shared) -> None:
    with torch.no_grad():
        a = completion_logprobs(adapter, model, padded)
        b = completion_logprobs(adapter, model, shared)
    assert a.shape == b.shape == padded.completion_ids.shape
    assert float((a - b).abs().max()) < ATOL
    assert bool((b[padded.completion_mask == 0] == 0).all())
    w = torch.randn(a.shape, generator=torch.Generator().manual_seed(1))
    _assert_same_grads(_grads(adapter, model, padded, w), _grads(adapter, model, shared, w))
    sa, sb = completion_token_stats(adapter, model, padded), completion_token_stats(adapter, model, shared)
    for key in ("logprobs", "entropy", "self_certainty"):
        assert float((getattr(sa, key) - getattr(sb, key)).abs().max()) < ATOL


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_shared_logprobs_and_gradients_equal_unshared(attn):
    adapter, model, rendered = _setup(attn)
    assert adapter.can_share_prefix(model)
    comps = _completions(LENGTHS)
    padded = _padded(adapter, rendered, comps)
    shared = _shared(adapter, model, rendered, comps)
    mask = shared.inputs["attention_mask"]
    assert mask.dim() == 4 and mask.dtype == (torch.bool if attn == "sdpa" else torch.float32)
    # each prompt once: the shared rows hold every real token but (G - 1) prompts' fewer
    prompt = [int(adapter.encode_prompts([r]).inputs["attention_mask"].sum()) for r in rendered]
    assert int((shared.inputs["input_ids"] != adapter.pad_token_id()).sum()) <= sum(prompt) + sum(LENGTHS)
    real = int(padded.inputs["attention_mask"].sum())
    assert shared.inputs["input_ids"].numel() < real
    _check_same(adapter, model, padded, shared)


def test_shared_rows_in_any_order_and_partial_groups():
    """A micro-batch holding part of a group, rows out of order (a token-budget
    micro-batch): units are the prompts present, rows keep their order."""
    adapter, model, rendered = _setup()
    comps = _completions(LENGTHS)
    order = [7, 1, 0, 8, 4]
    padded = adapter.encode_training(adapter.encode_prompts([rendered[n // G] for n in order]),
                                     [comps[n] for n in order])
    shared = _shared(adapter, model, rendered, comps, order)
    _check_same(adapter, model, padded, shared)


def test_a_completion_never_sees_a_sibling():
    """Changing completion 0's tokens changes its own log-probs and no sibling's (nor
    another unit's); control: the same row read with a plain causal mask lets the
    siblings see completion 0, so the check can fail."""
    adapter, model, rendered = _setup()
    comps = _completions((6, 4, 5, 3, 3, 3))
    changed = [[t + 1 for t in comps[0]], *comps[1:]]
    with torch.no_grad():
        a = completion_logprobs(adapter, model, _shared(adapter, model, rendered, comps))
        s2 = _shared(adapter, model, rendered, changed)
        b = completion_logprobs(adapter, model, s2)
        assert float((b[0] - a[0]).abs().max()) > 1e-3
        assert torch.equal(b[1:], a[1:])
        W = s2.inputs["input_ids"].shape[1]
        causal = torch.ones(W, W, dtype=torch.bool).tril().expand_as(s2.inputs["attention_mask"])
        leaky = type(s2)(inputs={**s2.inputs, "attention_mask": causal},
                         completion_ids=s2.completion_ids, completion_mask=s2.completion_mask,
                         prompt_len=s2.prompt_len, packed_index=s2.packed_index)
        c = completion_logprobs(adapter, model, leaky)
        assert float((c[1:3] - b[1:3]).abs().max()) > 1e-4


def test_shared_lora_gradients_equal_unshared():
    """A LoRA policy (the project's own wrapping, adapters made non-zero so every LoRA
    matrix has a gradient): shared LoRA gradients equal the padded ones."""
    from vlcohort.training.agent import build_agent

    cfg = load_config(None, ["method=gt_reward", "agents=[{name: A, path: 'tiny:qwen2'}]",
                             "agents.0.lora_rank=4", "rollout.prompts_per_step=3",
                             f"rollout.rollouts_per_prompt={G}"])
    agent = build_agent(cfg.agents[0], cfg)
    adapter, model = agent.adapter, agent.model
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
    rendered = [adapter.render(Problem(id=f"p{i}", text=t, images=[])) for i, t in enumerate(TEXTS)]
    comps = _completions(LENGTHS)
    padded, shared = _padded(adapter, rendered, comps), _shared(adapter, model, rendered, comps)
    w = torch.randn(padded.completion_ids.shape, generator=g)
    a, b = _grads(adapter, model, padded, w), _grads(adapter, model, shared, w)
    assert a and all("lora_" in n for n in a)
    _assert_same_grads(a, b)


def test_micro_batches_share_only_when_asked_supported_and_worth_it():
    from types import SimpleNamespace

    adapter, model, rendered = _setup()
    agent = SimpleNamespace(adapter=adapter, model=model)
    ro = _rollouts(_completions(LENGTHS))
    off = micro_batches(agent, rendered, ro, 3, packing=True)
    on = micro_batches(agent, rendered, ro, 3, packing=True, shared_prefix=True)
    # the same rows per micro-batch, in their own order; each a one-prompt unit
    assert [rows for rows, _ in on] == [slice(0, 3), slice(3, 6), slice(6, 9)]
    assert [sorted(row_indices(r)) for r, _ in off] == [row_indices(r) for r, _ in on]
    assert all(tb.inputs["attention_mask"].dim() == 4 for _, tb in on)
    # one completion per prompt (G = 1): nothing to share, the unshared batch
    ro1 = Rollouts(prompts=None, completions=_completions((4, 4, 4)), logprobs=torch.zeros(3, 4),
                   texts=[""] * 3, finished=[True] * 3, group_size=1)
    (_, tb), = micro_batches(agent, rendered, ro1, 3, shared_prefix=True)
    assert tb.inputs["attention_mask"].dim() == 2
    # a family that cannot share keeps the unshared path whatever grpo.shared_prefix says
    adapter.shared_prefix = False
    kept = micro_batches(agent, rendered, ro, 3, packing=True, shared_prefix=True)
    for (ra, x), (rb, y) in zip(off, kept):
        assert row_indices(ra) == row_indices(rb)
        assert torch.equal(x.inputs["input_ids"], y.inputs["input_ids"])


def test_where_a_model_cannot_share_it_falls_back():
    adapter, model, _ = _setup()
    assert adapter.can_share_prefix(model)
    model.config.model_type = "gemma3_text"  # served as the causal-LM fallback: unshared
    assert not adapter.can_share_prefix(model)
    model.config.model_type = "qwen2"
    model.config.layer_types = ["full_attention", "sliding_attention"]  # a window the mask would lose
    assert not adapter.can_share_prefix(model)
    model.config.layer_types = ["full_attention"] * 2
    model.config._attn_implementation = "flash_attention_2"  # takes no 4-D mask
    assert not adapter.can_share_prefix(model)


def test_only_the_text_adapter_declares_shared_prefix():
    """VLM families (M-RoPE, image tokens, their own mask rules) are the next slice: until
    their exactness is tested they declare no shared prefix and keep the unshared path."""
    import vlcohort.processors.registry as registry
    from vlcohort.processors.family import ADAPTERS

    registry.discover_families()
    sharing = {cls.__name__ for cls in ADAPTERS.values() if cls.shared_prefix}
    assert sharing == {"TextLMAdapter"}
    assert all(not cls.shared_prefix for cls in ADAPTERS.values() if cls.is_multimodal)


def _train(tmp_path, shared: bool):
    """3 steps of a text run (self-certainty rewards: every step updates), its records and
    final weights."""
    import vlcohort.recipes.step as step_mod
    from vlcohort.recipes.cohort import setup

    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": q, "answer": "1"}) + "\n"
                            for i, q in enumerate(TEXTS * 2)))
    cfg = load_config(None, ["method=intuitor", "agents=[{name: A, path: 'tiny:qwen2'}]",
                             "data.source=file", f"data.path={data}", "data.shuffle=false",
                             "run.steps=3", "arms=[]", "eval.every=0", "log.plot=false",
                             "log.tensorboard=false", "rollout.prompts_per_step=2",
                             "rollout.rollouts_per_prompt=4", "rollout.max_new_tokens=12",
                             "grpo.micro_batch_seqs=4", "grpo.kl_coef=0.1", "run.seed=3",
                             f"grpo.shared_prefix={str(shared).lower()}",
                             "checkpoint.at_end=false",
                             f"run.output_dir={tmp_path / ('on' if shared else 'off')}"])
    run = setup(cfg)
    adapter = run.agents[0].adapter
    calls, encode = [], adapter.encode_shared_prefix

    def spy(*args, **kwargs):
        calls.append(1)
        return encode(*args, **kwargs)

    adapter.encode_shared_prefix = spy
    start = [p.detach().clone() for p in run.agents[0].model.parameters()]
    records = [step_mod.train_step(run, step) for step in (1, 2, 3)]
    assert bool(calls) == shared
    assert any(not torch.equal(p, q) for p, q in zip(start, run.agents[0].model.parameters()))
    return records, [p.detach().clone() for p in run.agents[0].model.parameters()]


def test_three_training_steps_with_shared_prefix_equal_without(tmp_path):
    off, w_off = _train(tmp_path, False)
    on, w_on = _train(tmp_path, True)
    for a, b in zip(off, on):
        for key in a:
            if key.startswith("timing/") or not isinstance(a[key], (int, float)):
                continue
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-5, nan_ok=True), key
    losses = [k for k in on[0] if k.endswith("loss")]
    assert losses and all(on[i][k] != 0 for i in range(3) for k in losses), losses
    for x, y in zip(w_off, w_on):
        assert float((x - y).abs().max()) <= 1e-5
