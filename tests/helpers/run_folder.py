"""A file outside a run folder with known content, which attacks on the run folder must
leave unchanged (``tests/test_run_folder_attacks.py``, ``tests/test_run_folder_links.py``)."""

from __future__ import annotations

from pathlib import Path

VICTIM_TEXT = "precious: must survive every run\n"


def _victim(folder: Path, name: str = "victim.txt") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(VICTIM_TEXT)
    return path
