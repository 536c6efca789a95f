"""Prompt formats: how chat messages become prompt text, for models with and without a
chat template.

An instruct checkpoint ships a chat template and is prompted through it (``chat``). A
base checkpoint (Gemma-3-270M, Qwen3-*-Base, the R1-Zero setting) has none, and
``apply_chat_template`` refuses it; base-model RL prompts it with a plain text format
instead. The setting (``prompt.format``, or per agent ``agents.N.prompt_format``) is one of

=============  ==========================================================================
``auto``       ``chat`` when the tokenizer has a chat template, else ``r1_zero`` (the
               default plain format; the run says which one each agent uses)
``chat``       the checkpoint's own chat template (an error when it has none)
``r1_zero``    DeepSeek-R1-Zero's template (arXiv 2501.12948, Table 1): its fixed
               preamble, then ``User: <question> Assistant:``; the system prompt is
               replaced by the preamble
``plain``      the system prompt (if any), a blank line, ``Question: <question>`` and
               ``Answer:`` on the next line
a file path    a Jinja file of your own, rendered like a chat template (``messages``,
               ``add_generation_prompt``, ``bos_token``, ``eos_token`` and
               ``plain_bos``, the BOS text when the tokenizer adds one itself)
=============  ==========================================================================

The plain formats write the tokenizer's BOS first when tokenizing with special tokens
would add one (Gemma, Llama): prompts are tokenized with ``add_special_tokens=False``
because chat templates write BOS themselves, so the plain formats must too.
"""

from __future__ import annotations

from pathlib import Path

AUTO, CHAT = "auto", "chat"
#: The plain format ``auto`` picks for a checkpoint without a chat template.
DEFAULT_PLAIN = "r1_zero"

R1_ZERO_PREAMBLE = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant "
    "solves it. The assistant first thinks about the reasoning process in the mind and then "
    "provides the user with the answer. The reasoning process and answer are enclosed within "
    "<think> </think> and <answer> </answer> tags, respectively, i.e., <think> reasoning "
    "process here </think> <answer> answer here </answer>."
)

_USER_TEXT = ("{% for m in messages %}{% if m['role'] == 'user' %}{{ m['content'] }}"
              "{% endif %}{% endfor %}")
_SYSTEM_TEXT = ("{% for m in messages %}{% if m['role'] == 'system' %}{{ m['content'] }}"
                "\n\n{% endif %}{% endfor %}")

#: name -> Jinja template (the same variables a chat template gets, plus ``plain_bos``).
NAMED_FORMATS: dict[str, str] = {
    "r1_zero": "{{ plain_bos }}" + R1_ZERO_PREAMBLE + " User: " + _USER_TEXT + " Assistant:",
    # (chat-template Jinja drops a newline right after a block tag: hence {{ '\n' }})
    "plain": "{{ plain_bos }}" + _SYSTEM_TEXT + "Question: " + _USER_TEXT + "{{ '\\n' }}Answer:",
}


class PromptFormatError(ValueError):
    """A ``prompt.format`` that is no known name and no readable Jinja file."""


def choices() -> str:
    return ", ".join([AUTO, CHAT, *NAMED_FORMATS, "or a path to a .jinja file"])


def check_format(value: str, key: str = "prompt.format") -> None:
    """Raise :class:`PromptFormatError` naming ``key`` unless ``value`` is a known name or
    an existing file."""
    if value in (AUTO, CHAT) or value in NAMED_FORMATS:
        return
    path = Path(value).expanduser()
    if path.is_file():
        return
    raise PromptFormatError(
        f"{key}: {value!r} is not a prompt format ({choices()}); a file path must exist")


def resolve(value: str, has_chat_template: bool, where: str = "") -> str:
    """The format actually used: ``auto`` -> ``chat`` or :data:`DEFAULT_PLAIN`; ``chat``
    without a template is an error naming the fix."""
    check_format(value)
    if value == AUTO:
        return CHAT if has_chat_template else DEFAULT_PLAIN
    if value == CHAT and not has_chat_template:
        raise PromptFormatError(
            f"{where or 'this checkpoint'} has no chat template (a base model), but the "
            f"prompt format is 'chat'; set prompt.format to auto, {', '.join(NAMED_FORMATS)} "
            "or a .jinja file")
    return value


def template_text(fmt: str) -> str | None:
    """The Jinja text of a resolved format; None for ``chat`` (the tokenizer's own)."""
    if fmt == CHAT:
        return None
    if fmt in NAMED_FORMATS:
        return NAMED_FORMATS[fmt]
    return Path(fmt).expanduser().read_text()


def describe(fmt: str, requested: str) -> str:
    """``chat (the checkpoint's template)`` / ``r1_zero (auto: no chat template)`` ..."""
    if fmt == CHAT:
        return "chat (the checkpoint's template)"
    why = "auto: the checkpoint has no chat template" if requested == AUTO else "as set"
    return f"{fmt} ({why})"
