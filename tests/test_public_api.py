"""The package top's small public API (README, docs/design.md): what scripts import."""

from __future__ import annotations

import torch

import vlcohort


def test_the_public_names_are_the_real_functions():
    from vlcohort.answers.extract import extract_answer
    from vlcohort.answers.grading import is_equivalent
    from vlcohort.answers.voting import majority_vote
    from vlcohort.training import grpo

    assert vlcohort.__all__ == ["extract_answer", "is_equivalent", "majority_vote", "grpo"]
    assert (vlcohort.extract_answer, vlcohort.is_equivalent, vlcohort.majority_vote,
            vlcohort.grpo) == (extract_answer, is_equivalent, majority_vote, grpo)


def test_the_docstring_example_holds():
    options = ["30°", "40°", "45°", "60°"]
    assert vlcohort.extract_answer("... so the answer is <answer>C</answer>") == "C"
    assert vlcohort.is_equivalent("C", "45°", options=options)
    assert not vlcohort.is_equivalent("B", "45°", options=options)
    # "C" and "45°" are one class under the options: 2 of 3 parsed answers
    assert vlcohort.majority_vote(["C", "45°", "B", None], options=options).label in ("C", "45°")
    adv = vlcohort.grpo.group_advantages(torch.tensor([[1.0, 0.0, 1.0, 0.0]]))  # [B, G]
    assert adv.shape == (1, 4) and torch.allclose(adv.sum(), torch.tensor(0.0))
    assert adv[0, 0] > 0 > adv[0, 1]
