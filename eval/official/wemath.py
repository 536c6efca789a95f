"""We-Math's official protocol (We-Math/We-Math ``evaluation/four_dimensional_metrics.py``
and ``evaluation/accuracy.py``), rewritten rule for rule.

The official pipeline has no GPT step: the answer is string-matched out of the response
(the prompt asks for ``<Answer>: <<X>>``), compared with the gold letter, and the per-row
verdicts are combined per problem into the four-dimensional metrics (IK, IG, CM, RM) and the
strict / loose scores, and per step count into the One-step / Two-step / Three-step
accuracies (S1, S2, S3). The number papers report is the strict score.

Differences from the official scripts, on degenerate input only: the denominator is the
number of complete problems (525 on the full testmini, where the official literal 525 is
used), so a ``--limit`` subset still gives rates in [0, 1]; a problem without its composite
row or without any sub-step row is left out and counted (``incomplete``) where the official
merge would keep it in the 525 but in no category.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

__all__ = ["PROTOCOL", "wemath_extract", "wemath_metrics", "wemath_official_row", "verdict",
           "report"]

PROTOCOL = ("We-Math: the official string match (evaluation/four_dimensional_metrics.py: the "
            "first character after the last 'Answer', with <>:. removed, if one of A-H) against "
            "the gold letter; headline = the strict four-dimensional score; S1/S2/S3 as "
            "accuracy.py; RM rate = RM / (CM + RM) as the official script prints it; equal to "
            "the official scripts' printed figures on 20 random response sets")

#: The official ``str.replace(r'[>><<:.]', '')``: these characters go anywhere in the tail.
_STRIPPED = re.compile(r"[><:.]")
_LETTERS = "ABCDEFGH"
_KEY = re.compile(r"^(\d+)steps_(\d+|multi)$")


def wemath_extract(response: str | None) -> str | None:
    """The official extraction: the text after the last ``Answer`` (case-sensitive; the
    whole response when there is none), stripped, with every ``<``, ``>``, ``:`` and ``.``
    removed, stripped again; its first character when that is one of A-H, else None.

    >>> wemath_extract("<Thought process>: <<...>> <Answer>: <<B>>")
    'B'
    >>> wemath_extract("C. 45")  # no 'Answer': the response's own first character
    'C'
    >>> wemath_extract("The answer is B") is None  # lower-case 'answer' is not a marker
    True
    """
    tail = (response or "").split("Answer")[-1].strip()
    tail = _STRIPPED.sub("", tail).strip()
    return tail[0] if tail and tail[0] in _LETTERS else None


def verdict(problem, response: str, extracted, judged, use_judge) -> dict:
    """The official string match of the raw response against the gold letter (our
    extraction and the judge are not used: We-Math's own pipeline has no GPT step)."""
    prediction = wemath_extract(response)
    return {"official_prediction": prediction,
            "official_correct": prediction is not None and prediction == problem.gold,
            "official_rule": "wemath_string_match"}


# --------------------------------------------------------------------------- metrics


def _split(steps: Mapping[str, bool]) -> tuple[list[bool], list[bool]]:
    """(composite verdicts, sub-step verdicts) of one problem: the composite is the
    ``*_multi`` key, the others are its sub-steps."""
    multi = [bool(ok) for key, ok in steps.items() if str(key).endswith("multi")]
    subs = [bool(ok) for key, ok in steps.items() if not str(key).endswith("multi")]
    return multi, subs


def _step_count(steps: Mapping[str, bool]) -> int | None:
    """2 or 3 for a problem whose keys are ``2steps_*`` / ``3steps_*`` (the official scripts
    select rows by that prefix), else None."""
    counts = {int(m.group(1)) for key in steps if (m := _KEY.match(str(key)))}
    return counts.pop() if len(counts) == 1 else None


def _step_accuracies(verdicts: Mapping[str, Mapping[str, bool]]) -> dict[str, Any]:
    """accuracy.py's One-step (S1: every sub-step row of the 2- and 3-step problems), Two-step
    (S2: the composite rows of the 2-step problems) and Three-step (S3: those of the 3-step
    problems) accuracies. As its merge on the ``*_1`` row, a problem without its first
    sub-step is left out; a missing row is skipped (the official mean skips NaN)."""
    sub_ok: list[bool] = []
    multi_ok: dict[int, list[bool]] = {2: [], 3: []}
    for steps in verdicts.values():
        n = _step_count(steps)
        if n not in multi_ok or f"{n}steps_1" not in steps:
            continue
        sub_ok += [bool(steps[f"{n}steps_{i}"]) for i in range(1, n + 1) if f"{n}steps_{i}" in steps]
        if f"{n}steps_multi" in steps:
            multi_ok[n].append(bool(steps[f"{n}steps_multi"]))
    def mean(xs):
        return sum(xs) / len(xs) if xs else 0.0
    return {"S1": mean(sub_ok), "S2": mean(multi_ok[2]), "S3": mean(multi_ok[3]),
            "n_S1": len(sub_ok), "n_S2": len(multi_ok[2]), "n_S3": len(multi_ok[3])}


def wemath_metrics(verdicts: Mapping[str, Mapping[str, bool]]) -> dict[str, Any]:
    """We-Math's metrics from ``{problem ID: {key: correct}}``.

    Per problem: IK = a sub-step wrong and the composite wrong; IG = all sub-steps right,
    composite wrong; CM strict = composite right and all sub-steps right, CM loose =
    composite right and any sub-step right; RM strict = composite right with a sub-step
    wrong, RM loose = composite right with all sub-steps wrong. ``counts`` holds the
    numbers; ``IK``, ``IG``, ``CM_*`` are shares of the N problems (the official rates);
    ``RM_*_rate`` is the official RM rate, RM / (CM + RM) of the same condition;
    ``RM_strict`` / ``RM_loose`` are RM as a share of N (kept for the score formula, not
    what the official script prints). Score = ``(N - 0.5 IG - RM - IK) / N``, strict and
    loose. S1 / S2 / S3 as :func:`_step_accuracies`.
    """
    c = {"IK": 0, "IG": 0, "CM_strict": 0, "CM_loose": 0, "RM_strict": 0, "RM_loose": 0}
    n = incomplete = 0
    for steps in verdicts.values():
        multi, subs = _split(steps)
        if len(multi) != 1 or not subs:
            incomplete += 1
            continue
        n += 1
        composite, all_sub, any_sub = multi[0], all(subs), any(subs)
        if not composite:
            c["IG" if all_sub else "IK"] += 1
            continue
        c["CM_strict"] += all_sub
        c["CM_loose"] += any_sub
        c["RM_strict"] += not all_sub
        c["RM_loose"] += not any_sub
    denom = max(n, 1)
    def rate(rm, cm):
        return rm / (rm + cm) if rm + cm else 0.0
    out: dict[str, Any] = {"n_problems": n, "incomplete": incomplete, "counts": c}
    out.update({k: v / denom for k, v in c.items()})
    out["RM_strict_rate"] = rate(c["RM_strict"], c["CM_strict"])
    out["RM_loose_rate"] = rate(c["RM_loose"], c["CM_loose"])
    out["score_strict"] = (n - 0.5 * c["IG"] - c["RM_strict"] - c["IK"]) / denom
    out["score_loose"] = (n - 0.5 * c["IG"] - c["RM_loose"] - c["IK"]) / denom
    out.update(_step_accuracies(verdicts))
    return out


def wemath_official_row(m: Mapping[str, Any]) -> dict[str, str]:
    """The row ``four_dimensional_metrics.py`` prints, column for column: scores as
    percentages, each metric as ``"rate% (count)"`` (IK and IG are the same under both
    conditions, as in the official table)."""
    c = m["counts"]
    def pct(x):
        return f"{100 * x:.2f}%"
    row = {}
    for cond, suffix in (("Strict", "strict"), ("Loose", "loose")):
        row[f"Score ({cond})"] = pct(m[f"score_{suffix}"])
        row[f"InsufficientKnowledge ({cond})"] = f"{pct(m['IK'])} ({c['IK']})"
        row[f"InadequateGeneralization ({cond})"] = f"{pct(m['IG'])} ({c['IG']})"
        row[f"CompleteMastery ({cond})"] = f"{pct(m[f'CM_{suffix}'])} ({c[f'CM_{suffix}']})"
        row[f"RoteMemorization ({cond})"] = (f"{pct(m[f'RM_{suffix}_rate'])} "
                                             f"({c[f'RM_{suffix}']})")
    return row


def report(rows) -> dict:
    """The We-Math headline (the strict score) and tables from per-row verdicts
    (``[(problem, {"maj", "mean"})]``, ``maj`` from the chosen scorer): the metrics under
    ``wemath`` (with S1/S2/S3 and the official RM rates) and the official printed row
    under ``wemath_official``."""
    steps: dict[str, dict[str, bool]] = {}
    for p, v in rows:
        steps.setdefault(str(p.meta["ID"]), {})[str(p.meta["key"])] = v["maj"] >= 0.5
    m = wemath_metrics(steps)
    return {"headline": m["score_strict"], "headline_name": "score_strict", "wemath": m,
            "wemath_official": wemath_official_row(m)}
