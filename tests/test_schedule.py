"""The learning-rate schedule (vlcohort/training/schedule.py), by hand and through LambdaLR
as build_agent uses it (resume loads the scheduler's state_dict)."""

from __future__ import annotations

import math

import pytest
import torch

from vlcohort.training.schedule import lr_multiplier


def _cosine(progress: float, floor: float = 0.1) -> float:
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def test_cosine_by_hand():
    # no warm-up: 10 steps decay from the peak (step 0) to the floor (step 9), progress s / 9
    assert [lr_multiplier(s, 10, 0.0, 0.1) for s in range(10)] == pytest.approx(
        [_cosine(s / 9) for s in range(10)])
    assert lr_multiplier(9, 10, 0.0, 0.1) == pytest.approx(0.1)
    # 7 steps, 30% warm-up: ceil(2.1) = 3 warm-up steps at 1/3, 2/3, 1; then the peak again
    # and the decay over 7 - 3 - 1 = 3 steps: 0.1 + 0.45 (1 + cos(pi / 3)) = .775, then .325
    assert [lr_multiplier(s, 7, 0.3, 0.1) for s in range(7)] == pytest.approx(
        [1 / 3, 2 / 3, 1.0, 1.0, 0.775, 0.325, 0.1])
    # defaults: 100 steps, ceil(3) warm-up steps, floor 0.1 reached at the last step
    assert [lr_multiplier(s, 100) for s in (0, 1, 2, 3)] == pytest.approx([1 / 3, 2 / 3, 1.0, 1.0])
    assert lr_multiplier(51, 100) == pytest.approx(_cosine(48 / 96))
    assert lr_multiplier(99, 100) == pytest.approx(0.1)
    assert lr_multiplier(150, 100) == pytest.approx(0.1)  # past the end: held at the floor
    assert lr_multiplier(0, 1) == 1.0  # one step: ceil(0.03) = 1 warm-up step at the peak
    assert lr_multiplier(0, 2, 0.0) == 1.0 and lr_multiplier(1, 2, 0.0) == pytest.approx(0.1)


def test_constant_keeps_the_warm_up():
    assert [lr_multiplier(s, 10, 0.2, 0.1, "constant") for s in range(10)] == \
        [0.5, 1.0] + [1.0] * 8
    assert [lr_multiplier(s, 5, 0.0, 0.1, "constant") for s in range(5)] == [1.0] * 5


def test_through_lambda_lr_and_its_state_dict():
    total = 12

    def make():
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2.0)
        return opt, torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: lr_multiplier(s, total, 0.25, 0.1, "cosine"))

    opt, sched = make()
    seen = []
    for _ in range(5):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert seen == pytest.approx([2.0 * lr_multiplier(s, total, 0.25, 0.1) for s in range(5)])
    state = sched.state_dict()
    opt2, sched2 = make()
    sched2.load_state_dict(state)  # resume: the schedule continues at step 5
    opt2.step()
    sched2.step()
    assert sched2.last_epoch == 6
    assert opt2.param_groups[0]["lr"] == pytest.approx(2.0 * lr_multiplier(6, total, 0.25, 0.1))
