"""Cohort diversity: which partner model decorrelates a model's errors (``vlcohort diversity``).

Co-RL's claim is that a *diverse* cohort helps: where two models fail on different problems,
each one's majority vote can teach the other, and where they fail together with the same
wrong answer, a peer vote reinforces the error. Before training a pair, answer problems that
have gold with every candidate and measure, for every pair (A, B), how their errors are
coupled. Over the N problems, the four outcome cells are::

    n11 both right     n10 only A right     n01 only B right     n00 both wrong

and the paper's error-decoupling measures are

- **kappa**: Cohen's kappa between the two correctness indicators,
  ``(p_o - p_e) / (1 - p_e)`` with ``p_o = (n11 + n00) / N`` (observed agreement) and
  ``p_e = pA pB + (1 - pA)(1 - pB)`` (agreement expected from the two accuracies alone).
  1: right and wrong on the same problems; 0: as if independent; below 0: one tends to be
  right where the other is wrong. The lower, the more complementary the partner.
- **c**: % of problems exactly one of the two gets right, ``(n10 + n01) / N``: where a peer
  has something to teach.
- **w**: % of problems both get wrong *with the same answer* (by the grader, with the
  problem's options): errors a peer vote would confirm instead of correct.
- **u**: % of problems at least one gets right, ``1 - n00 / N``: the pair's coverage.

Two rules that the formulas alone leave open (both tested):

- *kappa when p_e = 1.* That happens only when both models are right on every problem or
  both wrong on every problem (then p_o = 1 too, and kappa is 0/0). We return **1.0** and
  mark the pair ``kappa_defined: false``: the two agree on everything, nothing shows their
  errors to be independent, and 1.0 ranks such a pair last as a partner, where NaN would
  neither sort nor serialise to JSON.
- *"The same answer" for w.* Two answers are the same when both were extracted and the
  grader calls each equivalent to the other with the problem's options ("C" and "45°" are
  one answer when option C is 45°). Both directions are asked because with options the
  grader checks that the prediction names a subset of the options the reference names.
  **Two missing answers (nothing extracted) are not the same answer**: "no answer" is a
  failure to answer, not a shared wrong belief, and a vote forms no class from it (the
  grader never calls None equivalent to anything), so it cannot reinforce an error.

Ordering: pairs sorted by kappa ascending; ties broken by higher u, then higher c, then
lower w, then the order the models were given. The recommendation is the first row.

Flow: problems with gold (one benchmark through ``eval``'s loaders, a data file through
:mod:`vlcohort.data.problems`, or the synthetic families) -> each model answers greedily through
the generation path of ``vlcohort eval`` (its ``items.jsonl`` records, saved under
``--out`` and reused on a rerun), or saved answers are read from JSONL files -> answers
extracted and judged by the one grader -> per-pair measures -> table and recommendation.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Sequence

from vlcohort.data.problems import Problem
from vlcohort.seeds import HELD_OUT_SEED

TIE_RULE = ("lowest kappa; ties: higher u, then higher c, then lower w, then the order "
            "given (--model before --answers)")


class DiversityError(ValueError):
    """Bad input to ``vlcohort diversity`` (the message names the file, model or ids)."""


# ============================================================================ the math


@dataclass(frozen=True)
class OutcomeTable:
    """The four outcome cells of a pair (A, B) over N problems, and the shared-error count.

    ``both_right`` (n11), ``only_a`` (n10), ``only_b`` (n01), ``both_wrong`` (n00) partition
    the problems; ``same_wrong`` counts the both-wrong problems where the two gave the same
    answer (so ``0 <= same_wrong <= both_wrong``).
    """

    both_right: int
    only_a: int
    only_b: int
    both_wrong: int
    same_wrong: int = 0

    def __post_init__(self) -> None:
        cells = (self.both_right, self.only_a, self.only_b, self.both_wrong, self.same_wrong)
        if any(not isinstance(c, int) or c < 0 for c in cells):
            raise ValueError(f"outcome cells must be non-negative integers, got {cells}")
        if self.same_wrong > self.both_wrong:
            raise ValueError(f"same_wrong ({self.same_wrong}) cannot exceed both_wrong "
                             f"({self.both_wrong})")

    @property
    def n(self) -> int:
        """N, the number of problems."""
        return self.both_right + self.only_a + self.only_b + self.both_wrong


def outcome_table(correct_a: Sequence[bool], correct_b: Sequence[bool],
                  same_answer: Sequence[bool] | None = None) -> OutcomeTable:
    """Count the outcome cells.

    ``correct_a``, ``correct_b``: [N] whether model A / B answered problem i right.
    ``same_answer``: [N] whether their two answers to problem i are the same answer (see
    :func:`same_answer`); read only where both are wrong. None: no shared errors counted.
    """
    n = len(correct_a)
    if len(correct_b) != n or (same_answer is not None and len(same_answer) != n):
        raise ValueError(f"lengths differ: {n} vs {len(correct_b)}"
                         + ("" if same_answer is None else f" vs {len(same_answer)}"))
    same = same_answer if same_answer is not None else [False] * n
    cells = Counter((bool(a), bool(b)) for a, b in zip(correct_a, correct_b))
    shared = sum(1 for a, b, s in zip(correct_a, correct_b, same) if not a and not b and s)
    return OutcomeTable(both_right=cells[True, True], only_a=cells[True, False],
                        only_b=cells[False, True], both_wrong=cells[False, False],
                        same_wrong=shared)


def kappa_fraction(t: OutcomeTable) -> Fraction | None:
    """Cohen's kappa as an exact fraction, or None where it is 0/0 (p_e = 1).

    For a 2x2 table kappa = 2 (n11 n00 - n10 n01) / ((n11 + n10)(n10 + n00) +
    (n11 + n01)(n01 + n00)), the same as (p_o - p_e) / (1 - p_e) multiplied through by N^2.
    The denominator is 0 exactly when all N problems are both-right or all are both-wrong.
    Exact, so that equal kappas tie exactly when pairs are sorted.
    """
    if t.n == 0:
        raise ValueError("kappa of an empty outcome table (no problems)")
    a, b, c, d = t.both_right, t.only_a, t.only_b, t.both_wrong
    denominator = (a + b) * (b + d) + (a + c) * (c + d)
    if denominator == 0:
        return None
    return Fraction(2 * (a * d - b * c), denominator)


def cohens_kappa(t: OutcomeTable) -> float:
    """Cohen's kappa between the two correctness indicators, in [-1, 1].

    Degenerate case (p_e = 1: both models right on every problem, or both wrong on every
    problem): returns 1.0, because the two agree on everything and nothing shows their
    errors to be independent (the module docstring says why not NaN).
    """
    k = kappa_fraction(t)
    return 1.0 if k is None else float(k)


def pair_measures(t: OutcomeTable) -> dict[str, Any]:
    """The paper's measures of one pair, as fractions of N (the Markdown shows percent).

    Returns ``n``, ``acc_a`` = (n11 + n10) / N, ``acc_b`` = (n11 + n01) / N, ``kappa``,
    ``kappa_defined`` (False in the degenerate case), ``c`` = (n10 + n01) / N,
    ``w`` = same_wrong / N, ``u`` = (N - n00) / N, and the ``cells``.
    """
    n = t.n
    if n == 0:
        raise ValueError("measures of an empty outcome table (no problems)")
    return {
        "n": n,
        "acc_a": (t.both_right + t.only_a) / n,
        "acc_b": (t.both_right + t.only_b) / n,
        "kappa": cohens_kappa(t),
        "kappa_defined": kappa_fraction(t) is not None,
        "c": (t.only_a + t.only_b) / n,
        "w": t.same_wrong / n,
        "u": (n - t.both_wrong) / n,
        "cells": {"both_right": t.both_right, "only_a": t.only_a, "only_b": t.only_b,
                  "both_wrong": t.both_wrong, "same_wrong": t.same_wrong},
    }


def rank_key(t: OutcomeTable, order: tuple[int, int] = (0, 0)) -> tuple:
    """Sort key of a pair: kappa ascending (exact; the degenerate case counts as 1), then
    u descending, c descending, w ascending, then ``order`` (the models' input positions)."""
    n = t.n
    k = kappa_fraction(t)
    return (Fraction(1) if k is None else k, -Fraction(n - t.both_wrong, n),
            -Fraction(t.only_a + t.only_b, n), Fraction(t.same_wrong, n), order)


def same_answer(a: str | None, b: str | None, options: Sequence[str] | None, grader) -> bool:
    """Whether two models' answers to one problem are the same answer, by the grader.

    Both must have been extracted (two None answers are not the same answer: see the module
    docstring), and the grader must call each equivalent to the other with the problem's
    options, so "C" and "45°" are one answer when option C is 45°.
    """
    if a is None or b is None:
        return False
    return bool(grader.is_equivalent(a, b, options) and grader.is_equivalent(b, a, options))


# ============================================================================ answers


@dataclass
class AnswerSet:
    """One model's answers to the problems: problem id -> extracted answer (None: nothing
    could be extracted). ``origin`` is the model spec, or the file the answers came from."""

    name: str
    origin: str
    answers: dict[str, str | None]


def _answer_of(obj: dict, path: Path, lineno: int) -> str | None:
    """The extracted answer of one saved record: ``answer`` (already extracted, as given),
    else ``extracted`` (``vlcohort eval`` records), else extracted from ``response``."""
    for key in ("answer", "extracted"):
        if key in obj:
            value = obj[key]
            return None if value is None else str(value)
    if "response" in obj:
        from vlcohort.answers.extract import extract_answer

        return extract_answer(obj["response"] or "")
    raise DiversityError(f"{path}: line {lineno}: no 'answer', 'extracted' or 'response' "
                         "field; each line needs the problem 'id' and one of them.")


def answer_sets_from_records(records: Sequence[tuple[int, dict]], path: Path,
                             problem_set: str) -> tuple[list[AnswerSet], list[str]]:
    """Group saved records into one :class:`AnswerSet` per model.

    ``records``: (line number, object) pairs of one JSONL file. The model is the record's
    ``model`` field (``vlcohort eval`` and ``vlcohort diversity`` write it), else the file's
    stem. Records carrying a ``benchmark`` field other than ``problem_set`` are left out;
    only sample 0 of each item is used. Returns the sets and notes for the user.
    """
    notes: list[str] = []
    if not records:
        raise DiversityError(f"{path}: the answer file is empty; it needs one JSON object per "
                             "line with the problem 'id' and its 'answer' (or 'response').")
    benches = {str(o["benchmark"]) for _, o in records if "benchmark" in o}
    if benches and problem_set not in benches:
        raise DiversityError(f"{path}: holds answers for {', '.join(sorted(benches))}, not for "
                             f"the problem set {problem_set!r}; pick the matching problems "
                             "(--benchmark / --data / --synthetic).")
    kept = [(i, o) for i, o in records if str(o.get("benchmark", problem_set)) == problem_set]
    if len(kept) < len(records):
        notes.append(f"{path}: {len(records) - len(kept)} line(s) for other problem sets "
                     "left out")
    sampled = [(i, o) for i, o in kept if int(o.get("sample", 0) or 0) != 0]
    if sampled:
        notes.append(f"{path}: items have several samples; only sample 0 is used "
                     f"({len(sampled)} line(s) left out)")
    sets: dict[str, AnswerSet] = {}
    for lineno, obj in kept:
        if int(obj.get("sample", 0) or 0) != 0:
            continue
        pid = obj.get("id", obj.get("pid"))
        if pid is None or str(pid) == "":
            raise DiversityError(f"{path}: line {lineno}: no 'id' field (the problem id).")
        name = str(obj.get("model") or path.stem)
        aset = sets.setdefault(name, AnswerSet(name, str(path), {}))
        if str(pid) in aset.answers:
            raise DiversityError(f"{path}: line {lineno}: a second answer of model {name!r} to "
                                 f"problem {str(pid)!r}; keep one line per (model, id).")
        aset.answers[str(pid)] = _answer_of(obj, path, lineno)
    return list(sets.values()), notes


def _show(ids: Sequence[str], limit: int = 10) -> str:
    shown = ", ".join(map(repr, ids[:limit]))
    return shown + (f" ... ({len(ids) - limit} more)" if len(ids) > limit else "")


def check_ids(aset: AnswerSet, problem_ids: Sequence[str], where: str) -> None:
    """The answer set must answer exactly the problems: name the missing and extra ids."""
    wanted = set(problem_ids)
    missing = [pid for pid in problem_ids if pid not in aset.answers]
    extra = [pid for pid in aset.answers if pid not in wanted]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"{len(missing)} problem id(s) without an answer: {_show(missing)}")
        if extra:
            parts.append(f"{len(extra)} answer id(s) not among the problems: {_show(extra)}")
        raise DiversityError(f"{where}: model {aset.name!r}: the ids do not match the "
                             f"{len(problem_ids)} problems; " + "; ".join(parts)
                             + ". Answer the same problems (same benchmark / file / "
                             "synthetic seed, same --limit or --n).")


# ============================================================================ the report


def analyse(problems: Sequence[Problem], sets: Sequence[AnswerSet], grader) -> dict[str, Any]:
    """Judge every answer against gold and measure every pair.

    ``problems``: the N problems (all with gold); ``sets``: >= 2 answer sets covering them.
    Returns the report: per model accuracy and answer rate, per pair the measures of
    :func:`pair_measures` sorted by :func:`rank_key`, and the recommendation.
    """
    if len(sets) < 2:
        raise DiversityError(f"need at least 2 models or answer sets to compare, got "
                             f"{len(sets)}; give --model / --answers more than once.")
    if not problems:
        raise DiversityError("no problem with a gold answer to judge against.")
    correct: dict[str, list[bool]] = {}  # model -> [N]
    for s in sets:
        correct[s.name] = [s.answers[p.id] is not None
                           and bool(grader.is_equivalent(s.answers[p.id], p.gold, p.options))
                           for p in problems]
    models = {s.name: {"origin": s.origin,
                       "accuracy": sum(correct[s.name]) / len(problems),
                       "answered": sum(s.answers[p.id] is not None for p in problems)
                       / len(problems)} for s in sets}
    ranked = []
    for i, sa in enumerate(sets):
        for j in range(i + 1, len(sets)):
            sb = sets[j]
            same = [same_answer(sa.answers[p.id], sb.answers[p.id], p.options, grader)
                    for p in problems]  # [N]
            table = outcome_table(correct[sa.name], correct[sb.name], same)
            ranked.append((rank_key(table, (i, j)), {"a": sa.name, "b": sb.name,
                                                     **pair_measures(table)}))
    ranked.sort(key=lambda kv: kv[0])
    pairs = [row for _, row in ranked]
    best = pairs[0]
    return {
        "n_problems": len(problems),
        "models": models,
        "pairs": pairs,
        "recommendation": {"a": best["a"], "b": best["b"], "kappa": best["kappa"],
                           "rule": TIE_RULE},
        "definitions": {
            "kappa": "Cohen's kappa between the two models' correctness indicators; 1.0 with "
                     "kappa_defined=false when both are right on every problem or both wrong "
                     "on every problem (p_e = 1)",
            "c": "share of problems exactly one of the two gets right",
            "w": "share of problems both get wrong with the same answer (by the grader, with "
                 "the problem's options; two missing answers are not the same answer)",
            "u": "share of problems at least one of the two gets right",
            "acc_a, acc_b, accuracy": "share of problems answered right",
            "answered": "share of problems with an extracted answer",
            "units": "shares in [0, 1] here; percent in the Markdown table",
        },
    }


def recommendation_line(report: dict[str, Any]) -> str:
    """The pair to train together: the first row (lowest kappa, ties by :data:`TIE_RULE`)."""
    r, best = report["recommendation"], report["pairs"][0]
    line = f"Recommended pair: {r['a']} + {r['b']} (kappa {r['kappa']:+.3f}; rule: {r['rule']})."
    if best["c"] == 0:  # then every pair has kappa 1: n10 = n01 = 0 everywhere
        line += (" No pair has a problem where exactly one model is right: none is a "
                 "complementary partner on these problems.")
    return line


def markdown_report(report: dict[str, Any], title: str = "") -> str:
    """The paper's layout: one row per pair, sorted by kappa ascending; c, w, u and the
    accuracies in percent; per-model accuracy above; the recommendation below."""
    lines = [title] if title else []
    lines.append(f"{report['n_problems']} problems with gold. Models: " + "; ".join(
        f"{name} {100 * m['accuracy']:.1f}% right ({100 * m['answered']:.1f}% answered)"
        for name, m in report["models"].items()) + ".")
    lines += ["", "| model A | model B | acc A | acc B | kappa | c | w | u |",
              "|---|---|---|---|---|---|---|---|"]
    for p in report["pairs"]:
        kappa = f"{p['kappa']:+.3f}" + ("" if p["kappa_defined"] else " *")
        lines.append(f"| {p['a']} | {p['b']} | {100 * p['acc_a']:.1f} | {100 * p['acc_b']:.1f} "
                     f"| {kappa} | {100 * p['c']:.1f} | {100 * p['w']:.1f} | "
                     f"{100 * p['u']:.1f} |")
    lines.append("")
    if not all(p["kappa_defined"] for p in report["pairs"]):
        lines += ["\\* kappa is 0/0 here (both right on every problem, or both wrong on every "
                  "problem); shown as 1.0, full agreement.", ""]
    lines += ["kappa: Cohen's kappa of the two correctness indicators (lower: errors less "
              "correlated); c: % exactly one right; w: % both wrong with the same answer; "
              "u: % at least one right.", "", recommendation_line(report)]
    return "\n".join(lines) + "\n"


# ============================================================================ problems


@dataclass
class ProblemSet:
    """The problems of one run: a name (the ``benchmark`` field of saved records), what they
    were read from, the problems with gold, and how many had none."""

    name: str
    path: Path
    problems: list[Problem]
    without_gold: int = 0


def load_problem_set(args: argparse.Namespace, need_images: bool) -> ProblemSet:
    """One problem set from ``--benchmark`` / ``--data`` / ``--synthetic``; problems with no
    gold are dropped (counted); none left is an error."""
    if args.benchmark:
        from vlcohort.eval.datasets import parse_benchmark_names
        from vlcohort.eval.runner import load_all

        names = parse_benchmark_names(args.benchmark)
        if len(names) != 1:
            raise DiversityError(f"--benchmark: one benchmark per run, got {', '.join(names)} "
                                 "(ids of different benchmarks may collide)")
        d = load_all(names, args.data_dir, args.limit, need_images=need_images)[names[0]]
        if d.skipped:
            print(f"{d.name}: skipped {len(d.skipped)} of {d.rows} items "
                  f"({', '.join(f'{k}: {v}' for k, v in d.skipped_by_reason().items())}); "
                  f"first: {d.skipped[0].id} ({d.skipped[0].detail})", file=sys.stderr)
        name, path, problems = d.name, d.path, d.problems
    elif args.data:
        from vlcohort.data.problems import load_problems_from

        problems, report = load_problems_from(str(args.data), preset=args.preset,
                                              limit=args.limit or 0)
        if report.skipped:
            print(report.summary(), file=sys.stderr)
        name, path = Path(args.data).stem, Path(args.data)
    else:
        from vlcohort.data.synthetic import make_dataset

        tasks = [t.strip() for t in args.synthetic.split(",") if t.strip()]
        try:
            problems = make_dataset(tasks, n=args.n, seed=args.seed, image_size=args.image_size,
                                    shuffle_options=not args.fixed_options)
        except ValueError as e:
            raise DiversityError(f"--synthetic: {e}") from e
        name, path = "synthetic", Path(f"synthetic:{','.join(tasks)}")
    with_gold = [p for p in problems if p.gold is not None and str(p.gold).strip()]
    if not with_gold:
        raise DiversityError(f"{path}: no problem with a gold answer ({len(problems)} problems "
                             "read); diversity is measured against gold.")
    if len(with_gold) < len(problems):
        print(f"{path}: {len(problems) - len(with_gold)} of {len(problems)} problems have no "
              "gold answer and are left out", file=sys.stderr)
    return ProblemSet(name, path, with_gold, len(problems) - len(with_gold))


# ============================================================================ the command


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", action="append", default=[], metavar="PATH_OR_SPEC",
                   help="a model to answer the problems greedily: checkpoint folder, hub id "
                        "or tiny:<name> (repeatable)")
    p.add_argument("--answers", action="append", default=[], type=Path, metavar="FILE.jsonl",
                   help="saved answers, one JSON object per line: 'id' and 'answer' (or "
                        "'response'); vlcohort eval / diversity items.jsonl files hold one "
                        "set per 'model' (repeatable)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--benchmark", help="one benchmark, read by eval's loaders "
                                         "(see vlcohort eval --help)")
    src.add_argument("--data", type=Path, help="a problem file (parquet / JSON / JSONL / "
                                               "dataset folder) with gold answers")
    src.add_argument("--synthetic", metavar="TASKS",
                     help="comma-separated synthetic task families (vlcohort.data.synthetic.TASKS)")
    p.add_argument("--data-dir", type=Path, default=Path("."),
                   help="--benchmark: folder of the official annotation files")
    p.add_argument("--preset", default="generic", help="--data: column layout "
                                                       "(generic | mmr1 | open_r1)")
    p.add_argument("--limit", type=int, default=None, help="--benchmark / --data: first N items")
    p.add_argument("--n", type=int, default=64, help="--synthetic: number of problems")
    p.add_argument("--seed", type=int, default=HELD_OUT_SEED,
                   help="--synthetic: seed (default %(default)s: the held-out set of a "
                        "training run with run.seed=0)")
    p.add_argument("--image-size", type=int, default=56, help="--synthetic: image side in px")
    p.add_argument("--fixed-options", action="store_true",
                   help="--synthetic: options in a fixed order (data.shuffle_options=false)")
    p.add_argument("--prompt", default="boxed", choices=["boxed", "answer_tag", "official"],
                   help="answer instruction style (as vlcohort eval)")
    p.add_argument("--instruction", default=None,
                   help="answer instruction replacing --prompt's (e.g. the training config's "
                        "prompt.instruction)")
    p.add_argument("--system-prompt", default="You are a helpful assistant.",
                   help="system message ('' for none)")
    p.add_argument("--max-new-tokens", type=int, default=1024)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--out", type=Path, default=Path("runs/diversity"),
                   help="output folder: diversity.md, diversity.json, and items.jsonl (the "
                        "models' answers, reused on a rerun)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _model_answer_sets(args: argparse.Namespace, pset: ProblemSet) -> list[AnswerSet]:
    """Each ``--model`` answers every problem greedily; answers already in
    ``<out>/items.jsonl`` (same problem set, id and model) are reused, not generated."""
    from vlcohort.eval.datasets import BenchmarkData
    from vlcohort.eval.generation import run_generation
    from vlcohort.eval.runner import EvalSettings, read_items

    items = args.out / "items.jsonl"
    settings = EvalSettings(models=list(args.model), benchmarks=[pset.name], data_dir=pset.path,
                            out=args.out, samples=1, prompt=args.prompt,
                            max_new_tokens=args.max_new_tokens, batch_size=args.batch_size,
                            system_prompt=args.system_prompt or None,
                            instruction=args.instruction, progress=not args.no_progress)
    args.out.mkdir(parents=True, exist_ok=True)
    written = run_generation(settings, {pset.name: BenchmarkData(pset.name, pset.path,
                                                                 pset.problems)}, items)
    ids = {p.id for p in pset.problems}
    reused = len(pset.problems) * len(args.model) - written
    print(f"answers: {written} generated, {reused} reused from {items}", file=sys.stderr)
    sets = {m: AnswerSet(m, m, {}) for m in args.model}
    for r in read_items(items):
        if (r.get("benchmark") == pset.name and r.get("model") in sets and str(r["id"]) in ids
                and int(r.get("sample", 0)) == 0):
            sets[r["model"]].answers[str(r["id"])] = r.get("extracted")
    return list(sets.values())


def _file_answer_sets(args: argparse.Namespace, pset: ProblemSet) -> list[AnswerSet]:
    from vlcohort.eval.datasets import read_jsonl

    out: list[AnswerSet] = []
    for path in args.answers:
        if not path.is_file():
            raise DiversityError(f"--answers {path}: no such file")
        sets, notes = answer_sets_from_records(list(read_jsonl(path)), path, pset.name)
        for note in notes:
            print(note, file=sys.stderr)
        for s in sets:
            check_ids(s, [p.id for p in pset.problems], str(path))
        out += sets
    return out


def run(args: argparse.Namespace) -> int:
    """``vlcohort diversity``: answer (or read answers), measure, write, print. Exit 0, or 2
    with a message for bad input."""
    from vlcohort.answers.grading import get_grader
    from vlcohort.data.problems import DataError
    from vlcohort.eval.datasets import BenchmarkError

    try:
        if len(args.model) + len(args.answers) == 0:
            raise DiversityError("give the models to compare: --model PATH_OR_SPEC and/or "
                                 "--answers FILE.jsonl, at least two sets in all")
        twice = sorted(m for m, k in Counter(args.model).items() if k > 1)
        if twice:
            raise DiversityError(f"--model given twice: {_show(twice)}")
        for flag, value in (("--n", args.n), ("--limit", args.limit),
                            ("--max-new-tokens", args.max_new_tokens),
                            ("--batch-size", args.batch_size)):
            if value is not None and value < 1:
                raise DiversityError(f"{flag} must be >= 1, got {value}")
        pset = load_problem_set(args, need_images=bool(args.model))
        sets = _file_answer_sets(args, pset)
        if len(sets) + len(args.model) < 2:
            raise DiversityError(f"need at least 2 models or answer sets to compare, got "
                                 f"{len(sets) + len(args.model)}; give --model / --answers "
                                 "more than once (an answers file holds one set per 'model').")
        clash = sorted({s.name for s in sets} & set(args.model)) or sorted(
            n for n, k in Counter(s.name for s in sets).items() if k > 1)
        if clash:
            raise DiversityError(f"two answer sets named {_show(clash)}; model names must be "
                                 "unique (add a 'model' field to the answer files, or rename one)")
        if args.model:
            sets = _model_answer_sets(args, pset) + sets
        report = analyse(pset.problems, sets, get_grader())
    except (DiversityError, BenchmarkError, DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    report["problems"] = {"set": pset.name, "path": str(pset.path),
                          "without_gold": pset.without_gold}
    text = markdown_report(report, f"## Cohort diversity on {pset.name}\n")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "diversity.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "diversity.md").write_text(text)
    print(text, end="")
    print(f"wrote {args.out / 'diversity.md'} and {args.out / 'diversity.json'}", file=sys.stderr)
    return 0
