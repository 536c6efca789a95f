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


# ------------------------------------------------------------------ foreign replies


@pytest.fixture(scope="module")
def foreign():
    from vlcohort.eval.grader_sets import foreign_replies

    return foreign_replies


def test_foreign_size_classes_sources_and_both_verdicts(foreign):
    cases = foreign.foreign_cases("all")
    assert len(cases) >= 400
    assert {c.klass for c in cases} == set(foreign.CLASSES)
    assert {c.source for c in cases} == set(foreign.SOURCES)
    for klass in foreign.CLASSES:
        verdicts = Counter(c.verdict for c in cases if c.klass == klass)
        assert verdicts[True] >= 8 and verdicts[False] >= 8, (klass, verdicts)
        assert 0.25 <= verdicts[False] / (verdicts[True] + verdicts[False]) <= 0.6, (klass, verdicts)


def test_foreign_cases_are_complete_and_unique(foreign):
    from vlcohort.answers.extract import STYLES

    cases = foreign.foreign_cases("all")
    assert len({c.key for c in cases}) == len(cases)
    for c in cases:
        assert c.gold.strip() and c.reply.strip(), c
        assert c.style in STYLES or c.style == "last_expression", c  # the style being added for sentences
        assert c.options is None or (isinstance(c.options, tuple) and len(c.options) >= 2), c
        assert c.clear_cut or c.why.strip(), c  # a case graders may differ on says why
    unclear = sum(not c.clear_cut for c in cases)
    assert 0 < unclear <= 0.08 * len(cases)


def test_foreign_heldout_is_a_stable_fifth(foreign):
    dev, held, every = (foreign.foreign_cases(s) for s in ("dev", "heldout", "all"))
    assert 0.15 <= len(held) / len(every) <= 0.25
    assert len(dev) + len(held) == len(every) and not {c.key for c in dev} & {c.key for c in held}
    assert foreign.foreign_cases("heldout") == held  # stable across calls
    # the split follows a case's content, not its position: a case keeps its split
    # whatever else is in the set
    for c in every[:50]:
        assert c.split == ("heldout" if c in held else "dev")
        assert foreign.ForeignCase(**{**c.__dict__}).split == c.split
    with pytest.raises(ValueError):
        foreign.foreign_cases("test")


def test_foreign_real_replies_are_the_published_ones(foreign, benchmark_dir):
    """The real replies are copied verbatim from the published Bard outputs, with their golds."""
    import json

    bard = json.loads((benchmark_dir / "mathvista_testmini_output_bard.json").read_text())
    real = [c for c in foreign.foreign_cases("all") if c.source == "mathvista_bard"]
    assert len(real) >= 50
    published = {(rec["response"], str(rec["answer"]), tuple(rec["choices"]) if rec["choices"] else None)
                 for rec in bard.values()}
    for c in real:
        assert (c.reply, c.gold, c.options) in published, c


# ------------------------------------------------------------------ math-verify's own suite


@pytest.fixture(scope="module")
def mv_suite():
    from vlcohort.eval.grader_sets import math_verify_suite

    return math_verify_suite


def test_mv_suite_loads_with_its_provenance(mv_suite):
    import re

    cases = mv_suite.suite_cases()
    assert len(cases) >= 250
    assert re.fullmatch(r"[0-9a-f]{40}", mv_suite.UPSTREAM_COMMIT) and mv_suite.LICENSE == "Apache-2.0"
    assert mv_suite.UPSTREAM_COMMIT in (ROOT / "eval" / "grader_sets" / "math_verify_suite_data.py").read_text()
    verdicts = Counter(c.expected for c in cases)
    assert verdicts[True] >= 150 and verdicts[False] >= 30
    assert all(c.gold.strip() and c.pred.strip() and c.test.count("::") == 1 for c in cases)
    extraction = [c for c in cases if c.extraction]
    assert 60 <= len(extraction) < len(cases)  # whole replies are marked, plain spans are not
    # every disputed entry names a real row, so a typo cannot silently drop one
    assert len([c for c in cases if c.disputed]) == len(mv_suite.DISPUTED)


def test_mv_suite_rows_are_upstream_verbatim(mv_suite):
    """math-verify, called as each upstream test calls it, reproduces every upstream verdict:
    a row mangled in the copy (an escape, a config) would not."""
    import logging

    pytest.importorskip("math_verify")
    logging.disable(logging.WARNING)
    try:
        wrong = [c for c in mv_suite.suite_cases() if mv_suite.math_verify_verdict(c) != c.expected]
    finally:
        logging.disable(logging.NOTSET)
    assert not wrong, wrong[:3]
