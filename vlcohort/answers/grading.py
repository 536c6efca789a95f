"""One grader: are two answers the same?

Voting, rewards and evaluation all ask this module, so a vote, a reward and a benchmark
score can never disagree about what counts as "the same answer". It works on answer
*spans* (see :mod:`vlcohort.answers.extract`) and knows nothing of models.

Why a corrected grader
----------------------
A plain math grader scores "C. Pythagorean theorem" against a gold "C" as wrong, and a
vote that hashes normalised strings splits "C" and "C. text" into two votes. On
multiple-choice data that turns a mostly-right model into a near-zero reward. Here every
way of naming an option ("C", "(C)", "C: 45°", "option C", "\\textbf{(C)}", a lone "c",
or the option's own text "45°") maps to one key, the letter.

The rules, in the order they are tried
--------------------------------------
With ``options`` (option texts in letter order, or letters only):

1. A *letter form* names its option: ``C``, ``(C)``, ``C)``, ``C.``, ``C: 45°``,
   ``option C``, ``choice (C)``, ``**C**``, ``\\text{C}``, a lone lowercase ``c``.
   Text after a delimiter must not name a *different* option ("C. 50°" when 50° is B is
   contradictory, so it names nothing). A letter followed only by a space is a letter
   only when the rest is that option's text: "D is the midpoint of AC" is not D.
2. Otherwise the answer's *content* is matched against the option texts: exact text,
   then normalised math form ("45", "$45^\\circ$" and "45°" are one form), then numeric
   value, then symbolic equivalence. It must pick out exactly one option; with duplicate
   option texts content is ambiguous and only letters match.

Without options, free-form answers are compared in tiers, cheapest first:

1. *Key*: a normalised form (full-width digits, ``$``, ``\\left``/``\\right``,
   ``\\dfrac``, ``\\text{}``, degrees, thousands separators, trailing units, ``x = 3`` ->
   ``3``, ``0.50``/``.5``/``1/2`` -> ``0.5``); equal keys are equivalent. An uppercase
   letter form ("C. Pythagorean theorem") keys as its letter, so a letter gold works
   without the option texts. Hard math forms meet here too, so a vote merges
   them without a symbolic call: a list however joined (``x = 2 \\text{ or } x = 5``,
   ``1; -2``, ``4 and 9``, one ``\\pm``) is one set (key ``2, 5``: a two-number list
   keeps its space, since a tight ``2,5`` may also be the decimal 2.5); values of distinct named
   variables (``a = 3, b = 4``) the tuple ``(3,4)``; a one-variable inequality with
   numeric bounds its interval (``-3 < x < 10`` -> ``(-3,10)``, ``x >= 2`` ->
   ``[2,\\infty)``, strictness kept) and a union of intervals their set; relation
   spellings one (``!=``, ``\\ne`` -> ``\\neq``); any matrix environment a list of rows
   (``[[1,2],[3,4]]``); ``pct`` a ``%``.
2. *Numeric*: both sides evaluate to numbers (``2\\sqrt{3}``, ``\\frac{9\\pi}{4}``,
   ``i(3-i)``). Written values and integer expressions are exact (``4096`` is not
   ``4096.2``, ``2^{81}`` is not ``2^{81}+1``; values beyond floats,
   ``\\frac{3^{1008}-1}{3^{1009}}``, are compared exactly); a decimal of 4+ significant
   digits also stands for the reals that round to it (``3.1416`` is ``\\pi``, ``3.14`` is
   not), a float's print (12+ digits) is such a rounded real, and two expressions agree
   within float noise (see :func:`_numbers_match`). ``rel_tol`` (default 0) adds a
   benchmark's declared relative tolerance on top (SciBench: 0.05). Lists, tuples, sets
   and intervals compare element by element; plain words only as text. A tight ``94,4``
   (key ``94{,}4``) has two readings, the decimal ``94.4`` and the list (never for a
   3-digit group, a thousands separator); it equals what either reading equals.
3. *Probing*: expressions with variables are evaluated at three fixed pseudo-random
   points; different values prove them different, equal values make them equal
   (``x^2+1`` vs ``1+x^2``) with overwhelming probability.
4. *Symbolic*: only what the cheap tiers cannot read or decide (``\\int``, matrices,
   equations equal up to a factor) goes to math-verify, with a time limit that all the
   symbolic calls of one decision share; every result is cached on the normalised pair.

Tiers 2 and 3 live in :mod:`vlcohort.answers.latex_eval`, tier 4 in :mod:`vlcohort.answers.symbolic`
(whose docstring explains how the time limit works in and outside the main thread); this
module holds the option mapping, the keys and the order in which the tiers are asked.
A refused or timed-out symbolic comparison counts as not equivalent.

>>> canonical("C. 45°", options=["30°", "40°", "45°", "50°"])
'C'
>>> canonical("$45^\\\\circ$", options=["30°", "40°", "45°", "50°"])
'C'
>>> is_equivalent("C. Pythagorean theorem", "C")
True
>>> is_equivalent("0.50", "\\\\frac{1}{2}")
True
>>> is_equivalent("D is the midpoint of AC", "D", options=["1", "2", "3", "4"])
False
"""

from __future__ import annotations

import functools
import math
import re
from decimal import Decimal
from fractions import Fraction
from typing import Callable, NamedTuple, Protocol, Sequence, TypeVar

from vlcohort.answers.forms import (
    INFINITY,
    SPACE_NOT_BETWEEN_LETTERS,
    THOUSANDS,
    inequality_interval,
    is_number,
    matrices_to_lists,
    one_relation_spelling,
    plus_minus,
)
from vlcohort.answers.latex_eval import clear_caches as _clear_latex_eval_caches
from vlcohort.answers.latex_eval import (
    complex_value,
    exact_value,
    format_rational,
    near,
    numeric_values,
    parse_rational,
    probe_decide,
)
from vlcohort.answers.symbolic import budget_cut, close_budget, open_budget, symbolic_equal
from vlcohort.answers.symbolic import clear_caches as _clear_symbolic_caches

__all__ = [
    "DEFAULT_REL_TOL",
    "DEFAULT_TIMEOUT_S",
    "GRADERS",
    "LETTERS",
    "MAX_ANSWER_CHARS",
    "CorrectedGrader",
    "Grader",
    "LegacyGrader",
    "canonical",
    "clear_caches",
    "get_grader",
    "is_equivalent",
]

#: Letters that can name an option, in order.
LETTERS = "ABCDEFGH"
#: A benchmark's own relative tolerance, added to the written-precision rule of
#: :func:`_numbers_match` (SciBench: 0.05); 0, the default, adds none.
DEFAULT_REL_TOL = 0.0
#: Wall-clock limit for one symbolic comparison (main thread only, see :mod:`vlcohort.answers.symbolic`).
DEFAULT_TIMEOUT_S = 1.0
#: A longer "answer" is a dump, not an answer: it has no key and matches nothing.
MAX_ANSWER_CHARS = 1000

OptionsArg = Sequence[str] | None

# --------------------------------------------------------------------------------------
# Light normalisation: notation that never changes meaning.
# --------------------------------------------------------------------------------------

_CHAR_MAP = {i: 0x21 + (i - 0xFF01) for i in range(0xFF01, 0xFF5F)}  # full-width ASCII
_CHAR_MAP.update(
    {
        0x3000: " ",  # ideographic space
        0x00A0: " ",
        0x3002: ".",
        0x2212: "-",  # minus sign
        0x00D7: r" \times ",
        0x00F7: r" \div ",
        0x00B7: r" \cdot ",
        0x22C5: r" \cdot ",
        0x03C0: r" \pi ",
        0x221A: r"\sqrt",
        0x2248: r" \approx ",
        0x2264: r" \le ",
        0x2265: r" \ge ",
        0x221E: r" \infty ",
        0x2220: r" \angle ",
        0x00B2: "^2",
        0x00B3: "^3",
        0x00BA: "°",  # ordinal indicator, often typed for a degree sign
        0x63B3: "°",  # "掳": a degree sign mis-decoded as GBK, found in MathVerse golds
    }
)
_CHAR_MAP = {k: (chr(v) if isinstance(v, int) else v) for k, v in _CHAR_MAP.items()}

_WRAPPER = re.compile(
    r"\\(?:boxed|fbox|text|textbf|textit|textrm|textsf|texttt|textnormal|mathrm|mathbf"
    r"|mathit|mathsf|mathbb|mbox|operatorname|emph|bm|boldsymbol)\s*\{"
)
_MATH_DELIMS = re.compile(r"\\[()\[\]]|\\\$|\$|\*\*|`")
_LEFT_RIGHT = re.compile(r"\\(?:left|right|bigl|bigr|Bigl|Bigr|big|Big|displaystyle)(?![A-Za-z])")
_SPACING = re.compile(r"\\[,;:! ]|~|\\q?quad(?![A-Za-z])")
_FRAC_ALIASES = re.compile(r"\\[dt]frac(?![A-Za-z])")
_FRAC_DIGITS = re.compile(r"\\frac\s*(\d)\s*(\d)")
_SQRT_DIGIT = re.compile(r"\\sqrt\s*(\d)")
_WS = re.compile(r"\s+")
_NEGATIVE_SPACE = re.compile(r"\\!\s*")
# "\\le", "\\frac": a command whose backslash was escaped twice (JSON or a Python string
# written out again). A LaTeX line break right before these letters would be nonsense.
_DOUBLED_COMMAND = re.compile(r"\\\\(?=(?:le|leq|ge|geq|neq|frac|dfrac|tfrac|left|right|sqrt|cdot|times|pi|in"
                              r"|infty|cup|cap|boxed|text|mathrm|circ|pm)(?![A-Za-z]))")
_SIMPLE = re.compile(r"^[A-Za-z0-9 .+\-]*$")


@functools.lru_cache(maxsize=1 << 16)
def _light(text: str) -> str:
    """Remove notation that never changes meaning: delimiters, wrappers, spacing.

    >>> _light("  $\\\\boxed{\\\\text{(C)}}$ ")
    '(C)'
    >>> _light("\\\\left( \\\\dfrac12 \\\\right)")
    '( \\\\frac{1}{2} )'
    >>> _light("４５°")
    '45°'
    """
    if _SIMPLE.match(text):  # "C", "42", "-3.5", "yes": nothing to normalise but spacing
        s = _WS.sub(" ", text).strip()
        while s and s[-1] == "." and not s.endswith(".."):
            s = s[:-1].rstrip()
        return s
    s = text.translate(_CHAR_MAP)
    s = _DOUBLED_COMMAND.sub(r"\\", s)
    s = matrices_to_lists(s)
    s = _MATH_DELIMS.sub(" ", s)
    s = _unwrap(s)
    s = _LEFT_RIGHT.sub("", s)
    s = _NEGATIVE_SPACE.sub("", s)  # it joins: "32,\! 349" is 32349
    s = _SPACING.sub(" ", s)
    s = _FRAC_ALIASES.sub(r"\\frac", s)
    s = _FRAC_DIGITS.sub(r"\\frac{\1}{\2}", s)
    s = _SQRT_DIGIT.sub(r"\\sqrt{\1}", s)
    s = s.replace("{,}", ",")
    s = _WS.sub(" ", s).strip()
    while s and s[-1] in ".,;" and not s.endswith(".."):
        s = s[:-1].rstrip()
    return s


def _unwrap(s: str) -> str:
    """Replace ``\\text{X}``-like wrappers by ``X`` (innermost first; unclosed: drop the name)."""
    for _ in range(64):  # a bound, not a loop condition: inputs are <= MAX_ANSWER_CHARS
        last = None
        for last in _WRAPPER.finditer(s):
            pass
        if last is None:
            return s
        close = _closing_brace(s, last.end())
        if close is None:
            s = s[: last.start()] + s[last.end() :]
        else:
            s = s[: last.start()] + " " + s[last.end() : close] + " " + s[close + 1 :]
    return s


def _closing_brace(s: str, after_open: int) -> int | None:
    depth = 1
    for i in range(after_open, len(s)):
        c = s[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
    return None





# --------------------------------------------------------------------------------------
# Letter forms: "C", "(C)", "C. 45°", "option C", ...
# --------------------------------------------------------------------------------------

_ANSWER_PREFIX = re.compile(
    r"^(?:the\s+)?(?:final\s+|correct\s+)?answer(?:\s+is)?\s*[:\-]?\s*", re.IGNORECASE
)
_OPTION_PREFIX = re.compile(
    r"^(?:the\s+)?(?:correct\s+)?(?:option|choice)(?:\s+is)?\s*[:\-]?\s*", re.IGNORECASE
)
_LETTER_PAREN = re.compile(r"^[(\[]\s*([A-Ha-h])\s*[)\]]\s*[.:]?\s*(.*)$", re.S)
_LETTER_DELIM = re.compile(r"^([A-H])\s*[.:)\]]\s*(.*)$", re.S)
_LETTER_LOWER_DELIM = re.compile(r"^([a-h])\s*[.:)\]]\s*(.*)$", re.S)
_LETTER_BARE = re.compile(r"^([A-H])$")
_LETTER_LOWER_BARE = re.compile(r"^([a-h])$")
_LETTER_SPACE = re.compile(r"^([A-H])\s+(.+)$", re.S)


def _strip_answer_prefix(s: str) -> str:
    """'The answer is C' -> 'C': extraction usually removes this, but not always."""
    stripped = _ANSWER_PREFIX.sub("", s, count=1)
    return stripped if stripped else s


@functools.lru_cache(maxsize=1 << 16)
def _letter_form(s: str, allow_lower: bool) -> tuple[str, str, bool] | None:
    """Parse ``s`` as a letter form: ``(LETTER, rest, strong)`` or None.

    ``strong`` forms carry a delimiter ("C.", "(C)", "C:") or stand alone, so they name
    the letter whatever follows. The weak form "C 45°" (letter, space, text) names the
    letter only if the text agrees: "D is the midpoint" must not become D. Lowercase
    letters count only alone or with a delimiter, and only when options are known.

    >>> _letter_form("choice (c)", True)
    ('C', '', True)
    >>> _letter_form("C. Pythagorean theorem", False)
    ('C', 'Pythagorean theorem', True)
    >>> _letter_form("D is the midpoint of AC", False)
    ('D', 'is the midpoint of AC', False)
    >>> _letter_form("C, since B is too large", False) is None
    True
    """
    s = _OPTION_PREFIX.sub("", s, count=1) or s
    m = _LETTER_PAREN.match(s)
    if m and (allow_lower or m.group(1).isupper()):
        return m.group(1).upper(), m.group(2).strip(), True
    m = _LETTER_DELIM.match(s) or _LETTER_BARE.match(s)
    if m:
        return m.group(1), (m.group(2).strip() if m.re.groups > 1 else ""), True
    if allow_lower:
        m = _LETTER_LOWER_BARE.match(s) or _LETTER_LOWER_DELIM.match(s)
        if m:
            return m.group(1).upper(), (m.group(2).strip() if m.re.groups > 1 else ""), True
    m = _LETTER_SPACE.match(s)
    if m:
        return m.group(1), m.group(2).strip(), False
    return None


# --------------------------------------------------------------------------------------
# Math key: the normalised free-form form that votes are clustered by.
# --------------------------------------------------------------------------------------

_DEGREE = re.compile(
    r"\s*(?:\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|°|\\degree|(?<![A-Za-z])degrees?\b)"
    r"(?:\s*T$)?"
)
_PERCENT = re.compile(r"\s*(?:\\%|%|(?<![A-Za-z])(?:per\s*cent|pct)\b)")
_UNIT_NAMES = frozenset(
    """mm cm dm m km in inch inches ft feet foot yd yard yards mi mile miles nm
    mg g kg gram grams kilogram kilograms lb lbs pound pounds oz ounce ounces t ton tons
    tonne tonnes ms s sec secs second seconds min mins minute minutes h hr hrs hour hours
    day days week weeks month months year years yr yrs l ml liter liters litre litres
    milliliter milliliters millilitre millilitres meter meters metre metres centimeter
    centimeters centimetre centimetres millimeter millimeters millimetre millimetres
    kilometer kilometers kilometre kilometres unit units dollar dollars cent cents euro
    euros yuan mph kph kmh knot knots kpa pa n j w kw v hz people person persons student
    students times piece pieces item items""".split()
) - {"t", "n", "j", "w", "v"}  # more often variables (2t, 3n) than tonnes or newtons
# These single-letter units need a space ("2 h", "3\\,\\mathrm{l}"): "2h" is as often
# 2 times h. "4.4m", "5g" and "3s" are read as metres, grams and seconds.
_SPACED_ONLY_UNITS = frozenset("h l".split())
# A trailing unit: optional "square"/"cubic", a word, optional "/word", optional power.
_UNIT_TAIL = re.compile(
    r"(?:(?:square|sq\.?|cubic|cu\.?)\s+)?(?P<word>[A-Za-z]+)(?:\s*/\s*(?P<per>[A-Za-z]+))?"
    r"(?:\s*\^\s*\{?\s*[23]\s*\}?)?\s*$",
    re.IGNORECASE,
)
_NUMBER_START = re.compile(r"^[-+\d.\\({]")
_CJK_UNIT = re.compile(r"^(?P<lead>.*?)\s*[\u3400-\u9fff]+\s*$")
_EQUATION = re.compile(r"^(?P<l>[^=<>!]*?)\s*(?:=|\\approx|\\simeq|\\equiv)\s*(?P<r>[^=<>!]+)$")
_IDENT = re.compile(
    r"^(?:[A-Za-z](?:_\{?[A-Za-z0-9]+\}?)?'?|\\[A-Za-z]+(?:_\{?[A-Za-z0-9]+\}?)?"
    r"|(?:m\s*)?\\angle\s*[A-Za-z]{1,3}|[A-Za-z][A-Za-z .]{1,40}"
    r"|[A-Za-z]\s*\(\s*[A-Za-z]\s*\)|\(\s*[A-Za-z](?:\s*,\s*[A-Za-z])+\s*\)"
    r"|[A-Za-z](?:_\{?[A-Za-z0-9]+\}?)?(?:\s*:\s*[A-Za-z](?:_\{?[A-Za-z0-9]+\}?)?)+"  # S_1 : S_2
    r"|\\frac\s*\{\s*[A-Z]{2,3}\s*\}\s*\{\s*[A-Z]{2,3}\s*\}|)$"  # \frac{NO}{BO}: a ratio of segments
)
_TRIG = re.compile(r"\\(?:sin|cos|tan|cot|sec|csc)(?![A-Za-z])")
_PLAIN_NUMBER = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)$")
_PLAIN_TEXT = re.compile(r"^[^\W\d_]+(?:[ '\-][^\W\d_]+)*$")
_COMMAND = re.compile(r"\\[A-Za-z]+")


@functools.lru_cache(maxsize=1 << 16)
def _math_key(s: str) -> str:
    """Normalised free-form key of a light-normalised answer.

    :func:`_freeform_key` iterates it to a fixed point, so a vote label can be graded,
    re-canonicalised and voted on again unchanged.

    >>> [_math_key(_light(x)) for x in ["0.50", ".5", "1/2", "\\\\frac{1}{2}"]]
    ['0.5', '0.5', '0.5', '0.5']
    >>> [_math_key(_light(x)) for x in ["1,000", "x = 3", "5 cm", "$45^\\\\circ$", "Yes."]]
    ['1000', '3', '5', '45', 'yes']
    """
    if _PLAIN_NUMBER.match(s):
        return _number_key(s, Fraction(s))
    if _PLAIN_TEXT.match(s):
        return s.lower() if len(s) > 1 else s
    if not _TRIG.search(s):  # "\sin 30^\circ" keeps its degrees
        s = _DEGREE.sub("", s)
    s = _PERCENT.sub("%", s)
    s = one_relation_spelling(s)
    s = _joined_list(s)
    s = plus_minus(s)
    s = _drop_outer_parens(s.strip())
    atom = _key_atom(s)
    if parse_rational(atom[:-1] if atom.endswith("%") else atom) is not None:
        return atom  # a number, perhaps with thousands separators: "1,000 cm" -> "1000"
    comma = _DECIMAL_COMMA.match(s)
    if comma:  # "94,4" written tight: two readings, kept apart from the list "94, 4"
        return f"{comma.group(1)}{{,}}{comma.group(2)}"
    seq = _split_sequence(s)
    if seq is not None:
        opener, items, closer = seq
        named = _named_tuple(items) if opener in ("", r"\{") else None
        if named is not None:
            return named
        atoms = [_key_atom(item) for item in items]
        if not opener and (_DECIMAL_COMMA.match(",".join(atoms)) or THOUSANDS.match(",".join(atoms))):
            return ", ".join(atoms)  # the list "1, 5" keeps its space: "1,5" is also 1.5, "32,349" 32349
        return opener + ",".join(atoms) + closer
    return _key_atom(s)


# "1 and 2", "x = 2 or x = 5", "1, 2, and 3", "1; -2": the joiners of a list of answers.
_JOINER = re.compile(r"\s*,?\s*(?<![A-Za-z\\])(?:and|or)(?![A-Za-z])\s*|\s*;\s*")
_UNION = re.compile(r"\s*\\cup(?![A-Za-z])\s*")


def _joined_list(s: str) -> str:
    """'x = 2 or x = 5' -> 'x = 2, x = 5', '1;-2' -> '1, -2': one list, however joined.

    Only when no part is prose ("domain: ... and range: ..." stays text), and only at
    the top level (a ";" inside brackets is left alone).

    >>> _joined_list("4 and 9"), _joined_list("1; -2"), _joined_list("left and right")
    ('4, 9', '1, -2', 'left and right')
    """
    if ";" in s and "," not in s:
        s = s.replace(";", ",")  # "(1; 2)": a semicolon list, where commas are decimal marks
    if "\\cup" in s:
        union = _UNION.split(s)
        if all(_encloses(p.strip()) and "," in p for p in union):
            return ", ".join(p.strip() for p in union)  # a union of intervals: their set
    if not _JOINER.search(s):
        return s
    parts, start, depth, scanned = [], 0, 0, 0
    for m in _JOINER.finditer(s):
        segment = s[scanned : m.start()]  # one pass: depth is carried from joiner to joiner
        depth += sum(c in _OPEN for c in segment) - sum(c in _CLOSE for c in segment)
        scanned = m.end()
        if depth == 0:  # a joiner inside brackets is part of an item
            parts.append(s[start : m.start()])
            start = m.end()
    parts.append(s[start:])
    if len(parts) < 2 or any(not p.strip() or _has_words(p) for p in parts):
        return s
    return ", ".join(p.strip() for p in parts)


_ASSIGNMENT = re.compile(r"^(?P<name>[A-Za-z])\s*=\s*(?P<value>[^=<>]+)$")


def _named_tuple(items: list[str]) -> str | None:
    """'a = 3, b = 4' -> '(3,4)': values given to distinct named variables are a tuple,
    ordered by name; 'x = 2, x = 5' (one variable, several solutions) stays a set.

    >>> _named_tuple(["b = 4", "a = 3"]), _named_tuple(["x = 2", "x = 5"]) is None
    ('(3,4)', True)
    """
    found = [_ASSIGNMENT.match(item.strip()) for item in items]
    if not all(found):
        return None
    names = [m.group("name") for m in found]
    if len(set(names)) != len(names):
        return None
    ordered = sorted(found, key=lambda m: m.group("name"))
    return "(" + ",".join(_key_atom(m.group("value")) for m in ordered) + ")"


def _drop_outer_parens(s: str) -> str:
    """'((1,3))' -> '(1,3)', '(3)' -> '3': brackets around one item change nothing."""
    for _ in range(8):
        if not (s.startswith("(") and s.endswith(")") and _encloses(s)):
            return s
        inner = s[1:-1].strip()
        if _split_sequence(inner) is not None and not _encloses(inner):
            return s  # '(1, 2)' is a tuple, not a bracketed list
        s = inner
    return s


def _key_atom(s: str) -> str:
    s = s.strip()
    s = inequality_interval(s)
    s = _strip_lhs(s)
    s = _strip_unit(s)
    s = _SPACED_POWER_PRODUCT.sub(lambda m: (m.group(1) or m.group(2)) + r"\cdot ", s)
    listed = ", " in s  # "32, 349" is a list; only a tight "32,349" groups thousands
    s = SPACE_NOT_BETWEEN_LETTERS.sub("", s)
    s = _WS.sub(" ", s)
    if THOUSANDS.match(s) and not listed:
        s = s.replace(",", "")
    percent = s.endswith("%")
    number = parse_rational(s[:-1] if percent else s)
    if number is not None:
        return _number_key(s[:-1] if percent else s, number) + ("%" if percent else "")
    if _PLAIN_TEXT.match(s) and len(s) > 1:
        return s.lower()
    return s


def _strip_lhs(s: str) -> str:
    """'x = 3' -> '3', 'Area = 9 cm^2' -> '9 cm^2', '5 = s' -> '5'; equations stay."""
    m = _EQUATION.match(s)
    if not m:
        return s
    lhs, rhs = m.group("l").strip(), m.group("r").strip()
    if _IDENT.match(lhs):
        return rhs
    if _IDENT.match(rhs) and is_number(lhs):
        return lhs
    return s


# A space between a power and a number, or a number and a power, is a product: "3^2 5^3",
# "2 3^4" (removing the space would read 3^{25} and 23^4).
_SPACED_POWER_PRODUCT = re.compile(
    r"(\^\s*(?:\d+|\{[^{}]*\})|(?<![\d.,])\d+)\s+(?=\d+\s*\^)|(\^\s*(?:\d+|\{[^{}]*\}))\s+(?=\d)"
)
# A number followed by one or two plain words is the number ("12 apples", "15 red
# apples"): a count noun or a free unit. Words that change the value, join answers or
# name mathematics are not free ("5 million", "3 dozen", "3 or 4", "2 pi").
_FREE_WORDS = re.compile(r"^(?P<lead>.*?\S)\s+(?P<words>[A-Za-z]{3,}(?:\s+[A-Za-z]{3,})?)$")
_NOT_FREE = frozenset(
    """million billion trillion thousand hundred lakh crore percent percentage pct dozen score
    half halves quarter third fourth fifth sixth seventh eighth ninth tenth hundredth thousandth
    millionth squared cubed sqrt factorial inverse reciprocal pi infinity inf and nor not than
    plus minus over under above below more less fewer least most about approximately around
    exactly only each per negative positive degree sin cos tan cot sec csc log exp mod one two
    three four five six seven eight nine ten eleven twelve twenty thirty forty fifty sixty
    seventy eighty ninety ones tens""".split()
)
# Value words only as written: "5 square" is 25, but "16 squares" are 16 things.
_NOT_FREE_SINGULAR = frozenset("square cubic root power".split())


def _free_word(word: str) -> bool:
    w = word.lower()
    singular = {w, w[:-1] if w.endswith("s") else w, w[:-2] if w.endswith("es") else w}
    return not (singular & _NOT_FREE or w in _NOT_FREE_SINGULAR)


def _strip_unit(s: str) -> str:
    """'5 cm^2' -> '5', '20海里' -> '20', '12 apples' -> '12'; only after a number ('5x'
    keeps its x)."""
    if not _NUMBER_START.match(s):
        return s
    free = _FREE_WORDS.match(s[-60:]) if len(s) <= 200 else None
    if free and all(_free_word(w) for w in free.group("words").split()):
        lead = s[: len(s) - len(free.group("words"))].strip()
        if lead and is_number(lead):
            return lead
    tail = s[-40:]  # units are short: bounding the search keeps it cheap on long strings
    m = _UNIT_TAIL.search(tail)
    if m and _is_unit(m.group("word")) and (m.group("per") is None or _is_unit(m.group("per"))):
        raw_lead = s[: len(s) - len(tail) + m.start()]
        spaced = raw_lead[-1:].isspace() or m.group("per") is not None or m.group(0) != m.group("word")
        if m.group("word").lower() in _SPACED_ONLY_UNITS and not spaced:
            return s
        lead = raw_lead.strip()
        if lead and is_number(lead):
            return lead
    m = _CJK_UNIT.match(s)
    if m:
        lead = m.group("lead").strip()
        if lead and is_number(lead):
            return lead
    return s


def _is_unit(word: str) -> bool:
    return word.lower() in _UNIT_NAMES


_OPEN = {"(": ")", "[": "]", "{": "}", "⦃": "⦄"}
_CLOSE = {v: k for k, v in _OPEN.items()}


def _split_sequence(s: str) -> tuple[str, list[str], str] | None:
    """Split a tuple, interval, set or bare list into (opener, items, closer), else None.

    ``\\{1, 2\\}`` and bare lists ``1, 2`` are sets (order-free, as math-verify reads
    them); ``(1, 2)`` and ``[1, 2)`` keep order and bracket types.
    """
    t = s.replace(r"\{", "⦃").replace(r"\}", "⦄").strip()
    if "," not in t:
        return None
    enclosed = _encloses(t)
    inner = t[1:-1] if enclosed else t
    items, depth, start = [], 0, 0
    for i, c in enumerate(inner):
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
            if depth < 0:
                return None
        elif c == "," and depth == 0:
            items.append(inner[start:i])
            start = i + 1
    items.append(inner[start:])
    if depth != 0 or len(items) < 2 or any(not item.strip() for item in items):
        return None
    opener, closer = (t[0], t[-1]) if enclosed else ("", "")
    if (opener, closer) == ("{", "}"):
        opener, closer = "⦃", "⦄"  # "{p+1, p}": braces around a list make a set, escaped or not
    def restore(x):
        return x.replace("⦃", r"\{").replace("⦄", r"\}")
    return restore(opener), [restore(x).strip() for x in items], restore(closer)


def _encloses(t: str) -> bool:
    """True when t[0] is a bracket whose partner (of any kind, for intervals) is t[-1]."""
    if len(t) < 2 or t[0] not in _OPEN or t[-1] not in _CLOSE:
        return False
    depth = 0
    for i, c in enumerate(t):
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
            if depth == 0 and i != len(t) - 1:
                return False
    return depth == 0


# --------------------------------------------------------------------------------------
# Free-form equivalence: fast path, then symbolic.
# --------------------------------------------------------------------------------------


_INTEGER = re.compile(r"[+-]?\d+")
# "94,4" written tight has two readings, as "50%" has: the list {94, 4}, or 94.4 with a
# decimal comma. Its key is "94{,}4" (a spaced "94, 4" is only a list, key "94,4"), and it
# equals what either reading equals; never for a group of three digits ("1,000" is a
# thousand, already in its key).
_DECIMAL_COMMA = re.compile(r"^([+-]?0|[+-]?\d+(?=,(?:\d{1,2}|\d{4,})$)),(\d+)$")
_COMMA_KEY = re.compile(r"^([+-]?0|[+-]?\d+(?=\{,\}(?:\d{1,2}|\d{4,})$))\{,\}(\d+)$")


#: A decimal with this many significant digits is a float's print (``0.16666666666666666``,
#: ``2.3333333333333335``): a rounded real, never an exact value.
FLOAT_PRINT_DIGITS = 12
#: A decimal needs this many significant digits to be read as a rounded real against a
#: value without a finite decimal form (``3.1416`` is pi; ``3.14`` is not).
ROUNDED_MIN_DIGITS = 4
# The error of a float's print (its double is within 2**-53 of the real, relatively) and
# of evaluating an expression in floats (a few roundings).
_PRINT_ERROR = 2.0**-50
_FLOAT_NOISE = 1e-9
_DECIMAL_LITERAL = re.compile(r"^[+-]?(?P<int>\d*)(?:\.(?P<frac>\d*))?(?:[eE](?P<exp>[+-]?\d{1,3}))?$")


def _decimal_digits(text: str) -> tuple[int, int] | None:
    """(significant digits, decimal places) of a written decimal, or None if it is none.

    >>> _decimal_digits("0.0250"), _decimal_digits("2.3333333333333335"), _decimal_digits("12")
    ((3, 4), (17, 16), None)
    """
    m = _DECIMAL_LITERAL.match(text)
    if not m or (m.group("frac") is None and m.group("exp") is None):
        return None
    whole, frac = m.group("int") or "", m.group("frac") or ""
    digits = (whole + frac).lstrip("0")
    places = len(frac) - int(m.group("exp") or 0)
    return (len(digits), places) if digits else (1, places)


def _number_key(text: str, value: Fraction) -> str:
    """The key of a plain number: its shortest exact spelling, but a float's print keeps
    its digits (as a fraction it would be an exact value, ``16666666666666666/10**17``)."""
    digits = _decimal_digits(text.lstrip("+"))
    if digits is not None and digits[0] >= FLOAT_PRINT_DIGITS:
        text = format(Decimal(text.lstrip("+")), "f")
        return text.rstrip("0").rstrip(".") if "." in text else text
    return format_rational(value)


class _Reading(NamedTuple):
    """One reading of a number: its float value, its exact value when it has one, the
    half-width of the interval it may stand for (half a unit of the last written place
    for a rounded decimal, 0 for an exact value) and whether it is written as a number
    (not an expression that floats evaluate with rounding error)."""

    value: float
    exact: Fraction | None
    slack: float
    literal: bool


def _terminates(x: Fraction) -> bool:
    d = x.denominator
    for p in (2, 5):
        while d % p == 0:
            d //= p
    return d == 1


@functools.lru_cache(maxsize=1 << 16)
def _readings(key: str) -> tuple[_Reading, ...] | None:
    """The numbers a key may denote (two for a percentage), or None when it is no number."""
    values = numeric_values(key)
    if values is None:
        return None
    percent = key.endswith("%")
    text = key[:-1] if percent else key
    literal = parse_rational(text)
    slack, exact, is_literal = 0.0, literal, literal is not None
    digits = _decimal_digits(text) if literal is not None else None
    if digits is not None:
        significant, places = digits
        if significant >= FLOAT_PRINT_DIGITS:  # a float's print: rounded, never exact
            exact, slack = None, 0.5 * 10.0**-places + _PRINT_ERROR * abs(values[0])
        elif significant >= ROUNDED_MIN_DIGITS and places >= 1:
            slack = 0.5 * 10.0**-places
    elif literal is None and "." not in text:
        exact = exact_value(text)
    readings = [_Reading(values[0], exact, slack, is_literal)]
    if percent:
        readings.append(_Reading(values[1], None if exact is None else exact / 100, slack / 100, is_literal))
    return tuple(readings)


def _reading_match(x: _Reading, y: _Reading, rel_tol: float) -> bool:
    if rel_tol and math.isclose(x.value, y.value, rel_tol=rel_tol):
        return True  # a benchmark's declared tolerance
    if x.exact is not None and y.exact is not None:
        if x.exact == y.exact:
            return True
        if _terminates(x.exact) and _terminates(y.exact):
            return False  # two exact values with finite decimals: 4096 is not 4096.2
        return float(abs(x.exact - y.exact)) <= x.slack + y.slack  # 0.3333 is 1/3 rounded
    noise = 0.0 if x.literal and y.literal else _FLOAT_NOISE * max(abs(x.value), abs(y.value)) + 1e-12
    return abs(x.value - y.value) <= x.slack + y.slack + noise


def _numbers_match(a: str, b: str, rel_tol: float) -> bool | None:
    """Whether two numeric keys are one number (None: not both numbers).

    Exact values are compared exactly (``4096`` is not ``4096.2``, ``0.50`` is ``1/2``);
    a decimal of at least :data:`ROUNDED_MIN_DIGITS` significant digits stands for every
    real that rounds to it, so it equals a value without a finite decimal form within half
    a unit of its last place (``3.1416`` is ``\\pi``, ``1.414`` is ``\\sqrt2``, ``0.3333``
    is ``1/3``); a float's print (:data:`FLOAT_PRINT_DIGITS` digits) is such a rounded
    real too, also against exact decimals (``0.30000000000000004`` is ``0.3``); two
    expressions agree within float noise. ``rel_tol`` > 0 adds a benchmark's tolerance.
    """
    ra, rb = _readings(a), _readings(b)
    if ra is None or rb is None:
        return None
    return any(_reading_match(x, y, rel_tol) for x in ra for y in rb)


def _is_text(key: str) -> bool:
    """Letters and spaces only ('obtuse', 'quarter to', 'x'): equal only as text."""
    return bool(_PLAIN_TEXT.match(key))


def _has_free_letters(key: str) -> bool:
    return bool(re.search(r"[A-Za-z]", _COMMAND.sub("", key)))


_WORD = re.compile(r"[A-Za-z]{3,}")


def _has_words(key: str) -> bool:
    """Prose ('Surface area of A > B', 'domain: ... and range: ...') is compared as text:
    sympy would read it as a product of single-letter symbols."""
    return bool(_WORD.search(_COMMAND.sub("", key)))


def _fast_decide(a: str, b: str, rel_tol: float) -> bool | None:
    """Decide equivalence of two keys cheaply, or None when only symbolic math can.

    Numbers compare by value, sequences element by element, prose as text, and
    expressions with variables by value at fixed random points
    (see :func:`vlcohort.answers.latex_eval.probe_decide`).

    >>> _fast_decide("2\\\\sqrt{3}", "\\\\sqrt{12}", 1e-4)
    True
    >>> _fast_decide("1,2", "2,1", 1e-4), _fast_decide("(1,2)", "(2,1)", 1e-4)
    (True, False)
    >>> _fast_decide("x^2+1", "1+x^2", 1e-4), _fast_decide("2\\\\sqrt{49-x^2}", "\\\\sqrt{49-x^2}", 1e-4)
    (True, False)
    >>> _fast_decide("x=2", "2x=4", 1e-4) is None  # same relation up to a factor: sympy decides
    True
    """
    if a == b:
        return True
    for x, y in ((a, b), (b, a)):
        comma = _COMMA_KEY.match(x)
        if comma:  # "94{,}4": equal if either reading is, the decimal or the list
            whole, part = comma.groups()
            verdicts = [_fast_decide(f"{whole}.{part}", y, rel_tol), _fast_decide(f"{whole},{part}", y, rel_tol)]
            return True if True in verdicts else (None if None in verdicts else False)
    sa, sb = _split_sequence(a), _split_sequence(b)
    if sa is not None or sb is not None:
        if sa is None or sb is None:
            return False
        return _sequences_equal(sa, sb, rel_tol)
    if _INTEGER.fullmatch(a) and _INTEGER.fullmatch(b):  # integer answers are exact: 609880 is not 609939
        return int(a) == int(b) or bool(rel_tol) and math.isclose(int(a), int(b), rel_tol=rel_tol)
    if a in INFINITY or b in INFINITY:  # interval ends: decided here, never by sympy
        return INFINITY.get(a) == INFINITY.get(b)
    ea = exact_value(a) if "." not in a else None
    eb = exact_value(b) if "." not in b else None
    if ea is not None and eb is not None:  # integer expressions are exact too: 2^{81} is not 2^{81}+1
        return ea == eb or bool(rel_tol) and _numbers_match(a, b, rel_tol) is True
    va, vb = _readings(a), _readings(b)
    if (ea is not None and va is None) != (eb is not None and vb is None):
        # one side is exact but beyond floats (5^{710}): the tolerance of the float tier
        # cannot apply, so compare exactly with the other side's exact value, if it has one
        exact, other = (ea, b) if ea is not None and va is None else (eb, a)
        literal = parse_rational(other)
        if literal is not None:
            return exact == literal
    if va is not None and vb is not None:
        return any(_reading_match(x, y, rel_tol) for x in va for y in vb)
    if _is_text(a) or _is_text(b) or _has_words(a) or _has_words(b):
        return False
    za, zb = _complex(a, va), _complex(b, vb)
    if za is not None and zb is not None:  # i(3-i) is 1+3i: i is the imaginary unit, not a variable
        return near(za, zb, _FLOAT_NOISE, 1e-12)
    # a number against an expression with letters: equal only if the expression is
    # constant (\sin^2 x + \cos^2 x is 1); the probe decides, else sympy
    return probe_decide(a, b, rel_tol)


def _complex(key: str, readings: tuple[_Reading, ...] | None) -> complex | None:
    """A constant's value as a complex number: ``1+3i``, or a real number's single reading."""
    if readings is not None:
        return complex(readings[0].value) if len(readings) == 1 else None
    return complex_value(key)


def _sequences_equal(sa, sb, rel_tol: float) -> bool | None:
    (oa, ia, ca), (ob, ib, cb) = sa, sb
    if len(ia) != len(ib):
        return False
    unordered_a, unordered_b = oa in ("", r"\{"), ob in ("", r"\{")
    if unordered_a != unordered_b or (not unordered_a and (oa, ca) != (ob, cb)):
        return False
    ka = [_math_key(x) for x in ia]
    kb = [_math_key(x) for x in ib]
    if not unordered_a:
        results = [_fast_decide(x, y, rel_tol) for x, y in zip(ka, kb)]
        if False in results:
            return False
        return True if all(results) else None
    remaining = list(kb)
    undecided = False
    for x in ka:
        for j, y in enumerate(remaining):
            verdict = _fast_decide(x, y, rel_tol)
            if verdict:
                del remaining[j]
                break
            undecided = undecided or verdict is None
        else:
            return None if undecided else False
    return True


@functools.lru_cache(maxsize=1 << 16)
def _freeform_key(text: str) -> str | None:
    """The free-form key of a light-normalised answer: a letter form's letter, else the
    math key, iterated to a fixed point so that ``canonical`` is idempotent even when one
    rewrite exposes another (removing "°" from "\\sqrt°3" makes "\\sqrt3")."""
    current = text
    for _ in range(6):
        stripped = _strip_answer_prefix(_light(current))
        form = _letter_form(stripped, False)
        key = form[0] if form is not None and form[2] else (_math_key(stripped) or None)
        if key is None or key == current:
            return key
        current = key
    return current


def _freeform_equal(a_light: str, b_light: str, rel_tol: float, timeout_s: float) -> bool:
    ka, kb = _freeform_key(a_light), _freeform_key(b_light)
    if not ka or not kb:
        return False
    verdict = _fast_decide(ka, kb, rel_tol)
    if verdict is not None:
        return verdict
    first, second = sorted((ka, kb))  # symmetric by construction, and one cache entry
    return symbolic_equal(first, second, timeout_s)


# --------------------------------------------------------------------------------------
# Options: letter <-> option text.
# --------------------------------------------------------------------------------------


class _OptionTable:
    """Precomputed forms of one question's options (cached per options tuple)."""

    def __init__(self, options: tuple[str, ...]):
        if len(options) > len(LETTERS):
            raise ValueError(
                f"{len(options)} options given, but only {len(LETTERS)} (A-H) can be named "
                "by a letter; split or trim the options of this question"
            )
        self.raw = tuple(t.strip() for t in _strip_own_letters(options))

    def __len__(self) -> int:
        return len(self.raw)

    # Built on first use: a bare letter answer never needs the option texts normalised.
    @functools.cached_property
    def folded(self) -> tuple[str, ...]:
        return tuple(_light(t).casefold() for t in self.raw)

    @functools.cached_property
    def keys(self) -> tuple[str, ...]:
        return tuple(_math_key(_light(t)) for t in self.raw)


_OWN_LETTER = re.compile(r"^\s*\(?([A-H])\s*[.:)]\s*")


def _strip_own_letters(options: tuple[str, ...]) -> tuple[str, ...]:
    """['A. 3', 'B. 4'] -> ['3', '4'] when every option carries its own letter in order."""
    matches = [_OWN_LETTER.match(o) for o in options]
    if options and all(m and m.group(1) == LETTERS[i] for i, m in enumerate(matches)):
        return tuple(o[m.end() :] for o, m in zip(options, matches))
    return options


@functools.lru_cache(maxsize=4096)
def _option_table(options: tuple[str, ...]) -> _OptionTable:
    return _OptionTable(options)


def _content_matches(text: str, table: _OptionTable, rel_tol: float, timeout_s: float) -> frozenset[int]:
    """Options whose text ``text`` (light-normalised) is, tier by tier; first tier that hits wins."""
    folded = text.casefold()
    hits = [i for i, t in enumerate(table.folded) if t == folded]
    if hits:
        return frozenset(hits)
    key = _math_key(text)
    if not key:
        return frozenset()
    hits = [i for i, k in enumerate(table.keys) if k == key]
    if hits:
        return frozenset(hits)
    if _readings(key) is not None:
        return frozenset(i for i, k in enumerate(table.keys) if k and _numbers_match(key, k, rel_tol))
    if _is_text(key) or _has_words(key) or not _has_free_letters(key) and "\\" not in key:
        return frozenset()
    return frozenset(
        i
        for i, k in enumerate(table.keys)
        if k and _fast_decide(key, k, rel_tol) is None and symbolic_equal(*sorted((key, k)), timeout_s)
    )


_RESOLVED: dict[tuple[str, tuple[str, ...], float, float], frozenset[int]] = {}
_RESOLVED_SIZE = 1 << 16


def _resolve_options(text: str, options: tuple[str, ...], rel_tol: float, timeout_s: float) -> frozenset[int]:
    """Indices of the options a light-normalised answer names (empty: none; 2+: ambiguous).

    Cached, except when the grading call's shared symbolic time limit cut a comparison
    short: alone, with its full limit, the answer might resolve otherwise."""
    key = (text, options, rel_tol, timeout_s)
    found = _RESOLVED.get(key)
    if found is None:
        found = _resolve_options_uncached(*key)
        if not budget_cut():
            if len(_RESOLVED) >= _RESOLVED_SIZE:
                _RESOLVED.clear()
            _RESOLVED[key] = found
    return found


def _resolve_options_uncached(text: str, options: tuple[str, ...], rel_tol: float,
                              timeout_s: float) -> frozenset[int]:
    table = _option_table(options)
    text = _strip_answer_prefix(text)
    form = _letter_form(text, True)
    if form is not None:
        letter, rest, strong = form
        index = LETTERS.index(letter)
        bare = text.strip("().[]: ")
        if not rest and bare.islower() and (text in table.raw or bare in table.raw):
            # a lowercase form that is literally an option's text ("(b)" among options
            # "(c)", "(a)", "(b)") names that option; uppercase letters always name letters
            return _content_matches(text, table, rel_tol, timeout_s)
        if index < len(table):
            if not rest:
                return frozenset([index])
            said = _content_matches(rest, table, rel_tol, timeout_s)
            if strong:
                return frozenset([index]) if (not said or index in said) else frozenset()
            if index in said:
                return frozenset([index])
    return _content_matches(text, table, rel_tol, timeout_s)


def _options_tuple(options: OptionsArg) -> tuple[str, ...] | None:
    if not options:
        return None
    if isinstance(options, str):
        raise TypeError("options must be a list of option texts, not one string")
    if type(options) is tuple and all(type(o) is str for o in options):
        return options  # already hashable: a vote converts once, not once per sample
    return tuple("" if o is None else str(o) for o in options)


def _prepare(answer: object) -> str | None:
    """Light-normalised answer text, or None for None / empty / oversized input."""
    if answer is None:
        return None
    text = answer if isinstance(answer, str) else str(answer)
    if not text or len(text) > MAX_ANSWER_CHARS:
        return None
    text = _light(text)
    return text or None


# --------------------------------------------------------------------------------------
# Graders and the public functions.
# --------------------------------------------------------------------------------------


class Grader(Protocol):
    """What voting, rewards and evaluation need from a grader."""

    name: str
    #: Whether a vote may merge distinct keys that this grader calls equivalent.
    merges_classes: bool

    def canonical(self, answer: str | None, options: OptionsArg = None) -> str | None: ...

    def is_equivalent(self, pred: str | None, gold: str | None, options: OptionsArg = None) -> bool: ...


T = TypeVar("T")


def _one_decision(decide: Callable[..., T], *args) -> T:
    """``decide(*args)`` as one grading decision: every symbolic call inside shares one
    time limit (:func:`vlcohort.answers.symbolic.open_budget`), unless an outer decision
    already holds it."""
    if not open_budget():
        return decide(*args)
    try:
        return decide(*args)
    finally:
        close_budget()


class CorrectedGrader:
    """The default grader: option mapping + fast math equivalence + symbolic fallback.

    >>> g = CorrectedGrader(rel_tol=1e-2)          # a benchmark with 2-decimal answers
    >>> g.is_equivalent("3.14", "\\\\pi")
    True
    >>> g.canonical("(c)", options=["1", "2", "3"])
    'C'
    """

    name = "corrected"
    merges_classes = True

    def __init__(self, rel_tol: float = DEFAULT_REL_TOL, timeout_s: float = DEFAULT_TIMEOUT_S):
        if not rel_tol >= 0:
            raise ValueError(f"rel_tol must be >= 0, got {rel_tol!r}")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        self.rel_tol = float(rel_tol)
        self.timeout_s = float(timeout_s)

    def __repr__(self) -> str:
        return f"CorrectedGrader(rel_tol={self.rel_tol!r}, timeout_s={self.timeout_s!r})"

    def canonical(self, answer: str | None, options: OptionsArg = None) -> str | None:
        """The key votes are clustered by: an option letter, or a normalised math form."""
        return _one_decision(self._canonical, answer, options)

    def _canonical(self, answer: str | None, options: OptionsArg) -> str | None:
        text = _prepare(answer)
        if text is None:
            return None
        opts = _options_tuple(options)
        if opts is not None:
            found = _resolve_options(text, opts, self.rel_tol, self.timeout_s)
            return LETTERS[next(iter(found))] if len(found) == 1 else None
        return _freeform_key(text)

    def is_equivalent(self, pred: str | None, gold: str | None, options: OptionsArg = None) -> bool:
        """Whether ``pred`` is the same answer as ``gold`` (a letter or option text with options).

        Every symbolic comparison the decision needs shares one limit of ``timeout_s``
        seconds of CPU time (:func:`vlcohort.answers.symbolic.shared_time_limit`); the
        clock starts at the first symbolic call."""
        return _one_decision(self._is_equivalent, pred, gold, options)

    def _is_equivalent(self, pred: str | None, gold: str | None, options: OptionsArg) -> bool:
        p, g = _prepare(pred), _prepare(gold)
        if p is None or g is None:
            return False
        opts = _options_tuple(options)
        if opts is not None:
            gold_options = _resolve_options(g, opts, self.rel_tol, self.timeout_s)
            if gold_options:
                said = _resolve_options(p, opts, self.rel_tol, self.timeout_s)
                return bool(said) and said <= gold_options
            # a gold that names no option is a data problem; still grade it as free-form
        else:
            gold_key = _freeform_key(g)
            if gold_key is not None and len(gold_key) == 1 and gold_key in LETTERS:
                # a letter gold with unknown option texts ("C" in multimodal-open-r1):
                # any letter form of C is right, whatever text follows it
                return _freeform_key(p) == gold_key
        return _freeform_equal(p, g, self.rel_tol, self.timeout_s)


class LegacyGrader:
    """The plain math grader, kept to reproduce results published with it.

    No option mapping: ``is_equivalent`` is math-verify's ``verify(parse(gold),
    parse(pred))`` on the ``$``-wrapped answer strings (same input screen and time limit
    as the corrected grader), and ``canonical`` is the lightly normalised string, which a
    vote hashes without merging equivalent forms. So "C. Pythagorean theorem" is wrong
    against "C", and "C" and "(C)" are two votes, exactly the failure the corrected
    grader fixes.

    >>> LegacyGrader().is_equivalent("C. Pythagorean theorem", "C")
    False
    >>> LegacyGrader().canonical("(C)")
    '(C)'
    """

    name = "legacy"
    merges_classes = False

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S):
        self.timeout_s = float(timeout_s)

    def __repr__(self) -> str:
        return f"LegacyGrader(timeout_s={self.timeout_s!r})"

    def canonical(self, answer: str | None, options: OptionsArg = None) -> str | None:
        return _prepare(answer)

    def is_equivalent(self, pred: str | None, gold: str | None, options: OptionsArg = None) -> bool:
        if pred is None or gold is None:
            return False
        p, g = str(pred).strip(), str(gold).strip()
        if not p or not g or len(p) > MAX_ANSWER_CHARS or len(g) > MAX_ANSWER_CHARS:
            return False
        return symbolic_equal(g, p, self.timeout_s)


#: Graders by the name a config uses (``grader: corrected`` or ``grader: legacy``).
GRADERS: dict[str, type] = {"corrected": CorrectedGrader, "legacy": LegacyGrader}


def get_grader(name: str = "corrected", **kwargs) -> Grader:
    """Build a grader by its config name.

    >>> get_grader("legacy").name
    'legacy'
    """
    try:
        cls = GRADERS[name]
    except KeyError:
        raise ValueError(f"unknown grader {name!r}; choose one of: {', '.join(sorted(GRADERS))}") from None
    return cls(**kwargs)


_DEFAULT = CorrectedGrader()


def canonical(answer: str | None, options: OptionsArg = None) -> str | None:
    """The key votes are clustered by (corrected grader, default tolerance).

    With options, every way of naming an option gives its letter; an answer naming no
    option, or several (duplicate option texts), gives None. Without options, an
    uppercase letter form gives its letter and anything else a normalised math form.

    >>> opts = ["135°", "140°", "145°", "150°"]
    >>> [canonical(x, opts) for x in ["C", "(C)", "C: 145°", "option C", "\\\\textbf{(C)}", "c", "145"]]
    ['C', 'C', 'C', 'C', 'C', 'C', 'C']
    >>> canonical("N 23.5° E", ["N", "S", "W", "E"]) is None
    True
    >>> canonical("x = 0.50"), canonical("1,000 cm"), canonical("３")
    ('0.5', '1000', '3')
    """
    return _DEFAULT.canonical(answer, options)


def is_equivalent(pred: str | None, gold: str | None, options: OptionsArg = None,
                  rel_tol: float = DEFAULT_REL_TOL) -> bool:
    """Whether ``pred`` answers the same as ``gold``; never raises on bad answers, never hangs.

    ``gold`` may be a letter or an option text when ``options`` are given; with no options
    a bare-letter gold ("C") still accepts any letter form of C ("C. Pythagorean theorem").

    >>> is_equivalent("C: 145°", "145°", options=["135°", "140°", "145°", "150°"])
    True
    >>> is_equivalent("12 cm", "12.00"), is_equivalent("1/3", "0.33")
    (True, False)
    >>> is_equivalent("0.333", "1/3", rel_tol=1e-2)
    True
    """
    grader = _DEFAULT if rel_tol == DEFAULT_REL_TOL else CorrectedGrader(rel_tol=rel_tol)
    return grader.is_equivalent(pred, gold, options)


def clear_caches() -> None:
    """Forget every cached normalisation and comparison (for benchmarks and tests)."""
    for fn in (_light, _letter_form, _math_key, _freeform_key, _option_table, _readings):
        fn.cache_clear()
    _RESOLVED.clear()
    _clear_latex_eval_caches()
    _clear_symbolic_caches()
