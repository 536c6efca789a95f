"""Text that came from outside (a responses file, a judge server) made safe to keep,
print and write.

Two hazards, both from text nobody on this side chose:

- a lone surrogate (``"\\ud800"`` is valid JSON but not valid Unicode): it cannot be
  encoded as UTF-8, so one such string makes writing ``items.jsonl`` fail for the whole
  run. :func:`first_surrogate` finds it, :func:`without_surrogates` makes the text
  writable (each one becomes U+FFFD, the replacement character);
- a secret echoed back (an API key, an ``Authorization`` header a server copies into an
  error body): :func:`redact` removes it before a message, a log line or a record sees
  it, and :func:`clip` cuts an untrusted body short for a message.
"""

from __future__ import annotations

import re
from typing import Iterable

__all__ = ["REDACTED", "clip", "first_surrogate", "redact", "without_surrogates"]

REDACTED = "[redacted]"

_SURROGATE = re.compile("[\ud800-\udfff]")

#: A credential-carrying header as servers echo it: ``Authorization: Bearer X``,
#: ``"x-api-key": "X"``, ``'api-key': 'X'``, ``api_key=X`` ... (the value is redacted,
#: the name kept so the reader sees what was there).
_HEADER_VALUE = re.compile(
    r"""(?ix)
    (\b(?:proxy-)?authorization|\bx[-_]api[-_]key|\bapi[-_]key)   # the header's name
    (["']?\s*[:=]\s*["']?)                                        # separator, quotes
    ((?:bearer|basic|token)\s+)?                                  # a scheme word
    [^\s"',;}\]]+                                                 # the value
    """)
_BEARER = re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]+")


def first_surrogate(text: str) -> int:
    """The index of the first lone surrogate in ``text``, -1 when there is none."""
    m = _SURROGATE.search(text)
    return m.start() if m else -1


def without_surrogates(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD, so it encodes as UTF-8."""
    return _SURROGATE.sub("\ufffd", text)


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with each secret's literal value, and the value of every
    ``Authorization`` / ``api-key`` / ``x-api-key`` header or ``Bearer`` token in it,
    replaced by ``[redacted]``. Run it before cutting a text short, or a cut could
    leave a prefix of the key that no longer matches."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    text = _HEADER_VALUE.sub(lambda m: m.group(1) + m.group(2) + (m.group(3) or "") + REDACTED,
                             text)
    return _BEARER.sub(lambda m: m.group(1) + REDACTED, text)


def clip(text: str, limit: int = 200) -> str:
    """The first ``limit`` characters of an untrusted text as a quoted literal (control
    characters and surrogates escaped), with how much was cut: fit for one line."""
    shown = repr(text[:limit])
    return shown + (f" ... ({len(text) - limit} more chars)" if len(text) > limit else "")
