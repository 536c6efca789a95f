"""The policy's log-probs (the core's chunked pass) equal the ``hf`` engine's recorded
sampling log-probs on real pretrained checkpoints, in fp32.

The engine records log p(token) during ``generate`` (incremental decoding with a KV
cache, one position at a time); the trainer recomputes them in one full-sequence forward
with the LM head run over chunks. The two differ only by float reassociation, so the gap
is the numeric rollout/policy mismatch the IS correction sees at ratio 1. Measured on a
2-core CPU (24 tokens x 4 sequences, two runs): SmolLM2-135M-Instruct max 1.7-2.0e-5,
mean 2.9-3.0e-6; Gemma-3-270M max 0.9-1.1e-5, mean 2.0-2.3e-6 (nats per token).
"""

from __future__ import annotations

import torch

from vlcohort.data.problems import Problem
from vlcohort.rollout.base import SamplingParams
from vlcohort.rollout.hf import HFEngine
from vlcohort.training.logprobs import completion_logprobs

#: Gap bound in nats per token, fp32: 1e-4 is ~5x the largest gap measured on either model.
MAX_GAP = 1e-4

PROBLEMS = [Problem("add", "What is 12 + 30?"),
            Problem("apples", "Tom has 3 apples and buys 4 more. How many apples does he have?")]
INSTRUCTION = "Put the final answer within \\boxed{}."


def test_policy_logprobs_equal_the_hf_engines_recorded_ones(real_model, record_property):
    a, model = real_model.adapter, real_model.model
    rendered = [a.render(p, "You are a helpful assistant.", INSTRUCTION) for p in PROBLEMS]
    ro = HFEngine(a, model).generate(rendered, group_size=2,
                                     sampling=SamplingParams(max_new_tokens=24), seed=0)
    batch = a.encode_training(ro.prompts, ro.completions)  # N = 4 sequences, T <= 24
    with torch.no_grad():
        lp = completion_logprobs(a, model, batch)  # [N, T]
    mask = batch.completion_mask.bool()
    assert mask.sum() >= 16, "too few sampled tokens to compare: weak test"
    assert lp.shape == ro.logprobs.shape
    gap = (lp - ro.logprobs)[mask].abs()  # [tokens]
    record_property("logprob_gap_max", float(gap.max()))
    record_property("logprob_gap_mean", float(gap.mean()))
    print(f"{real_model.spec}: log-prob gap policy vs hf engine over {int(mask.sum())} "
          f"tokens: max {float(gap.max()):.2e}, mean {float(gap.mean()):.2e}")
    assert float(gap.max()) < MAX_GAP, (float(gap.max()), float(gap.mean()))
    # the recorded numbers are real log-probs of sampled tokens, not zeros
    assert (ro.logprobs[mask] < 0).all() and (ro.logprobs[~mask] == 0).all()
