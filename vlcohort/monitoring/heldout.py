"""Held-out accuracy during training: greedy answers of one agent on fixed problems with gold,
per task family. Gold is used here only, to measure; never in a reward."""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import torch

from vlcohort.answers.extract import extract_answer
from vlcohort.data.problems import Problem
from vlcohort.processors import ProblemInputError, cut_at_stop


@torch.no_grad()
def generate_texts(adapter, model, rendered: Sequence, max_new_tokens: int,
                   temperature: float | None = None) -> list[str]:
    """One completion text per rendered prompt, from one batched ``generate``.

    Greedy when ``temperature`` is None (held-out accuracy, ``vlcohort eval`` at one sample,
    ``vlcohort diversity``), else plain sampling at that temperature (top-p 1, top-k 0, so
    the samples follow the model's own distribution). Inputs go to the model's device;
    each completion is cut at the family's first stop token and decoded without special
    tokens. The one place evaluation-style answering calls ``generate``.
    """
    stops = adapter.stop_token_ids()
    batch = adapter.encode_prompts(rendered)
    device = next(model.parameters()).device
    inputs = {k: v.to(device) for k, v in batch.inputs.items()}
    kwargs = dict(do_sample=temperature is not None, max_new_tokens=max_new_tokens,
                  eos_token_id=stops, pad_token_id=adapter.pad_token_id(),
                  suppress_tokens=adapter.suppressed_token_ids() or None)
    if temperature is not None:
        kwargs.update(temperature=temperature, top_p=1.0, top_k=0)
    out = model.generate(**inputs, **kwargs)  # [B, prompt_len + new]
    return adapter.tokenizer.batch_decode(
        [cut_at_stop(row, stops) for row in out[:, batch.prompt_len:].tolist()],
        skip_special_tokens=True)


class Accuracies(dict):
    """{task: accuracy} plus ``all``, as a plain dict, and ``left_out``: the ids of the
    problems that could not be asked (render refused them, e.g. a prompt over the token
    limit). They count neither as right nor as wrong: an accuracy over the problems the
    agent saw, with the number not seen beside it for the log."""

    def __init__(self, accuracies: dict[str, float], left_out: list[str]):
        super().__init__(accuracies)
        self.left_out = left_out


def askable(adapter, problems: Sequence[Problem], system_prompt: str | None,
            instruction: str | None, max_prompt_tokens: int = 0
            ) -> tuple[list[Problem], list, list[str]]:
    """(the problems render accepts, their rendered prompts, the ids of those it refuses
    with :class:`~processors.ProblemInputError`)."""
    kept, rendered, refused = [], [], []
    for p in problems:
        try:
            r = adapter.render(p, system_prompt, instruction, max_tokens=max_prompt_tokens)
        except ProblemInputError:
            refused.append(p.id)
            continue
        kept.append(p)
        rendered.append(r)
    return kept, rendered, refused


@torch.no_grad()
def accuracy_by_task(agent, problems: Sequence[Problem], system_prompt: str | None,
                     instruction: str | None, grader, max_new_tokens: int = 16,
                     style: str = "auto", batch_size: int = 64,
                     max_prompt_tokens: int = 0) -> Accuracies:
    """{task: share of problems whose greedy answer equals gold}, plus ``all``.

    ``max_prompt_tokens`` (0: no limit) is the run's ``data.max_prompt_tokens``: a held-out
    problem whose prompt is longer, or that does not render at all, is left out (listed in
    the result's ``left_out``) rather than stopping the run or counting as wrong."""
    adapter, model = agent.adapter, agent.model
    was_training = model.training
    model.eval()
    right: dict[str, list[bool]] = defaultdict(list)
    left_out: list[str] = []
    for start in range(0, len(problems), batch_size):
        chunk, rendered, refused = askable(adapter, problems[start:start + batch_size],
                                           system_prompt, instruction, max_prompt_tokens)
        left_out += refused
        if not chunk:
            continue
        texts = generate_texts(adapter, model, rendered, max_new_tokens)
        for p, text in zip(chunk, texts):
            ans = extract_answer(text, style=style)
            ok = ans is not None and grader.is_equivalent(ans, p.gold, p.options)
            right[p.meta.get("task", "all")].append(bool(ok))
    model.train(was_training)
    out = {task: sum(v) / len(v) for task, v in right.items()}
    out["all"] = sum(sum(v) for v in right.values()) / max(1, sum(len(v) for v in right.values()))
    return Accuracies(out, left_out)
