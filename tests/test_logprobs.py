"""The core's log-prob and distribution maths (``vlcohort/training/logprobs.py``), on a
model-free stub adapter: a toy causal model and the four hooks, so every number can be
checked against a direct full-logits computation. The same functions on tiny real models
of every family: ``tests/processors/test_adapters.py`` (log-probs) and
``tests/test_intrinsic.py`` (token statistics)."""

from __future__ import annotations

import math

import pytest
import torch

from vlcohort.processors.base import Adapter, AdapterOptions, TrainingBatch
from vlcohort.training.logprobs import (
    CompletionStats,
    completion_logprobs,
    completion_token_stats,
    distribution_stats,
)

V, H = 11, 6  # vocabulary, hidden size


class ToyModel(torch.nn.Module):
    """A causal toy LM: hidden state t = running mean of the token embeddings up to t."""

    def __init__(self, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.embed = torch.nn.Parameter(torch.randn(V, H, generator=g))
        self.head = torch.nn.Linear(H, V)
        with torch.no_grad():
            self.head.weight.copy_(3 * torch.randn(V, H, generator=g))
            self.head.bias.copy_(torch.randn(V, generator=g))

    def hidden(self, input_ids):  # [N, T] -> [N, T, H]
        e = self.embed[input_ids]  # [N, T, H]
        steps = torch.arange(1, input_ids.shape[1] + 1, dtype=e.dtype)[None, :, None]
        return e.cumsum(1) / steps


class Wrapped(torch.nn.Module):
    """Stands for a PEFT wrapper: the core unwraps it through ``get_base_model``."""

    def __init__(self, base):
        super().__init__()
        self.base = base

    def get_base_model(self):
        return self.base


class StubAdapter(Adapter):
    """No family, no processor: only the hooks the log-prob pass uses."""

    def __init__(self, suppressed=(), softcap=None, chunk=256):
        super().__init__("stub", AdapterOptions(logprob_chunk_tokens=chunk), processor=object())
        self._suppressed, self._softcap = list(suppressed), softcap

    def decoder_hidden_states(self, model, inputs):
        return model.hidden(inputs["input_ids"])

    def lm_head(self, model):
        return model.head

    def logit_softcap(self, model):
        return self._softcap

    def suppressed_token_ids(self):
        return self._suppressed


def _batch() -> TrainingBatch:
    """N = 3 sequences, P = 2 prompt tokens, C = 4 completion tokens; rows 1 and 2 are
    right-padded (completion lengths 4, 2, 1)."""
    prompt = torch.tensor([[1, 2], [3, 4], [5, 6]])  # [N, P]
    comp = torch.tensor([[7, 8, 9, 10], [2, 3, 0, 0], [4, 0, 0, 0]])  # [N, C]
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]])  # [N, C]
    inputs = {"input_ids": torch.cat([prompt, comp], 1),  # [N, T], T = P + C
              "attention_mask": torch.cat([torch.ones_like(prompt), mask], 1)}
    return TrainingBatch(inputs=inputs, completion_ids=comp, completion_mask=mask, prompt_len=2)


def _direct_logits(model, tb, softcap=None):
    """[N, C, V] logits of every completion position from one full-sequence head call."""
    with torch.no_grad():
        z = model.head(model.hidden(tb.inputs["input_ids"])).float()  # [N, T, V]
    if softcap:
        z = torch.tanh(z / softcap) * softcap
    P, C = tb.prompt_len, tb.completion_ids.shape[1]
    return z[:, P - 1: P + C - 1]  # position t predicts completion token t


@pytest.mark.parametrize("softcap", [None, 2.0])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_equal_a_direct_computation(softcap, temperature):
    model, tb = ToyModel(), _batch()
    adapter = StubAdapter(suppressed=[5], softcap=softcap, chunk=3)
    z = _direct_logits(model, tb, softcap).clone()
    z[..., 5] = float("-inf")
    expected = torch.distributions.Categorical(logits=z / temperature).log_prob(tb.completion_ids)
    expected = expected * tb.completion_mask  # [N, C]
    with torch.no_grad():
        lp = completion_logprobs(adapter, Wrapped(model), tb, temperature)
    assert lp.shape == (3, 4) and lp.dtype == torch.float32
    assert torch.allclose(lp, expected, atol=1e-5)
    assert not lp[tb.completion_mask == 0].any()  # padding holds 0
    if softcap:  # the cap is applied: without it the numbers differ
        plain = completion_logprobs(StubAdapter(suppressed=[5]), model, tb, temperature)
        assert not torch.allclose(lp, plain, atol=1e-3)


def test_a_suppressed_id_has_probability_zero():
    model, tb = ToyModel(), _batch()
    with torch.no_grad():
        lp = completion_logprobs(StubAdapter(suppressed=[8]), model, tb)
    assert lp[0, 1] == float("-inf")  # completion token 8 is suppressed
    assert torch.isfinite(lp[0, [0, 2, 3]]).all()


@pytest.mark.parametrize("chunk", [1, 2, 3, 10_000])
def test_chunks_do_not_change_the_numbers(chunk):
    model, tb = ToyModel(), _batch()
    adapter = StubAdapter(suppressed=[5], softcap=3.0)
    with torch.no_grad():
        whole = completion_logprobs(adapter, model, tb, 0.8, chunk_tokens=10_000)
        st_whole = completion_token_stats(adapter, model, tb, 0.8, chunk_tokens=10_000)
        assert torch.allclose(completion_logprobs(adapter, model, tb, 0.8, chunk_tokens=chunk),
                              whole, atol=1e-6)
    st = completion_token_stats(adapter, model, tb, 0.8, chunk_tokens=chunk)
    for key in ("logprobs", "self_certainty", "entropy"):
        assert torch.allclose(getattr(st, key), getattr(st_whole, key), atol=1e-6), key
    # the options' chunk is the default
    with torch.no_grad():
        default = completion_logprobs(StubAdapter(suppressed=[5], softcap=3.0, chunk=chunk),
                                      model, tb, 0.8)
    assert torch.allclose(default, whole, atol=1e-6)


@pytest.mark.parametrize("scaled", [False, True])
def test_token_stats_are_the_distributions_own(scaled):
    """Self-certainty KL(U || p) and entropy H(p) over the allowed ids, p = softmax(z) or
    softmax(z / T); the log-probs are exactly completion_logprobs'."""
    model, tb = ToyModel(), _batch()
    adapter, T = StubAdapter(suppressed=[1, 5]), 0.5
    st = completion_token_stats(adapter, model, tb, T, stats_temperature_scaled=scaled)
    assert isinstance(st, CompletionStats)
    assert torch.equal(st.logprobs, completion_logprobs(adapter, model, tb, T).detach())
    z = _direct_logits(model, tb)  # [N, C, V]
    za = z[..., [v for v in range(V) if v not in (1, 5)]] / (T if scaled else 1.0)  # [N, C, V']
    logp = torch.log_softmax(za, -1)
    kl = -math.log(za.shape[-1]) - logp.mean(-1)  # KL(U || p), [N, C]
    ent = torch.distributions.Categorical(logits=za).entropy()  # [N, C]
    mask = tb.completion_mask.bool()
    assert torch.allclose(st.self_certainty[mask], kl[mask], atol=1e-5)
    assert torch.allclose(st.entropy[mask], ent[mask], atol=1e-5)
    assert not st.self_certainty[~mask].any() and not st.entropy[~mask].any()


def test_logprobs_carry_a_gradient_and_token_stats_do_not():
    model, tb = ToyModel(), _batch()
    adapter = StubAdapter()
    completion_logprobs(adapter, model, tb).sum().backward()
    assert model.embed.grad is not None and model.embed.grad.abs().sum() > 0
    st = completion_token_stats(adapter, model, tb)
    assert not any(t.requires_grad for t in (st.logprobs, st.self_certainty, st.entropy))


def test_distribution_stats_by_hand():
    """Uniform: KL 0, entropy log V. Over 3 allowed ids with one id excluded (even with the
    largest logit), the values of p = (1/2, 1/4, 1/4)."""
    sc, ent = distribution_stats(torch.full((4,), 2.5))
    assert abs(float(sc)) < 1e-6 and abs(float(ent) - math.log(4)) < 1e-6
    logits = torch.log(torch.tensor([0.5, 0.25, 0.25, 1.0])) + 7.0
    logits[3] = 500.0  # excluded: must not matter, nor spoil the stable exp
    sc, ent = distribution_stats(logits, excluded=[3])
    # KL(U || p) = sum_v 1/3 * log((1/3) / p_v) over the three allowed ids
    expected_kl = sum(1 / 3 * math.log((1 / 3) / q) for q in (0.5, 0.25, 0.25))
    expected_h = -sum(q * math.log(q) for q in (0.5, 0.25, 0.25))
    # float32: lse - mean(z) loses ~1e-6 relative to the logits' offset of 7
    assert abs(float(sc) - expected_kl) < 2e-5 and abs(float(ent) - expected_h) < 2e-5
    assert float(logits[3]) == 500.0  # the input is left as it was


