"""The program in a completion: its last fenced code block, the language tag honoured.

Why the *last* block: models show a draft, or the problem's example input, before their
answer; the final block is the answer, as in LiveCodeBench's and most code-RL
extractors. A block tagged with another language (```text, ```bash) is skipped when a
language is asked for; an untagged block counts. A final block left open (a completion
cut off at the token limit) runs to the end of the text.
"""

from __future__ import annotations

import re

#: Tags that name Python (the first word of the info string, lower-cased).
LANGUAGE_ALIASES = {"python": {"python", "py", "python3", "py3", "python2"}}
_OPEN = re.compile(r"^[ \t]{0,3}(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")


def _tag_ok(info: str, language: str | None) -> bool:
    tag = info.strip().split()[0].lower() if info.strip() else ""
    if language is None or not tag:
        return True
    return tag in LANGUAGE_ALIASES.get(language.lower(), {language.lower()})


def code_blocks(text: str) -> list[tuple[str, str]]:
    """Every fenced block as (info string, body), in order (CommonMark's fence rules:
    a closing fence of the same character, at least as long, nothing after it)."""
    blocks: list[tuple[str, str]] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = _OPEN.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info = m.group("fence"), m.group("info")
        close = re.compile(rf"^[ \t]{{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        body: list[str] = []
        i += 1
        while i < len(lines) and not close.match(lines[i]):
            body.append(lines[i])
            i += 1
        blocks.append((info, "\n".join(body)))
        i += 1
    return blocks


def final_code_block(text: str, language: str | None = "python") -> str | None:
    """The last fenced block (tagged ``language`` or untagged); None when there is none."""
    for info, body in reversed(code_blocks(text)):
        if _tag_ok(info, language):
            return body + "\n" if body and not body.endswith("\n") else body
    return None


def program_of(text: str, language: str | None = "python") -> str:
    """final_code_block(text) or, when there is none, the whole text."""
    block = final_code_block(text, language)
    return text if block is None else block
