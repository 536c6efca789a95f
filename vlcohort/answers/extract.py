"""Answer extraction: find the answer *span* of a model completion.

Everything downstream (votes, rewards, evaluation) compares answers, so extraction must
find what the model committed to, not something it merely mentioned. That is why the
default order only trusts explicit markers:

1. the last ``<answer>...</answer>`` (with a ``\\boxed{}`` inside it, the box's content);
2. else the last ``\\boxed{...}`` / ``\\fbox{...}`` (nested braces are matched);
3. else an explicit phrase: "the answer is X", "Answer: X", "**Answer:** X",
   "the correct option is X".

It never falls back to "the last capital letter" or "the last number": in
"D is the midpoint of AC, so the answer follows" those heuristics would invent an answer.
Styles that do so exist (``last_letter``, ``last_number``) but only when asked by name.

This module only *finds* the span; turning "(C)", "C. 45°" or "$45^\\circ$" into one
comparable key is :mod:`vlcohort.answers.grading`'s job.

All scanning is linear in the length of the text, so a 1 MB completion, thousands of
unclosed ``\\boxed{`` or 10,000 nested braces cost milliseconds, never a hang.

>>> extract_answer("so x = 4. <answer>\\\\boxed{4}</answer>")
'4'
>>> extract_answer("Thus the area is \\\\boxed{\\\\frac{1}{2}}.")
'\\\\frac{1}{2}'
>>> extract_answer("**Answer:** C. 45°")
'C. 45°'
>>> extract_answer("D is the midpoint of AC") is None
True
>>> extract_answer("A, B or C? I pick C", style="last_letter")
'C'
"""

from __future__ import annotations

import re

__all__ = ["STYLES", "extract_answer"]

#: Extraction styles accepted by :func:`extract_answer`.
STYLES = ("auto", "answer_tag", "boxed", "phrase", "last_letter", "last_number")

_BOX_START = re.compile(r"\\(?:boxed|fbox)\s*\{")
# "\boxed 5" (no braces) is valid LaTeX for a one-token box.
_BOX_BARE = re.compile(r"\\boxed[ \t]+([^\s${}]+)")
_BRACE = re.compile(r"[{}]")
_PHRASE = re.compile(
    r"(?:\banswer(?:\s*\*\*)?\s*(?:is\b|:)|\bcorrect\s+(?:option|choice)\s+is\b)"
    r"[ \t]*:?[ \t]*(?:\*\*)?[ \t]*",
    re.IGNORECASE,
)
#: An answer span after a phrase is at most this long; bounding it keeps extraction
#: linear when a text repeats "the answer is" thousands of times.
_PHRASE_SPAN_CHARS = 300
_PHRASE_CANDIDATES = 16
# A sentence ends at ". " before a capital or a command ("3.5. Thus", "4. \boxed");
# "3.5" and "C. 45°" do not end one.
_SENTENCE_END = re.compile(r"\.\s+(?=[A-Z\\])")
_LAST_LETTER = re.compile(r"(?<![A-Za-z])([A-H])(?![A-Za-z])")
_LAST_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?|-?\.\d+")


def extract_answer(text: str | None, style: str = "auto") -> str | None:
    """Return the answer span of ``text``, or ``None`` when it commits to no answer.

    ``style`` picks the rule: ``auto`` (tag, then box, then phrase), ``answer_tag``,
    ``boxed``, ``phrase``, ``last_letter`` (last standalone A-H) or ``last_number``.
    Empty spans count as "no answer", so ``<answer></answer>`` falls through in ``auto``.

    >>> extract_answer("<answer> B </answer> and later \\\\boxed{C}")
    'B'
    >>> extract_answer("\\\\boxed{a} then \\\\boxed{b")  # the unclosed box is ignored
    'a'
    >>> extract_answer("The answer is 3.5. Done.")
    '3.5'
    >>> extract_answer(None) is None
    True
    """
    if style not in STYLES:
        raise ValueError(f"unknown answer style {style!r}; choose one of {', '.join(STYLES)}")
    if not text:
        return None
    text = str(text)
    if style == "answer_tag":
        return _from_answer_tag(text)
    if style == "boxed":
        return _last_boxed(text)
    if style == "phrase":
        return _from_phrase(text)
    if style == "last_letter":
        return _last_match(_LAST_LETTER, text)
    if style == "last_number":
        return _last_match(_LAST_NUMBER, text)
    return _from_answer_tag(text) or _last_boxed(text) or _from_phrase(text)


def _nonempty(span: str | None) -> str | None:
    if span is None:
        return None
    span = span.strip()
    return span or None


def _from_answer_tag(text: str) -> str | None:
    """Content of the last closed ``<answer>`` tag; a box inside it wins.

    Found with ``rfind`` rather than a lazy regex: a lazy ``<answer>(.*?)</answer>``
    rescans to the end for every unclosed tag, which is quadratic on adversarial text.
    """
    lower = text.lower()
    end = lower.rfind("</answer>")
    if end < 0:
        return None
    start = lower.rfind("<answer>", 0, end)
    if start < 0:
        return None
    content = text[start + len("<answer>") : end]
    return _last_boxed(content) or _nonempty(content)


def _last_boxed(text: str) -> str | None:
    """Content of the last closed ``\\boxed{}`` / ``\\fbox{}`` (or ``\\boxed X``)."""
    starts = [m.end() for m in _BOX_START.finditer(text)]  # index just after "{"
    best: tuple[int, str] | None = None  # (position, content)
    if starts:
        # Common case: the last box is closed; scanning from it is cheap.
        close = _match_brace(text, starts[-1])
        if close is not None:
            best = (starts[-1], text[starts[-1] : close])
        else:
            closes = _all_brace_matches(text, starts[0] - 1)
            for s in reversed(starts[:-1]):
                c = closes.get(s - 1)
                if c is not None:
                    best = (s, text[s:c])
                    break
    bare = None
    for bare in _BOX_BARE.finditer(text):
        pass
    if bare is not None and (best is None or bare.start() > best[0]):
        best = (bare.start(), bare.group(1))
    return _nonempty(best[1]) if best else None


def _match_brace(text: str, after_open: int) -> int | None:
    """Index of the ``}`` closing the ``{`` just before ``after_open``, or None."""
    depth = 1
    for m in _BRACE.finditer(text, after_open):
        depth += 1 if m.group() == "{" else -1
        if depth == 0:
            return m.start()
    return None


def _all_brace_matches(text: str, start: int) -> dict[int, int]:
    """Map every ``{`` at or after ``start`` to its closing ``}`` in one linear pass."""
    stack: list[int] = []
    matches: dict[int, int] = {}
    for m in _BRACE.finditer(text, start):
        if m.group() == "{":
            stack.append(m.start())
        elif stack:
            matches[stack.pop()] = m.start()
    return matches


def _from_phrase(text: str) -> str | None:
    """The X of the last "the answer is X" / "Answer: X", cut at the line or sentence end."""
    ends = [m.end() for m in _PHRASE.finditer(text)]
    for end in reversed(ends[-_PHRASE_CANDIDATES:]):
        span = _clean_phrase(text[end : end + _PHRASE_SPAN_CHARS].split("\n", 1)[0])
        if span:
            return span
    return None


def _clean_phrase(span: str) -> str | None:
    end = _SENTENCE_END.search(span)
    if end:
        span = span[: end.start()]
    span = span.strip().strip("*").strip()
    if span.endswith(".") and not span.endswith(".."):
        span = span[:-1]
    boxed = _last_boxed(span)
    return boxed or _nonempty(span)


def _last_match(pattern: re.Pattern[str], text: str) -> str | None:
    last = None
    for last in pattern.finditer(text):
        pass
    return last.group(0) if last else None
