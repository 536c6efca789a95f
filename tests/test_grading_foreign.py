"""Comparison classes that replies from other models bring: float prints, written
precision, count nouns, collections without braces, implicit products, complex numbers,
trigonometric identities, and the time one grading decision may take.

Each table holds pairs that must be equivalent and near misses that must not be; every
pair is checked both ways, since the vote compares answers in either order.
"""

from __future__ import annotations

import gc
import time

import pytest

from vlcohort.answers import grading
from vlcohort.answers.grading import CorrectedGrader, canonical, is_equivalent
from vlcohort.answers.symbolic import symbolic_equal


def _both_ways(a: str, b: str) -> tuple[bool, bool]:
    return is_equivalent(a, b), is_equivalent(b, a)


# ------------------------------------------------------------------ float prints

FLOAT_PRINTS_EQUAL = [
    ("0.16666666666666666", "\\frac16"), ("2.3333333333333335", "7/3"), ("0.3333333333333333", "1/3"),
    ("0.14285714285714285", "\\frac{1}{7}"), ("0.30000000000000004", "0.3"), ("4096.000000000001", "4096"),
    ("1.4142135623730951", "\\sqrt{2}"), ("x = 0.6666666666666666", "\\frac{2}{3}"),
]
FLOAT_PRINTS_NOT_EQUAL = [
    ("0.16666666666666666", "\\frac17"), ("2.3333333333333335", "7/4"), ("0.3333333333333333", "0.333"),
    ("0.14285714285714285", "0.1428"), ("0.30000000000000004", "0.31"), ("4096.000000000001", "4097"),
]


@pytest.mark.parametrize("a, b", FLOAT_PRINTS_EQUAL)
def test_a_float_print_is_the_real_it_rounds(a, b):
    assert _both_ways(a, b) == (True, True)


@pytest.mark.parametrize("a, b", FLOAT_PRINTS_NOT_EQUAL)
def test_a_float_print_is_not_a_different_value(a, b):
    assert _both_ways(a, b) == (False, False)


def test_a_float_print_keeps_its_digits_in_the_key():
    assert canonical("0.16666666666666666") == "0.16666666666666666"
    assert canonical("0.50") == "0.5" and canonical("1/2") == "0.5"


# ------------------------------------------------------------------ written precision

PRECISION_EQUAL = [
    ("3.1416", "\\pi"), ("3.14159", "\\pi"), ("1.414", "\\sqrt2"), ("1.4142", "\\sqrt{2}"),
    ("0.3333", "1/3"), ("0.7854", "\\frac{\\pi}{4}"), ("7.389056", "e^{2}"), ("123456.70", "123456.7"),
    ("4096", "4096.0"), ("0.5", "\\sin(\\frac{\\pi}{6})"), ("3", "\\sqrt{9}"), ("2024", "2024.000"),
]
PRECISION_NOT_EQUAL = [
    ("4096", "4096.2"), ("98765.4", "98765.5"), ("2024", "2024.1"), ("123456.7", "123456.8"),
    ("100000", "100000.5"), ("3.14159", "3.1416"), ("1.414", "1.4142"), ("12.0001", "12"),
    ("3.14", "\\pi"), ("0.333", "1/3"), ("1.41", "\\sqrt2"), ("3", "\\sqrt{10}"), ("1.414", "\\sqrt3"),
    ("0.7853", "\\frac{\\pi}{4}"), ("0.3334", "1/3"),
]


@pytest.mark.parametrize("a, b", PRECISION_EQUAL)
def test_a_rounded_decimal_equals_the_value_it_rounds(a, b):
    assert _both_ways(a, b) == (True, True)


@pytest.mark.parametrize("a, b", PRECISION_NOT_EQUAL)
def test_two_written_values_or_a_wrong_rounding_are_not_equal(a, b):
    assert _both_ways(a, b) == (False, False)


def test_a_benchmarks_tolerance_still_merges_written_values():
    scibench = CorrectedGrader(rel_tol=0.05)
    assert scibench.is_equivalent("4.5", "4.7") and scibench.is_equivalent("4100", "4096")
    assert not scibench.is_equivalent("4.0", "4.7")
    assert is_equivalent("3.14", "\\pi", rel_tol=1e-2) and not is_equivalent("3.14", "\\pi")


def test_the_precision_rule_holds_with_options():
    options = ["4096", "4096.2", "4100", "4000"]
    assert canonical("4096.2", options) == "B" and canonical("4096", options) == "A"
    assert is_equivalent("\\frac{\\pi}{4}", "B", ["0.5", "0.7854", "1.5708"])


# ------------------------------------------------------------------ count nouns and free units

COUNT_EQUAL = [
    ("12 apples", "12"), ("9 marbles", "9"), ("6\\text{ chairs}", "6"), ("15 students", "15"),
    ("3 \\text{ cm}^2", "3"), ("15 red apples", "15"), ("$4$ \\text{ ways}", "4"), ("2.5 liters", "2.5"),
    ("12 apples", "12 oranges"), ("16 squares", "16"), ("7 points", "7"),
]
COUNT_NOT_EQUAL = [
    ("12 apples", "13"), ("5 million", "5"), ("5 thousand", "5"), ("3 dozen", "3"), ("2 pi", "2"),
    ("1 half", "1"), ("5x", "5"), ("3 \\text{ or } 4", "3"),
    ("5 squared", "5"), ("20 hundreds", "20"), ("3 more apples", "3 apples"), ("5 square", "5"),
    ("3 point five", "3"),
]


@pytest.mark.parametrize("a, b", COUNT_EQUAL)
def test_a_number_with_a_count_noun_is_the_number(a, b):
    assert _both_ways(a, b) == (True, True)


@pytest.mark.parametrize("a, b", COUNT_NOT_EQUAL)
def test_words_that_change_the_value_are_not_free(a, b):
    assert _both_ways(a, b) == (False, False)


# ------------------------------------------------------------------ collections and products

STRUCTURE_EQUAL = [
    ("{p+1, p}", "{p, p+1}"), ("{p+1, p}", "\\{p, p+1\\}"), ("{3, 1, 2}", "1, 2, 3"),
    ("\\{x=1, y=2\\}", "x=1, y=2"), ("\\{x=1, y=2\\}", "(1, 2)"), ("\\{y=2, x=1\\}", "x = 1 \\text{ and } y = 2"),
    ("3^2 5^3", "3^2 \\cdot 5^3"), ("3^2 5^3", "1125"), ("2^{3} 7", "56"), ("2^3 3^2", "72"),
    ("2 3^4", "2\\cdot 3^4"), ("2 3^4", "162"), ("-y > -3", "y < 3"), ("-x \\le 2", "x \\ge -2"),
    ("\\frac{NO}{BO}=\\frac{1}{\\sqrt{6}}", "\\frac{1}{\\sqrt6}"),
]
STRUCTURE_NOT_EQUAL = [
    ("{p+1, p}", "{p, p+2}"), ("{p+1, p}", "(p, p+1)"), ("\\{x=1, y=2\\}", "(2, 1)"),
    ("\\{x=1, y=2\\}", "x=1, y=3"), ("3^2 5^3", "1126"), ("3^2 5^3", "3^{25}5^3"), ("2^3 3^2", "2^{33}"),
    ("2 3^4", "23^4"), ("12 345", "12\\cdot 345"), ("-y > -3", "y > 3"), ("-y > -3", "y < -3"),
    ("\\frac{NO}{BO}=\\frac{1}{\\sqrt{6}}", "\\frac{1}{\\sqrt5}"), ("\\frac{x}{y}=2", "2"),
]


@pytest.mark.parametrize("a, b", STRUCTURE_EQUAL)
def test_sets_assignments_and_products_however_written(a, b):
    assert _both_ways(a, b) == (True, True)


@pytest.mark.parametrize("a, b", STRUCTURE_NOT_EQUAL)
def test_sets_assignments_and_products_that_differ(a, b):
    assert _both_ways(a, b) == (False, False)


# ------------------------------------------------------------------ complex numbers and identities

IDENTITIES_EQUAL = [
    ("i(3-i)", "1+3i"), ("i(3-i)", "3i+1"), ("(1+2i)(1-2i)", "5"), ("i^2", "-1"), ("\\frac{1}{i}", "-i"),
    ("(2+i)^2", "3+4i"), ("\\sin^2 x + \\cos^2 x", "1"), ("2\\sin x\\cos x", "\\sin 2x"),
    ("\\cos^2 x - \\sin^2 x", "\\cos 2x"), ("\\sin(2x)", "2\\sin x \\cos x"), ("x + i", "i + x"),
    ("\\sin 60^\\circ", "\\frac{\\sqrt{3}}{2}"), ("\\cos 60^{\\circ}", "0.5"),
]
IDENTITIES_NOT_EQUAL = [
    ("i(3-i)", "3i-1"), ("i(3-i)", "3+i"), ("i^2", "1"), ("(2+i)^2", "4+4i"), ("\\frac{1}{i}", "i"),
    ("2\\sin x\\cos x", "\\cos 2x"), ("\\sin 2x", "2\\sin x"), ("\\sin^2 x", "\\sin x^2"),
    ("\\sin^2 x + \\cos^2 x", "2"), ("x + i", "x - i"), ("\\sin 60^\\circ", "\\frac{1}{2}"),
    ("\\sin 60^\\circ", "\\sin 60"),
]


@pytest.mark.parametrize("a, b", IDENTITIES_EQUAL)
def test_complex_arithmetic_and_trigonometric_identities(a, b):
    assert _both_ways(a, b) == (True, True)


@pytest.mark.parametrize("a, b", IDENTITIES_NOT_EQUAL)
def test_complex_and_trigonometric_near_misses(a, b):
    assert _both_ways(a, b) == (False, False)


# ------------------------------------------------------------------ one decision, one time limit

# 2^{1/2^{1000}} is no float and no integer, so only sympy can compare it, and against
# each of these spellings of 1 sympy runs past the limit: a decision that makes several
# such calls must still end within one limit.
TINY_POWER = "2^{\\frac{1}{2^{1000}}}"
SLOW_ONES = ["1", "e^{0}", "\\binom{1}{1}", "[1]"]
SLOW_DECISIONS = [
    ("[2^{\\frac{1}{2^{1000}}}, 3)", "[1, 3)", None),
    (TINY_POWER, "A", SLOW_ONES),
    (TINY_POWER, "B", SLOW_ONES + ["3^{\\frac{1}{3^{1000}}}"]),
]


@pytest.mark.parametrize("pred, gold, options", SLOW_DECISIONS, ids=["interval", "options", "options-more"])
def test_one_decision_shares_one_symbolic_time_limit(pred, gold, options):
    """The limit is CPU time (see vlcohort/answers/symbolic.py), so the bound is too: a
    machine shared with other processes stretches wall time, not CPU time."""
    symbolic_equal("x+1", "1+x", grading.DEFAULT_TIMEOUT_S)  # math-verify's one-time setup, outside the bound
    grading.clear_caches()
    gc.collect()
    gc.freeze()  # a collection of the whole suite's heap is not the grader's time
    try:
        started = time.process_time()
        verdict = is_equivalent(pred, gold, options)
        took = time.process_time() - started
    finally:
        gc.unfreeze()
    assert verdict is False
    assert took < grading.DEFAULT_TIMEOUT_S + 0.35, took


def test_a_resolution_cut_short_by_the_shared_limit_is_not_cached():
    """An answer matched against options after the shared limit ran out was matched by
    nobody: that resolution must not be reused by a later call with its own limit."""
    grading.clear_caches()
    pred = TINY_POWER
    assert not is_equivalent(pred, "A", SLOW_ONES)
    assert not any(key[0] == pred for key in grading._RESOLVED)
    assert is_equivalent("3", "C", ["1", "2", "3"])  # what was decided is cached as before
    assert any(key[0] == "3" for key in grading._RESOLVED)


# ------------------------------------------------------------ separators and escaped commands
# Forms from math-verify's own test suite (eval/grader_sets/math_verify_suite.py).


@pytest.mark.parametrize("pred, gold, equal", [
    ("32, 349", "32349", False),             # comma and space: a list of two numbers
    ("32, 349", "\\{349, 32\\}", True),
    ("32,\\! 349", "32349", True),           # a negative thin space joins the groups
    ("11,\\! 111,\\! 111,\\! 100", "11111111100", True),
    ("32,349", "32349", True),
    ("0,111", "0.111", True),                # a leading 0 is never a thousands group
    ("0,111", "111", False),
    ("1,000", "1000", True),
])
def test_comma_groups_and_lists(pred, gold, equal):
    grading.clear_caches()
    assert is_equivalent(pred, gold) is equal


@pytest.mark.parametrize("pred, gold, equal", [
    ("-2 \\\\le x \\\\le 7", "x \\in [-2,7]", True),  # "\\le" written out with its escape doubled
    ("\\\\frac{1}{2}", "0.5", True),
    ("\\\\left(\\\\frac{1}{5},\\\\frac{1}{6}\\\\right)", "(1/5, 1/6)", True),
    ("-2 \\\\le x \\\\le 7", "x \\in [-2,8]", False),
    ("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\begin{pmatrix} 1 \\\\ 3 \\end{pmatrix}", False),
])
def test_commands_with_a_doubled_backslash(pred, gold, equal):
    grading.clear_caches()
    assert is_equivalent(pred, gold) is equal
