"""Answer extraction: find the answer *span* of a model completion.

Everything downstream (votes, rewards, evaluation) compares answers, so extraction must
find what the model committed to, not something it merely mentioned. That is why the
default order only trusts explicit markers:

1. the last ``<answer>...</answer>`` (with a ``\\boxed{}`` inside it, the box's content);
2. else the final run of ``\\boxed{...}`` / ``\\fbox{...}`` (nested braces are matched):
   the last box, with the boxes right before it that only a connector separates
   (``\\boxed{3} and \\boxed{7}`` is the answer ``3, 7``, see :func:`_final_boxes`);
3. else an explicit phrase: "the answer is X", "Answer: X", "**Answer:** X",
   "the correct option is X", "i.e. option X", "the answer to the question is X",
   "<Answer>: <<X>>" (the template We-Math's official prompt asks for), and the same in
   other languages ("答案是 X", "答案：X", "答：X", "故选 X", "La réponse est X",
   "Die Antwort ist X", "La respuesta es X", "Ответ: X", a full-width colon) (X on the
   next line when the phrase ends its line). X stops at the sentence's end ("." before a
   capital, "。") and at a reason ("because", ", since", " as ", "; this ...", "，因为");
   a lead-in ("therefore choice (B)") is dropped, "not C but D" (答案不是 C，而是 D) is D,
   and "The largest $n$ is 34" is 34;
4. else, when the *whole* completion is one short answer (``A``, ``(C)``, ``（C）``, ``60``,
   ``12 cm``, ``$\\frac{1}{2}$``, a marked letter with one option's text ``(C) 24`` /
   ``B. circle``, bare LaTeX ``\\frac{5}{12}`` / ``2\\sqrt{3}`` / ``2^{16}``, one display
   segment ``$$\\frac{\\pi}{6}$$``), that answer: a direct-answer prompt's reply; or, when
   it is one sentence around one math segment ("Hence $y \\leq 7$ holds."), that segment.

A span that starts with one option and names another ("A. 3 or B. 4", "(A) 3 (B) 4") is
a list of options, so no answer, wherever it was found. A CJK sentence around one
number ("共有 12 个") is that number.

A span that is prose around exactly one math segment ("Hence $y \\leq 7$ holds.") is
reduced to that segment's content, unless the prose negates or hedges it or holds a
number or option letter of its own (see :func:`_math_in_prose`); with two or more
segments the span stays whole: picking one would guess.

It never falls back to "the last capital letter" or "the last number": in
"D is the midpoint of AC, so the answer follows" those heuristics would invent an answer.
Styles that do so exist (``last_letter``, ``last_number``) but only when asked by name, as
do ``direct`` (a short one-line reply of any shape), ``last_line`` (a short last line
after reasoning) and ``last_expression`` (the last math segment or last-line number, as
math-verify reads an unmarked reply), for direct-answer prompts and evaluation outputs.

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
STYLES = ("auto", "answer_tag", "boxed", "phrase", "direct", "last_line", "last_expression",
          "first_line", "last_letter", "last_number")

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
    r"(?:\banswer(?:\s+to\s+(?:the|this)\s+(?:question|problem))?(?:\s*\*\*|>)?\s*(?:is\b|[:：])"
    r"|\bcorrect\s+(?:option|choice)\s+is\b)"
    r"[ \t]*[:：]?[ \t]*(?:\*\*)?[ \t]*",
    re.IGNORECASE,
)
# Rarer phrases: "i.e. option (B)" (only before "option" / "choice", never a bare "i.e. 3"),
# and the phrase in French, German, Spanish, Russian and Chinese (答案是 / 答案为 / 答案： /
# 正确选项为 / 故选, never 选项 "option" or 选择题 "choice question" alone). A separate pattern,
# searched only when the text could hold one (see _FOREIGN_HINTS), so English replies do not
# pay for its alternatives on every rollout.
_PHRASE_FOREIGN = re.compile(
    r"(?:\bi\.\s?e\.,?(?=[ \t]+(?:option|choice)\b)"
    r"|\br[ée]ponse(?:\s+(?:finale|correcte))?\s*(?:est\b|[:：])"
    r"|\bantwort\s*(?:ist\b|lautet\b|[:：])"
    r"|\brespuesta(?:\s+(?:final|correcta))?\s*(?:es\b|[:：])"
    r"|\bответ\s*[:：]"
    r"|答案\s*(?:(?:应该?|應該?|应当|應當|就|即|也)\s*)?(?:是|为|為|[:：])"
    # 答案不是 C，而是 D ("the answer is not C but D"): what follows 而是
    r"|答案\s*不是[^，,。\n]{1,20}[，,]\s*(?:而|就|应该?)?(?:是|为|為)"
    r"|(?:正确|正確)的?(?:选项|選項)\s*(?:是|为|為|[:：])"
    r"|(?:^|(?<=\n))[ \t]*答\s*[:：]"
    r"|(?:故|应|應|所以|因此|因而|则|則)\s*(?:选|選)(?![项項择擇])"
    r")[ \t]*[:：]?[ \t]*(?:\*\*)?[ \t]*",
    re.IGNORECASE,
)
# ASCII pieces of those phrases (as usually written); any non-ASCII text is searched too.
# An ASCII text with an English phrase is searched again only for "i.e" (a mixed-language
# ASCII reply is rare; "The answer is 45°, i.e. option (B)" is not).
_FOREIGN_HINTS = ("i.e", "i. e", "I.e", "ponse", "ntwort", "espuesta")
_IE_HINT = "i.e"
#: An answer span after a phrase is at most this long; bounding it keeps extraction
#: linear when a text repeats "the answer is" thousands of times.
_PHRASE_SPAN_CHARS = 300
# The answer slot of a "<Answer>: <<your option>>" template (We-Math's official prompt).
_TEMPLATE_SLOT = re.compile(r"\s*<<\s*([^<>\n]{1,200}?)\s*>>")
_PHRASE_CANDIDATES = 16
# A sentence ends at ". " before a capital, a command, a tag or a parenthesis ("3.5. Thus",
# "4. \boxed", "7. (An earlier guess ...)");
# "3.5" and "C. 45°" do not end one.
_SENTENCE_END = re.compile(r"\.\s+(?=[A-Z\\<(])|。")
# "Final Answer: The largest $n$ is 34." (the span names what it states, then the value):
# the value after the last "is", when the span starts with "The" and nothing in it hedges.
_STATED = re.compile(r"\s(?:is|are|equals|was)\s+")
# "The answer is not C but D": the value after "but".
_NOT_BUT = re.compile(r"(?i:not)\s+[^\n,;]{1,30}?,?\s+(?i:but)\s+(?:(?i:rather)\s+)?")
_STATED_HEAD = re.compile(r"(?i:the)\s")
_STATED_HEDGE = re.compile(
    r"(?i:\b(?:or|nor|either|neither|maybe|perhaps|possibly|not|wrong|incorrect|if|unless)\b|n't)|[?？]"
)
# Where a phrase's answer stops and its reason starts: "D because ...", "D, since ...",
# "B as the ...", "12; this follows ...", "C, so ...", "D, not C", "12，因为 ...". A ";" before a number
# or a short word ("1; 2") is a list, not a reason, so it stays.
_REASON = re.compile(
    r"[,，]?\s+(?:because|since)\b|[,，]\s*(?:as|not)\b|\s+as\s+(?=[a-z])"
    r"|;\s+(?=[a-z]{3,}\b)|,\s+(?:so|which|hence|thus|therefore)\b|[,，]?\s*(?:因为|因為|由于|由於)",
    re.IGNORECASE,
)
# Full-width punctuation and letters a CJK reply writes: "（C）", "Ｃ：": read as ASCII for
# the shape checks (the span itself is returned as written; the grader folds them).
_FULLWIDTH = str.maketrans("（）：．ＡＢＣＤＥＦＧＨ", "():.ABCDEFGH")
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
# A direct multiple-choice reply: a marked letter and a short text ("(C) 24", "B. circle",
# "A: 3 cm"). The marks matter: "D is the midpoint of AC" is a sentence, not option D.
_LETTER_WITH_TEXT = re.compile(r"(?:\*\*)?(?:\(\s*[A-H]\s*\)|[A-H][.:)])(?:\*\*)?[ \t]+(\S[^\n]{0,39})")
# What makes the text after a letter a list of options or a hedge, not one option's text:
# another standalone letter ("A. 3 B. 4"), "or" / "and", a question, a hedge ("maybe",
# "I don't know"). "B. No" and "C. not parallel" are option texts and stay.
_OTHER_LETTER = re.compile(r"(?<![A-Za-z\\])[A-H](?![A-Za-z])")
_NOT_ONE_OPTION = re.compile(
    r"(?<![A-Za-z])[A-H](?![A-Za-z])|[?？]|n't"
    r"|(?i:\b(?:or|and|maybe|perhaps|either|neither|unsure|sure|know|guess|probably)\b)|或|和|可能"
)
# A reply of bare LaTeX ("\frac{5}{12}", "2\sqrt{3}", "2^{16}"): math characters only, at
# least one command, "^" or "{", no \text-like command (prose hides in it), no word of three
# or more letters outside a command, no "or", no standalone option letter.
_LATEX_CHARS = re.compile(r"[0-9A-Za-z\\{}^_+\-*/()\[\]|.,;=<>!' \t°π√−·×÷]+")
_LATEX_COMMAND = re.compile(r"\\[A-Za-z]+")
_LATEX_TEXTLIKE = re.compile(r"\\(?:text|mbox|operatorname|mathrm|mathbf|textbf|emph)(?![A-Za-z])")
_LATEX_PROSE = re.compile(r"[A-Za-z]{3}|\bor\b|(?<![A-Za-z])[A-H](?![A-Za-z])")
# Math segments: $...$, $$...$$, \(...\), \[...\]. "\\" (a line break) and "\$" (a
# dollar sign) are read first, so "\\[2pt]" and "\$5" open nothing.
_MATH_DELIM = re.compile(r"\\\\|\\\$|\\[()\[\]]|\$\$|\$")
_MATH_CLOSER = {"$": "$", "$$": "$$", "\\(": "\\)", "\\[": "\\]"}
# Prose around one math segment that must not be dropped: a negation or hedge, a number or
# an option letter outside it, another command or dollar sign. The span is then kept whole.
_PROSE_HEDGE = re.compile(
    r"(?i:\b(?:not|no|never|or|nor|either|neither|maybe|perhaps|possibly|probably|unless|if|except|but"
    r"|than|instead|wrong|incorrect|false|guess|might|could|least|most|twice|half|double|times"
    r"|minus|plus|squared|cubed|percent)\b|n't)|[?？\d\\$%]"
    r"|\(\s*[A-H]\s*\)|(?<![A-Za-z(])[A-H]\)|(?i:\b(?:options?|choices?)\b)|或|不|非|可能|也许|也許|约|約|至少|至多|倍",
)
# A word right before the segment that makes it an argument, not the value: "the inverse
# of $A$", "the square root of $9$", "divided by $2$", "from $1$ to ...".
_PROSE_OPERAND = re.compile(r"(?i:\b(?:of|by|from|over|under|per|with|without)\s*)$|的\s*$")
_HAS_LETTER = re.compile(r"[^\W\d_]")
# What may join two math segments of one answer in ``last_expression``: "$3$ or $-3$".
_SEGMENT_CONNECTOR = re.compile(r"\s*(?:,|;|\band\b|\bor\b|\\text\s*\{\s*(?:and|or)\s*\})?\s*", re.IGNORECASE)
# The last line's mathematical tokens for ``last_expression``: a fraction or root command, a
# number with an optional fraction or percent sign.
_MATH_TOKEN = re.compile(
    r"\d*\\d?frac\{[^{}\n]{1,24}\}\{[^{}\n]{1,24}\}|\d*\\sqrt\{[^{}\n]{1,24}\}"
    r"|(?<![A-Za-z_\d])-?(?:\d+,\d{1,2}(?![\d,])|\d+(?:,\d{3})*(?:\.\d+)?|\.\d+)(?:/\d+)?(?:\s?%)?"
)
# A line or context that hedges between values: ``last_expression`` reads no answer there.
_HEDGE = re.compile(r"\b(?:or|nor|either|neither|maybe|perhaps|possibly|not)\b|[?？]|或|可能|也许|也許",
                    re.IGNORECASE)
_CJK = re.compile(r"[\u3400-\u9fff]")
# Words that only lead into the answer after a phrase ("The correct answer is therefore
# choice (B)"): dropped from the span's start.
_LEAD_IN = re.compile(r"(?i:(?:therefore|thus|hence|so|clearly|then|indeed|simply|obviously)\b[,:]?\s*)+")
# A span that begins with one option and names another ("A. 3 or B. 4", "(A) 3 (B) 4"):
# a list of options, which the grader would read as the first.
_FIRST_OPTION = re.compile(r"\s*(?:\*\*)?\(?\s*[A-H]\s*(?:[.):]|\))")
_ANOTHER_OPTION = re.compile(r"\(\s*[A-H]\s*\)|(?<![A-Za-z\\])[A-H](?:[.):])(?=\s|$)|(?i:\bor\s+\(?[A-H]\b)")
# A CJK sentence around one number ("共有 12 个", "面积为12平方厘米"): that number, unless
# the sentence hedges or bounds it (或 "or", 不 "not", 约 "about", 至少 "at least", ...).
_CJK_NUMBER = re.compile(r"[-−]?\d+(?:\.\d+)?(?:/\d+)?(?:\s?[%％])?")
_CJK_PROSE = re.compile(r"[\u3400-\u9fff\s，。、：:；,.]+")
_CJK_HEDGE = re.compile(r"或|不|非|可能|也许|也許|约|約|大概|左右|至少|至多|多于|少于|以上|以下|超过|倍|分之")
# A whole reply that is one sentence: its first word must not set up reasoning ("Let $x$
# be ...", "Consider $f$"), and it must not introduce something (a trailing colon).
_ONE_SENTENCE_CHARS = 120
_SETUP_WORD = re.compile(
    r"(?i:(?:let|suppose|assume|consider|if|when|given|since|because|to|first|note|recall|using|use|find"
    r"|compute|calculate|solve|is|are|does|do|what|how|why|which|where"
    r"|we\s+(?:use|need|want|have\s+to|must|can|know|start|begin|first))\b)"
)


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
    - ``last_expression``: ``auto``, else the reply's last mathematical expression (the
      last ``$...$`` / ``\\(...\\)`` / ``\\[...\\]`` / ``$$...$$`` segment, or the last
      number or fraction of the last line, whichever ends later), unless its line hedges
      ("3 or 4", "maybe", a question): for evaluating foreign outputs the way math-verify
      does. Never for rewards: it reads an answer into reasoning that marks none.
    - ``first_line``: ``last_expression`` on the first non-empty line alone: for a base
      model prompted ``Question: ... Answer:``, which answers on its first line and then
      writes the next ``Question:`` or ``Answer:`` of its own.
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
    >>> extract_answer(" 7 + 8 = 15\\nAnswer: 11", style="first_line")
    '15'
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
    if style == "first_line":
        return extract_answer(_first_line(text), "last_expression")
    marked = _from_answer_tag(text) or _final_boxes(text) or _from_phrase(text)
    if marked is not None:
        return marked
    bare = _bare_answer(text)
    if bare is not None or style == "auto":
        return bare
    if style == "last_expression":
        return _last_expression(text)
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
    if _is_plain_token(span):
        return span
    boxed = _final_boxes(span)
    if boxed is not None:
        return boxed
    if _BOX_START.search(span):
        return None
    span = _nonempty(span)
    if span is None or _is_option_list(span):
        return None
    return _cjk_number(_math_in_prose(span))


def _is_option_list(span: str) -> bool:
    """Whether the span starts with one option and names another ("A. 3 or B. 4")."""
    first = _FIRST_OPTION.match(span)
    return first is not None and _ANOTHER_OPTION.search(span, first.end()) is not None


def _cjk_number(span: str) -> str:
    """The one number of a CJK sentence ("共有 12 个" -> "12"); any other span as it is."""
    if span.isascii() or not _CJK.search(span):
        return span
    numbers = _CJK_NUMBER.findall(span)
    if len(numbers) != 1 or _CJK_HEDGE.search(span):
        return span
    rest = _CJK_NUMBER.sub(" ", span)
    return numbers[0] if _CJK_PROSE.fullmatch(rest) else span


def _math_segments(text: str) -> list[tuple[int, int, int, int]]:
    """Closed math segments as (start, end, content start, content end), in one pass.

    ``$...$`` and ``\\(...\\)`` stay on one line (a ``$`` left open at a line break is
    a dollar sign, and the next ``$`` opens afresh); ``$$...$$`` and ``\\[...\\]`` may span
    lines. A delimiter of another kind inside an open segment is part of its content.
    """
    segments = []
    opened: re.Match[str] | None = None
    for m in _MATH_DELIM.finditer(text):
        token = m.group()
        if token in ("\\\\", "\\$"):
            continue
        if opened is None:
            if token in _MATH_CLOSER:
                opened = m
            continue
        if token != _MATH_CLOSER[opened.group()]:
            continue
        inline = opened.group() in ("$", "\\(")
        if inline and "\n" in text[opened.end() : m.start()]:
            opened = m if token == "$" else None
            continue
        segments.append((opened.start(), m.end(), opened.end(), m.start()))
        opened = None
    return segments


def _math_in_prose(span: str) -> str:
    """The one math segment of a sentence ("Hence $y \\leq 7$ holds." -> ``y \\leq 7``).

    Only when the span holds exactly one segment and the words around it are plain prose:
    with two segments ("$x = 2$ and $y = 3$") no one of them is the answer, and prose that
    negates or hedges ("not $3$", "maybe $4$"), or holds a number, an option letter or more
    LaTeX outside the segment, changes what the segment means, so the span stays whole (the
    grader then reads no answer into it). A span that is the segment and punctuation only
    ("$\\frac{1}{2}$") is returned as it is: the grader reads its delimiters.
    """
    if "$" not in span and "\\(" not in span and "\\[" not in span:
        return span
    segments = _math_segments(span)
    if len(segments) != 1:
        return span
    start, end, inner_start, inner_end = segments[0]
    outside = span[:start] + " " + span[end:]
    inner = span[inner_start:inner_end].strip()
    if not inner or not _HAS_LETTER.search(outside) or _PROSE_HEDGE.search(outside):
        return span
    if _PROSE_OPERAND.search(span, 0, start):
        return span
    return inner


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
    that line is a bare answer (answer-shaped, at most two words in 24 characters, or a
    marked letter with a text that names no other letter: "D. either $R$ or $S$", since
    the phrase already commits and an option's text may say "or"): "Answer:" over a
    paragraph of reasoning is no answer.
    """
    ends = [m.end() for m in _PHRASE.finditer(text)]
    if not text.isascii() or (_IE_HINT in text if ends else _has_foreign_hint(text)):
        ends = sorted(ends + [m.end() for m in _PHRASE_FOREIGN.finditer(text)])
    for end in reversed(ends[-_PHRASE_CANDIDATES:]):
        window = text[end : end + _PHRASE_SPAN_CHARS]
        line, _, rest = window.partition("\n")
        if line.strip().strip("*").strip():
            span = _clean_phrase(line)
        else:
            nxt = rest.lstrip().split("\n", 1)[0].strip()
            short = (len(nxt) <= 24 and len(nxt.split()) + len(_CJK.findall(nxt)) // 3 <= 2
                     and not nxt.endswith((":", "：")))
            marked = _LETTER_WITH_TEXT.fullmatch(nxt.rstrip("."))
            option = marked is not None and _OTHER_LETTER.search(marked.group(1)) is None
            span = _clean_phrase(nxt) if nxt and (short or option or _is_answer_shaped(nxt)) else None
        if span:
            return span
    return None


def _has_foreign_hint(text: str) -> bool:
    for hint in _FOREIGN_HINTS:
        if hint in text:
            return True
    return False


def _clean_phrase(span: str) -> str | None:
    guillemets = _TEMPLATE_SLOT.match(span)
    if guillemets:  # We-Math's template "<Answer>: <<B>>": the slot's content
        return _box_or_span(guillemets.group(1))
    end = _SENTENCE_END.search(span)
    if end:
        span = span[: end.start()]
    span = span.strip().strip("*").strip()
    if span.endswith(".") and not span.endswith(".."):
        span = span[:-1].rstrip()
    if _is_plain_token(span):  # "C", "12": the common reply needs none of the steps below
        return span
    not_but = _NOT_BUT.match(span)
    if not_but and not_but.end() < len(span):
        span = span[not_but.end() :]
    span = _cut_reason(span).strip().strip("*").strip()
    lead_in = _LEAD_IN.match(span)
    if lead_in and lead_in.end() < len(span):
        span = span[lead_in.end() :]
    if span.endswith(".") and not span.endswith(".."):
        span = span[:-1]
    return _box_or_span(_stated_value(span))


def _is_plain_token(span: str) -> bool:
    """An ASCII word or number ("C", "12"): no box, math, reason or option list can be in it."""
    return span.isascii() and span.isalnum()


def _stated_value(span: str) -> str:
    """"The largest $n$ is 34" -> "34": the value a "The ... is X" span states; any other
    span (or one that hedges: "The answer is not 5", "The result is 3 or 4") as it is."""
    if not _STATED_HEAD.match(span) or _STATED_HEDGE.search(span):
        return span
    last = _last_match_obj(_STATED, span)
    if last is None or last.end() >= len(span):
        return span
    return span[last.end() :]


def _cut_reason(span: str) -> str:
    """The span up to its first reason ("D because the angles ..." -> "D"), unless that
    word sits inside math or braces (``$a$ since``, ``\\text{ since }``)."""
    for m in _REASON.finditer(span):
        before = span[: m.start()]
        if before.count("$") % 2 == 0 and before.count("{") <= before.count("}"):
            return before
    return span


def _is_answer_shaped(span: str) -> bool:
    """One short answer: a token ("(C)", "60", "$x^2$", also full-width "（C）"), a marked
    letter with one option's text ("(C) 24", "B. circle."), or bare LaTeX ("\\frac{5}{12}")."""
    if len(span) > SHORT_LINE_CHARS or "\n" in span:
        return False
    span = span.translate(_FULLWIDTH)
    if len(span) <= _BARE_CHARS and _ANSWER_SHAPED.fullmatch(span) is not None:
        return True
    if span.endswith(".") and not span.endswith(".."):
        span = span[:-1].rstrip()
    return _is_letter_with_text(span) or _is_bare_latex(span)


def _is_letter_with_text(span: str) -> bool:
    """"(C) 24" / "B. circle": a marked letter and a text that names no other option and
    does not hedge ("A. 3 B. 4", "(A) or (B)", "B. circle?" are not one option)."""
    m = _LETTER_WITH_TEXT.fullmatch(span)
    return m is not None and _NOT_ONE_OPTION.search(m.group(1)) is None


def _is_bare_latex(span: str) -> bool:
    """A short math expression written without ``$``: a command, ``^`` or ``{``, math
    characters only, balanced braces, no \\text-like command, no word outside the commands."""
    if not any(c in span for c in "\\^{") or _LATEX_CHARS.fullmatch(span) is None:
        return False
    if span.count("{") != span.count("}"):
        return False
    if _LATEX_TEXTLIKE.search(span):
        return False
    return _LATEX_PROSE.search(_LATEX_COMMAND.sub(" ", span)) is None


def _bare_answer(text: str) -> str | None:
    """The whole text, when it is one short answer ("(C)", "60", "$x^2$", "(C) 24",
    "\\frac{5}{12}"): see :func:`_is_answer_shaped`; or one display segment
    ("$$\\frac{\\pi}{6}$$"); or one sentence around one math segment (see
    :func:`_one_sentence`)."""
    span = text.strip()
    if len(span) > _ONE_SENTENCE_CHARS or "\n" in span and not span.startswith(("$$", "\\[")):
        return None
    display = _display_only(span)
    if display is not None:
        return display
    if not _is_answer_shaped(span):
        return _one_sentence(span)
    span = span.strip("*").strip()
    span = _nonempty(span[:-1] if span.endswith(".") else span)
    return _box_or_span(span) if span is not None else None


def _display_only(span: str) -> str | None:
    """The content of a reply that is one display segment, ``$$...$$`` or ``\\[...\\]``,
    when that content is a short math expression (no prose, no "or")."""
    if not span.startswith(("$$", "\\[")):
        return None
    segments = _math_segments(span)
    if len(segments) != 1 or segments[0][0] != 0 or segments[0][1] != len(span.rstrip(".")):
        return None
    inner = span[segments[0][2] : segments[0][3]].strip()
    if len(inner) > SHORT_LINE_CHARS or not (_is_bare_latex(inner) or _ANSWER_SHAPED.fullmatch(inner)):
        return None
    return _box_or_span(inner)


def _one_sentence(span: str) -> str | None:
    """A whole reply that is one short sentence around one math segment ("Hence $y \\leq 7$
    holds.", "The equation of the circle is $(x+3)^2 + (y+3)^2 = 9$."): that segment.

    It commits to the segment as a stated result. Not when the reply is longer than one
    line of :data:`_ONE_SENTENCE_CHARS`, holds a second sentence or segment, sets up
    reasoning ("Let $x$ be ...") or introduces something (ends in ":"), or when its prose
    hedges, negates or adds a number or option (:func:`_math_in_prose` keeps such a span).
    A sentence with no math segment ("so it must be 42") stays no answer.
    """
    if "\n" in span or len(span) > _ONE_SENTENCE_CHARS or span.rstrip().endswith((":", "：")):
        return None
    if _SETUP_WORD.match(span) or _SENTENCE_END.search(span.rstrip(". ")):
        return None
    reduced = _math_in_prose(span.rstrip("."))
    return _box_or_span(reduced) if reduced != span.rstrip(".") else None


def _last_expression(text: str) -> str | None:
    """The reply's last mathematical expression, as math-verify reads an unmarked reply.

    The candidates are the last math segment (``$...$``, ``$$...$$``, ``\\(...\\)``,
    ``\\[...\\]``; with the segments right before it that only ``,``, ``;``, "and" or
    "or" separate, joined by ", " as one collection) and the last number or fraction / root
    command of the last line; the one that ends later wins. Its line, without it, must not
    hedge ("3 or 4", "maybe", "not", a question): then there is no answer.
    """
    body = text.rstrip()
    best: tuple[int, int, str] | None = None  # (start, end, span)
    segments = _math_segments(body)
    if segments:
        run = [segments[-1]]
        for prev in reversed(segments[:-1]):
            gap_start, gap_end = prev[1], run[-1][0]
            if gap_end - gap_start > _CONNECTOR_CHARS or not _SEGMENT_CONNECTOR.fullmatch(body, gap_start, gap_end):
                break
            run.append(prev)
        run.reverse()
        parts = list(dict.fromkeys(body[a:b].strip() for _, _, a, b in run if body[a:b].strip()))
        if parts:
            best = (run[0][0], run[-1][1], ", ".join(parts))
    line_start = body.rfind("\n") + 1
    tokens = list(_MATH_TOKEN.finditer(body, line_start))
    if tokens and (best is None or tokens[-1].end() > best[1]):
        best = (tokens[-1].start(), tokens[-1].end(), tokens[-1].group().strip())
    if best is None:
        return None
    start, end, span = best
    # The words that qualify the chosen value: from the value or segment before it on its
    # line (or the line's start) up to it, and from it to the line's end. "not 10 which is
    # 1,000.99" keeps 1,000.99; "3 or 4", "maybe 5", "12 or so", "5?" read no answer.
    context_start = body.rfind("\n", 0, start) + 1
    for prev_end in [t.end() for t in tokens] + [seg[1] for seg in segments]:
        if context_start <= prev_end <= start:
            context_start = prev_end
    context_end = body.find("\n", end)
    context_end = len(body) if context_end < 0 else context_end
    if _HEDGE.search(body, context_start, start) or _HEDGE.search(body, end, context_end):
        return None
    return _nonempty(span)


def _first_line(text: str) -> str:
    """The first non-empty line, found from the start (no split of a 1 MB text)."""
    text = text.lstrip()
    end = text.find("\n")
    return (text if end < 0 else text[:end]).strip()


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
    last = _last_match_obj(pattern, text)
    return last.group(0) if last else None


def _last_match_obj(pattern: re.Pattern[str], text: str, start: int = 0) -> re.Match[str] | None:
    last = None
    for last in pattern.finditer(text, start):
        pass
    return last
