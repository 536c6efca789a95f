"""An engine that replays hand-written completions through the real training step."""

from __future__ import annotations

import torch

from vlcohort.rollout.base import Rollouts


class ReplayEngine:
    """Generation replaced by hand-written completions (prompt id -> G texts), tokenized
    by the agent's own tokenizer so the update trains on them; everything after
    generation (keys, votes, rewards, the GRPO update, metrics) is the real step."""

    def __init__(self, engine, adapter, script: dict[str, list[str]]):
        self.engine, self.adapter, self.script = engine, adapter, script

    def __getattr__(self, name):  # weight pushes and the rest: the agent's real engine
        return getattr(self.engine, name)

    def generate(self, rendered, group_size, sampling, seed=None) -> Rollouts:
        tok, stop = self.adapter.tokenizer, self.adapter.stop_token_ids()[0]
        texts = [t for r in rendered for t in self.script[r.problem_id][:group_size]]
        completions = [tok.encode(t, add_special_tokens=False)[:sampling.max_new_tokens - 1]
                       + [stop] for t in texts]
        T = max(len(c) for c in completions)
        return Rollouts(prompts=None, completions=completions, texts=texts,
                        logprobs=torch.zeros(len(texts), T), finished=[True] * len(texts),
                        group_size=group_size)
