"""Tiny models of every registered family, built lazily (only those a test asks for) once
per test session into a private cache folder, so the tests never read or write the user's
cache and never touch the network.

The family lists come from the registry: every ``@tiny_builder`` spec that declares
:class:`~vlcohort.processors.family.FamilyFacts` (``vlcohort.processors.family.TINY_BUILDERS``). A new
family module is picked up by the shared adapter tests without an edit here.
"""

from __future__ import annotations

import importlib.util

import pytest

from vlcohort.processors import adapter_for, tiny_model_path
from vlcohort.processors.family import TINY_BUILDERS, TinySpec
from vlcohort.processors.tiny import sharpen

#: Every tiny spec with declared facts, in registration order.
SPECS: dict[str, TinySpec] = {n: s for n, s in TINY_BUILDERS.items() if s.facts is not None}
FAMILIES = list(SPECS)
VLM_FAMILIES = [n for n, s in SPECS.items() if s.facts.vision]
MULTI_IMAGE_FAMILIES = [n for n, s in SPECS.items() if s.facts.vision and s.facts.multi_image]


def facts(name: str):
    return SPECS[name].facts


def missing_modules(name: str) -> list[str]:
    """The spec's optional modules that are not importable here."""
    return [m for m in facts(name).optional_modules if importlib.util.find_spec(m) is None]


def require(name: str) -> None:
    """Skip, with the install line, a test of a spec whose optional modules are missing."""
    missing = missing_modules(name)
    if missing:
        pytest.skip(f"tiny:{name} needs {', '.join(missing)}: pip install {' '.join(missing)}")


class Lazy(dict):
    """A mapping that makes a value on first access (``make(name)``) and keeps it: a
    session builds and loads only the families its selected tests use."""

    def __init__(self, make):
        super().__init__()
        self._make = make

    def __missing__(self, name):
        value = self[name] = self._make(name)
        return value


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("tiny-models")


@pytest.fixture(scope="session")
def tiny_paths(tiny_dir):
    """name -> folder of a saved tiny checkpoint (real classes, save_pretrained), built on
    first access; a spec whose optional modules are missing skips the test."""

    def build(name):
        require(name)
        return tiny_model_path(f"tiny:{name}", cache_dir=tiny_dir)

    return Lazy(build)


@pytest.fixture(scope="session")
def loaded(tiny_paths):
    """name -> (adapter, model), loaded back through from_pretrained like a user
    checkpoint, on first access.

    Weights are re-drawn with a larger scale: a freshly initialised tiny model's output
    distribution is nearly uniform, which would make log-prob comparisons too easy.
    """

    def load(name):
        adapter = adapter_for(tiny_paths[name])
        return adapter, sharpen(adapter.load_model(), seed=1)

    return Lazy(load)


@pytest.fixture
def tiny_cache(tmp_path_factory, monkeypatch):
    """Cohort runs build their tiny models into a private cache, never the user's (only the
    tests that ask for it: ``tests/helpers/cohort.py``'s runs)."""
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))
