"""JSON from outside, read within bounds: its size, its nesting depth, its numbers' digits.

Every JSON text the project did not write itself goes through :func:`loads`: data and
rewrite records, benchmark annotations, responses to score, a judge server's replies, and
what a sandboxed program writes on its result channel. Python's ``json.loads`` has three
ways to fail that are not ``JSONDecodeError``, each reachable by whoever writes the text
(a dataset, a server, or the policy being trained, whose programs print the results):

* an integer of more than 4,300 digits raises ``ValueError`` (Python's int-to-str
  limit, applied when json builds the ``int``);
* nesting about a thousand deep raises ``RecursionError`` (and a deep result that does
  parse breaks the first recursive function that walks it);
* a text of any size is parsed whole, so the size bound has to come before the parse.

:func:`loads` turns each into :class:`BadJSON`, a ``ValueError`` whose message is one
phrase for a message that already names the file and line: ``not JSON (Expecting value
at column 1)``, ``JSON nested deeper than 100 levels``, ``JSON with a number of 5000
digits (at most 1000)``, ``JSON text of 70000000 characters (at most 33554432)``.

Imports only the standard library: the command line and the loaders read it before torch.
"""

from __future__ import annotations

import json
import re
from typing import IO, Any, AnyStr, Iterator

from vlcohort.errors import json_error_text

#: The default bounds. Real records nest a handful of levels and carry numbers of a few
#: dozen digits; these are far above that and far below what breaks the host.
MAX_DEPTH = 100
MAX_DIGITS = 1000
MAX_CHARS = 32 << 20


class BadJSON(ValueError):
    """A JSON text that is malformed or past a bound; ``str(e)`` is one phrase.
    ``syntax``: json's own error when the text is malformed (its line and column), else
    None."""

    def __init__(self, message: str, syntax: json.JSONDecodeError | None = None):
        super().__init__(message)
        self.syntax = syntax


def _bounded_int(max_digits: int):
    def parse_int(text: str) -> int:
        digits = len(text) - (text[:1] == "-")
        if digits > max_digits:
            raise BadJSON(f"JSON with a number of {digits} digits (at most {max_digits})")
        return int(text)
    return parse_int


def depth(value: Any) -> int:
    """How deep ``value`` nests lists and dicts (a scalar: 0), walked without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            v = v.values()
        elif not isinstance(v, list):
            continue
        deepest = max(deepest, d + 1)
        stack.extend((x, d + 1) for x in v if isinstance(x, (dict, list)))
    return deepest


def loads(text: str | bytes, *, max_chars: int = MAX_CHARS, max_depth: int = MAX_DEPTH,
          max_digits: int = MAX_DIGITS) -> Any:
    """``json.loads(text)`` within the bounds, else :class:`BadJSON` (also for a text that
    is not JSON, or bytes that are not UTF-8)."""
    if len(text) > max_chars:
        raise BadJSON(f"JSON text of {len(text)} characters (at most {max_chars})")
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise BadJSON(f"not UTF-8 (byte {text[e.start]:#04x} at offset {e.start})") from None
    # the hooks cost a Python call per number or node: only a text that could be past a
    # bound pays them (a run of that many digits somewhere; that many brackets in all)
    long_run = re.search(r"\d{%d}" % (max_digits + 1), text) is not None
    hooks = {"parse_int": _bounded_int(max_digits)} if long_run else {}
    try:
        value = json.loads(text, **hooks)
    except json.JSONDecodeError as e:
        raise BadJSON(f"not JSON ({json_error_text(e)})", syntax=e) from None
    except RecursionError:
        raise BadJSON(f"JSON nested deeper than {max_depth} levels") from None
    except BadJSON:
        raise
    except ValueError as e:  # json's own number conversion (a float text too long, say)
        raise BadJSON(f"not JSON ({str(e)[:120]})") from None
    if text.count("[") + text.count("{") > max_depth and depth(value) > max_depth:
        raise BadJSON(f"JSON nested deeper than {max_depth} levels")
    return value


def numbered_lines(f: IO[AnyStr], max_chars: int = MAX_CHARS) -> Iterator[tuple[int, AnyStr | None]]:
    """``(line number, line)`` of a text or binary file, line end included; ``None`` for
    a line longer than ``max_chars``, whose rest is read past in pieces and never held
    whole (a multi-gigabyte file with no newline costs ``max_chars`` of memory, not its
    size). The caller skips or refuses that line by its number."""
    lineno = 0
    while True:
        line = f.readline(max_chars + 1)
        if not line:
            return
        lineno += 1
        if len(line) <= max_chars or line[-1:] in ("\n", b"\n"):
            yield lineno, line
            continue
        while (rest := f.readline(max_chars + 1)) and rest[-1:] not in ("\n", b"\n"):
            pass
        yield lineno, None
