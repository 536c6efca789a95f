"""MathVista's official scorer, rule for rule (lupantech/MathVista @ 53d5258).

The official pipeline has three stages, reproduced here in the same order:

1. ``evaluation/extract_answer.py::extract_answer``: a few rules on the raw response before
   any GPT call (:func:`quick_extraction`), then a GPT-4 call on the few-shot prompt
   :data:`DEMO_PROMPT` + the official query + the response (:func:`extraction_prompt`);
2. ``evaluation/calculate_score.py::normalize_extracted_answer``: letter -> option, else
   the Levenshtein-nearest option; ``str(int(float(x)))`` for integers; rounding at the
   item's precision for floats; any exception -> no prediction (:func:`mathvista_normalize`);
3. ``safe_equal``: plain ``==`` of the prediction and the published answer, no stripping
   (:func:`mathvista_correct`).

Without the judge (``use_judge=False``) our extractor stands in for the GPT step; an item
it cannot read has no official extraction at all, so it is wrong (rule ``no_extraction``)
rather than normalised to the option nearest the empty string, which would hand out credit
for silence. With the judge, the official code is followed exactly, nearest option
included. ``bench/mathvista_replay.py`` replays the normalisation over the published
``extraction`` of the 24 result files and checks it against their ``true_false``.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import Levenshtein

from . import JudgeNeeded

__all__ = ["DEMO_PROMPT", "PROTOCOL", "extraction_prompt", "mathvista_correct",
           "mathvista_normalize", "quick_extraction", "report", "verdict"]

#: The official few-shot extraction prompt, verbatim (data, not code): lupantech/MathVista
#: @ 53d5258 ``evaluation/prompts/ext_ans.py`` ``demo_prompt`` (CC BY-SA 4.0). The
#: official code strips it before use; it is kept here as published (lines longer than the
#: linter's limit continue in adjacent literals, same text).
DEMO_PROMPT = ("""
Please read the following example. Then extract the answer from the model response and type it at the end of the prompt.

Hint: Please answer the question requiring an integer answer and provide the final value, e.g., 1, 2, 3, at the end.
Question: Which number is missing?

Model response: The number missing in the sequence is 14.

Extracted answer: 14

Hint: Please answer the question requiring a floating-point number with one decimal place and provide the final """
    """value, e.g., 1.2, 1.3, 1.4, at the end.
Question: What is the fraction of females facing the camera?

Model response: The fraction of females facing the camera is 0.6, which means that six out of ten females in the """
    """group are facing the camera.

Extracted answer: 0.6

Hint: Please answer the question requiring a floating-point number with two decimal places and provide the final """
    """value, e.g., 1.23, 1.34, 1.45, at the end.
Question: How much money does Luca need to buy a sour apple candy and a butterscotch candy? (Unit: $)

Model response: Luca needs $1.45 to buy a sour apple candy and a butterscotch candy.

Extracted answer: 1.45

Hint: Please answer the question requiring a Python list as an answer and provide the final list, e.g., [1, 2, 3], """
    """[1.2, 1.3, 1.4], at the end.
Question: Between which two years does the line  graph saw its maximum peak?

Model response: The line graph saw its maximum peak between 2007 and 2008.

Extracted answer: [2007, 2008]

Hint: Please answer the question and provide the correct option letter, e.g., A, B, C, D, at the end.
Question: What fraction of the shape is blue?\nChoices:\n(A) 3/11\n(B) 8/11\n(C) 6/11\n(D) 3/5

Model response: The correct answer is (B) 8/11.

Extracted answer: B
""")

PROTOCOL = ("MathVista: the official extract_answer.py pre-GPT rules (empty response, a response "
            "that is an option, an int / float response), then the GPT extraction (the judge, "
            "with the official few-shot prompt) or, without a judge, our extraction (none: "
            "wrong), then calculate_score.py's normalisation (letter -> option, nearest option, "
            "int / float at precision) and safe_equal; replayed over the 24 published result "
            "files (bench/mathvista_replay.py)")


# --------------------------------------------------------------------------- extraction


def quick_extraction(response: str, question_type: str | None, answer_type: str | None,
                     choices: Sequence[str] | None) -> tuple[str, str] | None:
    """(extraction, rule) by the rules ``extract_answer`` applies before calling GPT, in
    its order, or None when the response needs the GPT step.

    ``quick_empty``: an empty response extracts as ``""`` (which the normalisation then
    maps to the nearest option: the official quirk, kept); ``quick_choice``: a response
    that *is* one of the option texts (exact, unstripped); ``quick_number``: for integer
    items ``str(int(response))``, for float items ``str(float(response))`` (Python's own
    parsers, so ``" 3 "``, ``"1e3"`` and ``"inf"`` count as the official code counts
    them). The ``--quick_extract`` regex is left out: none of the official run scripts
    turns it on."""
    if response == "":
        return "", "quick_empty"
    if question_type == "multi_choice" and choices and response in choices:
        return response, "quick_choice"
    if answer_type == "integer":
        try:
            return str(int(response)), "quick_number"
        except Exception:  # the official code catches everything here
            pass
    if answer_type == "float":
        try:
            return str(float(response)), "quick_number"
        except Exception:
            pass
    return None


def extraction_prompt(query: str, response: str) -> str:
    """The GPT extraction prompt, built as the official ``create_test_prompt``."""
    return f"{DEMO_PROMPT.strip()}\n\n{query}\n\n{response}\n\nExtracted answer: "


# --------------------------------------------------------------------------- normalisation


def _nearest(extraction: str, choices: Sequence[str]) -> str:
    # ``Levenshtein.distance`` (unit-cost edits); a tie goes to the first of the closest
    # options, as the official ``distances.index(min(distances))``
    distances = [Levenshtein.distance(extraction, c) for c in choices]
    return choices[distances.index(min(distances))]


def mathvista_normalize(extraction: Any, choices: Sequence[str] | None, question_type: str,
                        answer_type: str, precision: Any,
                        nearest_option: bool = True) -> str | None:
    """MathVista's official ``normalize_extracted_answer``, rule for rule.

    A non-string multiple-choice extraction becomes ``str(x)`` (``None`` -> ``"None"``), as
    there. Where the official code would crash (a multiple-choice item without options, a
    free-form item of answer type ``text``) this returns None: no prediction, wrong.
    ``nearest_option=False`` turns off the Levenshtein fallback (an unmatched answer then
    matches no option), for callers that must not credit answers naming no option."""
    if question_type == "multi_choice":
        extraction = extraction.strip() if isinstance(extraction, str) else str(extraction)
        letter = re.findall(r"\(([a-zA-Z])\)", extraction)
        if letter:
            extraction = letter[0].upper()
        choices = list(choices or [])
        if not choices:
            return None
        letters = [chr(ord("A") + i) for i in range(len(choices))]
        if extraction in letters:
            return choices[letters.index(extraction)]
        if not nearest_option:
            return extraction if extraction in choices else None
        return _nearest(extraction, choices)
    try:  # every failure is "no prediction", as the official ``except Exception``
        if answer_type == "integer":
            return str(int(float(extraction)))  # inf -> OverflowError -> None
        if answer_type == "float":
            return str(round(float(extraction), int(precision)))
        if answer_type == "list":
            return str(extraction)
    except Exception:
        return None
    return None


def mathvista_correct(prediction: str | None, answer: str) -> bool:
    """The official ``safe_equal``: ``prediction == answer``, nothing stripped."""
    return prediction is not None and prediction == answer


# --------------------------------------------------------------------------- verdict


def _judged_text(judged: dict, step: str) -> str | None:
    out = judged.get(step)
    if out is None:
        return None
    # the official GPT wrapper returns ``prediction.strip()``
    return str(out).strip()


def verdict(problem, response: str, extracted, judged, use_judge) -> dict | JudgeNeeded:
    """The official verdict of one response (see the module docstring for the stages)."""
    m = problem.meta
    qt, at = m.get("question_type"), m.get("answer_type")
    quick = quick_extraction(response, qt, at, problem.options)
    if quick is not None:
        extraction, rule = quick
    elif use_judge:
        extraction = _judged_text(judged or {}, "extract")
        if extraction is None:
            query = m.get("official_query")
            if not query:
                raise ValueError(
                    f"mathvista item {problem.id}: the official extraction prompt needs the "
                    "official query (meta 'official_query'); put the official query.json "
                    "(or mathvista_query_testmini_and_test.json) beside the annotation file")
            return JudgeNeeded("extract", extraction_prompt(query, response))
        rule = "judge_extraction"
    elif extracted is None or str(extracted).strip() == "":
        return {"official_prediction": None, "official_correct": False,
                "official_rule": "no_extraction", "official_extraction": None}
    else:
        extraction, rule = extracted, "extraction"
    pred = mathvista_normalize(extraction, problem.options, qt, at, m.get("precision"))
    return {"official_prediction": pred, "official_correct": mathvista_correct(pred, problem.gold),
            "official_rule": rule, "official_extraction": extraction}


# --------------------------------------------------------------------------- report

#: The keys ``calculate_score.py`` breaks the accuracy down by, in its order (``source`` is
#: kept in meta as ``source_dataset``: ``Problem.source`` is the benchmark name).
REPORT_KEYS = ("question_type", "answer_type", "language", "source", "category", "task",
               "context", "grade", "skills")
_META_KEY = {"source": "source_dataset"}


def _table(pairs) -> dict[str, dict[str, float]]:
    """``[(value, correct)]`` -> ``{value: {accuracy, correct, total}}``, sorted by accuracy
    (highest first, a stable sort as the official ``sorted``)."""
    tally: dict[str, list[int]] = {}
    for value, ok in pairs:
        t = tally.setdefault(str(value), [0, 0])
        t[0] += bool(ok)
        t[1] += 1
    table = {v: {"accuracy": c / n, "correct": c, "total": n} for v, (c, n) in tally.items()}
    return dict(sorted(table.items(), key=lambda kv: kv[1]["accuracy"], reverse=True))


def report(rows) -> dict:
    """The official score file's content from per-item verdicts (``[(problem, {"maj",
    "mean"})]``, an item right when ``maj >= 0.5``): the headline is the overall accuracy;
    ``mathvista`` holds ``average`` and one table per official key present in meta
    (``skills`` counts an item under each of its skills)."""
    verdicts = [(p, v["maj"] >= 0.5) for p, v in rows]
    correct = sum(ok for _, ok in verdicts)
    total = len(verdicts)
    tables: dict[str, Any] = {"average": {"accuracy": correct / total if total else 0.0,
                                          "correct": correct, "total": total}}
    for key in REPORT_KEYS:
        mkey = _META_KEY.get(key, key)
        if not any(p.meta.get(mkey) is not None for p, _ in verdicts):
            continue
        if key == "skills":
            pairs = [(s, ok) for p, ok in verdicts for s in (p.meta.get(mkey) or [])]
        else:
            pairs = [(p.meta.get(mkey), ok) for p, ok in verdicts]
        tables[key] = _table(pairs)
    return {"headline": tables["average"]["accuracy"], "headline_name": "accuracy",
            "mathvista": tables}
