"""Answer extraction: find the answer *span* of a model completion.

Everything downstream (votes, rewards, evaluation) compares answers, so extraction must
find what the model committed to, not something it merely mentioned. That is why the
default order only trusts explicit markers:

1. the last ``<answer>...</answer>`` (with a ``\\boxed{}`` inside it, the box's content);
2. else the final run of ``\\boxed{...}`` / ``\\fbox{...}`` (nested braces are matched):
   the last box, with the boxes right before it that only a connector separates
   (``\\boxed{3} and \\boxed{7}`` is the answer ``3, 7``, see :func:`_final_boxes`);
3. else an explicit phrase: "the answer is X", "Answer: X", "**Answer:** X",
   "the correct option is X", "<Answer>: <<X>>" (the template We-Math's official prompt
   asks for) (X on the next line when the phrase ends its line);
4. else, when the *whole* completion is one short answer-shaped token (``A``, ``(C)``,
   ``60``, ``12 cm``, ``$\\frac{1}{2}$``), that token: a direct-answer prompt's reply.

It never falls back to "the last capital letter" or "the last number": in
"D is the midpoint of AC, so the answer follows" those heuristics would invent an answer.
Styles that do so exist (``last_letter``, ``last_number``) but only when asked by name, as
do ``direct`` (a short one-line reply of any shape) and ``last_line`` (a short last line
after reasoning), for direct-answer prompts and evaluation outputs.

An unclosed box (``the answer is \\boxed{12``: a truncated completion) is no answer,
never the raw ``\\boxed{12``.

This module only *finds* the span; turning "(C)", "C. 45°" or "$45^\\circ$" into one
comparable key is :mod:`vlcohort.answers.grading`'s job.

All scanning is linear in the length of the text, so a 1 MB completion, thousands of
unclosed ``\\boxed{`` or 10,000 nested braces cost milliseconds, never a hang.

>>> extract_answer("so x = 4. <answer>\\\\boxed{4}</answer>")
'4'
>>> extract_answer("Thus the area is \\\\boxed{\\\\frac{1}{2}}.")
'\\\\frac{1}{2}'
>>> extract_answer("The roots are \\\\boxed{3} and \\\\boxed{7}.")
'3, 7'
>>> extract_answer("**Answer:** C. 45°")
'C. 45°'
>>> extract_answer("<Thought process>: <<x = 2>> <Answer>: <<B>>")
'B'
>>> extract_answer("(C)")
'(C)'
>>> extract_answer("D is the midpoint of AC") is None
True
>>> extract_answer("A, B or C? I pick C", style="last_letter")
'C'
"""

from __future__ import annotations

import re

__all__ = ["STYLES", "extract_answer"]

#: Extraction styles accepted by :func:`extract_answer`.
STYLES = ("auto", "answer_tag", "boxed", "phrase", "direct", "last_line", "last_letter",
          "last_number")

_BOX_START = re.compile(r"\\(?:boxed|fbox)\s*\{")
# "\boxed 5" (no braces) is valid LaTeX for a one-token box.
_BOX_BARE = re.compile(r"\\boxed[ \t]+([^\s${}]+)")
_BRACE = re.compile(r"[{}]")
# What may stand between two boxes of one answer: spaces, commas, "and" / "or" (bare or in
# \text{}), LaTeX spacing, math delimiters, line breaks, and the next box's "y =".
_CONNECTOR = re.compile(
    r"(?:\s|[,;&.]|\$|\\[,;:! ]|\\q?quad(?![A-Za-z])|\\\\|\\[()\[\]]"
    r"|\\text\s*\{\s*(?:and|or|,)?\s*\}|\b(?:and|or)\b|[A-Za-z]{1,2}(?:_\{?\w{1,3}\}?)?\s*=)*"
)
_CONNECTOR_CHARS = 48
# "x = " / "k_1=" / "AB = " / "$a = $" right before a box: kept when boxes form a collection,
# so "x = \boxed{3}, y = \boxed{4}" stays "x = 3, y = 4" (the order of the names matters).
_LHS_BEFORE = re.compile(r"(?<![A-Za-z\\])([A-Za-z]{1,2}(?:_\{?\w{1,3}\}?)?)\s*=\s*\$?\s*$")
_PHRASE = re.compile(
    r"(?:\banswer(?:\s*\*\*|>)?\s*(?:is\b|:)|\bcorrect\s+(?:option|choice)\s+is\b)"
    r"[ \t]*:?[ \t]*(?:\*\*)?[ \t]*",
    re.IGNORECASE,
)
#: An answer span after a phrase is at most this long; bounding it keeps extraction
#: linear when a text repeats "the answer is" thousands of times.
_PHRASE_SPAN_CHARS = 300
# The answer slot of a "<Answer>: <<your option>>" template (We-Math's official prompt).
_TEMPLATE_SLOT = re.compile(r"\s*<<\s*([^<>\n]{1,200}?)\s*>>")
_PHRASE_CANDIDATES = 16
# A sentence ends at ". " before a capital or a command ("3.5. Thus", "4. \boxed");
# "3.5" and "C. 45°" do not end one.
_SENTENCE_END = re.compile(r"\.\s+(?=[A-Z\\])")
_LAST_LETTER = re.compile(r"(?<![A-Za-z])([A-H])(?![A-Za-z])")
_LAST_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?|-?\.\d+")
#: ``direct`` / ``last_line`` take a line of at most this many characters: a bare answer
#: ("9:30 am", "\frac{3}{4}", "C. 45°") fits, a sentence of reasoning mostly does not.
SHORT_LINE_CHARS = 64
# An answer-shaped token (what ``auto`` accepts as a whole completion): an option letter
# ("C", "(C)", "C.", "**C**"), a number with an optional unit / degree / percent ("60",
# "12 cm", "45°", "-3.5", "1/2"), or one math span ("$\frac{1}{2}$", "\(x+1\)").
_ANSWER_SHAPED = re.compile(
    r"(?:\*\*)?(?:\(?[A-H]\)?|[-+−]?(?:\d[\d,]*(?:\.\d+)?|\.\d+)(?:/\d+)?"
    r"(?:\s*(?:%|\\%|°|\^\\circ|[A-Za-z]{1,8}(?:\^?[23])?))?"
    r"|\$[^$\n]{1,38}\$|\\\([^\n]{1,38}\\\))(?:\*\*)?\.?"
)
_BARE_CHARS = 40


def extract_answer(text: str | None, style: str = "auto") -> str | None:
    """Return the answer span of ``text``, or ``None`` when it commits to no answer.

    ``style`` picks the rule:

    - ``auto``: answer tag, then the final boxes, then a phrase, then the whole text when it
      is one short answer-shaped token (``A``, ``(C)``, ``60``, ``12 cm``, ``$x+1$``). Long
      reasoning is never one such token, so ``auto`` reads no guess into it.
    - ``answer_tag``, ``boxed``, ``phrase``: that marker only.
    - ``direct``: ``auto``, else the whole text when it is one line of at most
      :data:`SHORT_LINE_CHARS` characters, whatever its shape (``Yes``, ``9:30 am``): for
      prompts that ask for the answer alone.
    - ``last_line``: ``auto``, else the last non-empty line when it is that short: for
      outputs that reason, then end on a bare answer line.
    - ``last_letter`` (last standalone A-H), ``last_number``: guesses, by name only.

    Empty spans count as "no answer", so ``<answer></answer>`` falls through in ``auto``;
    a box that never closes is no answer (a truncated completion), not ``\\boxed{12``.

    >>> extract_answer("<answer> B </answer> and later \\\\boxed{C}")
    'B'
    >>> extract_answer("\\\\boxed{a} then \\\\boxed{b")  # the unclosed box is ignored
    'a'
    >>> extract_answer("The answer is 3.5. Done.")
    '3.5'
    >>> extract_answer("the answer is \\\\boxed{12") is None
    True
    >>> extract_answer("We compare the two.\\nYes", style="last_line")
    'Yes'
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
        return _final_boxes(text)
    if style == "phrase":
        return _from_phrase(text)
    if style == "last_letter":
        return _last_match(_LAST_LETTER, text)
    if style == "last_number":
        return _last_match(_LAST_NUMBER, text)
    marked = _from_answer_tag(text) or _final_boxes(text) or _from_phrase(text)
    if marked is not None:
        return marked
    bare = _bare_answer(text)
    if bare is not None or style == "auto":
        return bare
    if style == "direct":
        return _short_line(text.strip()) if "\n" not in text.strip() else None
    return _short_line(_last_line(text))  # last_line


def _nonempty(span: str | None) -> str | None:
    if span is None:
        return None
    span = span.strip()
    return span or None


def _from_answer_tag(text: str) -> str | None:
    """Content of the last closed ``<answer>`` tag; boxes inside it win.

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
    return _box_or_span(text[start + len("<answer>") : end])


def _box_or_span(span: str) -> str | None:
    """The span's final boxes, else the span itself; ``None`` when it holds a box that
    never closes ("\\boxed{12": the completion was cut off, so it committed to nothing)."""
    boxed = _final_boxes(span)
    if boxed is not None:
        return boxed
    if _BOX_START.search(span):
        return None
    return _nonempty(span)


def _final_boxes(text: str) -> str | None:
    """The answer in the final run of closed boxes: one box's content, or ``"a, b"``.

    Which boxes count: the last closed ``\\boxed{}`` / ``\\fbox{}`` (or ``\\boxed X``) and
    the boxes right before it that only a connector separates (``,``, ``and``, ``or``,
    ``\\text{ or }``, spacing, ``$``, a line break, the next box's ``y =``). A model that
    boxes a collection writes it so (``\\boxed{3} and \\boxed{7}``); a box earlier in the
    reasoning ("first \\boxed{1}, then ...") is an intermediate result, and prose between
    two boxes ends the run. The parts, repeats dropped, are joined by ``", "``: the plain
    comma-separated list the grader reads as an unordered collection. With several parts,
    a name written right before a box is kept (``x = 3, y = 4``), since the order of
    named values matters; one part (or a repeated one) is returned as before.
    """
    boxes = _closed_boxes(text)  # [(command start, end exclusive, content)], by start
    if not boxes:
        return None
    run = [boxes[-1]]  # built from the end backwards, reversed below
    for prev in reversed(boxes[:-1]):
        gap_start, gap_end = prev[1], run[-1][0]
        if gap_start > gap_end or gap_end - gap_start > _CONNECTOR_CHARS:
            break  # nested in (or far from) the run's first box
        if not _CONNECTOR.fullmatch(text, gap_start, gap_end):
            break
        run.append(prev)
    run.reverse()
    parts = list(dict.fromkeys(c.strip() for _, _, c in run if c.strip()))
    if len(parts) <= 1:
        return parts[0] if parts else None
    named = []
    for start, _, content in run:
        content = content.strip()
        if not content:
            continue
        lhs = _LHS_BEFORE.search(text, max(0, start - 24), start)
        named.append(f"{lhs.group(1)} = {content}" if lhs else content)
    return ", ".join(dict.fromkeys(named))


def _closed_boxes(text: str) -> list[tuple[int, int, str]]:
    """Every closed box as (command start, end exclusive, content), sorted by start.

    One linear pass over the braces after the first box, so 200,000 unclosed boxes or
    10,000 nested braces cost one scan.
    """
    starts = [(m.start(), m.end()) for m in _BOX_START.finditer(text)]  # end: just after "{"
    boxes = []
    if len(starts) == 1:
        close = _match_brace(text, starts[0][1])
        if close is not None:
            boxes.append((starts[0][0], close + 1, text[starts[0][1] : close]))
    elif starts:
        closes = _all_brace_matches(text, starts[0][1] - 1)
        for cmd, after in starts:
            close = closes.get(after - 1)
            if close is not None:
                boxes.append((cmd, close + 1, text[after:close]))
    boxes += [(m.start(), m.end(), m.group(1)) for m in _BOX_BARE.finditer(text)]
    boxes.sort()
    return boxes


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
    """The X of the last "the answer is X" / "Answer: X", cut at the line or sentence end.

    When the phrase ends its line ("The answer is:\nA"), X is the next non-empty line, if
    that line is a bare answer (answer-shaped, or at most two words in 24 characters):
    "Answer:" over a paragraph of reasoning is no answer.
    """
    ends = [m.end() for m in _PHRASE.finditer(text)]
    for end in reversed(ends[-_PHRASE_CANDIDATES:]):
        window = text[end : end + _PHRASE_SPAN_CHARS]
        line, _, rest = window.partition("\n")
        if line.strip().strip("*").strip():
            span = _clean_phrase(line)
        else:
            nxt = rest.lstrip().split("\n", 1)[0].strip()
            short = len(nxt) <= 24 and len(nxt.split()) <= 2 and not nxt.endswith(":")
            span = _clean_phrase(nxt) if nxt and (short or _is_answer_shaped(nxt)) else None
        if span:
            return span
    return None


def _clean_phrase(span: str) -> str | None:
    guillemets = _TEMPLATE_SLOT.match(span)
    if guillemets:  # We-Math's template "<Answer>: <<B>>": the slot's content
        return _box_or_span(guillemets.group(1))
    end = _SENTENCE_END.search(span)
    if end:
        span = span[: end.start()]
    span = span.strip().strip("*").strip()
    if span.endswith(".") and not span.endswith(".."):
        span = span[:-1]
    return _box_or_span(span)


def _is_answer_shaped(span: str) -> bool:
    return len(span) <= _BARE_CHARS and _ANSWER_SHAPED.fullmatch(span) is not None


def _bare_answer(text: str) -> str | None:
    """The whole text, when it is one answer-shaped token ("(C)", "60", "$x^2$")."""
    span = text.strip()
    if len(span) > _BARE_CHARS or not _is_answer_shaped(span):
        return None
    span = span.strip("*").strip()
    return _nonempty(span[:-1] if span.endswith(".") else span)


def _last_line(text: str) -> str:
    """The last non-empty line, found from the end (no split of a 1 MB text)."""
    text = text.rstrip()
    return text[text.rfind("\n") + 1 :].strip()


def _short_line(line: str) -> str | None:
    """A line as a bare answer when it is short, ``**`` and a final period stripped."""
    line = line.strip().strip("*").strip()
    if len(line) > SHORT_LINE_CHARS:
        return None
    if line.endswith(".") and not line.endswith(".."):
        line = line[:-1]
    return _box_or_span(line)


def _last_match(pattern: re.Pattern[str], text: str) -> str | None:
    last = None
    for last in pattern.finditer(text):
        pass
    return last.group(0) if last else None
