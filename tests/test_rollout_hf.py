"""The ``hf`` engine samples from the policy's own distribution, whatever sampling defaults
a checkpoint ships in its generation_config (published chat checkpoints set e.g.
``repetition_penalty``); otherwise the recorded rollout log-probs would not be the
policy's and the importance-sampling correction would "correct" a penalty instead."""

from __future__ import annotations

import pytest
import torch

from vlcohort.data.problems import Problem
from vlcohort.processors import adapter_for
from vlcohort.processors.tiny import tiny_model_path
from vlcohort.rollout.base import SamplingParams
from vlcohort.rollout.hf import HFEngine
from vlcohort.training.logprobs import completion_logprobs


def test_checkpoint_sampling_defaults_do_not_leak_into_rollouts():
    adapter = adapter_for(tiny_model_path("tiny:qwen2"))
    model = adapter.load_model().eval()
    # what a published checkpoint may carry; none of it is the policy's distribution
    gc = model.generation_config
    gc.repetition_penalty, gc.no_repeat_ngram_size = 1.8, 2
    gc.top_k, gc.top_p, gc.temperature, gc.min_new_tokens = 3, 0.5, 0.2, 6
    rendered = [adapter.render(Problem(id=str(i), text=f"Count to {i}."), None, None)
                for i in range(3)]
    engine = HFEngine(adapter, model)
    ro = engine.generate(rendered, 4, SamplingParams(max_new_tokens=12, temperature=1.0),
                         seed=3)
    tb = adapter.encode_training(ro.prompts, ro.completions)
    with torch.no_grad():
        policy = completion_logprobs(adapter, model, tb, 1.0)  # [N, C]
    mask = tb.completion_mask.bool()
    C = ro.logprobs.shape[1]
    assert mask[:, :C].sum() > 20
    torch.testing.assert_close(ro.logprobs[mask[:, :C]], policy[:, :C][mask[:, :C]],
                               atol=1e-4, rtol=1e-4)
    # and the samples really come from the whole distribution (no top-k 3 of the config):
    # over 12 sequences x up to 12 tokens, some sampled token lies outside the top 3
    assert (ro.logprobs[mask[:, :C]] < -2.0).any()


def _next_token_logits(adapter, model, ro) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, C, V] the policy's logits before each completion token (the adapter's forward,
    suppressed ids at -inf) and [N, C] the completion mask, C = the rollouts' width."""
    tb = adapter.encode_training(ro.prompts, ro.completions)
    C = ro.logprobs.shape[1]
    with torch.no_grad():
        hidden = adapter.decoder_hidden_states(model, tb.inputs)  # [N, L, H]
        P = tb.prompt_len
        logits = adapter.lm_head(model)(hidden[:, P - 1: P + C - 1]).float()  # [N, C, V]
    suppressed = adapter.suppressed_token_ids()
    if suppressed:
        logits[..., suppressed] = float("-inf")
    return logits, tb.completion_mask[:, :C].bool()


@pytest.mark.parametrize("top_p, top_k, temperature",
                         [(0.5, 0, 1.0), (1.0, 0, 1.0), (1.0, 3, 1.0), (0.8, 5, 0.7)])
def test_recorded_logprobs_are_those_of_the_truncated_distribution(top_p, top_k, temperature):
    """Issue 14 item 8: with top-p / top-k the engine records each sampled token's log-prob
    under the distribution it was drawn from, the truncated and renormalised one (vLLM's
    processed log-probs); with top_p = 1, top_k = 0 that is the whole softmax. The
    nucleus is computed here from the model's logits, by its definition: the most likely
    tokens, in order, while the mass before them is < top_p."""
    adapter = adapter_for(tiny_model_path("tiny:qwen2"))
    model = adapter.load_model().eval()
    rendered = [adapter.render(Problem(id=str(i), text=f"Count to {i}."), None, None)
                for i in range(3)]
    ro = HFEngine(adapter, model).generate(
        rendered, 4, SamplingParams(max_new_tokens=10, temperature=temperature, top_p=top_p,
                                    top_k=top_k), seed=3)
    logits, mask = _next_token_logits(adapter, model, ro)  # [N, C, V], [N, C]
    p = torch.softmax(logits.double() / temperature, dim=-1)  # [N, C, V]
    order = p.argsort(dim=-1, descending=True)  # [N, C, V]
    p_sorted = p.gather(-1, order)  # [N, C, V] descending
    keep_sorted = torch.ones_like(p_sorted, dtype=torch.bool)
    if top_k > 0:
        keep_sorted[..., top_k:] = False
        p_sorted = torch.where(keep_sorted, p_sorted, 0.0)
        p_sorted = p_sorted / p_sorted.sum(-1, keepdim=True)  # renormalised over the top k
    if top_p < 1:
        before = p_sorted.cumsum(-1) - p_sorted  # [N, C, V] mass of the likelier tokens
        keep_sorted &= before < top_p
    kept_mass = torch.where(keep_sorted, p_sorted, 0.0).sum(-1)  # [N, C]
    rank = order.argsort(dim=-1)  # [N, C, V] each token's place in the order
    ids = torch.tensor([c + [0] * (ro.logprobs.shape[1] - len(c)) for c in ro.completions])
    tok_rank = rank.gather(-1, ids[..., None]).squeeze(-1)  # [N, C]
    tok_p = p_sorted.gather(-1, tok_rank[..., None]).squeeze(-1)  # [N, C]
    assert bool(keep_sorted.gather(-1, tok_rank[..., None]).squeeze(-1)[mask].all()), \
        "a sampled token lies outside the truncated distribution"
    expected = (tok_p / kept_mass).log()  # [N, C]
    assert mask.sum() > 20
    torch.testing.assert_close(ro.logprobs[mask].double(), expected[mask], atol=1e-4, rtol=1e-4)
    full = torch.log_softmax(logits.double() / temperature, dim=-1).gather(-1, ids[..., None]).squeeze(-1)
    if top_p == 1.0 and top_k == 0:  # nothing truncated: the policy's own log-probs
        torch.testing.assert_close(ro.logprobs[mask].double(), full[mask], atol=1e-4, rtol=1e-4)
    else:  # truncated: the recorded log-prob is above the untruncated one somewhere
        assert bool((ro.logprobs[mask].double() > full[mask] + 1e-3).any())


def test_checkpoint_min_p_does_not_leak_into_rollouts():
    """Issue 14 item 15: a checkpoint's ``min_p`` (generate's MinP warper: drop tokens below
    min_p x the top token's probability) is reset too. With min_p = 0.9 leaking, every
    sampled token would have p >= 0.9 p_max; the policy's own samples mostly do not."""
    adapter = adapter_for(tiny_model_path("tiny:qwen2"))
    model = adapter.load_model().eval()
    model.generation_config.min_p = 0.9
    rendered = [adapter.render(Problem(id=str(i), text=f"Count to {i}."), None, None)
                for i in range(3)]
    ro = HFEngine(adapter, model).generate(rendered, 4, SamplingParams(max_new_tokens=12),
                                           seed=3)
    logits, mask = _next_token_logits(adapter, model, ro)  # [N, C, V], [N, C]
    logp = torch.log_softmax(logits, dim=-1)  # [N, C, V]
    below = ro.logprobs < logp.amax(-1) + torch.log(torch.tensor(0.9))  # [N, C]
    assert mask.sum() > 20
    assert bool(below[mask].any()), "every sampled token passed min_p = 0.9: the checkpoint's min_p leaked"
    torch.testing.assert_close(ro.logprobs[mask], logp.gather(
        -1, torch.tensor([c + [0] * (ro.logprobs.shape[1] - len(c)) for c in ro.completions])[..., None]
    ).squeeze(-1)[mask], atol=1e-4, rtol=1e-4)


def test_shared_prompt_prefill_samples_what_a_prefill_per_row_does(monkeypatch):
    """The engine runs each prompt's forward once per group and repeats its KV cache over
    the G samples: the same tokens and, up to float noise, the same recorded log-probs as
    running every row's prompt (left-padded prompts of different lengths)."""
    import vlcohort.rollout.hf as hf

    adapter = adapter_for(tiny_model_path("tiny:qwen2"))
    model = adapter.load_model().eval()
    rendered = [adapter.render(Problem(id=str(i), text="Count " + "and count " * i + "on."),
                               None, None) for i in range(3)]
    sampling = SamplingParams(max_new_tokens=10, temperature=0.9)
    used, real = [], hf.shared_prompt_cache

    def spy(*args):
        out = real(*args)
        used.append(out is not None)
        return out

    monkeypatch.setattr(hf, "shared_prompt_cache", spy)
    shared = HFEngine(adapter, model).generate(rendered, 4, sampling, seed=5)
    monkeypatch.setattr(hf, "shared_prompt_cache", lambda *args: None)
    per_row = HFEngine(adapter, model).generate(rendered, 4, sampling, seed=5)
    assert used == [True]
    assert shared.completions == per_row.completions
    torch.testing.assert_close(shared.logprobs, per_row.logprobs, atol=1e-5, rtol=1e-5)


def test_prompt_cache_is_shared_only_between_equal_rows():
    """Rows that are not groups of equal prompts (or a group of one) keep their own
    prefill."""
    from vlcohort.rollout.hf import shared_prompt_cache

    adapter = adapter_for(tiny_model_path("tiny:qwen2"))
    model = adapter.load_model().eval()
    rendered = [adapter.render(Problem(id=str(i), text=f"Count to {i}."), None, None)
                for i in range(2)]
    grouped = adapter.encode_prompts([r for r in rendered for _ in range(2)]).inputs
    mixed = adapter.encode_prompts(rendered * 2).inputs  # rows 0 1 0 1
    with torch.no_grad():
        assert shared_prompt_cache(model, grouped, 2) is not None
        assert shared_prompt_cache(model, mixed, 2) is None
        assert shared_prompt_cache(model, grouped, 1) is None
