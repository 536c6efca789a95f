"""Scorers: our grader (``vlcohort``) and rule-based reproductions of official protocols.

Which official protocol each function reproduces, and which it cannot:

- MathVista: :func:`mathvista_normalize` + :func:`mathvista_correct` are the official
  ``normalize_extracted_answer`` / ``safe_equal`` (letter -> option, Levenshtein-nearest
  option for an unmatched multiple-choice answer, integers as ``str(int(float(x)))``, floats
  rounded to ``precision``). The official *extraction* is a GPT call; we apply the
  normalisation to our own extracted span instead, and say so in the output.
- We-Math: :func:`wemath_metrics` computes IK, IG, CM, RM (strict and loose) and the score
  ``(N - 0.5 IG - RM - IK) / N`` from per-question verdicts.
- MathVerse: its official judge is GPT; we report our grader per problem version.
- MATH-Vision: reported per subject and level with our grader.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Sequence

__all__ = [
    "group_accuracy", "levenshtein", "mathvista_correct", "mathvista_normalize",
    "wemath_metrics",
]


def levenshtein(a: str, b: str) -> int:
    """Edit distance (insert, delete, substitute: cost 1), as ``Levenshtein.distance``."""
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


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
        distances = [levenshtein(extraction, c) for c in choices]
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


def group_accuracy(verdicts: Iterable[tuple[str, bool]]) -> dict[str, dict[str, float]]:
    """``[(group, correct)]`` -> ``{group: {"acc", "n"}}``; the per-category / per-version
    / per-subject tables are all this one reduction."""
    tally: dict[str, list[int]] = {}
    for group, ok in verdicts:
        t = tally.setdefault(str(group), [0, 0])
        t[0] += bool(ok)
        t[1] += 1
    return {g: {"acc": r / n, "n": n} for g, (r, n) in sorted(tally.items())}


def wemath_metrics(verdicts: Mapping[str, Mapping[str, bool]]) -> dict[str, float]:
    """We-Math's four-dimensional metrics from ``{problem ID: {key: correct}}``.

    A problem's composite question is its ``*_multi`` key; the others are its sub-steps.
    Per problem: IK = a sub-step wrong and the composite wrong; IG = all sub-steps right,
    composite wrong; CM strict = composite right and all sub-steps right, CM loose adds
    composite right with some (not all) sub-steps wrong; RM strict = composite right with a
    sub-step wrong, RM loose = composite right with all sub-steps wrong. Score =
    ``(N - 0.5 IG - RM - IK) / N`` (the paper's N = 525), strict and loose. A problem
    without its composite or without any sub-step is left out and counted (``incomplete``).
    """
    ik = ig = cm_s = cm_l = rm_s = rm_l = 0
    n = incomplete = 0
    for steps in verdicts.values():
        multi = [ok for key, ok in steps.items() if key.endswith("multi")]
        subs = [ok for key, ok in steps.items() if not key.endswith("multi")]
        if len(multi) != 1 or not subs:
            incomplete += 1
            continue
        n += 1
        composite, all_sub, any_sub = multi[0], all(subs), any(subs)
        if not composite:
            if all_sub:
                ig += 1
            else:
                ik += 1
        else:
            if all_sub:
                cm_s += 1
                cm_l += 1
            else:
                rm_s += 1
                if any_sub:
                    cm_l += 1
                else:
                    rm_l += 1
    denom = max(n, 1)
    return {
        "n_problems": n, "incomplete": incomplete,
        "IK": ik / denom, "IG": ig / denom,
        "CM_strict": cm_s / denom, "CM_loose": cm_l / denom,
        "RM_strict": rm_s / denom, "RM_loose": rm_l / denom,
        "score_strict": (n - 0.5 * ig - rm_s - ik) / denom,
        "score_loose": (n - 0.5 * ig - rm_l - ik) / denom,
    }
