"""``eval/grader_sets/hard_math.py``: the held-out hard-math set is what its docstring promises
(enough pairs, every class with both verdicts, reproducible), and its intended verdicts
are consistent with extraction where a pair is a whole response.

Accuracy against the set is a bench figure (``python bench/grader.py``), not a test: the
set measures the grader, so the grader passing it is not asserted here.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def hard_math():
    from vlcohort.eval.grader_sets import hard_math

    return hard_math


def test_size_classes_and_both_verdicts(hard_math):
    cases = hard_math.hard_cases()
    assert len(cases) >= 300
    per_class = Counter(c.klass for c in cases)
    assert set(per_class) == set(hard_math.CLASSES)
    for klass in hard_math.CLASSES:
        verdicts = Counter(c.equal for c in cases if c.klass == klass)
        assert verdicts[True] >= 15 and verdicts[False] >= 15, (klass, verdicts)
    share_wrong = sum(not c.equal for c in cases) / len(cases)
    assert 0.3 <= share_wrong <= 0.6


def test_reproducible_and_no_pair_with_two_verdicts(hard_math):
    assert hard_math.hard_cases(0) == hard_math.hard_cases(0)
    assert hard_math.hard_cases(0) != hard_math.hard_cases(1)
    verdicts: dict[tuple, set] = {}
    for c in hard_math.hard_cases():
        verdicts.setdefault((c.gold, c.pred, c.options), set()).add(c.equal)
    assert all(len(v) == 1 for v in verdicts.values())


def test_response_pairs_extract_to_something_when_equal(hard_math):
    """An "equal" response pair must commit to an answer, or no grader could pass it."""
    from vlcohort.answers.extract import extract_answer

    for c in hard_math.hard_cases():
        if c.response and c.equal:
            assert extract_answer(c.pred) is not None, c


def test_plain_pairs_cover_the_plain_forms(hard_math):
    pairs = hard_math.plain_pairs(0, n=200)
    assert len(pairs) == 200 and len({(p, g, o) for p, g, o, _ in pairs}) > 150
    assert any(o for _, _, o, _ in pairs) and 0.2 < sum(not ok for *_, ok in pairs) / 200 < 0.6
