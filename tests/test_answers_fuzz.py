"""Fuzz the answer path: random LaTeX-ish strings through extraction (every style),
``canonical``, ``is_equivalent`` and the vote.

What must hold for *any* input, since rollouts are arbitrary text: no exception escapes,
the result has its documented type, and no call runs much past the grader's time limit
(the symbolic tier's CPU-time limit, :data:`grading.DEFAULT_TIMEOUT_S`). The bound on wall
time is generous (a few limits) because two test processes may share a core; a hang, or a
tier that ignores the limit, still fails it by far.

Examples come from hypothesis with a fixed derandomised seed and no example database, so
a run is reproducible and leaves nothing behind; the token alphabet is weighted toward
what reaches the deep tiers (braces, powers, fractions, boxes, intervals, matrices).
"""

from __future__ import annotations

import gc
import time

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402 - after importorskip
from hypothesis import strategies as st  # noqa: E402 - after importorskip

from vlcohort.answers import grading  # noqa: E402 - after importorskip
from vlcohort.answers.extract import STYLES, extract_answer  # noqa: E402 - after importorskip
from vlcohort.answers.voting import in_winning_class, majority_vote  # noqa: E402 - after importorskip

#: Wall-time bound per call: a few symbolic time limits (the limit is CPU time; a shared
#: machine stretches wall time), so a call that ignores the limit fails.
CALL_LIMIT_S = 3 * grading.DEFAULT_TIMEOUT_S + 1.0
#: A vote makes up to n(n-1)/2 comparisons, but over 6 answers it must still end in time.
VOTE_LIMIT_S = 4 * CALL_LIMIT_S

TOKENS = [
    "\\boxed{", "\\fbox{", "{", "}", "{", "}", "\\frac", "\\dfrac", "\\sqrt", "^", "_", "^{", "!",
    "0", "1", "2", "3", "7", "9", "99", "1008", "10^{10}", ".", ",", ", ", ";", ":", " ", "\n",
    "x", "y", "a", "A", "C", "E", "pi", "\\pi", "\\infty", "-", "+", "*", "**", "/", "=", "<",
    ">", "\\le", "\\geq", "\\neq", "!=", "\\cup", "(", ")", "[", "]", "\\{", "\\}", "$", "\\(",
    "\\)", "\\text{", "\\textbf{", "\\mathrm{", " or ", " and ", "\\%", "%", "°", "^\\circ",
    "cm", "percent", "\\begin{pmatrix}", "\\begin{bmatrix}", "\\end{pmatrix}", "&", "\\\\",
    "\\left(", "\\right)", "\\log", "\\sin", "e", "i", "<answer>", "</answer>",
    "the answer is ", "Answer:", "**Answer:**", "−", "√", "４", "答案", "\u200b", "\\",
]
_token_text = st.lists(st.sampled_from(TOKENS) | st.text(max_size=3), max_size=24).map("".join)
ANSWERS = _token_text
OPTIONS = st.none() | st.lists(st.sampled_from(["1", "2", "45°", "\\frac12", "x+1", "Yes", "(2, 3)",
                                                "[1, 2)", "9:30", "A"]), min_size=2, max_size=5)

# Inputs known to be expensive for a naive symbolic tier: huge powers, towers, factorials,
# deep nesting. Each runs as an explicit example on top of the random ones.
HARD = [
    ("\\frac{3^{1008}-1}{3^{1009}}", "\\frac13"),
    ("9^{9^{9^{9}}}", "9^{9^{9^{9}}}+1"),
    ("10^{10^{10}}!", "x"),
    ("2^{2^{2^{2^{2^{2}}}}}", "(2, 3)"),
    ("(" * 300 + "1" + ")" * 300, "1"),
    ("\\sqrt{" * 200 + "2" + "}" * 200, "2"),
    ("x^{" * 100 + "2" + "}" * 100, "x^2"),
    ("1" * 5000, "1" * 4999 + "2"),
    ("\\{" + ", ".join(str(i) for i in range(60)) + "\\}", ", ".join(str(i) for i in range(59, -1, -1))),
    ("\\begin{pmatrix}" + " \\\\ ".join("1 & 2" for _ in range(40)) + "\\end{pmatrix}", "[[1, 2]]"),
    ("x^{100} - y^{100}", "(x-y)(x^{99} + y^{99})"),
    ("\\boxed{" * 50, "}" * 50),
]

def fuzz(max_examples: int) -> settings:
    """Reproducible settings: fixed seed, no example database, our own time bounds."""
    return settings(max_examples=max_examples, derandomize=True, database=None, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def _timed(fn, *args, **kwargs):
    started = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - started


@fuzz(250)
@given(text=_token_text)
@example(text="the answer is \\boxed{12")
@example(text="\\boxed{3} and \\boxed{7}" * 50)
def test_extraction_never_raises(text):
    for style in STYLES:
        span, took = _timed(extract_answer, text, style=style)
        assert span is None or (isinstance(span, str) and span.strip() == span and span), (style, span)
        assert took < CALL_LIMIT_S, (style, took)


@fuzz(200)
@given(answer=ANSWERS, options=OPTIONS)
def test_canonical_never_raises(answer, options):
    key, took = _timed(grading.canonical, answer, options)
    assert key is None or isinstance(key, str)
    assert took < CALL_LIMIT_S, (answer, took)


@fuzz(300)
@given(a=ANSWERS, b=ANSWERS, options=OPTIONS, variant=st.sampled_from(["", "same", "spaced", "box"]))
def test_is_equivalent_never_raises(a, b, options, variant):
    # a variant of ``a`` reaches the comparison tiers more often than an unrelated ``b``
    b = {"": b, "same": a, "spaced": a.replace(",", ", ").replace(" ", ""), "box": f"\\boxed{{{a}}}"}[variant]
    verdict, took = _timed(grading.is_equivalent, a, b, options)
    assert isinstance(verdict, bool)
    assert took < CALL_LIMIT_S, (a, b, took)
    extracted = extract_answer(b)
    verdict, took = _timed(grading.is_equivalent, extracted, a, options)
    assert isinstance(verdict, bool) and took < CALL_LIMIT_S, (extracted, a, took)


@pytest.mark.parametrize("a, b", HARD, ids=[f"hard{i}" for i in range(len(HARD))])
def test_expensive_inputs_are_decided_in_time(a, b):
    grading.clear_caches()
    for x, y in ((a, b), (b, a), (a, a)):
        verdict, took = _timed(grading.is_equivalent, x, y)
        assert isinstance(verdict, bool)
        assert took < CALL_LIMIT_S, (x[:60], y[:60], took)
    key, took = _timed(grading.canonical, a)
    assert (key is None or isinstance(key, str)) and took < CALL_LIMIT_S


#: CPU-time bound for one whole decision: every symbolic call in it shares one limit
#: (``shared_time_limit`` in vlcohort/answers/symbolic.py); the margin is the fast tiers
#: and the time sympy takes to notice the limit's signal.
DECISION_CPU_S = grading.DEFAULT_TIMEOUT_S + 0.35
# Parts that only sympy can compare, several of them past its limit against each other
# (2^{1/2^{1000}} against the spellings of 1), and cheap ones.
SLOW_PARTS = ["2^{\\frac{1}{2^{1000}}}", "3^{\\frac{1}{3^{1000}}}", "1", "e^{0}", "\\binom{1}{1}", "[1]", "3", "x"]


@fuzz(10)
@given(pred=st.lists(st.sampled_from(SLOW_PARTS), min_size=1, max_size=3),
       gold=st.lists(st.sampled_from(SLOW_PARTS), min_size=1, max_size=3),
       form=st.sampled_from(["interval", "set", "options", "plain"]))
@example(pred=["2^{\\frac{1}{2^{1000}}}", "3"], gold=["1", "3"], form="interval")
@example(pred=["2^{\\frac{1}{2^{1000}}}"], gold=["1", "e^{0}", "\\binom{1}{1}", "[1]"], form="options")
def test_one_decision_stays_within_one_time_limit(pred, gold, form):
    """One ``is_equivalent`` call, however many symbolic comparisons it needs (interval
    ends, set elements, one per option), takes at most one limit of CPU time."""
    grading.symbolic_equal("x+1", "1+x", grading.DEFAULT_TIMEOUT_S)  # math-verify's one-time setup
    grading.clear_caches()
    if form == "options":
        args = (pred[0], "A", gold)
    elif form == "interval":
        args = ("[" + ", ".join(pred[:2] * 2)[: 200] + ")", "[" + ", ".join(gold[:2] * 2) + ")", None)
    elif form == "set":
        args = ("\\{" + ", ".join(pred) + "\\}", "\\{" + ", ".join(gold) + "\\}", None)
    else:
        args = (" + ".join(pred), " + ".join(gold), None)
    # A collection of the whole suite's heap (models, tokenizers) can cost a good part of a
    # second of CPU in the middle of the call; the bound is on the grader, so the objects
    # that exist before the call are frozen out of the collector's passes.
    gc.collect()
    gc.freeze()
    try:
        started = time.process_time()
        verdict = grading.is_equivalent(*args)
        took = time.process_time() - started
    finally:
        gc.unfreeze()
    assert isinstance(verdict, bool)
    assert took < DECISION_CPU_S, (args, took)


@fuzz(80)
@given(answers=st.lists(st.none() | ANSWERS, min_size=1, max_size=6), options=OPTIONS,
       probe=ANSWERS)
def test_vote_never_raises(answers, options, probe):
    vote, took = _timed(majority_vote, answers, options)
    assert took < VOTE_LIMIT_S, (answers, took)
    assert len(vote.assignments) == len(answers)
    assert vote.label is None or vote.label in vote.counts
    assert sum(vote.counts.values()) == sum(a is not None for a in vote.assignments)
    member, took = _timed(in_winning_class, probe, vote, options)
    assert isinstance(member, bool) and took < CALL_LIMIT_S


#: The live vote path's budget for 10,000 answers (1,250 prompts x G = 8): about 10 s on
#: two idle cores, 22 s with four other test processes on them; a tier that ignores its
#: limit, or a quadratic blow-up, exceeds it by far.
LIVE_VOTE_BUDGET_S = 150.0


def _adversarial_completion(rng) -> str:
    """A completion whose answer is adversarial: the expensive inputs, or random tokens,
    in each way a rollout marks an answer (or none)."""
    body = (rng.choice(rng.choice(HARD)) if rng.random() < 0.1 else
            "".join(rng.choice(TOKENS) for _ in range(rng.randint(0, 24))))
    wrap = rng.choice(["\\boxed{%s}", "<answer>%s</answer>", "The answer is %s.", "%s",
                       "**Answer:** %s", "Answer: \\(%s\\)"])
    return "Let me think step by step.\n" + wrap % body


def test_the_live_vote_path_decides_10000_adversarial_answers_within_its_budget():
    """The training step's own functions (rewards.extract_all -> vote_all -> score), as a
    step calls them, on 10,000 adversarial completions: no exception, every vote within
    VOTE_LIMIT_S, all of it within LIVE_VOTE_BUDGET_S, rewards of the documented shape."""
    import random

    from vlcohort.data.problems import Problem
    from vlcohort.training.rewards import extract_all, score, vote_all

    rng = random.Random(18)
    B, G = 1250, 8
    texts = [[_adversarial_completion(rng) for _ in range(G)] for _ in range(B)]
    problems = [Problem(id=str(i), text="q", options=["1", "\\frac12", "x+1", "(2, 3)"]
                        if i % 3 == 0 else None) for i in range(B)]
    grader = grading.get_grader("corrected")
    start = time.perf_counter()
    answers = extract_all(texts)
    votes, slowest = [], 0.0
    for row, p in zip(answers, problems):
        t = time.perf_counter()
        votes += vote_all([row], [p], grader=grader)
        slowest = max(slowest, time.perf_counter() - t)
    scored = score(answers, votes, problems, grader)
    total = time.perf_counter() - start
    assert slowest < VOTE_LIMIT_S, f"one vote took {slowest:.1f}s"
    assert total < LIVE_VOTE_BUDGET_S, f"10,000 answers took {total:.1f}s"
    assert scored.rewards.shape == (B, G) and scored.valid.shape == (B,)
    assert 0 < int(scored.valid.sum()) < B  # some votes decided, some abstained (ties)
    assert bool(((scored.rewards == 0) | (scored.rewards == 1)).all())
