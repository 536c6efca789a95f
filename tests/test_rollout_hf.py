"""The ``hf`` engine samples from the policy's own distribution, whatever sampling defaults
a checkpoint ships in its generation_config (published chat checkpoints set e.g.
``repetition_penalty``); otherwise the recorded rollout log-probs would not be the
policy's and the importance-sampling correction would "correct" a penalty instead."""

from __future__ import annotations

import torch

from processors import adapter_for
from processors.tiny import tiny_model_path
from vlcohort.data.problems import Problem
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
