"""Held-out accuracy during training: one agent's answers (greedy, or n samples) on fixed
problems with gold, per task family, with parse rate and length. Gold is used here only,
to measure; never in a reward."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

import torch

from vlcohort.answers.extract import extract_answer
from vlcohort.answers.voting import majority_vote
from vlcohort.data.problems import Problem
from vlcohort.processors import ProblemInputError, cut_at_stop


@torch.no_grad()
def generate_texts(adapter, model, rendered: Sequence, max_new_tokens: int,
                   temperature: float | None = None) -> list[str]:
    """One completion text per rendered prompt, from one batched ``generate``
    (:func:`generate_completions` without the lengths)."""
    return generate_completions(adapter, model, rendered, max_new_tokens, temperature)[0]


@torch.no_grad()
def generate_completions(adapter, model, rendered: Sequence, max_new_tokens: int,
                         temperature: float | None = None) -> tuple[list[str], list[int]]:
    """(one completion text per rendered prompt, its length in tokens), from one batched
    ``generate``.

    Greedy when ``temperature`` is None (held-out accuracy, ``vlcohort eval`` at one sample,
    ``vlcohort diversity``), else plain sampling at that temperature (top-p 1, top-k 0, so
    the samples follow the model's own distribution). Inputs go to the model's device;
    each completion is cut at the family's first stop token (the length counts the tokens
    kept) and decoded without special tokens. The one place evaluation-style answering
    calls ``generate``.
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
    rows = [cut_at_stop(row, stops) for row in out[:, batch.prompt_len:].tolist()]
    return adapter.tokenizer.batch_decode(rows, skip_special_tokens=True), [len(r) for r in rows]


def askable(adapter, problems: Sequence[Problem], system_prompt: str | None,
            instruction: str | None, max_prompt_tokens: int = 0
            ) -> tuple[list[Problem], list, list[str], list[str]]:
    """(the problems render accepts, their rendered prompts, the ids of those it refuses
    with :class:`~processors.ProblemInputError`, and each refusal's reason: the reasons the
    training step counts in ``skipped_records``, ``prompt_too_long``, ``image_unreadable``...)."""
    kept, rendered, refused, reasons = [], [], [], []
    for p in problems:
        try:
            r = adapter.render(p, system_prompt, instruction, max_tokens=max_prompt_tokens)
        except ProblemInputError as e:
            refused.append(p.id)
            reasons.append(getattr(e, "reason", type(e).__name__))
            continue
        kept.append(p)
        rendered.append(r)
    return kept, rendered, refused, reasons


@dataclass(frozen=True)
class Graded:
    """One held-out problem's answers: whether each of its n samples was right and parsed,
    their token lengths, and whether the plurality answer of the n was right."""

    task: str
    right: tuple[bool, ...]
    parsed: tuple[bool, ...]
    lengths: tuple[int, ...]
    majority_right: bool


def grade_samples(problem: Problem, texts: Sequence[str], lengths: Sequence[int], grader,
                  style: str) -> Graded:
    """The n answers of one problem graded against its gold by the run's grader; the
    plurality vote over the grader's equivalence classes (a tie abstains: not right)."""
    answers = [extract_answer(t, style=style) for t in texts]
    right = tuple(a is not None and bool(grader.is_equivalent(a, problem.gold, problem.options))
                  for a in answers)
    vote = majority_vote(answers, problem.options, grader=grader)
    majority = vote.label is not None and bool(
        grader.is_equivalent(vote.label, problem.gold, problem.options))
    return Graded(task=problem.meta.get("task", "all"), right=right,
                  parsed=tuple(a is not None for a in answers), lengths=tuple(lengths),
                  majority_right=majority)


def held_out_scores(graded: Sequence[Graded]) -> dict[str, float]:
    """``{"<task>/acc": ..., "all/acc": ...}`` over the graded problems, plus, when each
    problem has n > 1 samples, ``<task>/pass_at_n`` (any of the n right) and
    ``<task>/maj_at_n`` (the plurality answer right); and ``all/parse_rate`` and
    ``all/length`` (mean completion tokens) over every sample. acc is the mean over the
    samples (n = 1: the greedy accuracy)."""
    by_task: dict[str, list[Graded]] = defaultdict(list)
    for g in graded:
        by_task[g.task].append(g)
    sampled = any(len(g.right) > 1 for g in graded)
    out: dict[str, float] = {}
    families = [(t, gs) for t, gs in sorted(by_task.items()) if t != "all"]
    for task, gs in [*families, ("all", list(graded))]:
        out[f"{task}/acc"] = _mean([r for g in gs for r in g.right])
        if sampled:
            out[f"{task}/pass_at_n"] = _mean([any(g.right) for g in gs])
            out[f"{task}/maj_at_n"] = _mean([g.majority_right for g in gs])
    out["all/parse_rate"] = _mean([p for g in graded for p in g.parsed])
    out["all/length"] = _mean([n for g in graded for n in g.lengths])
    return out


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else float("nan")


class HeldOut(dict):
    """One agent's held-out scores (:func:`held_out_scores`' keys), with ``left_out``: the
    problems render refused, as (id, reason). They count neither as right nor as wrong."""

    def __init__(self, scores: dict[str, float], left_out: list[tuple[str, str]]):
        super().__init__(scores)
        self.left_out = left_out


@torch.no_grad()
def evaluate_agent(agent, problems: Sequence[Problem], system_prompt: str | None,
                   instruction: str | None, grader, *, max_new_tokens: int = 16,
                   style: str = "auto", batch_size: int = 32, max_prompt_tokens: int = 0,
                   samples: int = 1, temperature: float = 1.0, seed: int = 0) -> HeldOut:
    """One agent's held-out scores on ``problems``, each rendered in the agent's own prompt
    format: one greedy answer each (``samples`` 1), or ``samples`` sampled answers at
    ``temperature``. Sampling draws from ``seed`` inside a forked RNG, so the training's
    RNG streams are left as they were (a resumed run stays exact). A problem that does not
    render (a prompt over ``max_prompt_tokens``, a broken image) is left out with its
    reason, neither right nor wrong."""
    adapter, model = agent.adapter, agent.model
    was_training = model.training
    model.eval()
    graded: list[Graded] = []
    left_out: list[tuple[str, str]] = []
    temp = temperature if samples > 1 else None
    devices = [model.device] if getattr(model, "device", None) is not None and \
        model.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        per_call = max(1, batch_size // samples)
        for start in range(0, len(problems), per_call):
            chunk, rendered, refused, reasons = askable(
                adapter, problems[start:start + per_call], system_prompt, instruction,
                max_prompt_tokens)
            left_out += list(zip(refused, reasons))
            if not chunk:
                continue
            texts, lengths = generate_completions(
                adapter, model, [r for r in rendered for _ in range(samples)], max_new_tokens, temp)
            for i, p in enumerate(chunk):
                cut = slice(i * samples, (i + 1) * samples)
                graded.append(grade_samples(p, texts[cut], lengths[cut], grader, style))
    model.train(was_training)
    return HeldOut(held_out_scores(graded) if graded else {}, left_out)
