"""MathVista's official scorer (lupantech/MathVista ``evaluation/calculate_score.py``):
normalisation of an extracted answer and string equality."""

from __future__ import annotations

import re
from typing import Any, Sequence

import Levenshtein


def mathvista_normalize(extraction: Any, choices: Sequence[str] | None, question_type: str,
                        answer_type: str, precision: Any, nearest_option: bool = True) -> str | None:
    """MathVista's official ``normalize_extracted_answer``, rule for rule.

    ``nearest_option=False`` turns off the Levenshtein fallback (an unmatched answer then
    matches no option), because that fallback credits answers that name no option at all.
    """
    if question_type == "multi_choice":
        extraction = extraction.strip() if isinstance(extraction, str) else (
            "" if extraction is None else str(extraction))
        letter = re.findall(r"\(([a-zA-Z])\)", extraction)
        if letter:
            extraction = letter[0].upper()
        choices = list(choices or [])
        letters = [chr(ord("A") + i) for i in range(len(choices))]
        if extraction in letters:
            return choices[letters.index(extraction)]
        if not choices:
            return None
        if not nearest_option:
            return extraction if extraction in choices else None
        # the official scorer's ``Levenshtein.distance`` (unit-cost edits); a tie goes to
        # the first of the closest options, as its ``distances.index(min(distances))``
        distances = [Levenshtein.distance(extraction, c) for c in choices]
        return choices[distances.index(min(distances))]
    try:
        if answer_type == "integer":
            return str(int(float(extraction)))
        if answer_type == "float":
            return str(round(float(extraction), int(precision)))
        if answer_type == "list":
            return str(extraction)
    except (TypeError, ValueError):
        return None
    return extraction if extraction is None else str(extraction)


def mathvista_correct(prediction: str | None, answer: str) -> bool:
    """The official ``safe_equal``: stripped string equality."""
    return prediction is not None and str(prediction).strip() == str(answer).strip()


PROTOCOL = ("MathVista: the official normalisation (evaluation/calculate_score.py: letter -> "
            "option, Levenshtein-nearest option, int / float at precision) and safe_equal, "
            "applied to our extraction (the official extraction is a GPT call)")


def verdict(problem, response: str, extracted, judged, use_judge) -> dict:
    m = problem.meta
    pred = mathvista_normalize(extracted, problem.options, m.get("question_type"),
                               m.get("answer_type"), m.get("precision"))
    return {"official_prediction": pred, "official_correct": mathvista_correct(pred, problem.gold),
            "official_rule": "official"}
