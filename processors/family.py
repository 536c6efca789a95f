"""What a model family declares, in its own module: the contract that makes a new family
one file in ``processors/`` (plus its test file).

A family module ``processors/<family>.py`` holds

- its :class:`~vlcohort.processors.base.Adapter` subclass(es), decorated with :func:`register_adapter`
  (the registry's key is the class's ``model_types``);
- its tiny builder(s), decorated with :func:`tiny_builder`, each naming its ``tiny:<name>``
  spec, the ``model_type`` the built checkpoint has, and the family's declared test facts
  (:class:`FamilyFacts`), which the shared adapter tests are driven by.

``vlcohort.processors.registry`` imports every module of the package (no list to edit), so writing
the module is registering it. Nothing here imports torch or transformers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

__all__ = ["ADAPTERS", "CAUSAL_LM_FALLBACK", "FamilyFacts", "TINY_BUILDERS", "TinySpec", "register_adapter",
           "tiny_builder"]


@dataclass(frozen=True)
class FamilyFacts:
    """What the shared adapter tests check for one tiny model of a family.

    ``image_token_cases`` are ``(width, height, tokens)`` triples derived by hand from the
    family's published rule (a comment in the family module shows the arithmetic), never
    read back from the code under test."""

    model_class: str
    """The transformers model class ``from_pretrained`` must give (e.g.
    ``"Qwen2_5_VLForConditionalGeneration"``)."""
    processor_class: str
    """The processor (or tokenizer, for a text model) class ``AutoProcessor`` must give."""
    turn_pattern: str
    """A regex the rendered prompt of a one-turn, no-image problem with the default system
    prompt must match (``re.search``, DOTALL): the family's chat turn structure."""
    stop_tokens: tuple[str, ...]
    """Token strings that must be among the adapter's stop ids."""
    image_token_cases: tuple[tuple[int, int, int], ...] = ()
    vision: bool = True
    """False for a text-only family (the degenerate no-image case)."""
    multi_image: bool = True
    """The family takes several images in one prompt."""
    optional_modules: tuple[str, ...] = ()
    """Python modules the family's processor needs beyond the project's dependencies
    (e.g. ``num2words`` for SmolVLM2); tests skip with the install line when absent."""
    notes: str = ""
    """Known limits, for the README's family table."""


@dataclass(frozen=True)
class TinySpec:
    """One buildable tiny model: ``tiny:<name>``, the ``model_type`` it yields, its
    builder ``build(folder, seed)`` and the family's test facts."""

    name: str
    model_type: str
    build: Callable[[Path, int], None]
    facts: FamilyFacts | None = None
    module: str = field(default="", compare=False)
    """The module that defines the builder (the tiny cache is keyed on its source)."""


#: ``model_type`` -> adapter class, filled by :func:`register_adapter`.
ADAPTERS: dict[str, type] = {}
#: The adapter of any ``model_type`` no class claims that ``AutoModelForCausalLM`` loads
#: (a class with ``serves_any_causal_lm = True``; at most one).
CAUSAL_LM_FALLBACK: list[type] = []
#: tiny name -> spec, filled by :func:`tiny_builder`.
TINY_BUILDERS: dict[str, TinySpec] = {}


def register_adapter(cls: type) -> type:
    """Class decorator: serve ``cls.model_types`` with ``cls``. A model_type already served
    by another class is an error (two modules claiming one family). A class that sets
    ``serves_any_causal_lm`` also serves every causal-LM ``model_type`` nobody claims."""
    if vars(cls).get("serves_any_causal_lm") and cls not in CAUSAL_LM_FALLBACK:
        if CAUSAL_LM_FALLBACK:
            raise ValueError(f"{CAUSAL_LM_FALLBACK[0].__name__} already serves any causal LM")
        CAUSAL_LM_FALLBACK.append(cls)
    for mt in cls.model_types:
        if mt in ADAPTERS and ADAPTERS[mt] is not cls:
            raise ValueError(f"model_type {mt!r} is already served by {ADAPTERS[mt].__name__}")
        ADAPTERS[mt] = cls
    return cls


def tiny_builder(name: str, model_type: str, facts: FamilyFacts | None = None):
    """Function decorator: ``build(folder, seed)`` writes the ``tiny:<name>`` checkpoint
    (``save_pretrained`` of the real model and processor classes, random weights)."""

    def wrap(build: Callable[[Path, int], None]) -> Callable[[Path, int], None]:
        if name in TINY_BUILDERS and TINY_BUILDERS[name].build is not build:
            raise ValueError(f"tiny:{name} is already built by {TINY_BUILDERS[name].module}")
        TINY_BUILDERS[name] = TinySpec(name, model_type, build, facts, build.__module__)
        return build

    return wrap
