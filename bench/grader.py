"""Benchmark: the corrected grader against math-verify, on real benchmark golds.

Run from the project root::

    python bench/grader.py [--pairs 2000] [--seed 0] [--sets gold,hard,foreign,mvsuite]

``--sets`` picks the parts below (default: all); ``--sets foreign`` is the quick loop for
whoever fixes extraction or grading (a few seconds).

What it does
------------
1. Builds a realistic answer set from the shared benchmark files
   (``$VLCOHORT_BENCHMARK_DATA``, else ``shared/data/benchmarks`` beside the checkout): gold answers of
   MathVista, MATH-Vision, MathVerse and We-Math, each paired with phrasings a model
   writes (letters, "(C)", "C. option text", the option text, LaTeX variants, units,
   degrees, "x = ...", thousands separators) and with wrong answers (other values,
   other options, other golds).
2. Times ``vlcohort.answers.grading.is_equivalent`` on every pair with cold caches, then
   math-verify's ``verify(parse(gold), parse(pred))`` on the same pairs in the same run
   (each side wrapped in ``$...$`` as math-verify needs for bare LaTeX; its own default
   timeouts). Ours runs first so that math-verify's internal caches, which our symbolic
   tier also fills, can only flatter the baseline.
3. Reports agreement on the free-form pairs where math-verify parses both sides, the
   verdicts on multiple-choice pairs, and the time of a vote over 64 prompts x 8
   samples with cold caches (target < 5 ms).
4. Runs the held-out hard-math set (``eval/grader_sets/hard_math.py``: collections, several boxes,
   left-hand sides, intervals, matrices, number words, text, bare answers; each pair
   built with its intended verdict): per class, the accuracy of ours (extract, for the
   pairs that are whole responses, then ``is_equivalent``) and of math-verify's plain
   ``verify(parse(gold), parse(pred))``, and each one's time per pair; then the speed
   ratio on plain answers (numbers, letters, fractions, degrees, units), cold caches.

5. ``foreign``: the foreign-replies set (``eval/grader_sets/foreign_replies.py``: real Bard
   and MathVerse replies, pairs from a public grader's tests, and replies written in the
   styles a house grader never saw: other languages' answer markers, count nouns, long
   decimals, close large numbers, direct option forms, bare LaTeX, answers inside a
   sentence, collections, implicit products). Each case goes through ours (``extract_answer``
   in the case's style, ``auto`` unless it names one, then ``is_equivalent``) and through
   math-verify (``verify(parse(gold), parse(reply))``, its default extraction), in the same
   run. Per source and per class: n, each one's accuracy on the clear-cut cases and false
   positives (a "right" for a reply meant wrong). Dev and held-out are printed apart: the
   held-out fifth only as aggregate tables, the dev split also with every case ours fails.
6. ``mvsuite``: math-verify's own test cases (``eval/grader_sets/math_verify_suite.py``)
   against their expected verdicts; the cases that rely on its last-expression extraction
   go through our ``last_expression`` style (``auto`` where that style does not exist yet,
   which the output says).

The summary lines come last, for the parts run: ``speedup_vs_math_verify=<x>`` (target >= 20
with >= 99% agreement), ``plain_speedup_vs_math_verify=<x>`` (target >= 20),
``hard_accuracy_ours=<x> hard_accuracy_math_verify=<y>`` (target: ours >= 0.97),
``foreign_dev_clear_accuracy_ours=..``, ``foreign_heldout_clear_accuracy_ours=..``,
``foreign_false_positives_ours=..`` (each beside math-verify's), and
``mv_suite_accuracy_ours=.. mv_suite_accuracy_math_verify=..``.
A benchmark prints ratios against a peer; it is not a timed test.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import random
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import vlcohort  # noqa: E402 - sys.path is set first

if importlib.util.find_spec("vlcohort.eval") is None:  # a checkout without an install of it
    vlcohort.__path__.append(str(ROOT))  # eval/ installs as vlcohort.eval (pyproject's package-dir)

from vlcohort.answers import grading  # noqa: E402 - sys.path is set first
from vlcohort.answers.extract import extract_answer  # noqa: E402 - sys.path is set first
from vlcohort.answers.grading import LETTERS, is_equivalent  # noqa: E402 - sys.path is set first
from vlcohort.answers.voting import majority_vote  # noqa: E402 - sys.path is set first
from vlcohort.eval.datasets import split_semicolon_options  # noqa: E402 - sys.path is set first
from vlcohort.eval.grader_sets.hard_math import CLASSES, hard_cases, plain_pairs  # noqa: E402 - sys.path is set first

DATA = Path(os.environ.get("VLCOHORT_BENCHMARK_DATA") or ROOT.parent / "shared" / "data" / "benchmarks")


# ------------------------------------------------------------------ loading the golds


def load_items() -> list[dict]:
    """Items as {"gold": str, "options": list | None, "source": str}."""
    need = ["mathvista_testmini.json", "mathvision_testmini.jsonl", "wemath_testmini.json",
            "mathverse_testmini_text_only.json"]
    missing = [n for n in need if not (DATA / n).is_file()]
    if missing:
        sys.exit(f"benchmark files missing in {DATA}: {', '.join(missing)} "
                 "(set VLCOHORT_BENCHMARK_DATA to the shared benchmarks folder)")
    items = []
    for rec in json.loads((DATA / "mathvista_testmini.json").read_text()).values():
        opts = rec["choices"] if rec["question_type"] == "multi_choice" else None
        items.append({"gold": str(rec["answer"]), "options": opts, "unit": rec.get("unit"), "source": "mathvista"})
    for line in (DATA / "mathvision_testmini.jsonl").read_text().splitlines():
        rec = json.loads(line)
        items.append({"gold": rec["answer"], "options": rec["options"] or None, "source": "mathvision"})
    for rec in json.loads((DATA / "mathverse_testmini_text_only.json").read_text()):
        if rec["question_type"] == "free-form":
            items.append({"gold": rec["answer"].strip(), "options": None, "source": "mathverse"})
    seen = set()
    for rec in json.loads((DATA / "wemath_testmini.json").read_text()):
        key = (rec["ID"], rec["key"])
        if key not in seen:
            seen.add(key)
            items.append({"gold": rec["answer"], "options": split_semicolon_options(rec["option"]), "source": "wemath"})
    return items


def mc_pairs(item: dict, rng: random.Random) -> list[tuple[str, str, list[str], bool]]:
    opts, gold = item["options"], item["gold"]
    right = LETTERS.index(gold) if gold in LETTERS[: len(opts)] and item["source"] != "mathvista" else opts.index(gold)
    pairs = []
    for i, text in enumerate(opts):
        letter = LETTERS[i]
        ok = opts[i] == opts[right] if i != right else True
        forms = [letter, f"({letter})", f"{letter}.", f"{letter}: {text}", f"{letter}. {text}", f"option {letter}",
                 f"**{letter}**", f"\\text{{{letter}}}", letter.lower(), text]
        for form in rng.sample(forms, 4):
            dup = opts.count(text) > 1 and form == text
            pairs.append((form, gold, opts, ok and not dup))
    return pairs


def _num(text: str):
    try:
        return float(text)
    except ValueError:
        return None


def freeform_pairs(item: dict, pool: list[str], rng: random.Random) -> list[tuple[str, str, None, bool | None]]:
    """(pred, gold, None, intended) with intended None where no single verdict is obvious."""
    gold = item["gold"]
    bare = gold.replace("$", "").strip()
    right, wrong = [gold, f"${bare}$", bare], [rng.choice(pool), "yes", "x+1"]
    value = _num(gold)
    if value is not None:
        right += [f"{gold}0" if "." in gold else f"{gold}.0", f"x = {gold}"]
        if item.get("unit"):
            right.append(f"{gold} {item['unit']}")
        else:
            right.append(f"{gold} cm")
        if value >= 1000 and value == int(value):
            right.append(f"{int(value):,}")
        step = max(1.0, abs(value) / 10)  # far outside the 1e-4 relative tolerance
        wrong += [_fmt(value + step), _fmt(value * 2 + 3), _fmt(-value - 1)]
    else:
        variants = {
            gold.replace("\\frac", "\\dfrac"),
            gold.replace("^\\circ", "°"),
            gold.replace(" ", "") if not re.search(r"[A-Za-z]{3,}", re.sub(r"\\[A-Za-z]+", "", gold)) else gold,
            "\\left(" + bare[1:-1] + "\\right)" if bare.startswith("(") and bare.endswith(")") else gold,
            gold.replace("\\sqrt{", "\\sqrt {"),
        }
        right += sorted(variants)
        wrong += [_perturb(bare, 1), _perturb(bare, 7)]
    out = [(p, gold, None, True) for p in dict.fromkeys(right)]
    out += [(p, gold, None, False) for p in dict.fromkeys(wrong) if p.strip() != gold.strip()]
    return out


def _perturb(text: str, delta: int) -> str:
    """A wrong answer a model might give: the leading digit of the gold's first number
    changed by delta (mod 10), so the value is off by far more than the tolerance."""
    m = re.search(r"\d", text)
    if not m:
        return f"-({text})"
    return text[: m.start()] + str((int(m.group()) + delta) % 10) + text[m.end() :]


def _fmt(x: float) -> str:
    return str(int(x)) if x == int(x) else f"{x:.2f}"


# ------------------------------------------------------------------ measurements


def math_verify_verdicts(pairs):
    from math_verify import parse, verify

    def wrap(s: str) -> str:
        return s if "$" in s else f"${s}$"

    verdicts, parsed_both = [], []
    t0 = time.perf_counter()
    for pred, gold, _opts, _ in pairs:
        g, p = parse(wrap(gold)), parse(wrap(pred))
        verdicts.append(bool(verify(g, p)))
        parsed_both.append(bool(g) and bool(p))
    return verdicts, parsed_both, time.perf_counter() - t0


def ours_verdicts(pairs):
    grading.clear_caches()
    t0 = time.perf_counter()
    verdicts = [is_equivalent(pred, gold, opts) for pred, gold, opts, _ in pairs]
    return verdicts, time.perf_counter() - t0


def vote_timing(items, rng: random.Random, trials: int = 15) -> tuple[float, float, float]:
    """Best and median ms for 64 prompts x 8 samples with cold caches; and warm ms.

    The best of several trials is the figure least disturbed by other processes on a
    shared machine (as ``timeit`` advises); the median is printed beside it.
    """
    prompts = []
    pool = [it["gold"] for it in items if it["options"] is None]
    for item in rng.sample(items, 64):
        if item["options"]:
            phr = [p for p, _, _, _ in mc_pairs(item, rng)]
        else:
            phr = [p for p, _, _, _ in freeform_pairs(item, pool, rng)]
        samples = [None if rng.random() < 0.1 else rng.choice(phr[:3] if rng.random() < 0.6 else phr) for _ in range(8)]
        prompts.append((samples, item["options"]))
    cold = []
    for _ in range(trials):
        grading.clear_caches()
        t0 = time.perf_counter()
        for samples, opts in prompts:
            majority_vote(samples, opts)
        cold.append((time.perf_counter() - t0) * 1e3)
    t0 = time.perf_counter()
    for samples, opts in prompts:
        majority_vote(samples, opts)
    warm = (time.perf_counter() - t0) * 1e3
    return min(cold), statistics.median(cold), warm


def _wrap(s: str) -> str:
    """An answer span in ``$...$`` for math-verify's parse (bare LaTeX needs it)."""
    return s if "$" in s else f"${s}$"


def hard_verdicts(cases) -> tuple[list[bool], float, list[bool], float]:
    """(ours, seconds, math-verify's, seconds) on the hard set, ours first with cold caches.

    Ours: a response is extracted (``auto``) and then graded; a span is graded as is.
    math-verify: plain ``verify(parse(gold), parse(pred))``, the span ``$``-wrapped, a
    response given whole (its parse extracts from text itself).
    """
    from math_verify import parse, verify

    grading.clear_caches()
    t0 = time.perf_counter()
    ours = []
    for c in cases:
        pred = extract_answer(c.pred) if c.response else c.pred
        ours.append(pred is not None and is_equivalent(pred, c.gold, c.options))
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    theirs = [bool(verify(parse(_wrap(c.gold)), parse(c.pred if c.response else _wrap(c.pred))))
              for c in cases]
    return ours, t_ours, theirs, time.perf_counter() - t0


def hard_report(seed: int) -> tuple[float, float]:
    """Print the per-class table of the hard set; return (ours, math-verify) accuracy."""
    cases = hard_cases(seed)
    ours, t_ours, theirs, t_mv = hard_verdicts(cases)
    print(f"hard-math set: {len(cases)} pairs, {sum(not c.equal for c in cases)} built not equal")
    print(f"  {'class':<14} {'pairs':>5} {'ours':>7} {'math-verify':>12}")
    for klass in CLASSES:
        idx = [i for i, c in enumerate(cases) if c.klass == klass]
        a = sum(ours[i] == cases[i].equal for i in idx) / len(idx)
        b = sum(theirs[i] == cases[i].equal for i in idx) / len(idx)
        print(f"  {klass:<14} {len(idx):>5} {a:>7.3f} {b:>12.3f}{'' if a >= b else '  (ours below)'}")
    acc_ours = sum(o == c.equal for o, c in zip(ours, cases)) / len(cases)
    acc_mv = sum(t == c.equal for t, c in zip(theirs, cases)) / len(cases)
    print(f"  {'all':<14} {len(cases):>5} {acc_ours:>7.3f} {acc_mv:>12.3f}")
    wrong = [(c, o) for c, o in zip(cases, ours) if o != c.equal]
    for c, o in wrong[:8]:
        print(f"  ours wrong: [{c.klass}] pred={c.pred!r} gold={c.gold!r} ours={o} intended={c.equal}")
    print(f"hard set per pair: ours {1e6 * t_ours / len(cases):.1f} us, math-verify "
          f"{1e6 * t_mv / len(cases):.1f} us (target: ours <= 1.2x math-verify)")
    return acc_ours, acc_mv


def plain_speedup(seed: int) -> float:
    """math-verify's time over ours on plain answers (numbers, letters, fractions, degrees,
    units), ours with cold caches; also prints each one's accuracy there."""
    from math_verify import parse, verify

    pairs = plain_pairs(seed)
    grading.clear_caches()
    t0 = time.perf_counter()
    ours = [is_equivalent(p, g, o) for p, g, o, _ in pairs]
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    theirs = [bool(verify(parse(_wrap(g)), parse(_wrap(p)))) for p, g, _, _ in pairs]
    t_mv = time.perf_counter() - t0
    acc = [sum(v == ok for v, (*_, ok) in zip(vs, pairs)) / len(pairs) for vs in (ours, theirs)]
    print(f"plain answers: {len(pairs)} pairs; ours {1e6 * t_ours / len(pairs):.1f} us/pair "
          f"(accuracy {acc[0]:.3f}), math-verify {1e6 * t_mv / len(pairs):.1f} us/pair "
          f"(accuracy {acc[1]:.3f})")
    return t_mv / t_ours


def _mv_verdict(gold: str, pred: str, pred_is_reply: bool) -> bool:
    """math-verify's ``verify(parse(gold), parse(pred))`` with its default extraction; a
    span is ``$``-wrapped, a whole reply is given as is; any error counts as "not equal"."""
    from math_verify import parse, verify

    try:
        return bool(verify(parse(_wrap(gold)), parse(pred if pred_is_reply else _wrap(pred))))
    except Exception:  # a crash of the baseline is its "no", not ours to debug
        return False


def _ours_verdict(reply: str, gold: str, options, is_reply: bool, style: str) -> bool:
    """Ours on one case: extraction (bounded by its own span limits) when ``reply`` is a whole
    reply, then ``is_equivalent`` (bounded by the grader's own time limits)."""
    pred = extract_answer(reply, style) if is_reply else reply
    return pred is not None and is_equivalent(pred, gold, options)


def _table(title: str, groups: list[tuple[str, list[int]]], intended: list[bool], ours: list[bool],
           theirs: list[bool]) -> None:
    """Per group: n, each side's accuracy, each side's false positives (True where False was meant)."""
    width = max([22, len(title)] + [len(name) for name, _ in groups])
    print(f"  {title:<{width}} {'n':>4} {'ours':>7} {'math-verify':>12} {'FP ours':>8} {'FP mv':>6}")
    for name, idx in groups:
        if not idx:
            continue
        a = sum(ours[i] == intended[i] for i in idx) / len(idx)
        b = sum(theirs[i] == intended[i] for i in idx) / len(idx)
        fp_a = sum(ours[i] and not intended[i] for i in idx)
        fp_b = sum(theirs[i] and not intended[i] for i in idx)
        print(f"  {name:<{width}} {len(idx):>4} {a:>7.3f} {b:>12.3f} {fp_a:>8} {fp_b:>6}")


def foreign_report(split: str) -> dict[str, float]:
    """Run ``eval/grader_sets/foreign_replies.py`` (one split) through ours and math-verify.

    Accuracy is on the clear-cut cases; the others are counted apart. Held-out: only the
    aggregate tables (its cases stay unseen by whoever fixes the grader). Dev: also every
    case ours gets wrong.
    """
    from vlcohort.answers.extract import STYLES
    from vlcohort.eval.grader_sets.foreign_replies import CLASSES as FOREIGN_CLASSES
    from vlcohort.eval.grader_sets.foreign_replies import SOURCES, foreign_cases

    cases = foreign_cases(split)
    missing = sorted({c.style for c in cases} - set(STYLES))
    if missing:
        print(f"  note: extract_answer has no style {', '.join(missing)} yet; those cases run with 'auto'")
    grading.clear_caches()
    t0 = time.perf_counter()
    ours = [_ours_verdict(c.reply, c.gold, list(c.options) if c.options else None, c.response,
                          c.style if c.style in STYLES else "auto") for c in cases]
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    theirs = [_mv_verdict(c.gold, c.reply, c.response) for c in cases]
    t_mv = time.perf_counter() - t0
    intended = [c.verdict for c in cases]
    clear = [i for i, c in enumerate(cases) if c.clear_cut]
    unclear = [i for i, c in enumerate(cases) if not c.clear_cut]
    print(f"foreign replies, {split}: {len(cases)} cases ({len(unclear)} not clear-cut, counted apart), "
          f"{sum(not v for v in intended)} meant wrong; per case ours {1e6 * t_ours / max(len(cases), 1):.0f} us, "
          f"math-verify {1e6 * t_mv / max(len(cases), 1):.0f} us")
    by_source = [(s, [i for i in clear if cases[i].source == s]) for s in SOURCES]
    by_class = [(k, [i for i in clear if cases[i].klass == k]) for k in FOREIGN_CLASSES]
    _table("source (clear-cut)", by_source + [("all clear-cut", clear)], intended, ours, theirs)
    _table("class (clear-cut)", by_class, intended, ours, theirs)
    _table("not clear-cut", [("all not clear-cut", unclear)], intended, ours, theirs)
    if split == "dev":
        wrong = [i for i in range(len(cases)) if ours[i] != intended[i]]
        print(f"  ours wrong on {len(wrong)} dev cases:")
        for i in wrong:
            c = cases[i]
            shown = c.reply if len(c.reply) <= 160 else c.reply[:70] + " ... " + c.reply[-80:]
            pred = extract_answer(c.reply, c.style if c.style in STYLES else "auto") if c.response else c.reply
            tag = "" if c.clear_cut else " (not clear-cut)"
            tag += "" if c.style == "auto" else f" (style {c.style})"
            print(f"  ours wrong [{c.klass}/{c.source}]{tag}: gold={c.gold!r} options={c.options} "
                  f"{'reply' if c.response else 'span'}={shown!r} extracted={pred!r} ours={ours[i]} "
                  f"intended={c.verdict}")
    n = max(len(clear), 1)
    return {"ours": sum(ours[i] == intended[i] for i in clear) / n,
            "math_verify": sum(theirs[i] == intended[i] for i in clear) / n,
            "fp_ours": sum(ours[i] and not intended[i] for i in clear),
            "fp_math_verify": sum(theirs[i] and not intended[i] for i in clear)}


def mv_suite_report() -> tuple[float, float, float, float]:
    """Run math-verify's own test cases (``eval/grader_sets/math_verify_suite.py``) through ours
    and math-verify; return each one's accuracy against the suite's expected verdicts, on
    all cases and on the undisputed ones.

    math-verify runs as its test runs it (the test's extraction targets and precision); ours
    grades a span as is and extracts a side that is a whole reply with ``last_expression``.
    """
    from vlcohort.answers.extract import STYLES
    from vlcohort.eval.grader_sets.math_verify_suite import UPSTREAM_COMMIT, math_verify_verdict, suite_cases

    cases = suite_cases()
    style = "last_expression" if "last_expression" in STYLES else "auto"
    if style != "last_expression":
        print("  note: extract_answer has no 'last_expression' style yet; the extraction cases run with 'auto'")
    grading.clear_caches()
    ours = []
    for c in cases:
        gold = extract_answer(c.gold, style) if c.gold_is_reply else c.gold
        ours.append(gold is not None and _ours_verdict(c.pred, gold, None, c.pred_is_reply, style))
    theirs = []
    for c in cases:
        try:
            theirs.append(math_verify_verdict(c))
        except Exception:  # a crash of the baseline is its "no", not ours to debug
            theirs.append(False)
    intended = [c.expected for c in cases]
    print(f"math-verify's own test suite (upstream {UPSTREAM_COMMIT[:12]}): {len(cases)} cases, "
          f"{sum(c.extraction for c in cases)} relying on extraction from a reply (ours: {style!r})")
    tests = sorted({c.test for c in cases})
    _table("upstream test", [(t.split("::")[1], [i for i, c in enumerate(cases) if c.test == t]) for t in tests]
           + [("extraction cases", [i for i, c in enumerate(cases) if c.extraction]),
              ("span cases", [i for i, c in enumerate(cases) if not c.extraction]),
              ("all", list(range(len(cases))))], intended, ours, theirs)
    wrong = [i for i in range(len(cases)) if ours[i] != intended[i]]
    print(f"  ours wrong on {len(wrong)} cases:")
    for i in wrong:
        c = cases[i]
        g = c.gold if len(c.gold) <= 100 else c.gold[:40] + " ... " + c.gold[-50:]
        p = c.pred if len(c.pred) <= 100 else c.pred[:40] + " ... " + c.pred[-50:]
        tag = (", extraction" if c.extraction else "") + (", disputed" if c.disputed else "")
        print(f"  ours wrong [{c.test.split('::')[1]}{tag}]: gold={g!r} "
              f"pred={p!r} ours={ours[i]} expected={c.expected}")
    undisputed = [i for i, c in enumerate(cases) if not c.disputed]
    _table("upstream verdict", [("undisputed", undisputed),
                                ("disputed", [i for i, c in enumerate(cases) if c.disputed])],
           intended, ours, theirs)
    n, m = max(len(cases), 1), max(len(undisputed), 1)
    return (sum(o == e for o, e in zip(ours, intended)) / n, sum(t == e for t, e in zip(theirs, intended)) / n,
            sum(ours[i] == intended[i] for i in undisputed) / m, sum(theirs[i] == intended[i] for i in undisputed) / m)


SETS = ("gold", "hard", "foreign", "mvsuite")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=2000, help="pairs to time (sampled, mixed kinds)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sets", default=",".join(SETS),
                        help=f"comma-separated subset of {','.join(SETS)} (default: all); "
                        "'foreign' alone is the quick dev loop")
    args = parser.parse_args()
    chosen = [s.strip() for s in args.sets.split(",") if s.strip()]
    unknown = sorted(set(chosen) - set(SETS))
    if unknown:
        parser.error(f"unknown set(s) {', '.join(unknown)}; choose from {', '.join(SETS)}")
    logging.disable(logging.WARNING)  # math-verify logs every unparsable string
    # One-time costs outside every timing: the import, and the first parses that build
    # the LaTeX parser's lookup tables (hundreds of ms, paid once per process).
    from math_verify import parse as mv_parse
    from math_verify import verify as mv_verify

    mv_verify(mv_parse("$x^2+1$"), mv_parse("$\\frac{(x+1)^2}{2} = \\sqrt{3}$"))
    summary: list[str] = []
    if "gold" in chosen:
        summary += gold_report(args.pairs, args.seed)
    if "hard" in chosen:
        acc_ours, acc_mv = hard_report(args.seed)
        summary.append(f"plain_speedup_vs_math_verify={plain_speedup(args.seed):.1f}")
        summary.append(f"hard_accuracy_ours={acc_ours:.3f} hard_accuracy_math_verify={acc_mv:.3f}")
    if "foreign" in chosen:
        dev = foreign_report("dev")
        held = foreign_report("heldout")
        summary.append(f"foreign_dev_clear_accuracy_ours={dev['ours']:.3f} "
                       f"foreign_dev_clear_accuracy_math_verify={dev['math_verify']:.3f}")
        summary.append(f"foreign_heldout_clear_accuracy_ours={held['ours']:.3f} "
                       f"foreign_heldout_clear_accuracy_math_verify={held['math_verify']:.3f}")
        summary.append(f"foreign_false_positives_ours={dev['fp_ours'] + held['fp_ours']} "
                       f"foreign_false_positives_math_verify={dev['fp_math_verify'] + held['fp_math_verify']}")
    if "mvsuite" in chosen:
        acc_ours, acc_mv, und_ours, und_mv = mv_suite_report()
        summary.append(f"mv_suite_accuracy_ours={acc_ours:.3f} mv_suite_accuracy_math_verify={acc_mv:.3f}")
        summary.append(f"mv_suite_undisputed_accuracy_ours={und_ours:.3f} "
                       f"mv_suite_undisputed_accuracy_math_verify={und_mv:.3f}")
    for line in summary:
        print(line)


def gold_report(n_pairs: int, seed: int) -> list[str]:
    """The benchmark-gold pairs: agreement and speed against math-verify, and the vote
    timing; returns the summary line ``speedup_vs_math_verify=<x>``."""
    rng = random.Random(seed)

    items = load_items()
    pool = [it["gold"] for it in items if it["options"] is None]
    pairs = []
    for item in items:
        pairs += mc_pairs(item, rng) if item["options"] else freeform_pairs(item, pool, rng)
    pairs = list({(p, g, tuple(o) if o else None): (p, g, o, ok) for p, g, o, ok in pairs}.values())
    rng.shuffle(pairs)
    # half free-form, half multiple-choice (multiple-choice items give many more pairs)
    free = [p for p in pairs if p[2] is None][: n_pairs // 2]
    pairs = free + [p for p in pairs if p[2] is not None][: n_pairs - len(free)]
    rng.shuffle(pairs)
    n_ff = sum(1 for p in pairs if p[2] is None)
    print(f"benchmark data: {DATA}")
    print(f"pairs: {len(pairs)} ({n_ff} free-form, {len(pairs) - n_ff} multiple-choice), "
          f"from {len(items)} benchmark items")

    ours, t_ours = ours_verdicts(pairs)
    theirs, parsed_both, t_mv = math_verify_verdicts(pairs)

    ff = [i for i, p in enumerate(pairs) if p[2] is None and parsed_both[i]]
    agree = sum(ours[i] == theirs[i] for i in ff)
    print(f"free-form pairs math-verify parses on both sides: {len(ff)}; "
          f"agreement {agree}/{len(ff)} = {100 * agree / max(len(ff), 1):.2f}%")
    disagreements = [i for i in ff if ours[i] != theirs[i]]
    ours_right = sum(ours[i] == pairs[i][3] for i in disagreements)
    print(f"  of the {len(disagreements)} disagreements, the verdict the pair was built with "
          f"(a correct phrasing or a wrong value) is ours in {ours_right}, math-verify's in "
          f"{len(disagreements) - ours_right}")
    for i in disagreements[:8]:
        pred, gold, _, _ = pairs[i]
        print(f"  differ: pred={pred!r} gold={gold!r} ours={ours[i]} math_verify={theirs[i]}")
    ff_unparsed = sum(1 for i, p in enumerate(pairs) if p[2] is None and not parsed_both[i])
    print(f"free-form pairs math-verify cannot parse on one side (excluded): {ff_unparsed}")

    mc = [i for i, p in enumerate(pairs) if p[2] is not None]
    if mc:
        ok_ours = sum(ours[i] == pairs[i][3] for i in mc)
        ok_mv = sum(theirs[i] == pairs[i][3] for i in mc)
        print(f"multiple-choice pairs graded as intended: corrected grader {ok_ours}/{len(mc)} "
              f"= {100 * ok_ours / len(mc):.1f}%, math-verify {ok_mv}/{len(mc)} = {100 * ok_mv / len(mc):.1f}%")

    per_ours, per_mv = 1e6 * t_ours / len(pairs), 1e6 * t_mv / len(pairs)
    print(f"is_equivalent (cold caches): {t_ours:.3f} s total, {per_ours:.1f} us/pair")
    print(f"math-verify verify(parse(gold), parse(pred)): {t_mv:.3f} s total, {per_mv:.1f} us/pair")
    best, median, warm = vote_timing(items, rng)
    verdict = "under" if best < 5 else "OVER"
    print(f"vote over 64 prompts x 8 samples, cold caches: {best:.2f} ms best of 15 ({verdict} the 5 ms "
          f"target), {median:.2f} ms median; warm caches: {warm:.2f} ms")
    return [f"speedup_vs_math_verify={t_mv / t_ours:.1f}"]



if __name__ == "__main__":
    main()
