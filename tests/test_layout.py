"""House rules that a test can check (DESIGN.md)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FAMILY_NAMES = re.compile(r"qwen|internvl|gemma|llama", re.IGNORECASE)


def test_no_family_names_in_the_core():
    """Rule 1: family knowledge lives in processors/ only."""
    hits = []
    for path in sorted((ROOT / "vlcohort").rglob("*.py")):
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if FAMILY_NAMES.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not hits, "family names in vlcohort/ (move this to processors/):\n" + "\n".join(hits)


def test_processors_import_nothing_from_the_core_but_the_problem_record():
    """processors/ may use the plain Problem record, nothing else of vlcohort/."""
    bad = []
    for path in sorted((ROOT / "processors").rglob("*.py")):
        for i, line in enumerate(path.read_text().splitlines(), 1):
            m = re.match(r"\s*(from|import)\s+vlcohort(\.\w+)*", line)
            if m and not line.strip().startswith("from vlcohort.data.problems import"):
                bad.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not bad, "\n".join(bad)


def test_no_trust_remote_code_true_hard_coded():
    hits = [str(p) for d in ("vlcohort", "processors", "eval") for p in (ROOT / d).rglob("*.py")
            if re.search(r"trust_remote_code\s*=\s*True", p.read_text())]
    assert not hits, hits


def test_readme_lists_every_metric_and_method():
    """README tables stay true to the code: every documented metric key and every method."""
    from vlcohort.config import METHOD_SOURCES
    from vlcohort.analysis.metrics import METRIC_DOCS

    readme = (ROOT / "README.md").read_text()
    missing = [k for k in METRIC_DOCS if f"`{k}`" not in readme]
    assert not missing, f"README metrics table lacks: {missing}"
    assert all(f"`{m}`" in readme for m in METHOD_SOURCES)
