"""``load_script``: a script of ``bench/`` loaded as a module, so tests can call its pieces.
The benchmarks are run as files (``python bench/x.py``), not installed as a package."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load_script(name: str) -> ModuleType:
    """``bench/<name>.py`` as a fresh module (a new one per call)."""
    path = ROOT / "bench" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
