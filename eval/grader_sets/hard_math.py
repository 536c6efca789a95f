"""A held-out set of hard math answer pairs, with the verdict each pair was built with.

``bench/grader.py`` runs it beside its benchmark-gold sets. The pairs are the answer forms
that math training data (MATH levels 3-5, competition sets, free-form golds) uses and
that a grader aimed at multiple choice and single numbers gets wrong:

=================  ============================================================
class              what varies
=================  ============================================================
collections        unordered sets of numbers or tuples: order, spacing, ``\\{\\}``,
                   ``or`` / ``and`` / ``;``, ``x = a \\text{ or } x = b``
several_boxes      full responses whose answer is spread over several boxes
lhs                a left-hand side: ``x = 12``, ``AB = 5\\sqrt{2}``, ``a = 3, b = 4`` vs
                   ``(3, 4)``, ratios ``S_1 : S_2 = 7 : 32``, ``k = .., n = ..`` in two boxes
intervals          intervals against inequalities, strictness, unions, ``\\neq``
matrices           ``pmatrix`` / ``bmatrix`` / ``[[..], [..]]``, column vectors
number_words       ``percent`` / ``pct`` / ``\\%``, decimal commas, thousands, large powers
text               ``\\text{Yes}`` vs ``yes``, ``\\text{(E) 9:30}`` against option E
bare               full responses with no marker: ``A``, ``(C)``, ``60``, ``The answer is:\\nA``
=================  ============================================================

Every pair is made by a rule over small value pools with a fixed seed (a random set
permuted, an interval rendered as an inequality, one entry of a matrix changed), plus a
few hand-written ones; the intended verdict comes from the generator's own knowledge of
the values (the same set in another order is equal; a set with one element changed is
not), never from either grader. Close to half of each class is "not equal" (most
generators emit a right and a wrong rendering of one value): a wrong element, a missing
element, a strictness change, a wrong value.

:func:`plain_pairs` is the other half of the bench: plain numbers, letters, fractions,
degrees and units, for the speed ratio on the answers most training data has.

>>> cases = hard_cases()
>>> len(cases) >= 300 and {c.klass for c in cases} == set(CLASSES)
True
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from fractions import Fraction

__all__ = ["CLASSES", "HardCase", "hard_cases", "plain_pairs"]

CLASSES = ("collections", "several_boxes", "lhs", "intervals", "matrices", "number_words",
           "text", "bare")


@dataclass(frozen=True)
class HardCase:
    """One (gold, prediction) pair and the verdict it was built with.

    ``response``: ``pred`` is a whole model response, to pass through answer extraction
    first; otherwise it is an answer span. ``options``: the problem's choices, or None.
    """

    klass: str
    gold: str
    pred: str
    equal: bool
    response: bool = False
    options: tuple[str, ...] | None = None


def hard_cases(seed: int = 0) -> list[HardCase]:
    """All pairs, class by class, the same list for the same seed (duplicates dropped)."""
    rng = random.Random(seed)
    cases: list[HardCase] = []
    for make in (_collections, _several_boxes, _lhs, _intervals, _matrices, _number_words,
                 _text, _bare):
        cases += make(rng)
    return list({(c.klass, c.gold, c.pred, c.options): c for c in cases}.values())


# ------------------------------------------------------------------ renderers


def _permuted(rng: random.Random, values: list) -> list:
    """``values`` in another order (reversed when the shuffle keeps it)."""
    out = values[:]
    rng.shuffle(out)
    return out if out != values else out[::-1]


def _sep(rng: random.Random) -> str:
    return rng.choice([", ", ",", " , ", ",\\ "])


def _render_set(rng: random.Random, vals: list[int], var: str = "x") -> str:
    """One way a model or a dataset writes the set ``vals`` (in the given order)."""
    s = [str(v) for v in vals]
    form = rng.randrange(8)
    if form == 0:
        return "\\{" + _sep(rng).join(s) + "\\}"
    if form == 1:
        return _sep(rng).join(s)
    if form == 2:
        return "; ".join(s)
    if form == 3:
        return " \\text{ or } ".join(f"{var} = {v}" for v in s)
    if form == 4:
        return ", ".join(s[:-1]) + " \\text{ and } " + s[-1]
    if form == 5:
        return ", ".join(f"${v}$" for v in s[:-1]) + f" and ${s[-1]}$"
    if form == 6:
        return ", ".join(f"{var}={v}" for v in s)
    return " \\text{ or } ".join(s)


def _render_tuples(rng: random.Random, tuples: list[tuple[int, int]]) -> str:
    sep = _sep(rng)
    body = sep.join(f"({a}{sep}{b})" for a, b in tuples)
    return "\\{" + body + "\\}" if rng.random() < 0.3 else body


# ------------------------------------------------------------------ classes


def _collections(rng: random.Random) -> list[HardCase]:
    out = []
    for _ in range(16):  # sets of numbers
        vals = rng.sample(range(-9, 21), rng.choice([2, 3]))
        gold = "\\{" + ", ".join(map(str, vals)) + "\\}" if rng.random() < 0.5 else ", ".join(map(str, vals))
        out.append(HardCase("collections", gold, _render_set(rng, _permuted(rng, vals)), True))
        wrong = _permuted(rng, vals)
        kind = rng.randrange(3)
        if kind == 0:  # one element wrong
            i = rng.randrange(len(wrong))
            wrong[i] = max(vals) + rng.randint(1, 5)
        elif kind == 1:  # one element missing
            wrong = wrong[:-1]
        else:  # one element too many
            wrong = wrong + [max(vals) + rng.randint(1, 5)]
        if len(wrong) > 1 or kind != 1:
            out.append(HardCase("collections", gold, _render_set(rng, wrong), False))
    for _ in range(10):  # sets of ordered pairs
        a, b, c = rng.sample(range(-5, 18), 3)
        tuples = [(a, b), (b, a)] if rng.random() < 0.5 else [(a, b), (c, a)]
        gold = ", ".join(f"({p}, {q})" for p, q in tuples)
        out.append(HardCase("collections", gold, _render_tuples(rng, _permuted(rng, tuples)), True))
        p, q = tuples[1]
        if (q, p) in tuples:  # (a, b), (b, a): change a value
            wrong = [tuples[0], (p, q + 1)]
        else:  # flip one pair: order inside a tuple matters
            wrong = [tuples[0], (q, p)]
        out.append(HardCase("collections", gold, _render_tuples(rng, _permuted(rng, wrong)), False))
    out += [
        HardCase("collections", "(3, 17), (17, 3)", "(17,3),(3,17)", True),
        HardCase("collections", "\\{-2, 1\\}", "1;-2", True),
        HardCase("collections", "\\{-2, 1\\}", "-2, 1", True),
        HardCase("collections", "x = 2 \\text{ or } x = 5", "2, 5", True),
        HardCase("collections", "4, 9", "4 \\text{ and } 9", True),
        HardCase("collections", "1,2", "$1$ and $2$", True),
        HardCase("collections", "\\{-2, 1\\}", "-2, -1", False),
        HardCase("collections", "x = 2 \\text{ or } x = 5", "2", False),
    ]
    return out


def _several_boxes(rng: random.Random) -> list[HardCase]:
    out = []
    intros = ["Solving the quadratic, the roots are ", "Therefore the solutions are ",
              "So we get ", "Checking both candidates, the answers are "]
    for _ in range(12):
        vals = rng.sample(range(-9, 25), rng.choice([2, 2, 3]))
        gold = ", ".join(map(str, vals)) if rng.random() < 0.6 else "\\{" + ", ".join(map(str, vals)) + "\\}"
        order = _permuted(rng, vals)
        form = rng.randrange(3)
        if form == 0:
            body = ", ".join(f"$\\boxed{{{v}}}$" for v in order[:-1]) + f" and $\\boxed{{{order[-1]}}}$"
        elif form == 1:
            body = " or ".join(f"$x = \\boxed{{{v}}}$" for v in order)
        else:
            body = ", ".join(f"\\boxed{{{v}}}" for v in order)
        out.append(HardCase("several_boxes", gold, rng.choice(intros) + body + ".", True, response=True))
        # not equal: a box missing, or one value wrong
        if rng.random() < 0.5:
            wrong = order[:-1]
        else:
            wrong = order[:-1] + [max(vals) + rng.randint(1, 4)]
        body = " and ".join(f"\\boxed{{{v}}}" for v in wrong)
        out.append(HardCase("several_boxes", gold, rng.choice(intros) + body + ".", False, response=True))
    for _ in range(6):  # an early box is a discarded candidate, the final box the answer
        a, b = rng.sample(range(1, 30), 2)
        resp = (f"First we try $x = \\boxed{{{a}}}$, but substituting back it fails the "
                f"condition. The only solution that works is therefore $\\boxed{{{b}}}$.")
        out.append(HardCase("several_boxes", f"{b}", resp, True, response=True))
        out.append(HardCase("several_boxes", f"{a}, {b}", resp, False, response=True))
    for _ in range(6):  # tuples in several boxes
        a, b = rng.sample(range(-6, 12), 2)
        resp = f"The pairs are $\\boxed{{({b}, {a})}}$ and $\\boxed{{({a}, {b})}}$."
        out.append(HardCase("several_boxes", f"({a}, {b}), ({b}, {a})", resp, True, response=True))
        resp = f"The pairs are $\\boxed{{({a}, {b})}}$ and $\\boxed{{({a}, {b + 1})}}$."
        out.append(HardCase("several_boxes", f"({a}, {b}), ({b}, {a})", resp, False, response=True))
    for _ in range(4):  # the same box twice is one answer
        v = rng.randint(2, 99)
        resp = f"Hence the sum is $\\boxed{{{v}}}$.\n\nFinal answer: $\\boxed{{{v}}}$"
        out.append(HardCase("several_boxes", str(v), resp, True, response=True))
        out.append(HardCase("several_boxes", str(v + 1), resp, False, response=True))
    out += [
        HardCase("several_boxes", "(1, 2), (2, 1)", "\\boxed{(1, 2)}, \\boxed{(2, 1)}", True, response=True),
        HardCase("several_boxes", "3, 7", "so $\\boxed{3}$ and $\\boxed{7}$", True, response=True),
        HardCase("several_boxes", "3, 7", "so $\\boxed{3}$ and $\\boxed{8}$", False, response=True),
        # two boxes are a list, never one number with a decimal comma
        HardCase("several_boxes", "1.5", "\\boxed{1}, \\boxed{5}", False, response=True),
        HardCase("several_boxes", "1, 5", "\\boxed{1}, \\boxed{5}", True, response=True),
    ]
    return out


def _lhs(rng: random.Random) -> list[HardCase]:
    out = []
    for _ in range(8):
        var = rng.choice(["x", "y", "n", "k", "t", "a", "m"])
        if rng.random() < 0.5:
            n = rng.randint(-20, 99)
            v, w = str(n), str(n + rng.randint(1, 5))
        else:
            p, q = rng.randint(1, 9), rng.randint(2, 11)
            f = Fraction(p, q)
            v, w = f"\\frac{{{f.numerator}}}{{{f.denominator}}}", f"\\frac{{{f.numerator + 1}}}{{{f.denominator}}}"
        spaced = rng.choice([f"{var} = {v}", f"{var}={v}", f"${var} = {v}$"])
        out.append(HardCase("lhs", v, spaced, True))
        out.append(HardCase("lhs", v, spaced.replace(v, w), False))
    for _ in range(6):
        seg = rng.choice(["AB", "BC", "CD", "PQ", "AC"])
        k, m = rng.randint(2, 9), rng.choice([2, 3, 5, 7])
        out.append(HardCase("lhs", f"{k}\\sqrt{{{m}}}", f"{seg} = {k}\\sqrt{{{m}}}", True))
        out.append(HardCase("lhs", f"{k}\\sqrt{{{m}}}", f"{seg} = {k + 1}\\sqrt{{{m}}}", False))
    for _ in range(6):  # named values in order against a tuple
        p, q = rng.sample(range(-9, 30), 2)
        names = rng.choice([("a", "b"), ("x", "y"), ("m", "n")])
        out.append(HardCase("lhs", f"({p}, {q})", f"{names[0]} = {p}, {names[1]} = {q}", True))
        out.append(HardCase("lhs", f"({p}, {q})", f"{names[0]} = {q}, {names[1]} = {p}", False))
    for _ in range(5):  # ratios
        p, q = rng.sample(range(1, 40), 2)
        out.append(HardCase("lhs", f"{p}:{q}", f"S_1 : S_2 = {p} : {q}", True))
        out.append(HardCase("lhs", f"{p}:{q}", f"S_1 : S_2 = {p} : {q + 1}", False))
    for _ in range(5):  # k and n over two boxes (a response)
        k, n = rng.randint(2, 99), rng.randint(1, 9)
        resp = f"Thus $\\boxed{{k = {k}}}$, $\\boxed{{n = {n}}}$."
        out.append(HardCase("lhs", f"k = {k}, n = {n}", resp, True, response=True))
        resp = f"Thus $\\boxed{{k = {k + 1}}}$, $\\boxed{{n = {n}}}$."
        out.append(HardCase("lhs", f"k = {k}, n = {n}", resp, False, response=True))
    out += [
        HardCase("lhs", "12", "x = 12", True),
        HardCase("lhs", "5\\sqrt{2}", "AB = 5\\sqrt{2}", True),
        HardCase("lhs", "(3, 4)", "a = 3, b = 4", True),
        HardCase("lhs", "7:32", "S_1 : S_2 = 7 : 32", True),
        HardCase("lhs", "12", "x = 21", False),
    ]
    return out


def _ineq(rng: random.Random, op: str) -> str:
    return {"<": "<", ">": ">", "le": rng.choice(["\\le", "\\leq", "<="]),
            "ge": rng.choice(["\\ge", "\\geq", ">="])}[op]


def _intervals(rng: random.Random) -> list[HardCase]:
    out = []
    for _ in range(8):  # bounded intervals
        a, b = sorted(rng.sample(range(-12, 15), 2))
        lo, hi = rng.choice([("(", "<"), ("[", "le")]), rng.choice([(")", "<"), ("]", "le")])
        gold = f"{lo[0]}{a}, {b}{hi[0]}"
        pred = f"{a} {_ineq(rng, lo[1])} x {_ineq(rng, hi[1])} {b}"
        out.append(HardCase("intervals", gold, pred, True))
        flip = {"<": "le", "le": "<"}  # a strictness change at one end
        out.append(HardCase("intervals", gold, f"{a} {_ineq(rng, flip[lo[1]])} x {_ineq(rng, hi[1])} {b}", False))
    for _ in range(8):  # rays
        a = rng.randint(-15, 20)
        kind = rng.randrange(4)
        gold, op = [(f"[{a}, \\infty)", "ge"), (f"({a}, \\infty)", ">"), (f"(-\\infty, {a}]", "le"),
                    (f"(-\\infty, {a})", "<")][kind]
        out.append(HardCase("intervals", gold, f"x {_ineq(rng, op)} {a}", True))
        wrong = {"ge": ">", ">": "ge", "le": "<", "<": "le"}[op] if rng.random() < 0.5 else op
        other = a if wrong != op else a + rng.randint(1, 4)
        out.append(HardCase("intervals", gold, f"x {_ineq(rng, wrong)} {other}", False))
    for _ in range(5):  # unions of two rays
        a, b = sorted(rng.sample(range(-10, 12), 2))
        gold = f"(-\\infty, {a}) \\cup ({b}, \\infty)"
        out.append(HardCase("intervals", gold, f"x < {a} \\text{{ or }} x > {b}", True))
        out.append(HardCase("intervals", gold, f"(-\\infty, {a}] \\cup ({b}, \\infty)", False))
    for _ in range(4):  # excluded points
        a = rng.randint(-9, 9)
        out.append(HardCase("intervals", f"x \\neq {a}", f"x != {a}", True))
        out.append(HardCase("intervals", f"x \\neq {a}", f"x \\ne {a + 1}", False))
    out += [
        HardCase("intervals", "(-3, 10)", "-3 < x < 10", True),
        HardCase("intervals", "[2, \\infty)", "x \\geq 2", True),
        HardCase("intervals", "[2, \\infty)", "x >= 2", True),
        HardCase("intervals", "x \\neq 3", "x != 3", True),
        HardCase("intervals", "(-3, 10)", "-3 \\le x < 10", False),
        HardCase("intervals", "[2, \\infty)", "x > 2", False),
    ]
    return out


def _pmatrix(rows: list[list[str]], env: str = "pmatrix", tight: bool = False) -> str:
    amp, nl = ("&", "\\\\") if tight else (" & ", " \\\\ ")
    return f"\\begin{{{env}}} " + nl.join(amp.join(r) for r in rows) + f" \\end{{{env}}}"


def _matrices(rng: random.Random) -> list[HardCase]:
    out = []
    for _ in range(10):  # 2x2
        m = [[rng.randint(-9, 9) for _ in range(2)] for _ in range(2)]
        while m[0][1] == m[1][0] or m[0] == m[1]:
            m[1][0] = rng.randint(-9, 9)
            m[1][1] = rng.randint(-9, 9)
        rows = [[str(v) for v in r] for r in m]
        gold = _pmatrix(rows)
        form = rng.randrange(3)
        if form == 0:
            pred = "[" + ", ".join("[" + ", ".join(r) + "]" for r in rows) + "]"
        elif form == 1:
            pred = _pmatrix(rows, "bmatrix", tight=rng.random() < 0.5)
        else:
            pred = _pmatrix(rows, tight=True)
        out.append(HardCase("matrices", gold, pred, True))
        kind = rng.randrange(3)
        if kind == 0:  # one entry wrong
            bad = [r[:] for r in rows]
            bad[rng.randrange(2)][rng.randrange(2)] = str(rng.randint(10, 20))
        elif kind == 1:  # transposed
            bad = [[rows[0][0], rows[1][0]], [rows[0][1], rows[1][1]]]
        else:  # rows swapped
            bad = [rows[1], rows[0]]
        out.append(HardCase("matrices", gold, _pmatrix(bad, rng.choice(["pmatrix", "bmatrix"])), False))
    for _ in range(8):  # column vectors
        v = [str(rng.randint(-9, 9)) for _ in range(rng.choice([2, 3]))]
        gold = "\\begin{pmatrix} " + " \\\\ ".join(v) + " \\end{pmatrix}"
        pred = "\\begin{bmatrix}" + "\\\\".join(v) + "\\end{bmatrix}"
        out.append(HardCase("matrices", gold, pred, True))
        w = v[:]
        w[-1] = str(int(w[-1]) + rng.randint(1, 3))
        out.append(HardCase("matrices", gold, "\\begin{pmatrix} " + " \\\\ ".join(w) + " \\end{pmatrix}", False))
    for _ in range(4):  # fraction entries against decimals
        p = rng.choice([1, 3])
        rows = [[f"\\frac{{{p}}}{{2}}", "0"], ["0", "1"]]
        dec = [[str(p / 2), "0"], ["0", "1"]]
        out.append(HardCase("matrices", _pmatrix(rows), _pmatrix(dec, "bmatrix"), True))
        dec[1][1] = "2"
        out.append(HardCase("matrices", _pmatrix(rows), _pmatrix(dec, "bmatrix"), False))
    out += [
        HardCase("matrices", "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}", "[[1, 2], [3, 4]]", True),
        HardCase("matrices", "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}", "[[1, 3], [2, 4]]", False),
    ]
    return out


def _number_words(rng: random.Random) -> list[HardCase]:
    out = []
    for _ in range(8):  # percent words
        v = rng.randint(1, 99)
        gold = rng.choice([f"{v}\\%", f"{v}%"])
        pred = rng.choice([f"{v} percent", f"{v} pct", f"{v}\\%", f"{v} \\%", f"{v} per cent"])
        out.append(HardCase("number_words", gold, pred, True))
        out.append(HardCase("number_words", gold, pred.replace(str(v), str(v + rng.randint(1, 9)), 1), False))
    for _ in range(8):  # decimal commas where the reading is unambiguous (not 3 digits after)
        whole, frac_s = rng.randint(0, 99), rng.choice(["5", "25", "75", "4", "05"])
        dec = f"{whole}.{frac_s}"
        out.append(HardCase("number_words", dec, f"{whole},{frac_s}", True))
        out.append(HardCase("number_words", dec, f"{whole},{frac_s[::-1]}1", False))
    for _ in range(6):  # thousands separators
        v = rng.randint(1, 99) * 1000 + rng.randint(100, 999)
        out.append(HardCase("number_words", str(v), f"{v:,}", True))
        out.append(HardCase("number_words", f"{v / 1000:.3f}".rstrip("0").rstrip("."), f"{v:,}", False))
    for _ in range(6):  # large powers, decided rather than refused
        base, n = rng.choice([2, 3, 5]), rng.randint(500, 2100)
        gold = f"\\frac{{1}}{{{base}}}"
        exact = Fraction(base**n, base ** (n + 1))
        near = Fraction(base**n - 1, base ** (n + 1))
        assert exact == Fraction(1, base) and near != Fraction(1, base)
        out.append(HardCase("number_words", gold, f"\\frac{{{base}^{{{n}}}}}{{{base}^{{{n + 1}}}}}", True))
        out.append(HardCase("number_words", gold, f"\\frac{{{base}^{{{n}}}-1}}{{{base}^{{{n + 1}}}}}", False))
    for _ in range(3):
        n = rng.randint(40, 120)
        out.append(HardCase("number_words", str(2**n), f"2^{{{n}}}", True))
        out.append(HardCase("number_words", str(2**n + 1), f"2^{{{n}}}", False))
    out += [
        HardCase("number_words", "28\\%", "28 percent", True),
        HardCase("number_words", "28\\%", "28 pct", True),
        HardCase("number_words", "1.5", "1,5", True),
        HardCase("number_words", "1.5", "1, 5", False),  # a space after the comma: a list
        HardCase("number_words", "2.5", "2,\\ 5", False),
        HardCase("number_words", "1000", "1,000", True),
        HardCase("number_words", "1", "1,000", False),
        HardCase("number_words", "\\frac13", "\\frac{3^{1008}-1}{3^{1009}}", False),
    ]
    return out


_TIMES = ["8:00", "8:30", "9:00", "9:30", "10:00", "10:30"]
_WORDS = ["obtuse", "acute", "right", "Monday", "Tuesday", "red", "blue", "even", "odd"]


def _text(rng: random.Random) -> list[HardCase]:
    out = []
    for _ in range(8):  # yes / no in \text
        word = rng.choice(["Yes", "No"])
        other = "No" if word == "Yes" else "Yes"
        gold = rng.choice([word.lower(), word, f"\\text{{{word}}}"])
        pred = rng.choice([f"\\text{{{word}}}", f"\\textbf{{{word}}}", f"\\text{{ {word.lower()} }}",
                           word.upper()])
        out.append(HardCase("text", gold, pred, True))
        out.append(HardCase("text", gold, rng.choice([f"\\text{{{other}}}", other.lower()]), False))
    for _ in range(7):  # words
        word, other = rng.sample(_WORDS, 2)
        gold = rng.choice([word, word.lower(), f"\\text{{{word}}}"])
        out.append(HardCase("text", gold, rng.choice([f"\\text{{{word}}}", f"\\mathrm{{{word}}}", word.lower()]), True))
        out.append(HardCase("text", gold, f"\\text{{{other}}}", False))
    for _ in range(9):  # an option written as \text{(L) option text}
        start = rng.randrange(2)
        opts = tuple(_TIMES[start:start + 5])
        i = rng.randrange(5)
        letter = "ABCDE"[i]
        pred = rng.choice([f"\\text{{({letter}) {opts[i]}}}", f"\\text{{{letter}. {opts[i]}}}",
                           f"\\text{{({letter})}}", f"\\text{{{opts[i]}}}"])
        out.append(HardCase("text", letter, pred, True, options=opts))
        j = (i + rng.randint(1, 4)) % 5
        out.append(HardCase("text", letter, rng.choice([f"\\text{{({'ABCDE'[j]}) {opts[j]}}}",
                                                         f"\\text{{{opts[j]}}}"]), False, options=opts))
    out += [
        HardCase("text", "E", "\\text{(E) 9:30}", True, options=("8:00", "8:30", "9:00", "9:15", "9:30")),
        HardCase("text", "yes", "\\text{Yes}", True),
        HardCase("text", "yes", "\\text{No}", False),
    ]
    return out


def _bare(rng: random.Random) -> list[HardCase]:
    out = []
    for _ in range(10):  # letters
        letter, other = rng.sample("ABCDE", 2)
        resp = rng.choice([letter, f"({letter})", f"{letter}.", f"The answer is:\n{letter}",
                           f"**{letter}**", f"\n{letter}\n"])
        out.append(HardCase("bare", letter, resp, True, response=True))
        out.append(HardCase("bare", letter, resp.replace(letter, other), False, response=True))
    for _ in range(10):  # numbers
        v = rng.randint(2, 360)
        resp = rng.choice([str(v), f"{v}.", f"Answer:\n{v}", f"{v}°", f"${v}$"])
        out.append(HardCase("bare", str(v), resp, True, response=True))
        out.append(HardCase("bare", str(v), resp.replace(str(v), str(v + rng.randint(1, 9))), False, response=True))
    for _ in range(5):  # reasoning that commits to no answer
        letter = rng.choice("ABCD")
        resp = (f"Let {letter} be the midpoint of the segment; comparing the two triangles, "
                f"the areas depend on the height from {letter}.")
        out.append(HardCase("bare", letter, resp, False, response=True))
    out += [
        HardCase("bare", "A", "The answer is:\nA", True, response=True),
        HardCase("bare", "60", "60", True, response=True),
        HardCase("bare", "C", "(C)", True, response=True),
        HardCase("bare", "C", "(B)", False, response=True),
    ]
    return out


# ------------------------------------------------------------------ plain answers (speed)


def plain_pairs(seed: int = 0, n: int = 1000) -> list[tuple[str, str, tuple[str, ...] | None, bool]]:
    """(pred, gold, options, equal) over the plain forms the fast tiers handle: numbers,
    letters, fractions, degrees, units; values drawn fresh so no cache sees a repeat.

    For the speed ratio against math-verify: these are where most training answers are,
    so the grader's cost per pair here is what a vote or a reward pays.
    """
    rng = random.Random(seed)
    units = ["cm", "m", "kg", "cm^2", "km", "g", "s"]
    out: list[tuple[str, str, tuple[str, ...] | None, bool]] = []
    while len(out) < n:
        kind = len(out) % 5
        if kind == 0:  # numbers
            v = rng.randint(-9999, 9999) / rng.choice([1, 10, 100])
            gold = f"{v:g}"
            pred, equal = rng.choice([(f"{v:.2f}", True), (f"{v + rng.randint(1, 50):g}", False)])
            out.append((pred, gold, None, equal))
        elif kind == 1:  # letters against options
            opts = tuple(str(v) for v in rng.sample(range(1, 1000), 4))  # distinct texts
            i, j = rng.sample(range(4), 2)
            letter = "ABCD"[i]
            form = rng.choice(["{L}", "({L})", "{L}.", "\\text{{{L}}}"])
            pick = rng.random() < 0.6
            out.append((form.format(L="ABCD"[i] if pick else "ABCD"[j]), letter, opts, pick))
        elif kind == 2:  # fractions
            p, q = rng.randint(1, 99), rng.randint(2, 99)
            f = Fraction(p, q)
            gold = f"\\frac{{{p}}}{{{q}}}"
            pred, equal = rng.choice([(f"{f.numerator}/{f.denominator}", True),
                                      (f"\\dfrac{{{p * 2}}}{{{q * 2}}}", True),
                                      (f"\\frac{{{p + 1}}}{{{q}}}", False)])
            out.append((pred, gold, None, equal))
        elif kind == 3:  # degrees
            v = rng.randint(1, 359)
            gold = f"{v}^\\circ"
            pred, equal = rng.choice([(f"{v}°", True), (f"{v} degrees", True), (f"{(v + 7) % 360}°", False)])
            out.append((pred, gold, None, equal))
        else:  # units
            v, unit = rng.randint(1, 999), rng.choice(units)
            gold = str(v)
            pred, equal = rng.choice([(f"{v} {unit}", True), (f"{v}\\,\\text{{{unit}}}", True),
                                      (f"{v + 1} {unit}", False)])
            out.append((pred, gold, None, equal))
    return out
