"""math-verify's own regression tests, as a second measuring set for our grader.

math-verify (huggingface/Math-Verify, Copyright 2024 The HuggingFace Team; the repository's
LICENCE is the Apache License 2.0, while tests/test_all.py carries an MIT header) is the
grader ``bench/grader.py`` compares ours with; its test suite holds the (gold, prediction,
expected verdict) pairs its authors found in model outputs: thousands
separators, decimal commas, percent, intervals against inequalities, matrices, several
boxes, whole MATH / NuminaMath / OpenThoughts solutions. Passing its suite is a floor for a
grader that claims to read what math-verify reads.

The rows are in ``eval/grader_sets/math_verify_suite_data.py``, taken as data from the
``@pytest.mark.parametrize`` lists of its ``tests/*.py`` at :data:`UPSTREAM_COMMIT` (the
tests that check something other than a (gold, pred) verdict, such as timeouts, parser
configs or raw string extraction, are left out). The expected verdict is upstream's.

Each case keeps the test's configuration (``match_types``, ``precision``, ``strict``,
``allow_set_relation_comp``), so math-verify can be run exactly as its test runs it; and
marks each side that is a whole reply or a sentence (``gold_is_reply`` / ``pred_is_reply``:
prose around the math, or a ``\\boxed``), where math-verify extracts the last math
expression. Our side sends those through ``extract_answer(..., "last_expression")``.

A few upstream verdicts record a math-verify option or limitation rather than what the
answer means (:data:`DISPUTED`: a mode switch such as ``strict=False``, a math span split
over lines, ``1 - 1/e`` accepted for ``1 + 1/e``). They stay in the set with upstream's
verdict, and ``SuiteCase.disputed`` says why, so the bench can quote the figure both ways.

>>> len(suite_cases()) >= 250
True
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DISPUTED", "LICENSE", "UPSTREAM", "UPSTREAM_COMMIT", "SuiteCase", "math_verify_verdict", "suite_cases"]

UPSTREAM = "https://github.com/huggingface/Math-Verify"
UPSTREAM_COMMIT = "5d148cfaaf99214c2e4ffb4bc497ab042c592a7a"
LICENSE = "Apache-2.0"


_CONFIG = "the verdict follows a math-verify option this test sets"
#: (test function, gold, pred, expected) -> why the upstream verdict is not what the answer means.
DISPUTED = {
    ("test_latex_notation", "$9$", "Answer $ \n 9 \n $", False):
        "the reply answers 9; upstream records that math-verify does not match a math span over line breaks",
    ("test_latex_notation", "$9$", "Answer \\( \n 9 \n \\)", False):
        "the reply answers 9; upstream records that math-verify does not match a math span over line breaks",
    ("test_string_extraction", "$1 - \\frac{1}{\\mathrm{e}}$", "$1 + \\frac{1}{\\mathrm{e}}$", True):
        "1 - 1/e and 1 + 1/e differ; the upstream verdict records a quirk of math-verify",
    ("test_strict_variable_comparison", "$f(x)$", "$f(y)$", True): _CONFIG + " (strict=False)",
    ("test_set_rel_assymetry", "$x \\in [-2,7]$", "$-2 \\\\le x \\\\le 7$", True):
        _CONFIG + " (allow_set_relation_comp): the same pair is expected False without it",
    ("test_set_rel_assymetry", "$x \\in [-2,7]$", "$-2 \\\\le x \\\\le 7$", False):
        _CONFIG + " (allow_set_relation_comp): the same pair is expected True with it",
    ("test_math_extraction_additional_cases", "$(1,3)$", "${1,3}$", True):
        "a pair or open interval against a set: different objects, equal only to a lenient reader",
}


@dataclass(frozen=True)
class SuiteCase:
    """One upstream (gold, pred, expected) row and the configuration its test used."""

    test: str
    gold: str
    pred: str
    expected: bool
    match_types: tuple[str, ...] | None
    precision: int
    strict: bool
    allow_set_relation_comp: bool
    gold_is_reply: bool
    pred_is_reply: bool

    @property
    def disputed(self) -> str:
        """Why upstream's verdict is not what the answer means, or "" (see :data:`DISPUTED`)."""
        return DISPUTED.get((self.test.split("::")[-1], self.gold, self.pred, self.expected), "")

    @property
    def extraction(self) -> bool:
        """Whether the case relies on extracting the answer from a reply on either side."""
        return self.gold_is_reply or self.pred_is_reply


def suite_cases() -> list[SuiteCase]:
    """All rows, in upstream order."""
    from .math_verify_suite_data import ROWS

    return [SuiteCase(*row) for row in ROWS]


def math_verify_verdict(case: SuiteCase) -> bool:
    """math-verify's verdict on ``case``, called the way the upstream test calls it."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    if case.match_types is None:
        return bool(verify(parse(case.gold), parse(case.pred)))
    targets = [LatexExtractionConfig(boxed_match_priority=0) if m == "latex" else ExprExtractionConfig()
               for m in case.match_types]
    return bool(verify(parse(case.gold, targets), parse(case.pred, targets), float_rounding=case.precision,
                       strict=case.strict, allow_set_relation_comp=case.allow_set_relation_comp))
