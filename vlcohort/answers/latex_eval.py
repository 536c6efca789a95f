"""Fast numeric reading of simple LaTeX: the cheap tiers of math equivalence.

:mod:`vlcohort.answers.grading` decides whether two free-form answers are the same, cheapest test
first. Most answers are numbers or short formulas (``2\\sqrt{3}``, ``\\frac{9\\pi}{4}``,
``x^2+1``), and sending every pair to the symbolic tier (math-verify and sympy,
:mod:`vlcohort.answers.symbolic`) would cost milliseconds to a second per comparison inside every
vote and reward. This module reads such answers in microseconds, so the symbolic tier
sees only what it alone can decide:

* :func:`parse_rational` / :func:`format_rational`: exact plain rational literals
  (``-0.50``, ``3/4``, ``\\frac{3}{4}``, ``1\\frac12``) and their shortest spelling, the
  basis of the normalised keys votes are clustered by.
* :func:`numeric_values`: the value of a constant expression (numbers, ``+ - * / ^``,
  ``\\frac``, ``\\sqrt``, ``\\pi``, ``e``, common functions, brackets); a percentage has
  two readings.
* :func:`probe_decide`: expressions with single-letter variables compared by value at
  fixed pseudo-random points (randomised identity testing): different values prove two
  expressions different, equal values make them equal with overwhelming probability.

Everything here is pure and bounded: a recursive-descent evaluator with a depth limit,
inputs longer than :data:`MAX_EXPRESSION_CHARS` refused, huge exponents refused, results
cached (:func:`clear_caches` forgets them). It knows nothing of options, letters or
graders, and imports nothing from the rest of the package.

>>> numeric_values("\\\\frac{9\\\\pi}{4}")
(7.0685834705770345,)
>>> format_rational(parse_rational("-0.50")), format_rational(parse_rational("\\\\frac{2}{6}"))
('-0.5', '1/3')
>>> probe_decide("x^2+1", "1+x^2", 1e-4), probe_decide("2x", "x+2", 1e-4)
(True, False)
"""

from __future__ import annotations

import cmath
import functools
import math
import re
import zlib
from decimal import Decimal
from fractions import Fraction
from typing import Callable

__all__ = [
    "MAX_EXPRESSION_CHARS",
    "clear_caches",
    "complex_value",
    "exact_value",
    "format_rational",
    "near",
    "numeric_values",
    "parse_rational",
    "probe_decide",
]

#: Longer expressions are neither evaluated nor probed (they are not simple LaTeX).
MAX_EXPRESSION_CHARS = 200

# --------------------------------------------------------------------------------------
# Rational literals: exact value and shortest spelling.
# --------------------------------------------------------------------------------------

_RATIONAL_PATTERNS = (
    re.compile(r"^(?P<sign>[+-]?)(?P<num>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d{1,3})?)$"),
    re.compile(r"^(?P<sign>[+-]?)(?P<num>\d+)/(?P<den>\d+)$"),
    re.compile(r"^(?P<sign>[+-]?)\\frac\{(?P<num>[+-]?\d+)\}\{(?P<den>[+-]?\d+)\}$"),
    re.compile(r"^(?P<sign>[+-]?)(?P<whole>\d+)\\frac\{(?P<num>\d+)\}\{(?P<den>\d+)\}$"),
)


def parse_rational(s: str) -> Fraction | None:
    """Exact value of a plain rational literal ('-0.50', '3/4', '\\frac{3}{4}', '1\\frac12')."""
    if len(s) > 60:
        return None
    for pattern in _RATIONAL_PATTERNS:
        m = pattern.match(s)
        if not m:
            continue
        parts = m.groupdict()
        try:
            value = Fraction(parts["num"])
            if parts.get("den") is not None:
                value /= Fraction(parts["den"])
            if parts.get("whole") is not None:  # mixed number, as MATH and math-verify read it
                value += int(parts["whole"])
        except (ZeroDivisionError, ValueError):
            return None
        return -value if parts["sign"] == "-" else value
    return None


def format_rational(value: Fraction) -> str:
    """Shortest exact spelling: '3', '0.5', '-1/3' (a decimal only when it terminates)."""
    if value.denominator == 1:
        return str(value.numerator)
    d = value.denominator
    for p in (2, 5):
        while d % p == 0:
            d //= p
    if d == 1 and value.denominator <= 10**12:
        text = format(Decimal(value.numerator) / Decimal(value.denominator), "f")
        return text.rstrip("0").rstrip(".") if "." in text else text
    return f"{value.numerator}/{value.denominator}"


# --------------------------------------------------------------------------------------
# Numeric evaluation of simple LaTeX: numbers, + - * / ^, \frac, \sqrt, \pi, e, common
# functions, brackets; and, for identity testing, single-letter variables.
# --------------------------------------------------------------------------------------

_TOKEN = re.compile(r"\d+\.?\d*|\.\d+|\\[A-Za-z]+|\S")
_MAX_EXPONENT = 400.0
_FUNCTIONS: dict[str, Callable[[float], float]] = {
    r"\sin": math.sin, r"\cos": math.cos, r"\tan": math.tan,
    r"\cot": lambda x: 1.0 / math.tan(x), r"\sec": lambda x: 1.0 / math.cos(x),
    r"\csc": lambda x: 1.0 / math.sin(x), r"\arcsin": math.asin, r"\arccos": math.acos,
    r"\arctan": math.atan, r"\ln": math.log, r"\exp": math.exp, r"\log": math.log10,
}
_CONSTANTS = {r"\pi": math.pi, "e": math.e}
_RELATIONS = {"=": "=", r"\neq": "!=", r"\ne": "!=", "<": "<", r"\lt": "<", ">": ">", r"\gt": ">",
              r"\le": "<=", r"\leq": "<=", r"\leqslant": "<=", r"\ge": ">=", r"\geq": ">=", r"\geqslant": ">="}
#: Points at which expressions with variables are compared (randomised identity testing).
_PROBES = 3


class _NotNumeric(Exception):
    """Raised inside the evaluator for anything it does not handle (\\int, |x|, i, ...)."""


@functools.lru_cache(maxsize=1 << 16)
def numeric_values(key: str) -> tuple[float, ...] | None:
    """The value(s) a key may denote, or None when it is not a plain number.

    A percentage has two readings, as in math-verify: "50%" may mean 50 or 0.5.

    >>> numeric_values("2\\\\sqrt{3}")
    (3.4641016151377544,)
    >>> numeric_values("50%")
    (50.0, 0.5)
    >>> numeric_values("x+1") is None
    True
    """
    percent = key.endswith("%")
    text = key[:-1] if percent else key
    if not text or len(text) > MAX_EXPRESSION_CHARS:
        return None
    exact = parse_rational(text)
    if exact is not None:
        try:
            value = float(exact)
        except OverflowError:
            return None
    else:
        value = _evaluate(_TOKEN.findall(text), None)
        if value is None:
            return None
    if not math.isfinite(value):
        return None
    return (value, value / 100.0) if percent else (value,)


def _evaluate(tokens: list[str], probe: int | None, imaginary: bool = False) -> float | complex | None:
    try:
        value = _Evaluator(tokens, probe, imaginary).run()
    except (_NotNumeric, ArithmeticError, ValueError, TypeError, RecursionError):
        return None
    if isinstance(value, complex):
        if not cmath.isfinite(value):
            return None
        return value.real if imaginary and value.imag == 0 else value
    return value if math.isfinite(value) else None


def near(x: complex, y: complex, rel_tol: float, abs_tol: float = 1e-9) -> bool:
    """``math.isclose`` for real or complex values."""
    return abs(x - y) <= max(rel_tol * max(abs(x), abs(y)), abs_tol)


@functools.lru_cache(maxsize=1 << 15)
def complex_value(key: str) -> complex | None:
    """The value of a constant expression with the imaginary unit ``i`` (``i(3-i)``,
    ``\\frac{1}{1+i}``), or None: without an ``i``, with a variable, or unreadable.

    >>> complex_value("i(3-i)")
    (1+3j)
    """
    if not key or len(key) > MAX_EXPRESSION_CHARS:
        return None
    tokens = _TOKEN.findall(key)
    if "i" not in tokens:
        return None
    value = _evaluate(tokens, None, imaginary=True)
    return None if value is None else complex(value)


def _probe_value(name: str, probe: int) -> float:
    """A fixed pseudo-random value in [0.5, 2) for variable ``name`` at probe ``probe``.

    Positive and away from 0 and 1, so roots, logs and divisions stay defined; derived
    from crc32, so the same on every process and rank.
    """
    return 0.5 + 1.5 * (zlib.crc32(f"{name}:{probe}".encode()) % 100_003) / 100_003


@functools.lru_cache(maxsize=1 << 15)
def _probe(key: str) -> tuple[str, tuple[float, ...]] | None:
    """Values of a key with variables at the probe points, as (relation, values).

    A relation ``L op R`` probes ``L - R`` (relation "=", "<=", ...); a plain expression
    has relation "". None when the evaluator cannot read the key.

    >>> _probe("x^2+1") == _probe("1+x^2")
    True
    """
    if len(key) > MAX_EXPRESSION_CHARS or "," in key:
        return None
    tokens = _TOKEN.findall(key)
    found = [i for i, t in enumerate(tokens) if t in _RELATIONS]
    if len(found) > 1:
        return None
    relation = ""
    if found:
        i = found[0]
        relation = _RELATIONS[tokens[i]]
        if i + 1 < len(tokens) and tokens[i + 1] == "=" and relation in ("<", ">"):
            return None  # "<=" typed as two characters; rare, leave it to sympy
        tokens = ["("] + tokens[:i] + [")", "-", "("] + tokens[i + 1 :] + [")"]
    imaginary = "i" in tokens  # the imaginary unit, never a variable
    values = []
    for probe in range(_PROBES):
        value = _evaluate(tokens, probe, imaginary)
        if value is None:
            return None
        values.append(value)
    if relation and any(isinstance(v, complex) for v in values):
        return None  # an inequality between complex values: not for the probe
    return relation, tuple(values)


def probe_decide(a: str, b: str, rel_tol: float) -> bool | None:
    """Compare two keys with variables by value at fixed random points.

    Different values prove the expressions differ. Equal values at every point mean
    equal with overwhelming probability (Schwartz-Zippel), so plain expressions are then
    equivalent; relations that agree up to a factor ("x=2" vs "2x=4") are left to sympy.
    """
    pa, pb = _probe(a), _probe(b)
    if pa is None or pb is None:
        return None
    (ra, va), (rb, vb) = pa, pb
    if bool(ra) != bool(rb):
        return False
    if not ra:
        return all(near(x, y, max(rel_tol, 1e-9)) for x, y in zip(va, vb))
    flipped = {"<": ">", ">": "<", "<=": ">=", ">=": "<=", "=": "=", "!=": "!="}
    if rb not in (ra, flipped[ra]):
        return False
    zero_a = [abs(x) < 1e-9 for x in va]
    zero_b = [abs(y) < 1e-9 for y in vb]
    if zero_a != zero_b:
        return False
    ratios = [x / y for x, y, z in zip(va, vb, zero_a) if not z]
    if ratios and not all(math.isclose(r, ratios[0], rel_tol=max(rel_tol, 1e-9)) for r in ratios):
        return False
    return None


class _Evaluator:
    """Recursive-descent evaluator; depth-bounded so 10,000 nested braces cannot recurse.

    With ``probe`` None any variable makes the input non-numeric; with a probe index,
    single letters (optionally subscripted, ``x_1``) take their probe values.
    """

    _MAX_DEPTH = 40

    def __init__(self, tokens: list[str], probe: int | None, imaginary: bool = False):
        self.tokens = tokens
        self.probe = probe
        self.imaginary = imaginary
        self.pos = 0
        self.depth = 0
        self.in_abs = False

    def run(self) -> float:
        if not self.tokens:
            raise _NotNumeric
        value = self.expr()
        if self.pos != len(self.tokens):
            raise _NotNumeric
        return value

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (expected is not None and tok != expected):
            raise _NotNumeric
        self.pos += 1
        return tok

    def expr(self) -> float:
        self.depth += 1
        if self.depth > self._MAX_DEPTH:
            raise _NotNumeric
        value = self.term()
        while self.peek() in ("+", "-"):
            if self.take() == "+":
                value += self.term()
            else:
                value -= self.term()
        self.depth -= 1
        return value

    def term(self) -> float:
        value = self.unary()
        while True:
            tok = self.peek()
            if tok in ("*", r"\cdot", r"\times"):
                self.take()
                value *= self.unary()
            elif tok in ("/", r"\div"):
                self.take()
                value /= self.unary()
            elif tok is not None and self._starts_atom(tok):
                value *= self.power()  # implicit product: 2\sqrt{3}, 9\pi, 2x
            else:
                return value

    def unary(self) -> float:
        if self.peek() == "-":
            self.take()
            return -self.unary()
        if self.peek() == "+":
            self.take()
            return self.unary()
        return self.power()

    def power(self) -> float:
        base = self.atom()
        if self._degree_mark():  # "60^\\circ" left in a key only inside trigonometry: radians
            return base * math.pi / 180.0
        if self.peek() == "^":
            self.take()
            exponent = self.group() if self.peek() == "{" else self.atom()
            if abs(exponent) > _MAX_EXPONENT or (abs(base) > 1e6 and abs(exponent) > 50):
                raise _NotNumeric
            if isinstance(base, complex) or isinstance(exponent, complex):
                return base**exponent
            return math.pow(base, exponent)
        return base

    def _degree_mark(self) -> bool:
        """Consume ``^\\circ`` or ``^{\\circ}`` if it comes next."""
        t, i = self.tokens, self.pos
        if i + 1 < len(t) and t[i] == "^" and t[i + 1] == r"\circ":
            self.pos += 2
            return True
        if i + 3 < len(t) and t[i] == "^" and t[i + 1] == "{" and t[i + 2] == r"\circ" and t[i + 3] == "}":
            self.pos += 4
            return True
        return False

    def _starts_atom(self, tok: str) -> bool:
        if tok[0].isdigit() or tok[0] == "." or tok in ("(", "{", r"\frac", r"\sqrt"):
            return True
        if tok in _CONSTANTS or tok in _FUNCTIONS or (tok == "|" and not self.in_abs):
            return True
        if self.imaginary and tok == "i":
            return True
        return self.probe is not None and len(tok) == 1 and tok.isalpha() and tok != "i"

    def _letter_like(self, tok: str | None) -> bool:
        """A token that continues a function's bare argument: ``\\sin 2x`` is sin(2x),
        ``\\sin 2\\pi``; a function, bracket or number ends it (``\\sin x \\cos x``)."""
        if tok is None or tok in _FUNCTIONS:
            return False
        if tok in _CONSTANTS or (self.imaginary and tok == "i"):
            return True
        return self.probe is not None and len(tok) == 1 and tok.isalpha() and tok != "i"

    def _bare_argument(self) -> float:
        value = self.power()
        while self._letter_like(self.peek()):
            value *= self.power()
        return value

    def group(self) -> float:
        self.take("{")
        value = self.expr()
        self.take("}")
        return value

    def argument(self) -> float:
        return self.group() if self.peek() == "{" else self.atom()

    def atom(self) -> float:
        tok = self.take()
        if tok[0].isdigit() or tok[0] == ".":
            return float(tok)
        if tok == "|":  # |x|, not nested: inside one, "|" closes it
            self.in_abs = True
            value = self.expr()
            self.take("|")
            self.in_abs = False
            return abs(value)
        if tok in ("(", "["):
            value = self.expr()
            self.take(")" if tok == "(" else "]")
            return value
        if tok == "{":
            value = self.expr()
            self.take("}")
            return value
        if tok in _CONSTANTS:
            return _CONSTANTS[tok]
        if self.imaginary and tok == "i":
            return 1j
        if tok == r"\frac":
            return self.argument() / self.argument()
        if tok == r"\sqrt":
            index = 2.0
            if self.peek() == "[":
                self.take()
                index = self.expr()
                self.take("]")
            radicand = self.argument()
            if radicand < 0 or index == 0:
                raise _NotNumeric
            return radicand ** (1.0 / index)
        if tok in _FUNCTIONS:
            if tok == r"\log" and self.peek() == "_":
                self.take()
                base = self.argument()
                return math.log(self.power()) / math.log(base)
            exponent = 1.0
            if self.peek() == "^":  # \sin^2 x is (\sin x)^2; \sin^{-1} x is arcsin: left to sympy
                self.take()
                exponent = self.group() if self.peek() == "{" else self.atom()
                if exponent not in (2.0, 3.0, 4.0):
                    raise _NotNumeric
            if self.peek() in ("{", "(", "["):
                argument = self.atom()
            else:
                argument = self._bare_argument()
            return _FUNCTIONS[tok](argument) ** exponent
        if self.probe is not None and len(tok) == 1 and tok.isalpha() and tok != "i":
            name = tok
            if self.peek() == "_":
                self.take()
                sub = self.take()
                if sub == "{":
                    parts = []
                    while self.peek() not in ("}", None):
                        parts.append(self.take())
                    self.take("}")
                    sub = "".join(parts)
                name += "_" + sub
            while self.peek() == "'":
                name += self.take()
            return _probe_value(name, self.probe)
        raise _NotNumeric

# --------------------------------------------------------------------------------------
# Exact values of integer expressions: 2^{81}, \frac{5^{709}-1}{5^{710}}.
# --------------------------------------------------------------------------------------

#: An exact value may have at most this many bits (numerator or denominator), so a
#: power like ``7^{10^6}`` is refused before it is computed, not after.
MAX_EXACT_BITS = 1 << 16


@functools.lru_cache(maxsize=1 << 15)
def exact_value(key: str) -> Fraction | None:
    """The exact rational value of an integer expression, or None.

    Integers combined by ``+ - * / ^`` (integer exponents), ``\\frac`` and brackets. Floats
    round such numbers: ``2^{81}`` and ``2^{81}+1`` are one float, and ``5^{709}`` is no
    float at all, so the numeric tier can neither tell them apart nor read them. Decimals
    (``0.33``, rounded by their writer and compared within a tolerance) and anything
    irrational give None. Bounded: at most :data:`MAX_EXACT_BITS` bits per value.

    >>> exact_value("\\\\frac{3^{1008}}{3^{1009}}"), exact_value("2^{81}") == 2**81, exact_value("0.5")
    (Fraction(1, 3), True, None)
    """
    if not key or len(key) > MAX_EXPRESSION_CHARS or "." in key:
        return None
    try:
        return _ExactEvaluator(_TOKEN.findall(key), None).run()
    except (_NotNumeric, ArithmeticError, ValueError, RecursionError):
        return None


class _ExactEvaluator(_Evaluator):
    """The evaluator over Fractions: integers, ``\\frac``, brackets and integer powers only."""

    def power(self) -> Fraction:
        base = self.atom()
        if self.peek() != "^":
            return base
        self.take()
        exponent = self.group() if self.peek() == "{" else self.atom()
        if exponent.denominator != 1:
            raise _NotNumeric
        bits = max(base.numerator.bit_length(), base.denominator.bit_length(), 1)
        if abs(exponent.numerator) * bits > MAX_EXACT_BITS:
            raise _NotNumeric
        return base ** exponent.numerator

    def atom(self) -> Fraction:
        tok = self.take()
        if tok.isdigit():
            return Fraction(int(tok))
        if tok in ("(", "[", "{"):
            value = self.expr()
            self.take({"(": ")", "[": "]", "{": "}"}[tok])
            return value
        if tok == r"\frac":
            return self.argument() / self.argument()
        raise _NotNumeric


def clear_caches() -> None:
    """Forget every cached value and probe (for benchmarks and tests)."""
    for fn in (numeric_values, _probe, exact_value, complex_value):
        fn.cache_clear()
