"""The registry and the family contract: automatic registration, clear errors, the README
family table kept true to the registry, the tiny cache keyed on the builder's source."""

from __future__ import annotations

import json
import re
import sys
import textwrap
from pathlib import Path

import pytest

from vlcohort.processors import UnknownFamilyError, adapter_for
from vlcohort.processors.family import ADAPTERS, TINY_BUILDERS, TinySpec
from vlcohort.processors.tiny import builder_source_hash, tiny_model_path

ROOT = Path(__file__).resolve().parents[2]


def test_every_tiny_spec_has_an_adapter_and_facts():
    for name, spec in TINY_BUILDERS.items():
        assert spec.model_type in ADAPTERS, f"tiny:{name}: no adapter for {spec.model_type!r}"
        assert spec.facts is not None, f"tiny:{name}: declares no FamilyFacts"


def test_unknown_model_type_lists_supported_and_how_to_add(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "blip-2"}))
    with pytest.raises(UnknownFamilyError) as e:
        adapter_for(tmp_path)
    msg = str(e.value)
    assert "'blip-2'" in msg and all(cls.family in msg for cls in ADAPTERS.values())
    assert "AutoModelForCausalLM cannot load it" in msg
    assert "processors/<family>.py" in msg and "@register_adapter" in msg


def test_folder_without_config_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json"):
        adapter_for(tmp_path)


def test_unknown_tiny_spec_lists_available():
    with pytest.raises(ValueError, match="tiny:qwen2_5_vl"):
        adapter_for("tiny:nonexistent")


def _readme_section(title: str) -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start: end if end != -1 else len(text)]


def test_readme_family_table_lists_every_registered_family():
    """Every registered ``model_type`` and ``tiny:`` spec is in README's "Supported model
    families" section (as `code`), so a new family module cannot land undocumented."""
    section = _readme_section("Supported model families")
    missing = [f"`{mt}`" for mt in sorted(ADAPTERS) if f"`{mt}`" not in section]
    missing += [f"`tiny:{n}`" for n in TINY_BUILDERS if f"`tiny:{n}`" not in section]
    assert not missing, ("README 'Supported model families' lacks: " + ", ".join(missing)
                         + " (add the family's row / tiny spec)")


def test_tiny_cache_is_keyed_on_the_builder_source(tmp_path, monkeypatch):
    """Editing a builder's module gives a new cache folder: an old build is never reused."""
    module = tmp_path / "h1_fake_family.py"
    body = textwrap.dedent('''
        from pathlib import Path

        def build(out: Path, seed: int) -> None:
            (out / "config.json").write_text('{"model_type": "qwen2", "v": %d}')
    ''')
    monkeypatch.syspath_prepend(str(tmp_path))
    module.write_text(body % 1)
    import importlib

    mod = importlib.import_module("h1_fake_family")
    spec = TinySpec("h1_fake", "qwen2", mod.build, module="h1_fake_family")
    monkeypatch.setitem(TINY_BUILDERS, "h1_fake", spec)
    try:
        first_hash = builder_source_hash(spec)
        first = tiny_model_path("tiny:h1_fake", cache_dir=tmp_path / "cache")
        assert tiny_model_path("tiny:h1_fake", cache_dir=tmp_path / "cache") == first
        module.write_text(body % 2)
        assert builder_source_hash(spec) != first_hash
        second = tiny_model_path("tiny:h1_fake", cache_dir=tmp_path / "cache")
        assert second != first and json.loads((first / "config.json").read_text())["v"] == 1
    finally:
        sys.modules.pop("h1_fake_family", None)


def test_family_modules_register_themselves():
    """No list to edit: every family module's adapters and builders are registered by
    their decorators when the package is imported."""
    for cls in set(ADAPTERS.values()):
        assert cls.__module__.startswith("vlcohort.processors."), cls
    from vlcohort.processors.registry import _CORE_MODULES

    src = (ROOT / "processors" / "registry.py").read_text()
    imported = set(re.findall(r"^from \.(\w+) import", src, re.M))
    assert imported <= _CORE_MODULES, imported - _CORE_MODULES  # no family module named
