"""Scoring of the text benchmarks where a grader verdict alone is not the protocol.

- Code (HumanEval, MBPP, LiveCodeBench): the program of a response is its final fenced
  code block, else the whole text (:func:`vlcohort.code.blocks.program_of`). Running it
  takes seconds, so :func:`vlcohort.eval.items.score_record` only marks a code record ``pending``
  and :func:`check_code_records` runs every pending record of a run at once through
  :func:`vlcohort.code.checks.check_many` (a bounded pool over the cores, each program in
  its own sandboxed process); the verdict fields ``passed``, ``status``, ``reason`` go
  into ``items.jsonl``, so a resumed or re-read run runs nothing twice.
- pass@k: HumanEval's unbiased estimator per item, averaged (:func:`code_report`);
  LiveCodeBench per difficulty.
- SciBench: correct within the benchmark's relative tolerance (5%) through the grader,
  and the official rule as the ``official_*`` fields (:func:`scibench_verdict`).
"""

from __future__ import annotations

import math
import re
import sys
from typing import Any, Iterable, Sequence

from vlcohort.answers.grading import CorrectedGrader
from vlcohort.data.problems import Problem

__all__ = ["PASS_KS", "check_code_records", "code_item_verdicts", "code_report",
           "grader_for", "is_code_problem", "pending_code_fields", "scibench_equiv",
           "scibench_verdict", "text_benchmark_info", "text_official"]

#: The k of pass@k reported (those with k <= samples per item).
PASS_KS = (1, 5, 10)


def is_code_problem(problem: Problem) -> bool:
    """Items whose answer is a program run against tests (``meta["code_tests"]``)."""
    return isinstance(problem.meta.get("code_tests"), dict)


def pending_code_fields(problem: Problem, response: str | None) -> dict[str, Any]:
    """The verdict fields of a code response before it is run: the program that will be
    run (``extracted``), ``status: pending``; :func:`check_code_records` fills the rest."""
    from vlcohort.code.blocks import program_of

    program = program_of(response or "")
    return {"extracted": program, "canonical": None, "correct": False, "rule": "code_pending",
            "passed": None, "status": "pending", "reason": "not run yet"}


def check_code_records(records: list[dict], problems: dict[tuple[str, str], Problem],
                       workers: int | None = None, limits=None, rerun: bool = False) -> int:
    """Run the program of every pending code record (all of them with ``rerun``) against
    its item's tests, in parallel (``check_many``: at most ``workers`` sandboxed processes
    at once; default one per core), and set ``passed`` / ``status`` / ``reason`` /
    ``correct`` / ``sandbox`` (the isolation it ran under) in place. Records of items not in
    ``problems`` are left alone. Returns how many programs were run."""
    from vlcohort.code.blocks import program_of
    from vlcohort.code.checks import CodeTests, check_many
    from vlcohort.code.sandbox import Limits

    todo = []
    for rec in records:
        p = problems.get((rec.get("benchmark"), str(rec.get("id"))))
        if p is None or not is_code_problem(p):
            continue
        if rerun or rec.get("status") == "pending" or "passed" not in rec:
            todo.append((rec, p))
    if not todo:
        return 0
    jobs = [(program_of(rec.get("response") or ""), CodeTests.from_dict(p.meta["code_tests"]))
            for rec, p in todo]
    verdicts = check_many(jobs, workers=workers, limits=limits or Limits())
    weak = sorted({v.sandbox for v in verdicts} - {"bwrap", "none", ""})
    if weak:
        print(f"code checks ran under {', '.join(weak)} (VLCOHORT_SANDBOX=unshare-unsafe): "
              "the host's files were visible to the programs; each record says so",
              file=sys.stderr)
    for (rec, _), (program, _), v in zip(todo, jobs, verdicts):
        rec.update(extracted=program, canonical=None, passed=bool(v.passed), status=v.status,
                   reason=v.reason, correct=bool(v.passed), rule="code_tests",
                   sandbox=v.sandbox)
    return len(todo)


# --------------------------------------------------------------------------- pass@k


def code_item_verdicts(recs: Sequence[dict]) -> dict[str, float]:
    """One code item's samples: ``mean`` = c / n (pass@1's unbiased estimate), ``maj``
    the same (programs have no vote in evaluation), and ``n`` / ``c`` for pass@k."""
    c = sum(bool(r.get("passed")) for r in recs)
    n = len(recs)
    return {"mean": c / n, "maj": c / n, "n": n, "c": c}


def code_report(name: str, rows: Sequence[tuple[Problem, dict[str, float]]]) -> dict[str, Any]:
    """The headline (pass@1) and pass@k for k in :data:`PASS_KS` up to the fewest samples
    of any item (the unbiased estimator, averaged over items), and per-difficulty pass@1
    for LiveCodeBench (``groups``, as the other tables)."""
    from vlcohort.code.passk import pass_at_k
    from vlcohort.code.sandbox import sandbox_name

    n_min = min(int(v["n"]) for _, v in rows)
    passk = {f"pass@{k}": sum(pass_at_k(int(v["n"]), int(v["c"]), k) for _, v in rows) / len(rows)
             for k in PASS_KS if k <= n_min}
    # the isolation the programs ran under: "bwrap", or "unshare-UNSAFE" when the user
    # chose the weak fallback (VLCOHORT_SANDBOX=unshare-unsafe), which a reader must see
    out: dict[str, Any] = {"headline": passk["pass@1"], "headline_name": "pass@1",
                           "pass_at_k": passk, "samples_per_item": n_min,
                           "sandbox": sandbox_name()}
    if name == "livecodebench":
        by: dict[str, list[float]] = {}
        for p, v in rows:
            by.setdefault(f"difficulty={p.meta.get('difficulty')}", []).append(v["c"] / v["n"])
        out["groups"] = {g: {"acc": sum(x) / len(x), "n": len(x)} for g, x in sorted(by.items())}
    return out


# --------------------------------------------------------------------------- graders

_GRADERS: dict[tuple[float, float], CorrectedGrader] = {}


def grader_for(problem: Problem, grader):
    """The grader with the benchmark's own relative tolerance (``meta["rel_tol"]``:
    SciBench's 5%), else ``grader`` itself; only the corrected grader has a tolerance."""
    tol = problem.meta.get("rel_tol")
    if tol is None or not isinstance(grader, CorrectedGrader):
        return grader
    key = (float(tol), grader.timeout_s)
    if key not in _GRADERS:
        _GRADERS[key] = CorrectedGrader(rel_tol=float(tol), timeout_s=grader.timeout_s)
    return _GRADERS[key]


# --------------------------------------------------------------------------- SciBench


def _official_boxed(text: str) -> str | None:
    """SciBench's ``parse_math_answer``: the last ``\\boxed{...}`` (brace-matched), the part
    after its last ``=`` when it has one; None without a box."""
    idx = text.rfind("oxed")
    if idx < 0:
        return None
    depth, end = 0, None
    for i in range(idx, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                end = i
                break
    if end is None or not text[idx:].startswith("oxed{"):
        return None
    inner = text[idx + len("oxed{"):end]
    return inner.split("=")[-1].lstrip(" ") if "=" in inner else inner


_TIMES = re.compile(r"\\times|\*")
_EXP = re.compile(r"10\^[{]?\ *(-?[0-9]+)\ *[}]?")


def _scaled(output: str) -> str:
    """SciBench's ``cal_not(parse_not(x))``: ``"1.5 \\times 10^{-3}"`` -> ``"0.0015"``;
    anything else unchanged (as the official code, which keeps it on any failure)."""
    parts = _TIMES.split(output)
    if len(parts) != 2:
        return output
    m = _EXP.search(parts[1])
    try:
        return repr(float(parts[0].strip()) * 10.0 ** float(m.group(1))) if m else output
    except ValueError:
        return output


def scibench_equiv(output: str | None, answer: str, rel_tol: float = 0.05) -> bool:
    """SciBench's official ``equiv`` (mandyyyyii/scibench ``eval/eval_zero.py``, current
    version): commas dropped, the output (or its first space-separated token) read as a
    float and ``math.isclose(x, answer, rel_tol=0.05)``; anything unreadable is wrong."""
    if output is None:
        return False
    out = output.replace(",", "")
    try:
        ans = float(str(answer).strip())
    except ValueError:
        return False
    for cand in (out.strip(), (out.strip().split() or [""])[0]):
        try:
            if math.isclose(float(cand.strip()), ans, rel_tol=rel_tol):
                return True
        except ValueError:
            continue
    return False


def scibench_verdict(problem: Problem, response: str) -> dict[str, Any]:
    """The official SciBench verdict: its own extraction (last box), the ``\\times 10^k``
    scaling when the unit carried a power of ten (the gold is scaled the same way by the
    loader), then :func:`scibench_equiv` at the benchmark's 5%."""
    pred = _official_boxed(response or "")
    scaled_unit = "10^" in str(problem.meta.get("unit") or "")
    if pred is not None and scaled_unit:
        pred = _scaled(pred)
    ok = scibench_equiv(pred, problem.gold or "", float(problem.meta.get("rel_tol", 0.05)))
    return {"official_prediction": pred, "official_correct": ok, "official_rule": "scibench_equiv"}


def text_official(problem: Problem, response: str | None, extracted: str | None):
    """Official verdict fields of text benchmarks with a rule of their own (SciBench), else
    None (the runner's protocol modules cover the vision benchmarks)."""
    if problem.source == "scibench":
        return scibench_verdict(problem, response or "")
    return None


# --------------------------------------------------------------------------- summary


def text_benchmark_info(name: str, problems: Iterable[Problem]) -> dict[str, Any]:
    """What a summary records about how a text benchmark was asked: GPQA's option seed
    and each item's option order (letters A-D -> the published answer order, ``"C,A,B,D"``
    style: 0 is the correct answer), LiveCodeBench's release window and difficulty counts."""
    problems = list(problems)
    if name == "gpqa" and problems:
        return {"option_seed": problems[0].meta.get("option_seed"),
                "option_order": {p.id: p.meta.get("option_order") for p in problems}}
    if name == "livecodebench":
        counts: dict[str, int] = {}
        for p in problems:
            counts[str(p.meta.get("difficulty"))] = counts.get(str(p.meta.get("difficulty")), 0) + 1
        return {"window": problems[0].meta.get("window") if problems else None,
                "difficulty_counts": dict(sorted(counts.items()))}
    return {}
