"""Scoring helpers shared by the benchmarks, and the official scorers' public names.

The official protocols live one module per benchmark in :mod:`vlcohort.eval.official`; this module
re-exports their rule functions under the names the rest of the code and the tests use.
"""

from __future__ import annotations

from typing import Iterable

from .official.mathvision import mathvision_correct, mathvision_extract, mathvision_is_equal
from .official.mathvista import mathvista_correct, mathvista_normalize
from .official.wemath import wemath_metrics

__all__ = [
    "group_accuracy", "mathvision_correct", "mathvision_extract",
    "mathvision_is_equal", "mathvista_correct", "mathvista_normalize",
    "wemath_metrics",
]


def group_accuracy(verdicts: Iterable[tuple[str, bool]]) -> dict[str, dict[str, float]]:
    """``[(group, correct)]`` -> ``{group: {"acc", "n"}}``; the per-category / per-version
    / per-subject tables are all this one reduction."""
    tally: dict[str, list[int]] = {}
    for group, ok in verdicts:
        t = tally.setdefault(str(group), [0, 0])
        t[0] += bool(ok)
        t[1] += 1
    return {g: {"acc": r / n, "n": n} for g, (r, n) in sorted(tally.items())}
