"""The documentation stays true to the repository: a short README that indexes every
``docs/`` page, generated pages that are current, no back-ticked path that leads nowhere,
and no references a user's clone cannot follow (docs/design.md, "Layout")."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from vlcohort import docs_pages

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOC_PAGES = sorted((ROOT / "docs").glob("*.md"))

#: Back-ticked (`x` or ``x``) path-like tokens: no space, ending in one of these suffixes,
#: optionally followed by a pytest node id (``tests/test_layout.py::test_x``).
PATH_TOKEN = re.compile(r"(?<!`)(`{1,2})([^`\s]+?\.(?:py|md|yaml|yml|toml))(?:::[\w\[\].-]+)?\1(?!`)")
#: Folders a path may be written relative to, besides the repository root and the citing
#: file's folder: code says ``training/update.py`` for ``vlcohort/training/update.py``.
BASES = ("vlcohort", "processors", "eval")
#: Files a run or an output folder holds, named bare (``<run.output_dir>/config.yaml``).
RUN_FOLDER_FILES = {"config.yaml", "summary.md"}
#: Files of other projects, cited by name where their behaviour is reproduced: the official
#: benchmark scorers, the published Co-RL code, the peers the style anchors name.
UPSTREAM_FILES = {
    "co_rl_trainer.py",                                    # DrStranded/Co-RL
    "calculate_score.py", "evaluation/calculate_score.py",  # lupantech/MathVista
    "evaluation/extract_answer.py", "evaluation/prompts/ext_ans.py",
    "prompts.py", "evaluation/prompts.py",                  # MathVerse
    "extract_answer_s1.py", "score_answer_s2.py",
    "evaluate.py", "evaluation/evaluate.py", "evaluation/utils.py",  # mathllm/MATH-V
    "four_dimensional_metrics.py", "evaluation/four_dimensional_metrics.py",  # We-Math
    "accuracy.py", "evaluation/accuracy.py",
    "execution.py",                                         # openai/human-eval
    "lcb_runner/evaluation/testing_util.py",                # LiveCodeBench
    "eval/post_process.py", "eval/eval_zero.py",            # SciBench
    "scripts/chat_rl.py", "core_algos.py", "grpo_trainer.py",  # nanochat, verl, TRL
    "marti/worlds/workflows/comas.py", "marti/verifiers/comas_reward.py",  # CoMAS (MARTI)
}
#: Text no file of the project may hold: documents outside the repository, or history.
FORBIDDEN = {
    "DESIGN.md": re.compile(r"DESIGN\.md"),
    "FINDINGS.md": re.compile(r"FINDINGS\.md"),
    "../shared": re.compile(r"\.\./shared"),
    "issue N": re.compile(r"\bissues? #?\d+", re.IGNORECASE),
}


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("not a git checkout: " + out.stderr.strip())
    return out.stdout.split()


def _code_files() -> list[Path]:
    files = []
    for folder in ("vlcohort", "processors", "eval", "bench", "tests"):
        files += [p for p in sorted((ROOT / folder).rglob("*.py")) if "tests/data" not in p.as_posix()]
    return files


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def test_readme_is_short_and_indexes_every_docs_page():
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines (at most 250: move the rest to docs/)"
    text = "\n".join(lines)
    unlisted = [p.name for p in DOC_PAGES if f"](docs/{p.name})" not in text]
    assert not unlisted, f"README.md does not link these docs/ pages: {unlisted}"


def test_markdown_links_resolve():
    """Every relative link of the README and ``docs/`` (``[text](path)``, ``![alt](path)``)
    names a file of the repository."""
    broken = []
    for page in (README, *DOC_PAGES):
        text = page.read_text(encoding="utf-8")
        for m in re.finditer(r"\]\(([^)\s]+)\)", text):
            target = m.group(1).split("#")[0]
            if target and "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)}:{_line(text, m.start())}: {m.group(1)}")
    assert not broken, "links to missing files:\n" + "\n".join(broken)


def test_generated_pages_are_current():
    stale = [str(path.relative_to(ROOT)) for path, text in docs_pages.generated().items()
             if not path.is_file() or path.read_text() != text]
    assert not stale, f"stale generated pages {stale}: run python -m vlcohort.docs_pages --write"


def test_check_mode_agrees_with_the_pages():
    expected = 0 if all(p.is_file() and p.read_text() == t for p, t in docs_pages.generated().items()) else 1
    assert docs_pages.main(["--check"]) == expected


def _dangling(path: str, cited_in: Path, basenames: set[str]) -> bool:
    if any(c in path for c in "*<{") or path in RUN_FOLDER_FILES or path in UPSTREAM_FILES:
        return False
    bases = [ROOT, cited_in.parent, *(ROOT / b for b in BASES)]
    if any((base / path).exists() for base in bases):
        return False
    return not ("/" not in path and path in basenames)  # a bare file name of the repository


def test_no_backticked_path_leads_nowhere():
    """Every back-ticked ``*.py`` / ``*.md`` / ``*.yaml`` / ``*.yml`` / ``*.toml`` path in the
    README, ``docs/``, ``configs/`` and the code exists (CHANGELOG.md is history: not read)."""
    basenames = {Path(t).name for t in _tracked()}
    files = [README, *DOC_PAGES, *sorted((ROOT / "configs").glob("*.yaml")), *_code_files()]
    dangling = []
    for f in files:
        text = f.read_text(encoding="utf-8")
        for m in PATH_TOKEN.finditer(text):
            if _dangling(m.group(2), f, basenames):
                dangling.append(f"{f.relative_to(ROOT)}:{_line(text, m.start())}: {m.group(2)}")
    assert not dangling, "back-ticked paths that do not exist:\n" + "\n".join(dangling)


def test_no_reference_outside_the_repository_and_no_history():
    """No citation of documents a clone does not have, and no "issue N" history, in the
    code, the configs, the README or ``docs/``."""
    files = [README, *DOC_PAGES]
    for folder in ("vlcohort", "processors", "eval", "configs", "bench"):
        files += [p for p in sorted((ROOT / folder).rglob("*"))
                  if p.suffix in (".py", ".yaml", ".yml", ".toml", ".md") and p.is_file()]
    hits = []
    for f in files:
        text = f.read_text(encoding="utf-8")
        for what, pattern in FORBIDDEN.items():
            hits += [f"{f.relative_to(ROOT)}:{_line(text, m.start())}: {what}: {m.group(0)!r}"
                     for m in pattern.finditer(text)]
    assert not hits, "references outside the repository or history in code and docs:\n" + "\n".join(hits)
