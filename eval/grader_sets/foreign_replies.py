"""Foreign replies: whole model replies (and a few answer spans) that a grader built on one
house style has never seen, each with the verdict a careful human gives it.

``bench/grader.py --sets foreign`` runs the set; the reward path depends on
``vlcohort.answers.extract.extract_answer`` then ``vlcohort.answers.grading.is_equivalent``
reading these the way a person does. The verdicts were set by reading what each reply
answers against the gold, never from what any grader says: a set tuned to a grader's output
measures nothing.

Sources (``ForeignCase.source``)
--------------------------------
``mathvista_bard``
    Real replies of Bard on MathVista testmini, from ``mathvista_testmini_output_bard.json``
    (published with MathVista), data in ``eval/grader_sets/foreign_replies_real.py``.
``mathverse_template``
    The example replies in MathVerse's ``mathverse_output_template_*.json``.
``nemo_skills``, ``qwen25_math``
    (gold, prediction) pairs taken as data from public graders' own tests: NVIDIA
    NeMo-Skills tests/test_math_equal.py (Apache-2.0, Copyright 2024 NVIDIA; commit
    583b90a2d5df; both orders) and QwenLM/Qwen2.5-Math evaluation/grader.py (commit
    29a82a8802e0, the pairs of its ``TestMathEquality`` and ``_test_math_equal``; the
    repository states no licence, so only these short expression pairs are cited, as test
    data, with this attribution), a third of them wrapped in a one-line reply. The verdict
    is set here, not taken from the suite.
    math-verify's own suite is a set of its own, ``eval/grader_sets/math_verify_suite.py``.
``written``
    Replies written for this set in the styles listed below, on real benchmark items
    (golds and options of MathVista (CC BY-SA 4.0), MATH-Vision (MIT), MathVerse (MIT) and
    We-Math (CC BY-NC 4.0), copied into ``_MC_ITEMS`` / ``_FREE_ITEMS`` with their ids) or on
    golds of the shapes those benchmarks and math training data use.

Classes (``ForeignCase.klass``), each with right and wrong replies (about 35-50% wrong;
the wrong ones are near misses: another option, off by one, a sign, a dropped element):

=====================  =================================================================
decimal_fraction       ``0.16666666666666666`` vs ``\\frac16``, ``2.3333333333333335`` vs ``7/3``
close_numbers          ``4096`` vs ``4096.2`` (different), ``3.14159`` vs ``3.1416`` (rounded)
count_nouns            ``Answer: 12 apples``, ``9 marbles``, ``6\\text{ chairs}``
foreign_markers        ``所以答案是 C。``, ``故选：D``, ``Answer：B``, ``La réponse est 42.``
mc_direct              ``(C) 24``, ``B. circle.``, ``The answer is D because ...``, ``option (B)``
bare_latex             a reply that is only ``\\frac{5}{12}`` (or ``$...$`` of it)
in_sentence            ``Hence $y \\leq 7$ holds.``, ``The inverse is $\\begin{pmatrix}..$.``
collections            ``{p+1, p}`` vs ``{p, p+1}``, ``(a, b) = ...`` vs braces, unordered
algebraic_forms        ``3^2 5^3`` vs ``3^2 \\cdot 5^3``, ``i(3-i)`` vs ``1+3i``, trig identities
hedges                 ``The answer is A or C.``, ``12 (or 13)`` (wrong: no commitment) vs
                       ``not B; it is D`` (right: one answer, others named)
control                plain ``\\boxed{..}`` / "The answer is .." replies
real_reply             the real replies of the first two sources
public_pair            the public suites' pairs
=====================  =================================================================

``clear_cut`` is False for the few cases where reasonable graders may differ; ``why`` says
why. Bench figures are quoted on the clear-cut cases; the others are printed apart.

A fixed fifth of the cases (by a salted hash of the case's content, so the split does not
move when cases are added or reordered) is held out: ``foreign_cases("heldout")``. Fixers
work on ``dev``; the bench prints only the aggregate of ``heldout``.

>>> len(foreign_cases("all")) >= 400
True
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

__all__ = ["CLASSES", "SOURCES", "ForeignCase", "foreign_cases"]

CLASSES = ("decimal_fraction", "close_numbers", "count_nouns", "foreign_markers", "mc_direct",
           "bare_latex", "in_sentence", "collections", "algebraic_forms", "hedges", "control", "real_reply",
           "public_pair")
SOURCES = ("mathvista_bard", "mathverse_template", "nemo_skills", "qwen25_math", "written")
SPLITS = ("dev", "heldout", "all")
_SALT = "vlcohort-foreign-replies-v1"
LETTERS = "ABCDEFGH"


@dataclass(frozen=True)
class ForeignCase:
    """One reply, its gold, and the verdict a careful human gives it.

    ``response``: ``reply`` is a whole model reply, for answer extraction first; otherwise it
    is an answer span, graded as is. ``style``: the extraction style the prompt implies.
    ``options``: the choices of a multiple-choice item (gold is then a letter or an
    option's text, as the benchmark stores it), or None.
    """

    source: str
    klass: str
    gold: str
    options: tuple[str, ...] | None
    reply: str
    verdict: bool
    response: bool = True
    style: str = "auto"
    clear_cut: bool = True
    why: str = ""

    @property
    def key(self) -> str:
        """The content the held-out split hashes: what the case asks, not its verdict."""
        return "\x1f".join([self.klass, self.gold, "\x1e".join(self.options or ()), self.reply,
                            str(self.response), self.style])

    @property
    def split(self) -> str:
        digest = hashlib.sha256((_SALT + self.key).encode()).digest()
        return "heldout" if digest[0] % 5 == 0 else "dev"


def foreign_cases(split: str = "dev") -> list[ForeignCase]:
    """The cases of ``split`` ("dev", "heldout" or "all"), in a fixed order."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    cases = _all_cases()
    return cases if split == "all" else [c for c in cases if c.split == split]


_CACHE: list[ForeignCase] = []


def _all_cases() -> list[ForeignCase]:
    if not _CACHE:
        cases: list[ForeignCase] = []
        for make in (_real, _public, _decimal_fraction, _close_numbers, _count_nouns, _foreign_markers,
                     _mc_direct, _bare_latex, _in_sentence, _collections, _algebraic_forms, _hedges, _control):
            cases += make()
        seen: dict[str, ForeignCase] = {}
        for c in cases:
            first = seen.setdefault(c.key, c)
            if (first.verdict, first.clear_cut) != (c.verdict, c.clear_cut):
                raise ValueError(f"one case written twice with different verdicts: {c}")
        _CACHE.extend(seen.values())
    return list(_CACHE)


def _w(klass, gold, reply, verdict, options=None, **kw) -> ForeignCase:
    return ForeignCase("written", klass, gold, tuple(options) if options else None, reply, verdict, **kw)


# ------------------------------------------------------------------ real benchmark items

# (benchmark id, gold as the benchmark stores it, options or None, letter of the gold)
_MC_ITEMS = [
    ("mathvista-364", "40°", ["30°", "35°", "40°", "45°"]),
    ("mathvista-909", "\\frac{1}{3}", ["\\frac{2}{3}", "\\frac{1}{4}", "\\frac{1}{3}", "\\frac{1}{2}"]),
    ("mathvista-931", "50°", ["35°", "50°", "40°", "60°"]),
    ("mathvista-736", "32°", ["28°", "30°", "32°", "58°"]),
    ("mathvista-896", "Around 31%", ["Around 21%", "Around 27%", "Around 31%", "Around 37%"]),
    ("mathvista-119", "20°", ["45°", "40°", "25°", "20°"]),
    ("mathvista-932", "decrease", ["decrease", "increase", "can't be predicted", "stay the same"]),
    ("mathvista-15", "Common water flea", ["Tilapia", "Common water flea", "Great diving beetle", "Tadpole"]),
    ("mathvista-726", "10", ["10", "30", "90", "120"]),
    ("mathvista-958", "R, D, N", ["A, R, N", "R, D, N", "I, A, M", "H, O, W"]),
    ("mathvision-1008", "B", ["$10^{\\circ}$", "$15^{\\circ}$", "$20^{\\circ}$", "$25^{\\circ}$", "$30^{\\circ}$"]),
    ("mathvision-1564", "D", ["only $Q$", "only $R$", "only $S$", "either $R$ or $S$, but no others",
                              "it is impossible to complete the grid"]),
    ("mathverse-224", "B", ["30", "60", "90", "120"]),
    ("mathverse-321", "C", ["24", "30", "48", "60"]),
    ("mathverse-155", "C", ["6.4米", "7米", "8米", "9米"]),
    ("mathverse-216", "D", ["3", "4", "6", "9"]),
    ("mathverse-260", "B", ["20", "30", "40", "50"]),
    ("wemath-3steps_132", "C", ["6", "4", "3", "2", "No correct answer"]),
    ("wemath-2steps_71", "C", ["30", "70", "441", "900", "No correct answer"]),
    ("wemath-3steps_117", "B", ["3.14", "1.57", "12.56", "6.28", "No correct answer"]),
    ("wemath-2steps_115", "D", ["12", "10", "14", "16", "No correct answer"]),
    ("wemath-2steps_359", "A", ["Equal", "Not equal", "Cannot be determined", "No correct answer"]),
]

# free-form golds: (benchmark id, gold, count noun or unit a model may add)
_FREE_ITEMS = [
    ("mathvista-208", "5", "years"), ("mathvista-614", "7", "years"), ("mathvista-725", "-130", None),
    ("mathvista-965", "30", None), ("mathvista-247", "6.36", None), ("mathvista-616", "2", "objects"),
    ("mathvista-249", "6", "objects"), ("mathvista-533", "8", "people"), ("mathvista-453", "4", "bars"),
    ("mathvision-2555", "160", None), ("mathvision-176", "711", None), ("mathvision-608", "16", "squares"),
    ("mathvision-2984", "45", None), ("mathvision-11", "7", "points"), ("mathvision-2786", "8", "triangles"),
    ("mathverse-347", "19", None), ("mathverse-541", "3", None), ("mathverse-591", "-2", None),
]


def _letter_of(gold: str, options: list[str]) -> int:
    if len(gold) == 1 and gold in LETTERS[: len(options)] and gold not in options:
        return LETTERS.index(gold)
    return options.index(gold)


def _wrong_index(right: int, options: list[str], rng: random.Random) -> int:
    """Another option, not a "no correct answer" one and not equal in text to the right one."""
    pool = [i for i, t in enumerate(options) if i != right and t != options[right] and "No correct" not in t]
    return rng.choice(pool)


def _strip_dollars(text: str) -> str:
    return text.replace("$", "")


# ------------------------------------------------------------------ sources (a), (b)


def _real() -> list[ForeignCase]:
    from .foreign_replies_real import BARD_MATHVISTA, MATHVERSE_TEMPLATE

    out = []
    for source, rows in (("mathvista_bard", BARD_MATHVISTA), ("mathverse_template", MATHVERSE_TEMPLATE)):
        for r in rows:
            out.append(ForeignCase(source, "real_reply", r["gold"], r["options"], r["reply"], r["verdict"],
                                   clear_cut=r["clear_cut"], why=r["why"]))
    return out


# NVIDIA NeMo-Skills tests/test_math_equal.py (Apache-2.0, commit 583b90a2d5df): the pairs its
# test asserts equal / not equal in both orders, taken as data; the verdict is set here (the
# suite's ``0 vs None`` pair is left out: None is no reply). Each pair is used in both orders.
_NEMO_EQUAL = [
    ("5", "5"), ("5", "5.0"), ("1/2", "0.5"), ("\\frac{1}{2}", "0.5"), ("918\\frac{1}{2}", "918.5"),
    ("x^2+2x+1", "x^2 + 2*x + 1"), ("x^2+2x+1", "x^2 + 2*x - (-1)"), ("y = x^2+2x+1", "2x+ 1+x^2"),
    ("odd", "\\text{odd}"), ("E", "\\mathrm{E}"), ("A", "\\textbf{A}"), ("f'", "f'"), ("185", "185\\"),
    (".185", "0.185"), ("\\frac {1}{2}", "0.5"), ("17\\text{ any text}", "17"), ("\\$10", "10"),
    ("10%", "10"), ("10\\%", "10"), ("2.5", "\\frac{5}{2}"), ("\\frac{1}{3}", "\\dfrac{1}{3}"),
    ("(r+5)(r+5)", "(r+5)^2"), ("\\frac{\\sqrt{3}}{3}", "\\frac{\\sqrt{3}}{3} \\approx 0.577"), ("C", "C. x = 42"),
    ("\\begin{pmatrix}0&0&0\\\\0&1&0\\\\0&0&1\\end{pmatrix}",
     "\\begin{bmatrix} 0 & 0 & 0 \\\\ 0 & 1 & 0 \\\\ 0 & 0 & 1 \\end{bmatrix}"),
]
_NEMO_DIFFERENT = [
    ("5", "5.001"), ("x^2+2x+1", "x^3+2x+1"), ("odd", "\\text{oddd}"), ("E", "\\mathrm{E}*2"),
    ("\\sqrt{67},-\\sqrt{85}", "\\sqrt{67}"),
]
# Near misses of the same pairs written for this set (source "written"), so the class has
# wrong replies in the proportion of the others.
_NEMO_NEAR_MISSES = [
    ("918\\frac{1}{2}", "918.2"), ("1/2", "0.52"), (".185", "0.1850001"), ("\\$10", "\\$100"),
    ("2.5", "\\frac{2}{5}"), ("(r+5)(r+5)", "(r+5)^3"), ("(r+5)(r+5)", "(r-5)^2"), ("C", "D. x = 42"),
    ("\\frac{\\sqrt{3}}{3}", "\\frac{\\sqrt{2}}{3} \\approx 0.471"), ("17\\text{ any text}", "71"),
    ("y = x^2+2x+1", "2x+ 1-x^2"), ("\\frac{1}{3}", "\\dfrac{1}{6}"), ("185", "186\\"), ("odd", "\\text{even}"),
    ("\\begin{pmatrix}0&0&0\\\\0&1&0\\\\0&0&1\\end{pmatrix}",
     "\\begin{bmatrix} 1 & 0 & 0 \\\\ 0 & 1 & 0 \\\\ 0 & 0 & 1 \\end{bmatrix}"),
    ("918\\frac{1}{2}", "9\\frac{18}{2}"), ("x^2+2x+1", "x^2 + 2*x - 1"),
]
_ROUNDED = "the prediction is the gold rounded to 3-4 digits: right to a tolerant grader, not to an exact one"
# QwenLM/Qwen2.5-Math evaluation/grader.py at 29a82a8802e0: (gold, pred, verdict set here, why not clear-cut or "").
_QWEN = [
    ("10", "10", True, ""), ("0.1", "10%", True, "a percent for a decimal gold: equal as numbers, but a question "
                                                   "asking a fraction may refuse a percent"),
    ("[1, 2, 3]", "[1, 2, 3]", True, ""), ("20", "10", False, ""), ("x = z", "x = y", False, ""),
    ("\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", True, ""),
    ("x = y", "x = y", True, ""), ("0.2", "10%", False, ""), ("[1, 2, 4]", "[1, 2, 3]", False, ""),
    ("\\begin{pmatrix}1&2\\\\3&5\\end{pmatrix}", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", False, ""),
    ("10", "x = 10", True, ""), ("x = 10", "10", True, ""),
    ("\\frac{1}{12}", "0.0833333333333333", True, ""), ("(1,\\frac{9}{2})", "(1,4.5)", True, ""),
    ("\\frac{x+2}{7}", "\\frac{x}{7}+\\frac{2}{7}", True, ""), ("\\tan^2(y)+1", "\\sec^2(y)", True, ""),
    ("(\\begin{pmatrix}-\\frac{7}{4}&-2\\\\4&\\frac{1}{4}\\\\\\end{pmatrix})",
     "\\begin{pmatrix}-\\frac{7}{4}&-2\\\\4&\\frac{1}{4}\\end{pmatrix}", True, ""),
    ("(\\begin{pmatrix}\\frac{1}{3\\sqrt[3]{x}^2}&0&0\\\\0&1&0\\\\-\\sin(x)&0&0\\\\\\end{pmatrix})",
     "\\begin{pmatrix}\\frac{1}{3x^{2/3}}&0&0\\\\0&1&0\\\\-\\sin(x)&0&0\\end{pmatrix}", True, ""),
    ("-\\frac{2(x^2+6)}{9(x^2-2)\\sqrt[3]{x^2-2}^2}",
     "-\\frac{8x^2}{9(x^2-2)^{5/3}}+\\frac{2}{3(x^2-2)^{2/3}}", True, ""),
    ("34x+45y-20z+100=0", "-34x-45y+20z-100=0", True, ""), ("33.3", "\\frac{100}{3}", True, _ROUNDED),
    ("(\\begin{pmatrix}0.29\\\\0.196\\\\-0.186\\\\\\end{pmatrix})",
     "\\begin{pmatrix}0.290243531202435\\\\0.196008371385084\\\\-0.186381278538813\\end{pmatrix}", True,
     _ROUNDED),
    ("\\frac{\\sqrt{\\sqrt{11}+\\sqrt{194}}}{15+2\\sqrt{33}}",
     "\\frac{\\sqrt{\\sqrt{11}+\\sqrt{194}}}{2\\sqrt{33}+15}", True, ""),
    ("(a+5)(b+2)", "(+5)(b+2)", False, ""), ("2", "\\frac{1+\\sqrt{5}}{2}", False, ""),
    ("4", "\\frac{34}{16}+\\frac{\\sqrt{1358}}{16}", False, ""), ("1\\\\sqrt{19}", "1", False, ""),
    ("(\\frac{3}{5},\\frac{8}{3}]", "(0.6,2.6667]", True, _ROUNDED), ("x+2n+1", "x+1", False, ""),
]
_NOT_CLEAR = {
    "10": "a bare 10 for a 10% gold (or the reverse): most graders accept, strict unit graders refuse",
    "918.5": "a mixed number against its decimal: equal, but '918\\frac{1}{2}' also reads as 918 times 1/2",
}


def _public() -> list[ForeignCase]:
    out = []
    rows = [(g, p, True, "nemo_skills", "") for a, b in _NEMO_EQUAL for g, p in ((a, b), (b, a))]
    rows += [(g, p, False, "nemo_skills", "") for a, b in _NEMO_DIFFERENT for g, p in ((a, b), (b, a))]
    rows += [(g, p, False, "written", "") for g, p in _NEMO_NEAR_MISSES]
    rows += [(g, p, ok, "qwen25_math", why) for g, p, ok, why in _QWEN]
    for i, (gold, pred, ok, source, why) in enumerate(rows):
        clear = not why
        for side in (gold, pred):
            if side in _NOT_CLEAR and ok and ("%" in gold + pred or "frac" in gold + pred):
                clear, why = False, _NOT_CLEAR[side]
        # every third pair is wrapped in a one-line reply, the rest are answer spans
        if i % 3 == 0:
            math = pred if "%" in pred.replace("\\%", "") else f"${pred}$"  # a bare % would be a TeX comment
            reply, response = f"Putting everything together, the final answer is {math}.", True
        else:
            reply, response = pred, False
        out.append(ForeignCase(source, "public_pair", gold, None, reply, ok, response=response,
                               clear_cut=clear, why=why))
    return out


# ------------------------------------------------------------------ written classes


def _decimal_fraction() -> list[ForeignCase]:
    out = []
    fracs = [(1, 6), (7, 3), (5, 12), (2, 7), (11, 9), (1, 3), (22, 7), (13, 6), (4, 15), (17, 11),
             (-5, 6), (8, 21), (3, 14)]
    golds = ["\\frac{%d}{%d}", "%d/%d", "\\dfrac{%d}{%d}"]
    for i, (p, q) in enumerate(fracs):
        gold = (golds[i % 3] % (abs(p), q)) if p > 0 else "-\\frac{%d}{%d}" % (-p, q)
        val = repr(p / q)
        near = repr((p + 1) / q) if i % 2 else repr(p / (q + 1))
        if i % 3 == 0:
            right = f"Dividing, we get {val}.\n\nThe answer is {val}"
            wrong = f"Dividing, we get {near}.\n\nThe answer is {near}"
        elif i % 3 == 1:
            right = f"So the probability is $\\boxed{{{val}}}$."
            wrong = f"So the probability is $\\boxed{{{near}}}$."
        else:
            right = val
            wrong = near
        out.append(_w("decimal_fraction", gold, right, True))
        out.append(_w("decimal_fraction", gold, wrong, False))
    # the reverse direction: a long-decimal gold (benchmarks store computed floats) vs a fraction reply
    for p, q in [(1, 6), (7, 3), (5, 9), (2, 3)]:
        out.append(_w("decimal_fraction", repr(p / q), f"The answer is $\\frac{{{p}}}{{{q}}}$.", True))
        out.append(_w("decimal_fraction", repr(p / q), f"The answer is $\\frac{{{p + 1}}}{{{q}}}$.", False))
    # short roundings of a repeating fraction: graders with a relative tolerance accept, exact ones refuse
    for gold, reply in [("\\frac{7}{3}", "The answer is 2.33."), ("\\frac{1}{6}", "The answer is 0.167.")]:
        out.append(_w("decimal_fraction", gold, reply, True, clear_cut=False,
                      why="a 3-significant-digit rounding of an exact fraction: right to a tolerant grader, "
                      "not the exact value a strict one wants"))
    return out


def _close_numbers() -> list[ForeignCase]:
    out = []
    pairs_wrong = [("4096", "4096.2"), ("98765.4", "98765.5"), ("2024", "2024.1"), ("123456", "123457"),
                   ("100000000", "100000001"), ("65536", "65535"), ("31415.9", "31415.8"), ("1000000", "1000001"),
                   ("7519", "7518"), ("9015", "9016"), ("2023.5", "2023.4"), ("86400", "86401")]
    pairs_right = [("4096", "4,096"), ("98765.4", "98765.40"), ("2024", "2024.0"), ("123456", "123,456"),
                   ("100000000", "10^8"), ("65536", "2^{16}"), ("31415.9", "31415.90"), ("1000000", "1{,}000{,}000"),
                   ("7519", "7519"), ("9015", "9 015"), ("2023.5", "2023.50"), ("86400", "86,400")]
    for k, (gold, pred) in enumerate(pairs_wrong):
        tmpl = ["The answer is {}.", "Therefore the total is $\\boxed{{{}}}$.", "{}"][k % 3]
        out.append(_w("close_numbers", gold, tmpl.format(pred), False))
    for k, (gold, pred) in enumerate(pairs_right):
        tmpl = ["The answer is {}.", "Therefore the total is $\\boxed{{{}}}$.", "{}"][k % 3]
        clear = pred != "9 015"
        out.append(_w("close_numbers", gold, tmpl.format(pred), True, clear_cut=clear,
                      why="" if clear else "a space as thousands separator (SI style) reads as two numbers to some"))
    # genuinely rounded reals: the gold is a rounded real, the reply the same real at fewer digits
    for gold, pred in [("3.14159", "3.1416"), ("2.71828", "2.718"), ("1.41421", "1.4142")]:
        out.append(_w("close_numbers", gold, f"The answer is {pred}.", True, clear_cut=False,
                      why="the reply is the gold correctly rounded to 4-5 significant digits (the same real); "
                      "accepted, but a grader demanding the gold's precision refuses"))
    for gold, pred in [("3.14159", "3.1415"), ("2.71828", "2.7182"), ("1.41421", "1.4143")]:
        out.append(_w("close_numbers", gold, f"The answer is {pred}.", False, clear_cut=False,
                      why="truncated or mis-rounded at 5 significant digits: not a rounding of the gold; "
                      "a 1e-4 relative tolerance still accepts it"))
    return out


def _count_nouns() -> list[ForeignCase]:
    out = []
    written = [
        ("12", "Answer: 12 apples", True), ("12", "Answer: 13 apples", False),
        ("9", "So there are 9 marbles left.\n\nThe answer is 9 marbles.", True),
        ("9", "So there are 8 marbles left.\n\nThe answer is 8 marbles.", False),
        ("6", "The number of chairs is $\\boxed{6\\text{ chairs}}$.", True),
        ("6", "The number of chairs is $\\boxed{7\\text{ chairs}}$.", False),
        ("24", "The answer is 24 students.", True), ("24", "The answer is 42 students.", False),
        ("3", "Final answer: 3 cubes", True), ("3", "Final answer: 2 cubes", False),
        ("15", "$\\boxed{15 \\text{ cookies}}$", True), ("15", "$\\boxed{16 \\text{ cookies}}$", False),
        ("40", "The answer is 40 dollars.", True), ("40", "The answer is 4 dollars.", False),
        ("1", "The answer is 1 ball.", True), ("2", "The answer is 1 ball.", False),
    ]
    for gold, reply, ok in written:
        out.append(_w("count_nouns", gold, reply, ok))
    rng = random.Random(11)
    for _id, gold, noun in _FREE_ITEMS:
        if not noun:
            continue
        g = int(gold)
        off = g + rng.choice([-1, 1]) if g > 1 else g + 1
        tmpl = rng.choice(["Counting them one by one, there are {} {}.\n\nThe answer is {} {}.",
                           "The answer is: {2} {3}", "**Answer:** {2} {3}"])
        out.append(_w("count_nouns", gold, tmpl.format(g, noun, g, noun), True))
        out.append(_w("count_nouns", gold, tmpl.format(off, noun, off, noun), False))
    return out


_FOREIGN_LETTER = ["所以答案是 {}。", "故选：{}", "答案：{}", "Answer：{}", "因此，正确选项为 {}。",
                   "La réponse est {}.", "Die richtige Antwort ist {}.", "La respuesta correcta es {}.",
                   "答案是（{}）", "故答案为：{}"]
_FOREIGN_VALUE = ["答案：{}", "所以答案是 {}。", "La réponse est {}.", "Die Antwort lautet {}.",
                  "La respuesta es {}.", "最终答案：$\\boxed{{{}}}$", "Answer：{}", "Antwort: {}",
                  "Respuesta: {}", "Réponse : {}"]


def _foreign_markers() -> list[ForeignCase]:
    out = []
    rng = random.Random(7)
    for k, (_id, gold, options) in enumerate(_MC_ITEMS):
        right = _letter_of(gold, options)
        wrong = _wrong_index(right, options, rng)
        tmpl = _FOREIGN_LETTER[k % len(_FOREIGN_LETTER)]
        lead = "由图可知，两条直线平行，同位角相等。\n" if "答" in tmpl or "故" in tmpl or "所以" in tmpl else ""
        out.append(_w("foreign_markers", gold, lead + tmpl.format(LETTERS[right]), True, options))
        out.append(_w("foreign_markers", gold, lead + tmpl.format(LETTERS[wrong]), False, options))
    for k, (_id, gold, _noun) in enumerate(_FREE_ITEMS):
        tmpl = _FOREIGN_VALUE[k % len(_FOREIGN_VALUE)]
        g = float(gold)
        near = gold.replace(gold.lstrip("-")[0], str((int(gold.lstrip("-")[0]) + 1) % 10), 1) if "." in gold \
            else str(int(g) + (1 if k % 2 else -1))
        out.append(_w("foreign_markers", gold, tmpl.format(gold), True))
        out.append(_w("foreign_markers", gold, tmpl.format(near), False))
    extra = [("42", "Wir addieren beide Teile.\nDie Antwort ist 42.", True),
             ("42", "Wir addieren beide Teile.\nDie Antwort ist 24.", False),
             ("12", "解：设共有 x 个，则 x = 12。\n答：共有 12 个。", True),
             ("12", "解：设共有 x 个，则 x = 11。\n答：共有 11 个。", False),
             ("7", "Por lo tanto, la respuesta es 7.", True), ("7", "Por lo tanto, la respuesta es -7.", False),
             ("\\frac{1}{2}", "综上，答案为 $\\frac{1}{2}$。", True),
             ("\\frac{1}{2}", "综上，答案为 $\\frac{1}{3}$。", False)]
    for gold, reply, ok in extra:
        out.append(_w("foreign_markers", gold, reply, ok))
    o224 = ["30", "60", "90", "120"]  # mathverse-224
    for gold, reply, ok in [("C", "答案不是 C，而是 D。", False), ("D", "答案不是 C，而是 D。", True),
                            ("B", "Die Antwort ist nicht A, sondern B.", True),
                            ("A", "Die Antwort ist nicht A, sondern B.", False)]:
        out.append(_w("foreign_markers", gold, reply, ok, o224))
    for gold, reply, ok in [("12", "La réponse n'est pas 12, c'est 13.", False),
                            ("13", "La réponse n'est pas 12, c'est 13.", True)]:
        out.append(_w("foreign_markers", gold, reply, ok))
    return out


_MC_FORMS = [
    "({L}) {T}",
    "{L}. {T}.",
    "The answer is {L} because the angles on a straight line add up to 180°.",
    "Comparing the four choices, only one fits, so the correct option is:\n\n{L}. {T}",
    "The value matches the third reading, i.e. option ({L}).",
    "**{L}**",
    "Answer: ({L})",
    "The correct choice is {L}: {T}.",
    "I think it is {L}. {T}",
    "Looking at the figure again, the best answer is ({L}) {T}.",
]


def _mc_direct() -> list[ForeignCase]:
    out = []
    rng = random.Random(5)
    for k, (_id, gold, options) in enumerate(_MC_ITEMS):
        right = _letter_of(gold, options)
        for j in range(2):
            form = _MC_FORMS[(2 * k + j) % len(_MC_FORMS)]
            out.append(_w("mc_direct", gold, form.format(L=LETTERS[right], T=options[right]), True, options))
        wrong = _wrong_index(right, options, rng)
        form = _MC_FORMS[(2 * k + 1) % len(_MC_FORMS)]
        out.append(_w("mc_direct", gold, form.format(L=LETTERS[wrong], T=options[wrong]), False, options))
    # the option text alone, and a letter with the text of another option
    out.append(_w("mc_direct", "C", "The answer is (C) 24", True, ["20", "22", "24", "26"]))
    out.append(_w("mc_direct", "C", "The answer is (B) 22", False, ["20", "22", "24", "26"]))
    out.append(_w("mc_direct", "B", "B. circle.", True, ["square", "circle", "triangle", "hexagon"]))
    out.append(_w("mc_direct", "B", "A. square.", False, ["square", "circle", "triangle", "hexagon"]))
    out.append(_w("mc_direct", "A", "Since AB = 6 and M is the midpoint, AM = 3, so the correct option is:\n\n"
                  "A. 3 cm", True, ["3 cm", "4 cm", "6 cm", "12 cm"]))
    out.append(_w("mc_direct", "A", "Since AB = 6 and M is the midpoint, AM = 3, so the correct option is:\n\n"
                  "C. 6 cm", False, ["3 cm", "4 cm", "6 cm", "12 cm"]))
    out.append(_w("mc_direct", "D", "The answer is D because the angles in a triangle sum to 180°.", True,
                  ["30°", "45°", "60°", "75°"]))
    out.append(_w("mc_direct", "D", "The answer is C because the angles in a triangle sum to 180°.", False,
                  ["30°", "45°", "60°", "75°"]))
    out.append(_w("mc_direct", "B", "Both legs are equal, i.e. option (B).", True, ["1", "2", "3", "4"]))
    out.append(_w("mc_direct", "B", "Both legs are equal, i.e. option (D).", False, ["1", "2", "3", "4"]))
    out.append(_w("mc_direct", "C", "(C) 24", True, ["18", "20", "24", "30"]))
    out.append(_w("mc_direct", "C", "(D) 30", False, ["18", "20", "24", "30"]))
    return out


def _bare_latex() -> list[ForeignCase]:
    out = []
    golds = ["\\frac{5}{12}", "\\frac{3}{4}", "2\\sqrt{3}", "\\frac{\\pi}{6}", "\\sqrt{5}", "\\frac{7}{2}",
             "-\\frac{1}{8}", "4\\pi", "\\frac{\\sqrt{3}}{2}", "\\frac{1}{12}"]
    wrongs = ["\\frac{7}{12}", "\\frac{4}{3}", "3\\sqrt{2}", "\\frac{\\pi}{3}", "\\sqrt{3}", "\\frac{2}{7}",
              "\\frac{1}{8}", "2\\pi", "\\frac{\\sqrt{2}}{2}", "\\frac{1}{6}"]
    for k, (g, bad) in enumerate(zip(golds, wrongs)):
        wrap = ["{}", "${}$", "\\({}\\)", "$${}$$"][k % 4]
        right = wrap.format(g.replace("\\frac", "\\dfrac") if k % 3 == 1 else g)
        out.append(_w("bare_latex", g, right, True))
        out.append(_w("bare_latex", g, wrap.format(bad), False))
    for g, r, ok in [("\\frac{5}{12}", "5/12", True), ("\\frac{5}{12}", "\\frac{5}{12}", True),
                     ("0.4167", "\\frac{5}{12}", True), ("\\frac{3}{4}", "\\tfrac34", True),
                     ("\\frac{3}{4}", "\\tfrac43", False), ("768 \\mathrm{cm}^2", "768", True),
                     ("768 \\mathrm{cm}^2", "786", False), ("4\\sqrt{5}", "\\sqrt{80}", True),
                     ("4\\sqrt{5}", "\\sqrt{20}", False), ("$-\\frac{21}{29}$", "-\\frac{21}{29}", True),
                     ("$-\\frac{21}{29}$", "\\frac{21}{29}", False)]:
        clear = not (g == "0.4167")
        out.append(_w("bare_latex", g, r, ok, clear_cut=clear,
                      why="" if clear else "a 4-digit rounded gold against the exact fraction: equal to a "
                      "tolerant grader only"))
    return out


def _in_sentence() -> list[ForeignCase]:
    inv = "\\begin{pmatrix} 2 & -1 \\\\ -5 & 3 \\end{pmatrix}"
    inv_bad = "\\begin{pmatrix} 2 & 1 \\\\ 5 & 3 \\end{pmatrix}"
    rows = [
        ("y \\le 7", "Hence $y \\leq 7$ holds.", True), ("y < 7", "Hence $y \\leq 7$ holds.", False),
        ("y \\le 7", "Hence $y \\geq 7$ holds.", False), ("y <= 7", "So the solution set is $y \\le 7$.", True),
        (inv, f"The inverse is ${inv}$.", True), (inv, f"The inverse is ${inv_bad}$.", False),
        ("y < 3", "Multiplying by $-1$ flips the sign, and we are left with $-y > -3$.", True),
        ("y < 3", "Multiplying by $-1$ flips the sign, and we are left with $-y < -3$.", False),
        ("x > 2", "The inequality reduces to $2 < x$, which is our answer.", True),
        ("x > 2", "The inequality reduces to $2 > x$, which is our answer.", False),
        ("8", "So the distance from A to B is $8$ units, which is the answer.", True),
        ("8", "So the distance from A to B is $6$ units, which is the answer.", False),
        ("g(x)=(x+2)^2+1", "After the shift, the function becomes $g(x) = (x+2)^2 + 1$.", True),
        ("g(x)=(x+2)^2+1", "After the shift, the function becomes $g(x) = (x-2)^2 + 1$.", False),
        ("y=-2 t+180", "The line through the two points is therefore $y = 180 - 2t$.", True),
        ("y=-2 t+180", "The line through the two points is therefore $y = 180 + 2t$.", False),
        ("(x+3)^2+(y+3)^2=9", "The equation of the circle is $(x+3)^2 + (y+3)^2 = 9$.", True),
        ("(x+3)^2+(y+3)^2=9", "The equation of the circle is $(x-3)^2 + (y-3)^2 = 9$.", False),
        ("$h=58$", "Rounding to the nearest meter, we find that the height is $h = 58$ m.", True),
        ("$h=58$", "Rounding to the nearest meter, we find that the height is $h = 57$ m.", False),
        ("$x=8 \\mathrm{~cm}$", "Therefore the side $x$ measures 8 cm.", True),
        ("$x=8 \\mathrm{~cm}$", "Therefore the side $x$ measures 6 cm.", False),
        ("5", "Thus the value of $k$ is $5$ and we are done.", True),
        ("5", "Thus the value of $k$ is $-5$ and we are done.", False),
        ("\\frac{1}{2}", "The slope is $\\frac{1}{2}$, as claimed.", True),
        ("\\frac{1}{2}", "The slope is $-\\frac{1}{2}$, as claimed.", False),
        ("[-2, 3]", "The solution is $-2 \\le x \\le 3$.", True),
        ("[-2, 3]", "The solution is $-2 < x \\le 3$.", False),
        ("y \\ge -1", "Therefore the range of the function is $y \\geq -1$.", True),
        ("y \\ge -1", "Therefore the range of the function is $y \\geq 1$.", False),
    ]
    out = [_w("in_sentence", g, r, ok) for g, r, ok in rows if g != "[-2, 3]" or not ok]
    # the same replies under the style for prompts that let a model answer in a sentence
    out += [_w("in_sentence", g, r, ok, style="last_expression") for g, r, ok in rows[::2] + rows[1::4]]
    out.append(_w("in_sentence", "[-2, 3]", "The solution is $-2 \\le x \\le 3$.", True, clear_cut=False,
                  why="an inequality for an interval gold: the same set in another notation"))
    out.append(_w("in_sentence", "x \\le 3", "So we need $x \\le 3$. The answer is $(-\\infty, 3]$.", True,
                  clear_cut=False, why="the interval for an inequality gold: the same set in another notation"))
    return out


def _collections() -> list[ForeignCase]:
    rows = [
        ("\\{p, p+1\\}", "The two solutions are {p+1, p}.", True),
        ("\\{p, p+1\\}", "The two solutions are {p-1, p}.", False),
        ("1, 2, 3", "The roots are $3, 1, 2$.", True), ("1, 2, 3", "The roots are $3, 1$.", False),
        ("\\{-2, 5\\}", "The answer is -2, 5", True), ("\\{-2, 5\\}", "The answer is 2, 5", False),
        ("(a, b) = (3, 4)", "So $a = 3$ and $b = 4$.\n\nThe answer is $a = 3, b = 4$.", True),
        ("(a, b) = (3, 4)", "So $a = 4$ and $b = 3$.\n\nThe answer is $a = 4, b = 3$.", False),
        ("\\{a=1, b=-2\\}", "The answer is $\\boxed{a=1, b=-2}$.", True),
        ("\\{a=1, b=-2\\}", "The answer is $\\boxed{a=1, b=2}$.", False),
        ("x=2, y=5", "Solving the system: $\\boxed{\\{x=2, y=5\\}}$", True),
        ("x=2, y=5", "Solving the system: $\\boxed{\\{x=5, y=2\\}}$", False),
        ("2, -3", "The solutions are $x = -3$ and $x = 2$.\n\nThe answer is $x=-3$ or $x=2$.", True),
        ("2, -3", "The solutions are $x = 3$ and $x = 2$.\n\nThe answer is $x=3$ or $x=2$.", False),
        ("\\{1, 4, 9\\}", "The answer is \\{9, 4, 1\\}", True),
        ("\\{1, 4, 9\\}", "The answer is \\{9, 4, 1, 16\\}", False),
        ("(1, 2), (2, 1)", "The answer is $(2, 1), (1, 2)$.", True),
        ("(1, 2), (2, 1)", "The answer is $(2, 1)$.", False),
        ("\\{0, \\pi\\}", "The answer is $\\pi, 0$.", True), ("\\{0, \\pi\\}", "The answer is $0, 2\\pi$.", False),
        ("-1, \\frac{1}{2}", "Therefore $x \\in \\{\\frac{1}{2}, -1\\}$.\n\nThe answer is $\\{\\frac12, -1\\}$.", True),
        ("-1, \\frac{1}{2}",
         "Therefore $x \\in \\{-\\frac{1}{2}, 1\\}$.\n\nThe answer is $\\{-\\frac12, 1\\}$.", False),
        ("\\{3, 7\\}", "$\\boxed{7, 3}$", True), ("\\{3, 7\\}", "$\\boxed{7, 3, 3}$", True),
        ("\\{3, 7\\}", "$\\boxed{7}$", False),
        ("\\{1, -1\\}", "So $x^2 = 1$ and the answer is $\\pm 1$.", True),
        ("\\{1, -1\\}", "So $x^2 = 1$ and the answer is $1$.", False),
        ("(2, 3)", "The answer is $x = 2, y = 3$.", True), ("(2, 3)", "The answer is $x = 3, y = 2$.", False),
        ("1, 3, 5", "The answer is 5, 3 and 1.", True), ("1, 3, 5", "The answer is 5 and 1.", False),
        ("\\{\\frac12, 2\\}", "The answer is $2, 0.5$.", True),
        ("\\{\\frac12, 2\\}", "The answer is $2, 0.2$.", False),
        ("x = -1 \\text{ or } x = 4", "The answer is $\\{4, -1\\}$.", True),
        ("x = -1 \\text{ or } x = 4", "The answer is $\\{4, 1\\}$.", False),
        ("\\{p, p+1\\}", "The answer is p, p + 1", True), ("\\{p, p+1\\}", "The answer is p, p + 2", False),
    ]
    repeated = "$\\boxed{7, 3, 3}$"
    out = [_w("collections", g, r, ok) for g, r, ok in rows if r != repeated]
    out.append(_w("collections", "\\{3, 7\\}", repeated, True, clear_cut=False,
                  why="a repeated element: the same set, but as a list of roots it has a wrong multiplicity"))
    return out


def _algebraic_forms() -> list[ForeignCase]:
    rows = [
        ("3^2 \\cdot 5^3", "The answer is $3^2 5^3$.", True), ("3^2 \\cdot 5^3", "The answer is $3^3 5^2$.", False),
        ("1125", "The answer is $3^2 5^3$.", True), ("1125", "The answer is $3^2 5^2$.", False),
        ("1+3i", "The answer is $i(3-i)$.", True), ("1+3i", "The answer is $i(3+i)$.", False),
        ("-1+3i", "The answer is $i(3+i)$.", True), ("2i", "The answer is $(1+i)^2$.", True),
        ("2i", "The answer is $(1-i)^2$.", False), ("5", "The answer is $(2+i)(2-i)$.", True),
        ("3", "The answer is $(2+i)(2-i)$.", False), ("1", "The answer is $\\sin^2 x + \\cos^2 x$.", True),
        ("\\cos 2x", "The answer is $\\cos^2 x - \\sin^2 x$.", True),
        ("\\cos 2x", "The answer is $\\cos^2 x + \\sin^2 x$.", False),
        ("\\sin 2x", "The answer is $2\\sin x\\cos x$.", True), ("\\sin 2x", "The answer is $\\sin x\\cos x$.", False),
        ("\\frac{\\sqrt{3}}{2}", "The answer is $\\sin 60^\\circ$.", True),
        ("\\frac{\\sqrt{3}}{2}", "The answer is $\\cos 60^\\circ$.", False),
        ("2\\cdot 3^4", "The answer is $2 3^4$.", True), ("162", "The answer is $2\\times 3^4$.", True),
        ("162", "The answer is $2\\times 3^3$.", False), ("6ab", "The answer is $6 a b$.", True),
        ("6ab", "The answer is $6 a + b$.", False), ("x^2-1", "The answer is $(x-1)(x+1)$.", True),
        ("x^2-1", "The answer is $(x-1)^2$.", False), ("\\tan x", "The answer is $\\frac{\\sin x}{\\cos x}$.", True),
        ("\\tan x", "The answer is $\\frac{\\cos x}{\\sin x}$.", False), ("e^{i\\pi}", "The answer is $-1$.", True),
        ("e^{i\\pi}", "The answer is $1$.", False),
        ("3+4i", "The answer is $(2+i)^2$.", True), ("3+4i", "The answer is $(2-i)^2$.", False),
        ("\\frac{1}{2}", "The answer is $\\cos\\frac{\\pi}{3}$.", True),
        ("\\frac{1}{2}", "The answer is $\\sin\\frac{\\pi}{3}$.", False),
        ("2^{10}", "The answer is $1024$.", True), ("2^{10}", "The answer is $1000$.", False),
        ("x(x+1)", "The answer is $x^2 + x$.", True), ("x(x+1)", "The answer is $x^2 + 1$.", False),
    ]
    out = [_w("algebraic_forms", g, r, ok) for g, r, ok in rows]
    out.append(_w("algebraic_forms", "2\\cdot 3^4", "The answer is $23^4$.", False, clear_cut=False,
                  why="'23^4' without a space is the number 23 to the 4th: a near-miss only by typography"))
    return out


def _hedges() -> list[ForeignCase]:
    """Replies that name other answers: right when they still commit to the gold, wrong when
    they hedge over several (a reward that accepts a hedge pays a policy to list options)."""
    o224 = ["30", "60", "90", "120"]  # mathverse-224, gold B
    o132 = ["6", "4", "3", "2", "No correct answer"]  # wemath-3steps_132, gold C
    o216 = ["3", "4", "6", "9"]  # mathverse-216, gold D
    rows = [
        ("B", o224, "It is not A, since the central angle of a hexagon is larger; the answer is B.", True),
        ("B", o224, "The answer is A or B.", False), ("B", o224, "$\\boxed{A, B}$", False),
        ("B", o224, "A. 30 B. 60 C. 90 D. 120", False), ("B", o224, "The answer is one of A, B, C, D.", False),
        ("B", o224, "The answer is not B; it is D.", False),
        ("B", o224, "Between (B) and (D), only (B) fits the figure. The answer is (B).", True),
        ("C", o132, "Option B looks tempting, but the answer is C.", True),
        ("C", o132, "The answer is (B) or (C).", False), ("C", o132, "$\\boxed{\\text{B or C}}$", False),
        ("C", o132, "The answer is C. (A, B and D each miss one of the edges.)", True),
        ("C", o132, "Not A: 6 is too many. Not B either. So the answer is C.", True),
        ("13", None, "First I got 12, then rechecked the corners: the answer is $\\boxed{13}$.", True),
        ("D", o216, "The answer is D, not C.", True), ("D", o216, "The answer is C or D.", False),
        ("D", o216, "The answer is A, B, C or D.", False),
        ("12", None, "Answer: 12 (I first got 13, but that counted the corner twice).", True),
        ("12", None, "Answer: 12 (or 13)", False), ("12", None, "It could be 12 or 13.", False),
        ("12", None, "The answer is between 10 and 14.", False), ("12", None, "$\\boxed{12}$ or $\\boxed{13}$", False),
        ("13", None, "I considered both 12 and 13; the answer is 13.", True),
        ("13", None, "The answer is 12 or 13.", False),
        ("13", None, "$\\boxed{13}$\n\nNot 12, because the corner is shared.", True),
        ("7", None, "The answer is 7, not 8.", True), ("7", None, "The answer is 8, not 7.", False),
        ("7", None, "Final answer: 7. (An earlier guess of 8 was wrong.)", True),
        ("7", None, "The answer is 7 or 8, depending on whether the endpoints count.", False),
    ]
    return [_w("hedges", g, r, ok, opts) for g, opts, r, ok in rows]


def _control() -> list[ForeignCase]:
    out = []
    rng = random.Random(3)
    forms = ["Adding the two parts gives the total.\n\nThe answer is {}.", "$\\boxed{{{}}}$",
             "So the final answer is $\\boxed{{{}}}$.", "Therefore, the answer is: {}",
             "<answer>{}</answer>", "The final answer is {}"]
    for k, (_id, gold, _noun) in enumerate(_FREE_ITEMS):
        g = float(gold)
        near = str(round(g + rng.choice([-1, 1]) * (1 if g == int(g) else 0.01), 2)).removesuffix(".0")
        form = forms[k % len(forms)]
        out.append(_w("control", gold, form.format(gold), True))
        out.append(_w("control", gold, forms[(k + 1) % len(forms)].format(near), False))
    for g, r, ok in [("\\frac{1}{3}", "The answer is $\\frac{1}{3}$.", True),
                     ("\\frac{1}{3}", "The answer is $\\frac{1}{4}$.", False),
                     ("A", "$\\boxed{A}$", True), ("A", "$\\boxed{B}$", False),
                     ("24", "The answer is \\boxed{24}", True), ("24", "The answer is \\boxed{25}", False)]:
        out.append(_w("control", g, r, ok))
    return out
