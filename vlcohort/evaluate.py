"""Held-out accuracy during training: greedy answers of one agent on fixed problems with gold,
per task family. Gold is used here only, to measure; never in a reward."""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import torch

from processors import cut_at_stop

from .answers import extract_answer
from .problems import Problem


@torch.no_grad()
def accuracy_by_task(agent, problems: Sequence[Problem], system_prompt: str | None,
                     instruction: str | None, grader, max_new_tokens: int = 16,
                     style: str = "auto", batch_size: int = 64) -> dict[str, float]:
    """{task: share of problems whose greedy answer equals gold}, plus ``all``."""
    adapter, model = agent.adapter, agent.model
    was_training = model.training
    model.eval()
    right: dict[str, list[bool]] = defaultdict(list)
    stops = adapter.stop_token_ids()
    for start in range(0, len(problems), batch_size):
        chunk = problems[start:start + batch_size]
        batch = adapter.encode_prompts([adapter.render(p, system_prompt, instruction) for p in chunk])
        device = next(model.parameters()).device
        out = model.generate(**batch.to(device).inputs, do_sample=False, max_new_tokens=max_new_tokens,
                             eos_token_id=stops, pad_token_id=adapter.pad_token_id(),
                             suppress_tokens=adapter.suppressed_token_ids() or None)
        texts = adapter.tokenizer.batch_decode(
            [cut_at_stop(row, stops) for row in out[:, batch.prompt_len:].tolist()],
            skip_special_tokens=True)
        for p, text in zip(chunk, texts):
            ans = extract_answer(text, style=style)
            ok = ans is not None and grader.is_equivalent(ans, p.gold, p.options)
            right[p.meta.get("task", "all")].append(bool(ok))
    model.train(was_training)
    out = {task: sum(v) / len(v) for task, v in right.items()}
    out["all"] = sum(sum(v) for v in right.values()) / max(1, sum(len(v) for v in right.values()))
    return out
