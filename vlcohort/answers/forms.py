"""Compound answer forms, each rewritten into the one written form the grader's key and
sequence tier compare: a matrix as nested lists, one ``\\pm`` as the pair of signs, the
spellings of a relation made one, a one-variable inequality as its interval, and what
counts as a number there.

Pure string rules, no grader state: :mod:`vlcohort.answers.grading` calls them while
building an answer's key (``_light`` and ``_math_key``), so the vote's classes merge these
spellings without a symbolic call. Kept apart from ``grading.py``, which is about deciding
equivalence.
"""

from __future__ import annotations

import re

from vlcohort.answers.latex_eval import numeric_values

__all__ = ["INFINITY", "SPACE_NOT_BETWEEN_LETTERS", "THOUSANDS", "inequality_interval", "is_number",
           "matrices_to_lists", "one_relation_spelling", "plus_minus"]

# A leading group of 0 is never a thousands group: "0,111" is a decimal comma.
THOUSANDS = re.compile(r"^[+-]?(?!0,)\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
SPACE_NOT_BETWEEN_LETTERS = re.compile(r"(?<![A-Za-z])\s+|\s+(?![A-Za-z])")


# pmatrix / bmatrix / Bmatrix / matrix / smallmatrix / array (its column spec dropped);
# vmatrix is a determinant, a number, and is left alone.
_MATRIX = re.compile(
    r"(?:\\left\s*[(\[]\s*)?"  # an array's own brackets
    r"\\begin\s*\{(?P<env>[pbB]?matrix|smallmatrix|array)\}(?:\s*\{[^{}]*\})?(?P<body>.*?)"
    r"\\end\s*\{(?P=env)\}(?:\s*\\right\s*[)\]])?",
    re.S,
)
_MATRIX_ROW = re.compile(r"\\\\(?:\s*\[[^\]]*\])?")  # "\\" or "\\[2pt]"


def matrices_to_lists(s: str) -> str:
    """'\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}' -> '[[1, 2], [3, 4]]'.

    A matrix is an ordered list of rows, which the sequence tier compares element by
    element; the bracket style of the environment (p, b, B) never changes the matrix, so
    every style gives one form, the same as a ``[[1, 2], [3, 4]]`` written by hand. It
    runs before the spacing rules, which would otherwise eat the ``\\\\`` row breaks.

    >>> matrices_to_lists("\\\\begin{bmatrix} 1 & 0 \\\\\\\\ 0 & 1 \\\\end{bmatrix}")
    '[[1, 0], [0, 1]]'
    """
    if "\\begin" not in s:
        return s

    def as_list(m: re.Match) -> str:
        rows = [r for r in _MATRIX_ROW.split(m.group("body")) if r.strip()]
        return "[" + ", ".join("[" + ", ".join(c.strip() for c in r.split("&")) + "]" for r in rows) + "]"

    return _MATRIX.sub(as_list, s)

# Spellings of one relation, mapped to one: ">=" and "\geq" are "\ge", "!=" is "\neq".
_RELATION = re.compile(r"\\(?:geqslant|leqslant|geq|leq|ge|le|neq|ne|gt|lt)(?![A-Za-z])|>=|<=|!=")
_RELATION_NAMES = {
    "\\geqslant": "\\ge", "\\geq": "\\ge", "\\ge": "\\ge", ">=": "\\ge",
    "\\leqslant": "\\le", "\\leq": "\\le", "\\le": "\\le", "<=": "\\le",
    "\\neq": "\\neq", "\\ne": "\\neq", "!=": "\\neq", "\\gt": ">", "\\lt": "<",
}


def one_relation_spelling(s: str) -> str:
    """'x >= 2', 'x \\geq 2', 'x \\geqslant 2' -> 'x  \\ge  2': every spelling of a relation
    becomes one (padded with spaces, which later rules collapse).

    >>> one_relation_spelling("x != 3") == one_relation_spelling("x \\\\ne 3")
    True
    """
    return _RELATION.sub(lambda m: f" {_RELATION_NAMES[m.group()]} ", s)

_PLUS_MINUS = re.compile(r"\\(?:pm|mp)(?![A-Za-z])")


def plus_minus(s: str) -> str:
    """'x = \\pm 2' -> 'x = +2, x = -2': one ``\\pm`` (or ``\\mp``) is the set of both signs.

    Replacing the sign in place is exactly its meaning, wherever it stands
    (``\\frac{1 \\pm \\sqrt{5}}{2}`` is the two roots); with two of them, or inside a list,
    the pairing of signs is not clear, and the answer is left as written.

    >>> plus_minus("1 \\\\pm \\\\sqrt{2}")
    '1 +\\\\sqrt{2}, 1 -\\\\sqrt{2}'
    """
    found = _PLUS_MINUS.findall(s)
    if len(found) != 1 or "," in s:
        return s
    plus, minus = ("+", "-") if found[0] == "\\pm" else ("-", "+")
    m = _PLUS_MINUS.search(s)
    head, tail = s[: m.start()], s[m.end() :].strip()
    if not tail:
        return s
    return f"{head}{plus}{tail}, {head}{minus}{tail}"

_INEQUALITY_OPS = re.compile(r"\s*(<|>|\\le(?![A-Za-z])|\\ge(?![A-Za-z]))\s*")
_VARIABLE = re.compile(r"^[A-Za-z](?:_\{?[A-Za-z0-9]+\}?)?$")
_MEMBERSHIP = re.compile(r"^[A-Za-z](?:_\{?[A-Za-z0-9]+\}?)?\s*\\in\s*(?=\S)")
#: Spellings of (minus) infinity as an interval end, to one.
INFINITY = {"\\infty": "\\infty", "+\\infty": "\\infty", "-\\infty": "-\\infty", "\\infin": "\\infty"}


def _bound(text: str) -> str | None:
    """An interval end: a number ('-3', '\\sqrt{2}', '1/2') or (minus) infinity."""
    t = text.strip()
    if t.replace(" ", "") in INFINITY:
        return INFINITY[t.replace(" ", "")]
    return t if t and is_number(t) else None


def inequality_interval(s: str) -> str:
    """'-3 < x < 10' -> '(-3,10)', 'x \\ge 2' -> '[2,\\infty)', 'x \\in [2, 5)' -> '[2, 5)'.

    An inequality in one variable with numeric bounds is the interval of its solutions,
    so it meets the interval answer in the sequence tier; ``<`` gives an open end and
    ``\\le`` a closed one, so strictness is kept. Anything else is returned unchanged.

    >>> inequality_interval("x \\\\ge 2"), inequality_interval("10 > x \\\\ge -3")
    ('[2,\\\\infty)', '[-3,10)')
    """
    m = _MEMBERSHIP.match(s)
    if m:
        return s[m.end() :]
    if "<" not in s and ">" not in s and "\\le" not in s and "\\ge" not in s:
        return s
    pieces = _INEQUALITY_OPS.split(s.strip())
    if len(pieces) == 3:
        left, op, right = pieces
        flip = {"<": ">", ">": "<", "\\le": "\\ge", "\\ge": "\\le"}
        if _VARIABLE.match(right.strip()):  # "2 \le x" is "x \ge 2"
            left, right, op = right, left, flip[op]
        if left.strip().startswith("-") and _VARIABLE.match(left.strip()[1:].strip()):
            negated = _negate(right)  # "-y > -3" is "y < 3"
            if negated is not None:
                left, right, op = left.strip()[1:], negated, flip[op]
        if not _VARIABLE.match(left.strip()) or (end := _bound(right)) is None:
            return s
        if op in ("<", "\\le"):
            return f"(-\\infty,{end}{')' if op == '<' else ']'}"
        return f"{'(' if op == '>' else '['}{end},\\infty)"
    if len(pieces) == 5:
        low, op1, var, op2, high = pieces
        if not _VARIABLE.match(var.strip()):
            return s
        if op1 in (">", "\\ge") and op2 in (">", "\\ge"):  # "10 > x > -3"
            low, op1, op2, high = high, {">": "<", "\\ge": "\\le"}[op2], {">": "<", "\\ge": "\\le"}[op1], low
        if op1 not in ("<", "\\le") or op2 not in ("<", "\\le"):
            return s
        a, b = _bound(low), _bound(high)
        if a is None or b is None:
            return s
        return f"{'(' if op1 == '<' else '['}{a},{b}{')' if op2 == '<' else ']'}"
    return s

def _negate(text: str) -> str | None:
    """The bound ``-text`` as written: '-3' -> '3', '\\frac12' -> '-\\frac12'; None if no bound."""
    t = text.strip()
    if _bound(t) is None:
        return None
    if t.startswith("-"):
        return t[1:].strip()
    return "-" + t.lstrip("+").strip()


def is_number(text: str) -> bool:
    """Whether ``text`` evaluates to a number ('1,000', '9 \\pi', '2\\sqrt{3}')."""
    t = SPACE_NOT_BETWEEN_LETTERS.sub("", text)
    if THOUSANDS.match(t):
        t = t.replace(",", "")
    return numeric_values(t) is not None
