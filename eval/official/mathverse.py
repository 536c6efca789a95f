"""MathVerse's official protocol (ZrrSkywalker/MathVerse ``evaluation/``): two GPT calls,
answer extraction (``extract_answer_s1.py``) then a 0/1 judgement (``score_answer_s2.py``),
each with a few-shot prompt from ``evaluation/prompts.py``. There is no official rule-based
path, so without a judge this module scores with our extraction and our grader and says so.

The number papers report ("w/o" accuracy, the leaderboard's primary metric) is the accuracy
over the five-version testmini (788 problems x Text Dominant, Text Lite, Vision Intensive,
Vision Dominant, Vision Only = 3,940 items), what ``score_answer_s2.py`` prints as ``Acc``
over ``testmini.json``. Text Only is a separate file and an ablation: it is reported
beside, never as MathVerse.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from vlcohort.eval.official import JudgeNeeded

__all__ = ["FIVE_VERSIONS", "PROTOCOL", "TEXT_ONLY", "TRUNK_WORDS", "extract_prompt",
           "parse_extraction", "parse_judgement", "report", "score_prompt", "verdict"]

PROTOCOL = ("MathVerse: with --judge, the official two GPT steps (evaluation/prompts.py "
            "few-shot extraction of the last 30 words, then the 0/1 scoring prompt with the "
            "question and standard answer, parsed as score_answer_s2.py); without a judge, our "
            "extraction and grader (there is no official rule-based path); headline = accuracy "
            "over the five testmini versions, Text Only reported apart as an ablation; the "
            "prompt texts equal evaluation/prompts.py (test)")

#: The five versions of the testmini file, in the paper's order; their pooled accuracy is
#: the headline.
FIVE_VERSIONS = ("Text Dominant", "Text Lite", "Vision Intensive", "Vision Dominant",
                 "Vision Only")
TEXT_ONLY = "Text Only"

#: The README's extraction command passes ``--trunk_response 30``: the extraction prompt
#: sees the response's last 30 space-separated words (the script's own default, -1, would
#: keep it whole).
TRUNK_WORDS = 30

# The two few-shot prompts below are data, reproduced exactly from ZrrSkywalker/MathVerse
# @ 937b090, evaluation/prompts.py (MIT licence, (c) the MathVerse authors), because the
# judge must see the text the official pipeline sends. The score prompt keeps its source
# form (``{{``/``}}``, ``{question}``...): it is used through ``str.format`` as the official
# code does, which is what turns ``{{3}}`` into ``{3}``. Lines longer than the linter's limit
# continue in adjacent literals (same text).
DEMO_PROMPT_EXTRACT = ("""
I am providing you a response from a model to a math problem, termed 'Model Response'. You should extract the answer """
    """from the response as 'Extracted Answer'. Directly output the extracted answer with no explanation.

1.
Model response: 'Rounded to two decimal places, the perimeter of the sector is approximately:\n\n(-2, 1)'
Extracted Answer: (-2, 1)

2.
Model response: 'at those points.\n\nTherefore, the correct option that represents the meaning of the intersection """
    """points of the graphs is:\n\nD. They give the solutions to the equation $f(t)=g(t)$.",'
Extracted Answer: D

3.
Model response: ' at 1 (there's a closed circle at y = 1), the range in interval notation is \\((-4, 1]\\).\n\nFinal """
    """values:\nDomain: \\((-3, 3]\\)\nRange: \\((-4, 1]\\)'
Extracted Answer: Domain: \\((-3, 3]\\)\nRange: \\((-4, 1]\\)

4.
Model response: 'As it stands, I cannot provide the correct option letter because there isn't enough information to """
    """solve for 'y'.'
Extracted Answer: null

5.
Model response: 'Given that AB = 17.6 meters, we can now substitute into the equation:\n\nd = 17.6 / """
    """cos(38\u00b0)\n\nTherefore, to one decimal place, the distance d between Ned and Bart is approximately 22.3 """
    """meters.'
Extracted answer: 22.3

6.
Model response:  have all the coefficients for the quadratic function:\n\\( f(x) = ax^2 + bx + c \\)\n\\( f(x) = """
    """-1x^2 - 2x + 1 \\)\n\nTherefore, the equation for the graphed function \\( f \\) is:\n\\( f(x) = -x^2 - 2x + """
    """1 \\)"'
Extracted answer: f(x) = -x^2 - 2x + 1

7.
""")

DEMO_PROMPT_SCORE = ("""
Below are two answers to a math question. Question is [Question], [Standard Answer] is the standard answer to the """
    """question, and [Model_answer] is the answer extracted from a model's output to this question.  Determine """
    """whether these two answers are consistent.
Please note that only when the [Model_answer] completely matches the [Standard Answer] means they are consistent. """
    """For non-multiple-choice questions, if the meaning is expressed in the same way, it is also considered """
    """consistent, for example, 0.5m and 50cm.
If they are consistent, Judement is 1; if they are different, Judement is 0.

[Question]: Write the set of numbers represented on the number line in interval notation.
[Standard Answer]: (-2,1]
[Model_answer] : Extracted Answer: \\((-2, 1)\\)
Judgement: 0

[Question]: As shown in the figure, circle O has a radius 1.0, if angle BAC = 60.0, then the length of BC is """
    """()\nChoices:\nA:2\nB:2\u221a{{3}}\nC:\u221a{{3}}\nD:2\u221a{{2}}
[Standard Answer]: C
[Model_answer] : B:2\u221a{{3}}
Judgement: 0

[Question]: Find the domain and range of the function f using interval notation.
[Standard Answer]: domain: [-4, 0) and range: (-3, 1]
[Model_answer] : Range: \\((-4, 1]\\)
Judgement: 0

[Question]: As shown in the figure, circle O has a radius 1.0, if angle BAC = 60.0, then the length of BC is """
    """()\nChoices:\nA:2\nB:2\u221a{{3}}\nC:\u221a{{3}}\nD:2\u221a{{2}}
[Standard Answer]: C
[Model_answer] : null
Judgement: 0

[Question]: Given the graph of the ellipse that intersects with x-axis at 9 and -9 and with y-axis at 3 and -3, """
    """determine its equation.A. \\frac{{x^2}}{{81}} + \\frac{{y^2}}{{9}} = 1 B. Can not determine.\n
[Standard Answer]: A
[Model_answer] : \\frac{{x^2}}{{81}} + \\frac{{y^2}}{{9}} = 1
Judgement: 1

[Question]: {question}
[Standard Answer]: {gt}
[Model_answer] : {extraction}
Judgement: """)


# --------------------------------------------------------------------------- prompts


def truncate_response(response: str, words: int = TRUNK_WORDS) -> str:
    """The official ``trunk_response``: the last ``words`` space-separated pieces (all of
    it when ``words <= 0``)."""
    return response if words <= 0 else " ".join(response.split(" ")[-words:])


def extract_prompt(response: str, words: int = TRUNK_WORDS) -> str:
    """The official extraction prompt (``create_test_prompt`` of extract_answer_s1.py)."""
    test = f"Model response: '{truncate_response(response, words)}'\nExtracted Answer: "
    return f"{DEMO_PROMPT_EXTRACT.strip()}\n\n{test}"


def score_prompt(question: str, answer: str, extraction: str) -> str:
    """The official scoring prompt (``create_test_prompt`` of score_answer_s2.py): the
    published question and standard answer, and the extracted answer."""
    return DEMO_PROMPT_SCORE.strip().format(question=question, gt=answer, extraction=extraction)


def parse_extraction(output: str) -> str:
    """What extract_answer_s1.py saves: the reply stripped (``get_chat_response``), then
    ``'Extracted Answer: '`` removed (GPT sometimes repeats it) and stripped again."""
    return (output or "").strip().replace("Extracted Answer: ", "").strip()


def parse_judgement(output: str) -> int:
    """The official 0/1: ``'Judgement:'`` removed and stripped. Any other reply is refused:
    the official script asks again until it gets 0 or 1, which a cached reply cannot do,
    so the item is counted wrong with this reason (:func:`vlcohort.eval.official.official_verdict`)."""
    judgement = (output or "").strip().replace("Judgement:", "").strip()
    if judgement not in ("0", "1"):
        raise ValueError(f"the judge replied {output!r} to the scoring prompt; the official "
                         "score_answer_s2.py accepts only 0 or 1 (it asks again): clear this "
                         "item's 'score' judge output to ask again")
    return int(judgement)


# --------------------------------------------------------------------------- verdict


@lru_cache(maxsize=1)
def _grader():
    from vlcohort.answers.grading import get_grader

    return get_grader()


def verdict(problem, response: str, extracted, judged, use_judge) -> dict | JudgeNeeded:
    """Without a judge: our extraction and grader (rule ``grader_no_judge``). With one: the
    official extraction prompt, then always the official scoring prompt (the default
    pipeline has no string-match shortcut; ``--quick_match`` replaces the judge for every
    item and is not reproduced), parsed as 0/1 (rule ``judge``)."""
    if not use_judge:
        ok = extracted is not None and _grader().is_equivalent(extracted, problem.gold,
                                                               problem.options)
        return {"official_prediction": extracted, "official_correct": bool(ok),
                "official_rule": "grader_no_judge"}
    if "extract" not in judged:
        return JudgeNeeded("extract", extract_prompt(response))
    extraction = parse_extraction(judged["extract"])
    if "score" not in judged:
        m = problem.meta
        return JudgeNeeded("score", score_prompt(m.get("official_question", problem.text),
                                                 m.get("official_answer", problem.gold),
                                                 extraction))
    return {"official_prediction": extraction,
            "official_correct": parse_judgement(judged["score"]) == 1, "official_rule": "judge"}


# --------------------------------------------------------------------------- report


def _acc(vals: list[dict[str, float]]) -> dict[str, Any]:
    n = len(vals)
    return {"acc": sum(v["maj"] for v in vals) / n if n else 0.0,
            "mean": sum(v["mean"] for v in vals) / n if n else 0.0, "n": n}


def _version_order(version: str) -> tuple[int, str]:
    """The paper's order (the five, then Text Only), then any other version by name."""
    known = FIVE_VERSIONS + (TEXT_ONLY,)
    return (known.index(version), "") if version in known else (len(known), version)


def _headline_name(present: list[str], has_text_only: bool) -> str:
    if len(present) == len(FIVE_VERSIONS):
        return "overall (5 versions)"
    if present:
        return (f"overall ({len(present)} of the 5 versions: {', '.join(present)}; "
                "not the full five-version testmini)")
    if has_text_only:
        return "text_only (ablation; the five-version testmini is not loaded)"
    return "accuracy (no MathVerse problem_version recognised)"


def report(rows) -> dict:
    """The headline (accuracy over the five testmini versions present), the per-version
    table (``versions``: every version seen, Text Only included), Text Only apart
    (``text_only_ablation``) and per subject over the headline's items (``subjects``).
    When the data holds only Text Only its accuracy is the headline, named as an ablation."""
    by_version: dict[str, list[dict[str, float]]] = {}
    for p, v in rows:
        by_version.setdefault(str(p.meta.get("problem_version")), []).append(v)
    present = [ver for ver in FIVE_VERSIONS if ver in by_version]
    text_only = by_version.get(TEXT_ONLY, [])
    if present:
        chosen = set(present)
    elif text_only:
        chosen = {TEXT_ONLY}
    else:
        chosen = set(by_version)
    head_rows = [(p, v) for p, v in rows if str(p.meta.get("problem_version")) in chosen]
    subjects: dict[str, list[dict[str, float]]] = {}
    for p, v in head_rows:
        subjects.setdefault(str(p.meta.get("subject")), []).append(v)
    out: dict[str, Any] = {
        "headline": _acc([v for _, v in head_rows])["acc"],
        "headline_name": _headline_name(present, bool(text_only)),
        "versions": {ver: _acc(by_version[ver]) for ver in sorted(by_version, key=_version_order)},
        "subjects": {s: _acc(vals) for s, vals in sorted(subjects.items())},
    }
    if text_only:
        out["text_only_ablation"] = _acc(text_only)
    return out
