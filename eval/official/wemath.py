"""We-Math's official four-dimensional metrics (We-Math/We-Math ``evaluation/``)."""

from __future__ import annotations

from typing import Mapping


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


def report(rows) -> dict:
    """The We-Math tables from per-row verdicts (``[(problem, {"maj", "mean"})]``): the
    four-dimensional metrics under ``wemath``."""
    steps: dict[str, dict[str, bool]] = {}
    for p, v in rows:
        steps.setdefault(str(p.meta["ID"]), {})[str(p.meta["key"])] = v["maj"] >= 0.5
    return {"wemath": wemath_metrics(steps)}
