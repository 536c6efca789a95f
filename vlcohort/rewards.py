"""Reward sources, registered by name: who provides the label an agent is graded against.

For one step every agent has voted on each of the B prompts over its G answers. A reward
source maps (agent index, every agent's votes, the problems) to that agent's *teacher
labels* [B] (None = no label: the prompt gives this agent no learning signal). Rewards are
then 1 / 0 by the one grader (``grading.py``) against the label, plus an optional format
term.

| source         | label for agent a on prompt b                          | method    |
|----------------|--------------------------------------------------------|-----------|
| ``peer_vote``  | vote of agent a-1 (ring) or of the other agents        | Co-RL     |
| ``self_vote``  | agent a's own vote                                     | TTRL      |
| ``ground_truth`` | the problem's gold answer (never shown to the model) | GT-Reward |
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from .answers import extract_answer
from .problems import Problem
from .voting import Vote, majority_vote, teacher_labels

LabelFn = Callable[..., list]


def _peer_vote(agent: int, votes: Sequence[Sequence[Vote]], problems: Sequence[Problem],
               topology: str = "ring", tie: str = "abstain", grader=None) -> list[str | None]:
    out = []
    for b, p in enumerate(problems):
        labels = [votes[a][b].label for a in range(len(votes))]
        out.append(teacher_labels(labels, topology, p.options, tie=tie, grader=grader)[agent])
    return out


def _self_vote(agent: int, votes: Sequence[Sequence[Vote]], problems: Sequence[Problem],
               **_) -> list[str | None]:
    return [v.label for v in votes[agent]]


def _ground_truth(agent: int, votes: Sequence[Sequence[Vote]], problems: Sequence[Problem],
                  **_) -> list[str | None]:
    return [p.gold for p in problems]


REWARD_SOURCES: dict[str, LabelFn] = {
    "peer_vote": _peer_vote,
    "self_vote": _self_vote,
    "ground_truth": _ground_truth,
}


def extract_all(texts_by_prompt: Sequence[Sequence[str]], style: str = "auto") -> list[list[str | None]]:
    """[B][G] completion texts -> [B][G] answer spans (None: nothing extractable)."""
    return [[extract_answer(t, style=style) for t in row] for row in texts_by_prompt]


def vote_all(answers: Sequence[Sequence[str | None]], problems: Sequence[Problem],
             tie: str = "abstain", min_share: float = 0.0, grader=None) -> list[Vote]:
    """One vote per prompt over its G answers."""
    return [majority_vote(row, p.options, tie=tie, min_share=min_share, grader=grader)
            for row, p in zip(answers, problems)]


@dataclass
class Scored:
    rewards: torch.Tensor  # [B, G]
    valid: torch.Tensor  # [B] bool: the prompt has a label (else: zero advantage)
    correct: torch.Tensor  # [B, G] bool: the answer matches the label

    def select(self, prompt_indices: list[int]) -> "Scored":
        idx = torch.tensor(prompt_indices, dtype=torch.long)
        return Scored(self.rewards[idx], self.valid[idx], self.correct[idx])


def score(answers: Sequence[Sequence[str | None]], labels: Sequence[str | None],
          problems: Sequence[Problem], grader, format_weight: float = 0.0) -> Scored:
    """1 / 0 rewards by the grader against each prompt's label, + ``format_weight`` for an
    extractable answer. A prompt without a label gets reward 0 everywhere and valid=False."""
    B, G = len(answers), len(answers[0]) if answers else 0
    correct = torch.zeros(B, G, dtype=torch.bool)
    parsed = torch.zeros(B, G, dtype=torch.bool)
    for b, (row, label, p) in enumerate(zip(answers, labels, problems)):
        for g, ans in enumerate(row):
            parsed[b, g] = ans is not None
            if ans is not None and label is not None:
                correct[b, g] = bool(grader.is_equivalent(ans, label, p.options))
    valid = torch.tensor([label is not None for label in labels], dtype=torch.bool)
    rewards = correct.float() + format_weight * parsed.float()
    rewards[~valid] = 0.0
    return Scored(rewards=rewards, valid=valid, correct=correct)


def labels_for(source: str, agent: int, votes: Sequence[Sequence[Vote]],
               problems: Sequence[Problem], topology: str = "ring", tie: str = "abstain",
               grader=None) -> list[str | None]:
    try:
        fn = REWARD_SOURCES[source]
    except KeyError:
        raise ValueError(f"unknown reward source {source!r}; registered: "
                         + ", ".join(REWARD_SOURCES)) from None
    return fn(agent, votes, problems, topology=topology, tie=tie, grader=grader)


def gold_match(answer_or_label: str | None, problem: Problem, grader) -> bool | None:
    """Whether an answer / label equals the problem's gold; None when there is no gold."""
    if problem.gold is None:
        return None
    if answer_or_label is None:
        return False
    return bool(grader.is_equivalent(answer_or_label, problem.gold, problem.options))
